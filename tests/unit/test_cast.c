/* test_cast.c - the casts of lib/cast.c on buffers: e4m3, bf16 and f16 rounding, the FP8 rule. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sysexits.h>

#include "tap.h"
#include "wsync.h"

static uint32_t
s_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float
s_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t
s_bf16(float f)
{
	return (uint16_t)(s_bits(f) >> 16);
}

/* Every code decodes to a value that encodes back to it; 0x7f and 0xff are NaN. */
static void
test_e4m3_codes(void)
{
	int back = 0;

	for (int b = 0; b < 256; b++) {
		float v = wsync_e4m3_to_f32((uint8_t)b);
		if ((b & 0x7f) == 0x7f)
			back += isnan(v) && (wsync_e4m3_from_f32(v) & 0x7f) == 0x7f;
		else
			back += !isnan(v) && wsync_e4m3_from_f32(v) == b;
	}
	ok(back == 256, "all 256 e4m3 codes decode and encode back (%d did)", back);
	ok(wsync_e4m3_to_f32(0x7e) == 448.0f && wsync_e4m3_to_f32(0xfe) == -448.0f,
	    "0x7e and 0xfe are 448 and -448");
	ok(wsync_e4m3_to_f32(0x01) == ldexpf(1, -9) && wsync_e4m3_to_f32(0x08) == ldexpf(1, -6),
	    "0x01 is 2^-9, the smallest subnormal, and 0x08 is 2^-6, the smallest normal");
	ok(wsync_e4m3_to_f32(0x80) == 0.0f && signbit(wsync_e4m3_to_f32(0x80)),
	    "0x80 decodes to negative zero");
	ok(wsync_e4m3_from_f32(-0.0f) == 0x80 && wsync_e4m3_from_f32(0.0f) == 0x00,
	    "negative zero encodes to 0x80, zero to 0x00");
}

/*
 * The midpoint of two neighbouring codes goes to the even one; a hair either
 * side goes to the nearer. Across subnormals, the subnormal-normal border and
 * every binade.
 */
static void
test_e4m3_ties(void)
{
	int good = 0, pairs = 0;

	for (int k = 0; k < 0x7e; k++) {
		float lo = wsync_e4m3_to_f32((uint8_t)k), hi = wsync_e4m3_to_f32((uint8_t)(k + 1));
		float mid = (lo + hi) / 2;
		int even = k % 2 == 0 ? k : k + 1;
		pairs++;
		good += wsync_e4m3_from_f32(mid) == even &&
		    wsync_e4m3_from_f32(nextafterf(mid, 0)) == k &&
		    wsync_e4m3_from_f32(nextafterf(mid, 1000)) == k + 1 &&
		    wsync_e4m3_from_f32(-mid) == (0x80 | even);
	}
	ok(good == pairs, "ties go to even and neighbours to the nearer, for all %d pairs (%d did)",
	    pairs, good);
	ok(wsync_e4m3_from_f32(ldexpf(1, -10)) == 0x00 &&
	    wsync_e4m3_from_f32(ldexpf(3, -10)) == 0x02,
	    "half the smallest subnormal rounds to 0, three halves to 2 (ties to even)");
	ok(wsync_e4m3_from_f32(ldexpf(15, -10)) == 0x08,
	    "the midpoint of the largest subnormal and 2^-6 rounds up into the next binade");
	ok(wsync_e4m3_from_f32(ldexpf(1, -20)) == 0x00, "a value far below 2^-10 is zero");
	ok(wsync_e4m3_from_f32(464.0f) == 0x7e && wsync_e4m3_from_f32(-464.0f) == 0xfe,
	    "464, the midpoint above 448, rounds to 448 (the even code)");
	ok(wsync_e4m3_from_f32(nextafterf(464.0f, 1000)) == 0x7f &&
	    wsync_e4m3_from_f32(INFINITY) == 0x7f && wsync_e4m3_from_f32(NAN) == 0x7f,
	    "above 464, infinity and NaN give 0x7f, as PyTorch's conversion");
}

