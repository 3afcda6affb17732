/* dtype.c - element types: names, sizes, values; tensor sizes; model ids. */
#include <math.h>
#include <string.h>

#include "wsync.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wsync reads tensor data in place and needs a little-endian host"
#endif

static const struct {
	const char *name;
	size_t size;
} s_dtypes[WSYNC_DTYPE_COUNT] = {
	[WSYNC_F64] = { "f64", 8 },     [WSYNC_F32] = { "f32", 4 },
	[WSYNC_F16] = { "f16", 2 },     [WSYNC_BF16] = { "bf16", 2 },
	[WSYNC_I64] = { "i64", 8 },     [WSYNC_I32] = { "i32", 4 },
	[WSYNC_I16] = { "i16", 2 },     [WSYNC_I8] = { "i8", 1 },
	[WSYNC_U8] = { "u8", 1 },       [WSYNC_BOOL] = { "bool", 1 },
	[WSYNC_F8E4M3] = { "f8e4m3", 1 }, [WSYNC_F8E5M2] = { "f8e5m2", 1 },
};

const char *
wsync_dtype_name(wsync_dtype_t dtype)
{
	if ((unsigned)dtype >= WSYNC_DTYPE_COUNT)
		return NULL;
	return s_dtypes[dtype].name;
}

int
wsync_dtype_from_name(const char *name, wsync_dtype_t *dtype)
{
	for (int i = 0; i < WSYNC_DTYPE_COUNT; i++) {
		if (strcmp(name, s_dtypes[i].name) == 0) {
			*dtype = (wsync_dtype_t)i;
			return 0;
		}
	}
	return -1;
}

size_t
wsync_dtype_size(wsync_dtype_t dtype)
{
	if ((unsigned)dtype >= WSYNC_DTYPE_COUNT)
		return 0;
	return s_dtypes[dtype].size;
}

/* IEEE half precision bits to double, subnormals, infinities and NaN included. */
static double
s_half(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;

	if (exp == 0)
		v = ldexp(mant, -24);
	else if (exp == 31)
		v = mant ? NAN : INFINITY;
	else
		v = ldexp(mant + 1024, exp - 25);
	return sign ? -v : v;
}

/* OCP FP8 E4M3FN: bias 7, no infinities, only S.1111.111 is NaN. */
static double
s_e4m3(uint8_t b)
{
	int sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 7;
	double v;

	if (exp == 15 && mant == 7)
		return NAN;
	if (exp == 0)
		v = ldexp(mant, -9);
	else
		v = ldexp(mant + 8, exp - 10);
	return sign ? -v : v;
}

double
wsync_dtype_get(wsync_dtype_t dtype, const void *data, uint64_t i)
{
	const unsigned char *p = (const unsigned char *)data + i * wsync_dtype_size(dtype);
	union { double f64; float f32; int64_t i64; int32_t i32; int16_t i16;
	    uint16_t u16; } u;
	uint32_t bits;

	switch (dtype) {
	case WSYNC_F64: memcpy(&u.f64, p, 8); return u.f64;
	case WSYNC_F32: memcpy(&u.f32, p, 4); return u.f32;
	case WSYNC_F16: memcpy(&u.u16, p, 2); return s_half(u.u16);
	case WSYNC_BF16:
		memcpy(&u.u16, p, 2);
		bits = (uint32_t)u.u16 << 16;
		memcpy(&u.f32, &bits, 4);
		return u.f32;
	case WSYNC_I64: memcpy(&u.i64, p, 8); return (double)u.i64;
	case WSYNC_I32: memcpy(&u.i32, p, 4); return u.i32;
	case WSYNC_I16: memcpy(&u.i16, p, 2); return u.i16;
	case WSYNC_I8: return (int8_t)*p;
	case WSYNC_U8: return *p;
	case WSYNC_BOOL: return *p != 0;
	case WSYNC_F8E4M3: return s_e4m3(*p);
	case WSYNC_F8E5M2: return s_half((uint16_t)(*p << 8));
	default: return NAN;
	}
}

int
wsync_tensor_nbytes(wsync_dtype_t dtype, int ndim, const uint64_t *shape,
    uint64_t *nbytes)
{
	uint64_t n = wsync_dtype_size(dtype);

	if (n == 0 || ndim < 0 || ndim > WSYNC_MAX_DIMS)
		return -1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] != 0 && n > UINT64_MAX / shape[i])
			return -1;
		n *= shape[i];
	}
	*nbytes = n;
	return 0;
}

int
wsync_model_id_check(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > WSYNC_MAX_MODEL || s[0] == '.')
		return -1;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._-") == n ? 0 : -1;
}