static void
test_bf16(void)
{
	ok(wsync_bf16_from_f32(1.0f) == 0x3f80, "bf16: 1.0 is 0x3f80");
	ok(wsync_bf16_from_f32(s_float(0x3f808000)) == 0x3f80 &&
	    wsync_bf16_from_f32(s_float(0x3f818000)) == 0x3f82,
	    "bf16: ties go to even");
	ok(wsync_bf16_from_f32(s_float(0x3f808001)) == 0x3f81 &&
	    wsync_bf16_from_f32(s_float(0x3f807fff)) == 0x3f80,
	    "bf16: a hair above or below a tie goes to the nearer");
	ok(wsync_bf16_from_f32(NAN) == 0x7fc0 && wsync_bf16_from_f32(-NAN) == 0x7fc0 &&
	    wsync_bf16_from_f32(s_float(0x7f800001)) == 0x7fc0,
	    "bf16: every NaN becomes 0x7fc0");
	ok(wsync_bf16_from_f32(INFINITY) == 0x7f80 && wsync_bf16_from_f32(-0.0f) == 0x8000,
	    "bf16: infinity and negative zero stay");
	ok(wsync_bf16_from_f32(s_float(0x7f7fffff)) == 0x7f80,
	    "bf16: the largest float rounds to infinity");
	ok(wsync_bf16_from_f32(s_float(0x00018000)) == 0x0002,
	    "bf16: subnormals round to nearest even too");
}

static void
test_f16(void)
{
	uint16_t h = 0;
	int good = 1;

	good &= wsync_f16_from_f32(1.0f, &h) == 0 && h == 0x3c00;
	ok(good, "f16: 1.0 is 0x3c00");
	ok(wsync_f16_from_f32(1.0f + ldexpf(1, -11), &h) == 0 && h == 0x3c00 &&
	    wsync_f16_from_f32(1.0f + ldexpf(3, -11), &h) == 0 && h == 0x3c02,
	    "f16: ties go to even");
	ok(wsync_f16_from_f32(ldexpf(1, -24), &h) == 0 && h == 0x0001 &&
	    wsync_f16_from_f32(ldexpf(1, -25), &h) == 0 && h == 0x0000 &&
	    wsync_f16_from_f32(ldexpf(3, -25), &h) == 0 && h == 0x0002,
	    "f16: subnormals, and ties among them to even");
	ok(wsync_f16_from_f32(ldexpf(2047, -25), &h) == 0 && h == 0x0400,
	    "f16: the largest subnormal's upper midpoint rounds into the normals");
	ok(wsync_f16_from_f32(65504.0f, &h) == 0 && h == 0x7bff &&
	    wsync_f16_from_f32(nextafterf(65520.0f, 0), &h) == 0 && h == 0x7bff,
	    "f16: 65504 and anything below 65520 stay finite");
	ok(wsync_f16_from_f32(65520.0f, &h) == -1 && wsync_f16_from_f32(-1e6f, &h) == -1,
	    "f16: 65520 and beyond are refused");
	ok(wsync_f16_from_f32(-0.0f, &h) == 0 && h == 0x8000 &&
	    wsync_f16_from_f32(NAN, &h) == 0 && h == 0x7e00 &&
	    wsync_f16_from_f32(-INFINITY, &h) == 0 && h == 0xfc00,
	    "f16: negative zero, NaN and infinity stay");
}

static void
test_convert(void)
{
	float src[3] = { 1.0f, 70000.0f, 2.0f };
	uint16_t dst[3];
	uint64_t bad = 99;

	ok(wsync_cast_convert(WSYNC_F32, src, 3, WSYNC_F16, dst, &bad) == -1 && bad == 1,
	    "convert: f16 overflow names element 1");
	ok(wsync_cast_convert(WSYNC_F32, src, 3, WSYNC_BF16, dst, &bad) == 0 &&
	    dst[0] == 0x3f80 && dst[2] == 0x4000, "convert: f32 to bf16");
}

/* A bf16 [m, n] tensor from floats (each must be a bf16 value). */
static void
s_fill(uint16_t *x, const float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = s_bf16(v[i]);
}

static void
test_rule(void)
{
	float v[6] = { 896.0f, -896.0f, ldexpf(1, -8), -0.0f, 1.0f, 3.0f };
	uint16_t x[6], big[130 * 129];
	uint8_t q[130 * 129];
	float s[4], z[4] = { 0 };
	uint64_t bad = 0;
	int edge = 1;

	s_fill(x, v, 6);
	ok(wsync_fp8_quantize(WSYNC_BF16, x, 1, 6, 0, q, s, &bad) == 0 && s[0] == 2.0f,
	    "rule: s = amax / 448 (896 / 448 = 2)");
	ok(q[0] == 0x7e && q[1] == 0xfe, "rule: +-amax become exactly +-448 (0x7e, 0xfe)");
	ok(q[2] == 0x01, "rule: a small value beside a large one becomes a subnormal (2^-9)");
	ok(q[3] == 0x80, "rule: negative zero stays negative zero");
	ok(q[4] == wsync_e4m3_from_f32(1.0f / 2.0f) && q[5] == wsync_e4m3_from_f32(1.5f),
	    "rule: the rest is x / s rounded");
	ok(wsync_fp8_quantize(WSYNC_F32, z, 2, 2, 128, q, s, &bad) == 0 && s[0] == 1e-12f &&
	    q[0] == 0 && q[3] == 0, "rule: an all-zero block gets s = 1e-12 and q = 0");
	{
		float one = 1.0f, three = 3.0f, odd = 0.3f;
		ok(wsync_fp8_quantize(WSYNC_F32, &one, 1, 1, 0, q, s, &bad) == 0 && q[0] == 0x7e &&
		    wsync_fp8_quantize(WSYNC_F32, &three, 1, 1, 0, q + 1, s, &bad) == 0 &&
		    q[1] == 0x7e && wsync_fp8_quantize(WSYNC_F32, &odd, 1, 1, 0, q + 2, s,
		    &bad) == 0 && q[2] == 0x7e,
		    "rule: amax / s is clamped to 448 where s's rounding takes it beyond");
	}
	/* 130 x 129 in 128-blocks: four tiles, three of them partial, each its own amax. */
	memset(big, 0, sizeof(big));
	big[0] = s_bf16(4.0f * 448);                    /* tile (0, 0) */
	big[5 * 129 + 128] = s_bf16(-2.0f * 448);       /* tile (0, 1), one column wide */
	big[129 * 129 + 3] = s_bf16(0.5f * 448);        /* tile (1, 0), two rows high */
	big[128 * 129 + 128] = s_bf16(8.0f * 448);      /* tile (1, 1), one element */
	ok(wsync_fp8_quantize(WSYNC_BF16, big, 130, 129, 128, q, s, &bad) == 0, "rule: edge tiles");
	edge = s[0] == 4.0f && s[1] == 2.0f && s[2] == 0.5f && s[3] == 8.0f;
	ok(edge, "rule: each partial tile's scale is its own amax / 448 (%g %g %g %g)",
	    (double)s[0], (double)s[1], (double)s[2], (double)s[3]);
	ok(q[0] == 0x7e && q[5 * 129 + 128] == 0xfe && q[129 * 129 + 3] == 0x7e &&
	    q[128 * 129 + 128] == 0x7e, "rule: each tile's amax becomes 448");
	{
		float nan[3] = { 1.0f, NAN, 2.0f }, inf[3] = { 1.0f, 2.0f, -INFINITY };
		ok(wsync_fp8_quantize(WSYNC_F32, nan, 1, 3, 0, q, s, &bad) == -1 && bad == 1,
		    "rule: a NaN is refused, naming its element");
		ok(wsync_fp8_quantize(WSYNC_F32, inf, 1, 3, 128, q, s, &bad) == -1 && bad == 2,
		    "rule: an infinity is refused, naming its element");
	}
}

static void
test_parse(void)
{
	wsync_cast_rule_t r;
	wsync_err_t err;
	char text[300];

	ok(wsync_cast_parse("*.weight=f8e4m3:block128", &r, &err) == 0 &&
	    strcmp(r.pattern, "*.weight") == 0 && r.dtype == WSYNC_F8E4M3 &&
	    r.scaling == WSYNC_SCALING_BLOCK128, "parse: PATTERN=f8e4m3:block128");
	wsync_cast_rule_text(&r, text, sizeof(text));
	ok(strcmp(text, "*.weight=f8e4m3:block128") == 0, "parse: the rule's text is the spec");
	ok(wsync_cast_parse("a=b=bf16", &r, &err) == 0 && strcmp(r.pattern, "a=b") == 0,
	    "parse: the last '=' ends the pattern");
	ok(wsync_cast_parse("*=f8e4m3", &r, &err) == -1 && err.code == EX_USAGE &&
	    strcmp(err.msg, "\"*=f8e4m3\": f8e4m3 needs a scaling: f8e4m3:block128 or "
	    "f8e4m3:tensor") == 0, "parse: f8e4m3 without a scaling is a usage error");
	ok(wsync_cast_parse("*=i8", &r, &err) == -1 && err.code == EX_USAGE,
	    "parse: an integer target is a usage error");
	ok(wsync_cast_parse("*=bf16:tensor", &r, &err) == -1 && err.code == EX_USAGE,
	    "parse: a scaling on bf16 is a usage error");
	ok(wsync_cast_parse("bf16", &r, &err) == -1 && err.code == EX_USAGE,
	    "parse: no '=' is a usage error");
}

int
main(void)
{
	test_e4m3_codes();
	test_e4m3_ties();
	test_bf16();
	test_f16();
	test_convert();
	test_rule();
	test_parse();
	return tap_done();
}
