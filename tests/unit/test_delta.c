/*
 * test_delta.c - deltas: byte-identical round trips on stepped models and on
 * every change of a tree, sizes against the bars and the peers'
 * xor+zstd-1, damaged deltas and bases refused naming the tensor, the
 * header decoder on truncated and altered input, and inputs that are pipes
 * (held in memory, not read from their files); a delta made over the base
 * (a pusher's kept copy made into the head as it is read), the same bytes as
 * the delta made from the two files; a delta applied while it arrives, the
 * same file, its first tensors written before its last bytes came; a delta
 * applied through kept mappings, the same file. Run from
 * the repository root
 * (tests/fixtures/mkstep.py writes the stepped models).
 */
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>
#include <zstd.h>

#include "delta_int.h"
#include "source_int.h"
#include "tap.h"

static char s_dir[64];

static const char *
s_path(const char *name)
{
	static char buf[8][256];
	static int next;
	char *p = buf[next++ % 8];

	snprintf(p, sizeof(buf[0]), "%s/%s", s_dir, name);
	return p;
}

/* The whole of a file, malloc'd; *len its size. NULL when unreadable. */
static unsigned char *
s_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p = NULL;
	long n;

	if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) != NULL &&
	    fread(p, 1, (size_t)n, f) == (size_t)n)
		*len = (size_t)n;
	else {
		free(p);
		p = NULL;
	}
	if (f != NULL)
		fclose(f);
	return p;
}

static int
s_spit(const char *path, const void *p, size_t len)
{
	FILE *f = fopen(path, "wb");
	int rc = f != NULL && fwrite(p, 1, len, f) == len ? 0 : -1;

	if (f != NULL && fclose(f) != 0)
		rc = -1;
	return rc;
}

static int
s_same_files(const char *a, const char *b)
{
	size_t la = 0, lb = 0;
	unsigned char *pa = s_slurp(a, &la), *pb = s_slurp(b, &lb);
	int same = pa != NULL && pb != NULL && la == lb && memcmp(pa, pb, la) == 0;

	free(pa);
	free(pb);
	return same;
}

/* Makes base -> head into delta; 0, or the error's code with err filled. */
static int
s_make(const char *base, const char *head, const char *delta, wsync_delta_stats_t *st,
    wsync_err_t *err)
{
	int b = open(base, O_RDONLY), h = open(head, O_RDONLY);
	int d = open(delta, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int rc = wsync_delta_make(b, h, d, delta, WSYNC_DELTA_ANY, st, err) < 0 ? err->code : 0;

	close(b);
	close(h);
	close(d);
	return rc;
}

/* Makes base -> head into delta with the hub's limit; what wsync_delta_make returned. */
static int
s_make_worth(const char *base, const char *head, const char *delta, wsync_delta_stats_t *st,
    wsync_err_t *err)
{
	int b = open(base, O_RDONLY), h = open(head, O_RDONLY);
	int d = open(delta, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int rc = wsync_delta_make(b, h, d, delta, WSYNC_DELTA_WORTH, st, err);

	close(b);
	close(h);
	close(d);
	return rc;
}

/* Applies delta to base into out (a new file); 0, or the error's code. */
static int
s_apply(const char *base, const char *delta, const char *out, wsync_err_t *err)
{
	int b = open(base, O_RDONLY), d = open(delta, O_RDONLY);
	int o = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
	uint64_t version = 0, content = 0;
	int rc = wsync_delta_apply(b, d, o, delta, &version, &content, err) < 0 ? err->code : 0;

	close(b);
	close(d);
	close(o);
	return rc;
}

/* zstd level 1 of the xor of every tensor of head that differs from base's. */
static uint64_t
s_peers(const char *base, const char *head)
{
	wsync_err_t err;
	wsync_file_t *b = wsync_file_open(base, &err), *h = wsync_file_open(head, &err);
	uint64_t total = 0;

	for (size_t i = 0; b != NULL && h != NULL && i < wsync_file_count(h); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(h, i);
		const wsync_tensor_t *bt = wsync_file_find(b, t->path);
		size_t cap = ZSTD_compressBound(t->nbytes);
		unsigned char *x = malloc(t->nbytes + cap);
		if (bt == NULL || bt->nbytes != t->nbytes || bt->hash == t->hash || x == NULL) {
			free(x);
			continue;
		}
		for (uint64_t j = 0; j < t->nbytes; j++)
			x[j] = ((const unsigned char *)t->data)[j] ^ ((const unsigned char *)bt->data)[j];
		total += ZSTD_compress(x + t->nbytes, cap, x, t->nbytes, 1);
		free(x);
	}
	wsync_file_close(&b);
	wsync_file_close(&h);
	return total;
}

/* Writes a stepped model pair with mkstep.py; 0 on success. */
static int
s_mkstep(const char *dtype, const char *fraction, unsigned bytes)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/fixtures/mkstep.py %s %s %u "
	    "%s %s >/dev/null", dtype, fraction, bytes, s_path("base.wsync"),
	    s_path("head.wsync"));
	return system(cmd);
}

/* A stepped pair round trips byte for byte; returns the delta's and the peers' sizes. */
static void
s_round_trip_step(const char *dtype, const char *fraction, uint64_t *delta,
    uint64_t *peers, uint64_t *whole)
{
	wsync_delta_stats_t st = { 0 };
	wsync_err_t err = { 0 };

	int written = s_mkstep(dtype, fraction, 1u << 22) == 0;

	*delta = *peers = *whole = 0;
	ok(written, "mkstep.py writes a %s model and its step changing %s of it (run from "
	    "the repository root)", dtype, fraction);
	if (!written)
		return;
	ok(s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0, "%s %s: a delta is made (%s)", dtype, fraction, err.msg);
	ok(s_apply(s_path("base.wsync"), s_path("d.wdelta"), s_path("out.wsync"), &err) == 0,
	    "%s %s: the delta applies (%s)", dtype, fraction, err.msg);
	ok(s_same_files(s_path("out.wsync"), s_path("head.wsync")),
	    "%s %s: the rebuilt file equals the head byte for byte", dtype, fraction);
	*delta = st.bytes;
	*whole = st.head_bytes;
	*peers = s_peers(s_path("base.wsync"), s_path("head.wsync"));
}

static void
test_stepped_models_round_trip_within_the_bars(void)
{
	static const struct { const char *dtype, *fraction; unsigned bar; } cases[] = {
		{ "bf16", "0.01", 40 }, { "bf16", "0.03", 15 },
		{ "f32", "0.01", 40 }, { "f32", "0.03", 15 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t delta, peers, whole;
		s_round_trip_step(cases[i].dtype, cases[i].fraction, &delta, &peers, &whole);
		ok(delta > 0 && delta * cases[i].bar <= whole, "%s %s: the delta (%llu bytes) "
		    "is at most 1/%u of the head (%llu)", cases[i].dtype, cases[i].fraction,
		    (unsigned long long)delta, cases[i].bar, (unsigned long long)whole);
		ok(delta > 0 && delta <= peers, "%s %s: the delta (%llu bytes) is no larger than "
		    "xor+zstd-1 of the changed tensors (%llu)", cases[i].dtype, cases[i].fraction,
		    (unsigned long long)delta, (unsigned long long)peers);
	}
}

static void
test_no_change_and_all_changed_round_trip(void)
{
	uint64_t delta, peers, whole;
	wsync_delta_stats_t st = { 0 };
	wsync_err_t err = { 0 };
	int rc;

	s_round_trip_step("bf16", "0", &delta, &peers, &whole);
	ok(delta > 0 && delta < 4096, "no change: the delta is a header (%llu bytes)",
	    (unsigned long long)delta);
	s_round_trip_step("bf16", "1", &delta, &peers, &whole);
	ok(delta > 0 && delta <= whole && delta <= peers, "all changed: the delta (%llu) is no "
	    "larger than the head (%llu) or xor+zstd-1 (%llu)", (unsigned long long)delta,
	    (unsigned long long)whole, (unsigned long long)peers);
	ok(s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0 && st.count[WSYNC_DELTA_SAME] == 0, "all changed: no tensor is same");
	rc = s_make_worth(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err);
	ok(rc == 1 && st.bytes == 0 && st.estimate > st.head_bytes / 2 &&
	    st.count[WSYNC_DELTA_SPARSE] == 0, "all changed, with the hub's limit: not worth it "
	    "by the estimate (%llu of %llu bytes), nothing encoded",
	    (unsigned long long)st.estimate, (unsigned long long)st.head_bytes);
	s_round_trip_step("bf16", "0.01", &delta, &peers, &whole);
	rc = s_make_worth(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err);
	ok(rc == 0 && st.bytes == delta && st.estimate <= st.head_bytes / 2,
	    "1%% changed, with the hub's limit: made, the same %llu bytes (estimate %llu)",
	    (unsigned long long)st.bytes, (unsigned long long)st.estimate);
}

/* Adds a tensor of n elements of dtype, shape given, filled from seed. */
static void
s_add(wsync_tree_t *tree, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, unsigned char *buf, unsigned seed)
{
	uint64_t nbytes = 0;
	wsync_err_t err;

	wsync_tensor_nbytes(dtype, ndim, shape, &nbytes);
	for (uint64_t i = 0; i < nbytes; i++)
		buf[i] = (unsigned char)(((i * 2654435761u) >> 7) + seed);
	if (wsync_tree_add(tree, path, dtype, ndim, shape, buf, nbytes, &err) < 0)
		printf("# add %s: %s\n", path, err.msg);
}

static int
s_write(wsync_tree_t *tree, const char *path, uint64_t version)
{
	wsync_err_t err;
	int rc;

	wsync_tree_set_version(tree, version);
	rc = wsync_tree_write_file(tree, path, &err);
	if (rc < 0)
		printf("# write %s: %s\n", path, err.msg);
	wsync_tree_destroy(&tree);
	return rc;
}

/*
 * Base and head differ in every way a tree can: a tensor changed in one
 * element, one added, one removed, one reshaped, one whose dtype changed,
 * a zero-size tensor and a scalar.
 */
static void
test_every_change_of_a_tree_round_trips(void)
{
	static unsigned char b[6][8192], h[7][8192];
	uint64_t s64x16[2] = { 64, 16 }, s128[1] = { 128 }, s8[1] = { 8 }, s2x4[2] = { 2, 4 };
	uint64_t s0x4[2] = { 0, 4 }, s300[1] = { 300 };
	wsync_delta_stats_t st = { 0 };
	wsync_err_t err = { 0 };
	wsync_tree_t *tb = wsync_tree_new("edits", &err), *th = wsync_tree_new("edits", &err);

	s_add(tb, "a.changed", WSYNC_BF16, 2, s64x16, b[0], 1);
	s_add(tb, "b.removed", WSYNC_F32, 1, s128, b[1], 2);
	s_add(tb, "c.reshaped", WSYNC_I32, 1, s8, b[2], 3);
	s_add(tb, "d.retyped", WSYNC_F32, 1, s128, b[3], 4);
	s_add(tb, "e.empty", WSYNC_F32, 2, s0x4, b[4], 5);
	s_add(tb, "f.scalar", WSYNC_F32, 0, NULL, b[5], 6);
	s_add(th, "a.changed", WSYNC_BF16, 2, s64x16, h[0], 1);
	h[0][100] ^= 1;
	s_add(th, "c.reshaped", WSYNC_I32, 2, s2x4, h[2], 3);
	s_add(th, "d.retyped", WSYNC_F64, 1, s128, h[3], 4);
	s_add(th, "e.empty", WSYNC_F32, 2, s0x4, h[4], 5);
	s_add(th, "f.scalar", WSYNC_F32, 0, NULL, h[5], 7);
	s_add(th, "g.added", WSYNC_U8, 1, s300, h[6], 8);
	ok(s_write(tb, s_path("base.wsync"), 10) == 0 && s_write(th, s_path("head.wsync"), 11) == 0,
	    "edits: base and head written");
	ok(s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0, "edits: a delta is made (%s)", err.msg);
	ok(st.count[WSYNC_DELTA_SPARSE] == 1 && st.count[WSYNC_DELTA_SAME] == 0 &&
	    st.count[WSYNC_DELTA_RAW] + st.count[WSYNC_DELTA_WHOLE] == 5,
	    "edits: one tensor sparse, the five others encoded alone (same %llu, xor %llu, "
	    "sparse %llu, whole %llu, raw %llu)",
	    (unsigned long long)st.count[0], (unsigned long long)st.count[1],
	    (unsigned long long)st.count[2], (unsigned long long)st.count[3],
	    (unsigned long long)st.count[4]);
	ok(s_apply(s_path("base.wsync"), s_path("d.wdelta"), s_path("out.wsync"), &err) == 0,
	    "edits: the delta applies (%s)", err.msg);
	ok(s_same_files(s_path("out.wsync"), s_path("head.wsync")),
	    "edits: the rebuilt file equals the head byte for byte");
	ok(s_make(s_path("head.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0 && st.count[WSYNC_DELTA_SAME] == 5 && st.count[WSYNC_DELTA_RAW] == 1,
	    "a head against itself: every tensor with data is same, the empty one raw");
	ok(s_apply(s_path("head.wsync"), s_path("d.wdelta"), s_path("out.wsync"), &err) == 0 &&
	    s_same_files(s_path("out.wsync"), s_path("head.wsync")),
	    "a head against itself round trips (%s)", err.msg);
}

/*
 * A tensor of 32 MiB is estimated from one 1 MiB chunk in 8: changed only in
 * chunks the sample skips, it is still encoded (its hash differs), never taken
 * for the same, and the rebuilt file equals the head.
 */
static void
test_a_change_the_sample_skips_is_still_sent(void)
{
	uint64_t shape[1] = { 8u << 20 };
	wsync_delta_stats_t st = { 0 };
	wsync_err_t err = { 0 };
	unsigned char *b = malloc(32u << 20), *h = malloc(32u << 20);
	int rc;
	wsync_tree_t *tb = wsync_tree_new("sampled", &err), *th = wsync_tree_new("sampled", &err);

	if (b == NULL || h == NULL || tb == NULL || th == NULL) {
		ok(0, "sampled: 64 MiB of memory");
		return;
	}
	s_add(tb, "w", WSYNC_F32, 1, shape, b, 1);
	s_add(th, "w", WSYNC_F32, 1, shape, h, 1);
	/* The first chunk and the last are not sampled (the fifth in each 8 is). */
	h[10] ^= 1;
	h[(32u << 20) - 3] ^= 0x80;
	ok(s_write(tb, s_path("base.wsync"), 1) == 0 && s_write(th, s_path("head.wsync"), 2) == 0,
	    "sampled: base and head written");
	rc = s_make_worth(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err);
	ok(rc == 0 && st.count[WSYNC_DELTA_SPARSE] == 1 && st.count[WSYNC_DELTA_SAME] == 0,
	    "sampled: two changes the sample skips, with the hub's limit: encoded sparse "
	    "(estimate %llu bytes, delta %llu)", (unsigned long long)st.estimate,
	    (unsigned long long)st.bytes);
	ok(s_apply(s_path("base.wsync"), s_path("d.wdelta"), s_path("out.wsync"), &err) == 0 &&
	    s_same_files(s_path("out.wsync"), s_path("head.wsync")),
	    "sampled: the rebuilt file equals the head byte for byte (%s)", err.msg);
	free(b);
	free(h);
}

/* The delta's header, read from the file at path; 0 on success. */
static int
s_header(const char *path, unsigned char **buf, size_t *len, wsync_delta_header_t *h)
{
	wsync_err_t err;

	if ((*buf = s_slurp(path, len)) == NULL)
		return -1;
	return wsync_delta_read_header(*buf, *len, path, h, &err);
}

static void
test_damage_is_refused_naming_the_tensor(void)
{
	wsync_delta_header_t h = { 0 };
	unsigned char *buf = NULL, *base = NULL, *before = NULL;
	size_t len = 0, blen = 0, before_len = 0;
	const wsync_delta_tensor_t *t = NULL;
	wsync_delta_stats_t st;
	wsync_err_t err = { 0 };
	char want[256];
	wsync_file_t *f;

	int made = s_mkstep("bf16", "0.01", 1u << 20) == 0 &&
	    s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st, &err) == 0;

	ok(made, "damage: a stepped pair and its delta are written");
	if (!made)
		return;
	ok(s_header(s_path("d.wdelta"), &buf, &len, &h) == 0, "damage: the header reads back");
	for (size_t i = 0; i < h.ntensors && t == NULL; i++)
		if (h.tensors[i].enc == WSYNC_DELTA_SPARSE)
			t = &h.tensors[i];
	ok(t != NULL, "damage: the delta has a sparse tensor");
	if (t == NULL)
		goto out;

	/* One byte of its encoded data: zstd or the hash catches it. */
	buf[t->data_off + t->data_len / 2] ^= 0x10;
	s_spit(s_path("bad.wdelta"), buf, len);
	buf[t->data_off + t->data_len / 2] ^= 0x10;
	snprintf(want, sizeof(want), "tensor %s:", t->path);
	ok(s_apply(s_path("base.wsync"), s_path("bad.wdelta"), s_path("out.wsync"), &err) ==
	    EX_DATAERR && strstr(err.msg, want) != NULL,
	    "a flipped byte in a tensor's delta data is refused naming it: %s", err.msg);

	/* One byte of the base tensor it is applied to. */
	base = s_slurp(s_path("base.wsync"), &blen);
	before = s_slurp(s_path("base.wsync"), &before_len);
	f = base != NULL ? wsync_file_open_buffer(base, blen, "base", &err) : NULL;
	ok(f != NULL, "damage: the base opens");
	if (f != NULL) {
		const wsync_tensor_t *bt = wsync_file_find(f, t->path);
		base[bt->offset + 7] ^= 0x01;
		wsync_file_close(&f);
		s_spit(s_path("badbase.wsync"), base, blen);
		ok(s_apply(s_path("badbase.wsync"), s_path("d.wdelta"), s_path("out.wsync"),
		    &err) == EX_DATAERR && strstr(err.msg, want) != NULL &&
		    strstr(err.msg, "damaged base") != NULL,
		    "a flipped byte in the base is refused naming the tensor: %s", err.msg);
	}
	ok(before != NULL && s_spit(s_path("before.wsync"), before, before_len) == 0 &&
	    s_same_files(s_path("before.wsync"), s_path("base.wsync")),
	    "applying never changes the base");

	/* A base that is not the delta's at all: the head itself. */
	ok(s_apply(s_path("head.wsync"), s_path("d.wdelta"), s_path("out.wsync"), &err) ==
	    EX_DATAERR && strstr(err.msg, "the base is not the delta's") != NULL,
	    "a delta applied to another base is refused: %s", err.msg);

	/* The skeleton: one byte of H's header. */
	buf[h.skeleton_off + h.skeleton_len / 2] ^= 0x20;
	s_spit(s_path("bad.wdelta"), buf, len);
	buf[h.skeleton_off + h.skeleton_len / 2] ^= 0x20;
	ok(s_apply(s_path("base.wsync"), s_path("bad.wdelta"), s_path("out.wsync"), &err) ==
	    EX_DATAERR, "a flipped byte in the skeleton is refused: %s", err.msg);
out:
	wsync_delta_header_free(&h);
	free(buf);
	free(base);
	free(before);
}

/* Every truncation, and each byte of the header region altered, gives 0 or 65. */
static void
test_hostile_headers_give_65(void)
{
	wsync_delta_header_t h = { 0 };
	unsigned char *buf = NULL;
	size_t len = 0, bad = 0, refused = 0, limit;
	wsync_delta_stats_t st;
	wsync_err_t err;

	int made = s_mkstep("f32", "0.01", 1u << 16) == 0 &&
	    s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0 && s_header(s_path("d.wdelta"), &buf, &len, &h) == 0;

	ok(made, "hostile: a small delta is made and reads back");
	if (!made)
		goto out;
	wsync_delta_header_free(&h);
	for (size_t n = 0; n < len; n++) {
		int rc = wsync_delta_read_header(buf, n, "cut", &h, &err);
		wsync_delta_header_free(&h);
		if (rc == 0 || err.code != EX_DATAERR || err.msg[0] == '\0')
			bad++;
	}
	ok(bad == 0, "every truncation of a delta is refused with 65 (%zu were not)", bad);
	limit = len < 4096 ? len : 4096;
	bad = 0;
	for (size_t i = 0; i < limit; i++) {
		for (unsigned v = 0; v < 256; v += 37) {
			unsigned char was = buf[i];
			int rc;
			buf[i] = (unsigned char)v;
			rc = wsync_delta_read_header(buf, len, "altered", &h, &err);
			wsync_delta_header_free(&h);
			buf[i] = was;
			if (rc < 0 && (err.code != EX_DATAERR || err.msg[0] == '\0'))
				bad++;
			refused += rc < 0;
		}
	}
	ok(bad == 0 && refused > 0, "altered headers are read or refused with 65 "
	    "(%zu refused, %zu with another code)", refused, bad);
out:
	free(buf);
}

/* A delta written by hand: each field as given, for the decoder's checks. */
static void
test_lying_entries_are_refused(void)
{
	static const struct {
		const char *what, *enc, *want;
		unsigned off, len;
		uint64_t size;
	} cases[] = {
		{ "an unknown encoding", "zigzag", "tensor t", 64, 4, 128 },
		{ "data outside the head", "raw", "tensor t", 200, 4, 128 },
		{ "an empty tensor that is not raw", "whole", "tensor t", 0, 0, 128 },
		{ "a head of 1 TiB around one tensor", "raw", "more than any header", 64, 4,
		    UINT64_C(1) << 40 },
	};
	wsync_delta_header_t h;
	wsync_err_t err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char d[256];
		size_t n = 0;
		int rc;
#define PUT(...) do { const unsigned char b_[] = { __VA_ARGS__ }; \
	memcpy(d + n, b_, sizeof(b_)); n += sizeof(b_); } while (0)
#define STR(s) do { d[n++] = (unsigned char)(0xa0 | strlen(s)); memcpy(d + n, s, strlen(s)); \
	n += strlen(s); } while (0)
		PUT(0x89);
		STR("wsync-delta"); PUT(1);
		STR("model"); STR("m");
		STR("base"); PUT(1);
		STR("base_content"); PUT(2);
		STR("version"); PUT(2);
		STR("content"); PUT(3);
		STR("size"); PUT(0xcf);
		for (int b = 7; b >= 0; b--)
			d[n++] = (unsigned char)(cases[i].size >> (8 * b));
		STR("skeleton"); PUT(0xc4, 0);
		STR("tensors"); PUT(0x91, 0x86);
		STR("path"); STR("t");
		STR("off"); PUT(0xcc, (unsigned char)cases[i].off);
		STR("len"); PUT((unsigned char)cases[i].len);
		STR("hash"); PUT(0);
		STR("enc"); STR(cases[i].enc);
		STR("data"); PUT(0xc4, (unsigned char)cases[i].len, 0, 0, 0, 0);
		n -= 4 - cases[i].len;
#undef PUT
#undef STR
		rc = wsync_delta_read_header(d, n, "hand", &h, &err);
		wsync_delta_header_free(&h);
		ok(rc < 0 && err.code == EX_DATAERR && strstr(err.msg, cases[i].want) != NULL,
		    "%s is refused: %s", cases[i].what, err.msg);
	}
}

/*
 * A file of 4 MiB or more opened from disk is parsed from an image of its
 * headers (lib/mpcheck.c): its tensors read the file's bytes, and a damaged
 * one is refused as from memory.
 */
static void
test_large_files_parse_from_an_image(void)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	wsync_err_t err = { 0 }, merr = { 0 };
	wsync_file_t *f = NULL, *m = NULL;

	int made = s_mkstep("bf16", "0.01", 1u << 23) == 0 &&
	    (buf = s_slurp(s_path("head.wsync"), &len)) != NULL && len >= (4u << 20);

	ok(made, "image: an 8 MiB model is written");
	if (!made)
		goto out;
	f = wsync_file_open(s_path("head.wsync"), &err);
	m = wsync_file_open_buffer(buf, len, s_path("head.wsync"), &merr);
	ok(f != NULL && m != NULL && wsync_file_count(f) == wsync_file_count(m) &&
	    wsync_file_content_id(f) == wsync_file_content_id(m) &&
	    wsync_file_verify(f, NULL, NULL, &err) == 0,
	    "image: the file opens as from memory, its tensors verify (%s)", err.msg);
	for (size_t i = 0; f != NULL && m != NULL && i < wsync_file_count(f); i++)
		if (wsync_file_tensor(f, i)->offset != wsync_file_tensor(m, i)->offset ||
		    (wsync_file_tensor(f, i)->nbytes > 0 && memcmp(wsync_file_tensor(f, i)->data,
		    wsync_file_tensor(m, i)->data, wsync_file_tensor(f, i)->nbytes) != 0)) {
			ok(0, "image: tensor %zu reads the file's bytes", i);
			goto out;
		}
	wsync_file_close(&f);
	wsync_file_close(&m);
	s_spit(s_path("cut.wsync"), buf, len - 100);
	f = wsync_file_open(s_path("cut.wsync"), &err);
	m = wsync_file_open_buffer(buf, len - 100, s_path("cut.wsync"), &merr);
	ok(f == NULL && m == NULL && err.code == EX_DATAERR && strcmp(err.msg, merr.msg) == 0,
	    "image: a truncated file is refused as from memory: %s", err.msg);
out:
	wsync_file_close(&f);
	wsync_file_close(&m);
	free(buf);
}

/* A pipe whose write end a child fills with path's bytes: the read end, or -1. */
static int
s_pipe_of(const char *path, pid_t *pid)
{
	int fds[2];
	size_t len = 0;
	unsigned char *p;

	if (pipe(fds) < 0)
		return -1;
	if ((*pid = fork()) == 0) {
		close(fds[0]);
		p = s_slurp(path, &len);
		_exit(p != NULL && write(fds[1], p, len) == (ssize_t)len ? 0 : 1);
	}
	close(fds[1]);
	if (*pid < 0) {
		close(fds[0]);
		return -1;
	}
	return fds[0];
}

/*
 * Files are read a piece at a time; a base and a head that are pipes are held
 * in memory instead, and the delta made from them is the same, byte for byte.
 */
static void
test_inputs_from_pipes_make_the_same_delta(void)
{
	wsync_delta_stats_t st = { 0 };
	wsync_err_t err = { 0 };
	pid_t bpid = -1, hpid = -1;
	int b, h, d, rc, bst = -1, hst = -1;

	int made = s_mkstep("bf16", "0.01", 1u << 21) == 0 &&
	    s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("files.wdelta"), &st,
	    &err) == 0;

	ok(made, "pipes: a 2 MiB model, its step and their delta from the files (%s)", err.msg);
	if (!made)
		return;
	b = s_pipe_of(s_path("base.wsync"), &bpid);
	h = s_pipe_of(s_path("head.wsync"), &hpid);
	d = open(s_path("pipes.wdelta"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	rc = b >= 0 && h >= 0 && d >= 0 ? wsync_delta_make(b, h, d, "pipes.wdelta",
	    WSYNC_DELTA_ANY, &st, &err) : -1;
	if (b >= 0)
		close(b);
	if (h >= 0)
		close(h);
	if (d >= 0)
		close(d);
	if (bpid > 0)
		waitpid(bpid, &bst, 0);
	if (hpid > 0)
		waitpid(hpid, &hst, 0);
	ok(rc == 0 && bst == 0 && hst == 0 &&
	    s_same_files(s_path("files.wdelta"), s_path("pipes.wdelta")),
	    "pipes: the delta made from a base and a head that are pipes is the files' one (%s)",
	    err.msg);
}

/*
 * The delta made and the file rebuilt are the same byte for byte on 1, 2 and
 * 7 threads (WSYNC_THREADS): tensors are encoded and applied on all of them.
 */
static void
test_thread_counts_make_the_same_bytes(void)
{
	static const struct { const char *dtype, *fraction; } cases[] = {
		{ "bf16", "0.01" }, { "f32", "0.3" }, { "bf16", "1" },
	};
	static const char *const threads[] = { "1", "2", "7" };
	wsync_err_t err = { 0 };

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int made = s_mkstep(cases[c].dtype, cases[c].fraction, 1u << 22) == 0, same = made;
		for (size_t k = 0; made && k < sizeof(threads) / sizeof(threads[0]); k++) {
			setenv("WSYNC_THREADS", threads[k], 1);
			made = s_make(s_path("base.wsync"), s_path("head.wsync"),
			    s_path(k == 0 ? "t1.wdelta" : "tn.wdelta"), NULL, &err) == 0 &&
			    s_apply(s_path("base.wsync"), s_path(k == 0 ? "t1.wdelta" :
			    "tn.wdelta"), s_path("out.wsync"), &err) == 0;
			same = made && s_same_files(s_path("out.wsync"), s_path("head.wsync")) &&
			    (k == 0 || s_same_files(s_path("t1.wdelta"), s_path("tn.wdelta")));
			if (!same)
				printf("# %s %s: %s threads differ (%s)\n", cases[c].dtype,
				    cases[c].fraction, threads[k], err.msg);
			made = made && same;
		}
		unsetenv("WSYNC_THREADS");
		ok(made && same, "%s %s: 1, 2 and 7 threads make the same delta and rebuild the "
		    "head byte for byte", cases[c].dtype, cases[c].fraction);
	}
}

/* Writes size bytes of 'z' over path (made if need be): a file whose pages all exist. */
static int
s_scribble(const char *path, const char *like)
{
	struct stat st;
	int fd = open(path, O_RDWR | O_CREAT, 0600), rc = -1;
	char *buf = NULL;

	if (fd >= 0 && stat(like, &st) == 0 && (buf = malloc((size_t)st.st_size)) != NULL) {
		memset(buf, 'z', (size_t)st.st_size);
		rc = pwrite(fd, buf, (size_t)st.st_size, 0) == st.st_size &&
		    ftruncate(fd, st.st_size) == 0 ? 0 : -1;
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Applies delta to base into out (a file written over in place) through kept; 0 or -1. */
static int
s_apply_kept(const char *base, const char *delta, const char *out, wsync_kept_t *kept,
    wsync_delta_dest_t *o, wsync_err_t *err)
{
	int b = open(base, O_RDONLY), d = open(delta, O_RDONLY), rc;

	*o = (wsync_delta_dest_t){ .fd = open(out, O_RDWR), .path = out, .kept = kept };
	rc = wsync_delta_apply_into(b, d, o, delta, NULL, NULL, err);
	close(b);
	close(d);
	close(o->fd);
	return rc;
}

/*
 * A delta applied through kept mappings (a recycling hub's store on tmpfs):
 * written into a file whose pages exist, then that file read as the base of
 * the delta back, on 1, 2 and 7 threads, the same mappings again each time:
 * the same bytes as the files, for tensors sparse, xored and sent whole.
 */
static void
test_kept_mappings_rebuild_the_same_bytes(void)
{
	static const struct { const char *dtype, *fraction; } cases[] = {
		{ "bf16", "0.01" }, { "f32", "0.3" }, { "bf16", "1" },
	};
	static const char *const threads[] = { "1", "2", "7" };
	char shm[] = "/dev/shm/test_delta.XXXXXX", o1[64], o2[64], cmd[96];
	wsync_delta_dest_t d1, d2;
	wsync_err_t err = { 0 };
	wsync_kept_t *kept;

	if (!wsync_kept_fits("/dev/shm") || mkdtemp(shm) == NULL) {
		printf("ok %d - kept mappings # skip no tmpfs at /dev/shm\n", ++tap_n);
		return;
	}
	if ((kept = wsync_kept_new(4)) == NULL)
		exit(70);
	snprintf(o1, sizeof(o1), "%s/o1", shm);
	snprintf(o2, sizeof(o2), "%s/o2", shm);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int made = s_mkstep(cases[c].dtype, cases[c].fraction, 1u << 22) == 0 &&
		    s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("fwd.wdelta"), NULL,
		    &err) == 0 && s_make(s_path("head.wsync"), s_path("base.wsync"),
		    s_path("back.wdelta"), NULL, &err) == 0, same = made;
		for (size_t k = 0; made && same && k < sizeof(threads) / sizeof(threads[0]); k++) {
			setenv("WSYNC_THREADS", threads[k], 1);
			made = s_scribble(o1, s_path("head.wsync")) == 0 &&
			    s_scribble(o2, s_path("base.wsync")) == 0 &&
			    s_apply_kept(s_path("base.wsync"), s_path("fwd.wdelta"), o1, kept, &d1,
			    &err) == 0 && s_apply_kept(o1, s_path("back.wdelta"), o2, kept, &d2,
			    &err) == 0;
			same = made && !d1.base_kept && d1.head_kept && d2.base_kept && d2.head_kept &&
			    s_same_files(o1, s_path("head.wsync")) &&
			    s_same_files(o2, s_path("base.wsync"));
			if (!same)
				printf("# %s %s: %s threads: kept %d%d %d%d (%s)\n", cases[c].dtype,
				    cases[c].fraction, threads[k], d1.base_kept, d1.head_kept,
				    d2.base_kept, d2.head_kept, made ? "" : err.msg);
		}
		unsetenv("WSYNC_THREADS");
		ok(made && same, "%s %s: rebuilt through kept mappings, from and into them, on 1, 2 "
		    "and 7 threads: the head and the base byte for byte", cases[c].dtype,
		    cases[c].fraction);
	}
	wsync_kept_free(&kept);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", shm);
	if (system(cmd) != 0)
		printf("# cannot remove %s\n", shm);
}

/*
 * Writes a model of one large tensor (bf16, 24 MiB: sampled when planned, 24
 * pieces when applied) among three small ones, and its step: 1% of the large
 * one's elements and one small tensor changed.
 */
static int
s_write_large_and_small(void)
{
	static const uint64_t big[2] = { 3072, 4096 }, norm[1] = { 64 }, bias[1] = { 1000 },
	    ids[1] = { 5 };
	const uint64_t nbig = big[0] * big[1] * 2;
	unsigned char *b = malloc(nbig), *h = malloc(nbig), small[3][4096], hsmall[4096];
	wsync_err_t err;
	wsync_tree_t *tb = wsync_tree_new("large", &err), *th = wsync_tree_new("large", &err);
	int rc = -1;

	if (b != NULL && h != NULL && tb != NULL && th != NULL) {
		s_add(tb, "bias", WSYNC_F32, 1, bias, small[0], 1);
		s_add(tb, "ids", WSYNC_U8, 1, ids, small[1], 2);
		s_add(tb, "norm", WSYNC_F32, 1, norm, small[2], 3);
		s_add(tb, "embed", WSYNC_BF16, 2, big, b, 4);
		memcpy(h, b, nbig);
		for (uint64_t e = 7; e < nbig / 2; e += 100)
			h[2 * e] ^= (unsigned char)(1 + e % 3);
		s_add(th, "bias", WSYNC_F32, 1, bias, small[0], 1);
		s_add(th, "ids", WSYNC_U8, 1, ids, small[1], 2);
		s_add(th, "norm", WSYNC_F32, 1, norm, hsmall, 9);
		wsync_tree_add(th, "embed", WSYNC_BF16, 2, big, h, nbig, &err);
		rc = s_write(tb, s_path("base.wsync"), 1) == 0 &&
		    s_write(th, s_path("head.wsync"), 2) == 0 ? 0 : -1;
		tb = th = NULL;
	}
	wsync_tree_destroy(&tb);
	wsync_tree_destroy(&th);
	free(b);
	free(h);
	return rc;
}

/*
 * The same with one large tensor among small ones: the pool hands it out
 * first, the small ones go on the other threads, the delta is packed and
 * the head written in file order all the same.
 */
static void
test_a_large_tensor_among_small_ones_makes_the_same_bytes(void)
{
	static const char *const threads[] = { "1", "2", "7" };
	wsync_err_t err = { 0 };
	int made = s_write_large_and_small() == 0, same = made;

	for (size_t k = 0; made && k < sizeof(threads) / sizeof(threads[0]); k++) {
		setenv("WSYNC_THREADS", threads[k], 1);
		made = s_make(s_path("base.wsync"), s_path("head.wsync"),
		    s_path(k == 0 ? "t1.wdelta" : "tn.wdelta"), NULL, &err) == 0 &&
		    s_apply(s_path("base.wsync"), s_path(k == 0 ? "t1.wdelta" : "tn.wdelta"),
		    s_path("out.wsync"), &err) == 0;
		same = made && s_same_files(s_path("out.wsync"), s_path("head.wsync")) &&
		    (k == 0 || s_same_files(s_path("t1.wdelta"), s_path("tn.wdelta")));
		if (!same)
			printf("# %s threads differ (%s)\n", threads[k], err.msg);
		made = made && same;
	}
	unsetenv("WSYNC_THREADS");
	ok(made && same, "a 24 MiB tensor among three small ones: 1, 2 and 7 threads make the "
	    "same delta and rebuild the head byte for byte");
}

/* Copies file from to to; 0 on success. */
static int
s_copy(const char *from, const char *to)
{
	size_t len = 0;
	unsigned char *p = s_slurp(from, &len);
	int rc = p != NULL ? s_spit(to, p, len) : -1;

	free(p);
	return rc;
}

/* path as a push lays it out (a source's document of its model) written to doc; 0 or -1. */
static int
s_doc(const char *path, const char *doc, wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open(path, err);
	wsync_source_t *src = f != NULL ? wsync_source_open_tree(path, wsync_file_model(f), NULL,
	    err) : NULL;
	uint64_t size = src != NULL ? wsync_source_size(src, err) : 0;
	int fd = size > 0 ? open(doc, O_RDWR | O_CREAT | O_TRUNC, 0600) : -1;
	int rc = fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
	    wsync_source_write_fd(src, fd, size, NULL, NULL, NULL, err) == 0 ? 0 : -1;

	if (fd >= 0)
		close(fd);
	wsync_source_destroy(&src);
	wsync_file_close(&f);
	return rc;
}

/*
 * base and head as a push lays them out (base's in work, head's in doc), and
 * the delta from base's made over work into delta, as a batch pusher makes
 * it from the version it pushed before (patch: work made into head's), or a
 * push with --base (work only read): what wsync_source_delta_over returned,
 * err filled on -1. With map, work is made into head's through its mapping,
 * kept there as a batch pusher keeps it on tmpfs (wsync_kept_one).
 */
static int
s_make_over(const char *base, const char *head, const char *doc, const char *work,
    const char *delta, int patch, wsync_kept_one_t *map, wsync_err_t *err)
{
	wsync_file_t *hf = wsync_file_open(head, err);
	wsync_source_t *src = NULL;
	uint64_t size = 0;
	int wfd = -1, dfd = -1, rc = -1;

	if (hf == NULL || s_doc(head, doc, err) < 0 || s_doc(base, work, err) < 0 ||
	    (src = wsync_source_open_tree(head, wsync_file_model(hf), NULL, err)) == NULL ||
	    (size = wsync_source_size(src, err)) == 0)
		goto out;
	if ((wfd = open(work, O_RDWR)) < 0 ||
	    (dfd = open(delta, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		goto out;
	rc = wsync_source_delta_over(src, size, wfd, patch, map != NULL ? wsync_kept_one(map,
	    wfd) : NULL, dfd, delta, WSYNC_DELTA_ANY, NULL, err);
out:
	if (wfd >= 0)
		close(wfd);
	if (dfd >= 0)
		close(dfd);
	wsync_source_destroy(&src);
	wsync_file_close(&hf);
	return rc;
}

/*
 * Writes a model of small tensors of each element width whose bytes are no
 * multiple of 32 (the encoder's block), and its step: an element changed in
 * each one's last bytes, where the encoder goes element by element, and one
 * before them; the shortest all tail.
 */
static int
s_write_tails(void)
{
	static const struct { const char *path; wsync_dtype_t dtype; uint64_t n, mid; } t[] = {
		{ "bf16", WSYNC_BF16, 4097, 100 }, { "u8", WSYNC_U8, 45, 3 },
		{ "f32", WSYNC_F32, 1001, 10 }, { "f64", WSYNC_F64, 13, 2 },
		{ "short", WSYNC_BF16, 3, 0 },
	};
	static unsigned char b[5][8200], h[5][8200];
	wsync_err_t err;
	wsync_tree_t *tb = wsync_tree_new("tails", &err), *th = wsync_tree_new("tails", &err);

	if (tb == NULL || th == NULL) {
		wsync_tree_destroy(&tb);
		wsync_tree_destroy(&th);
		return -1;
	}
	for (size_t i = 0; i < 5; i++) {
		uint64_t w = (uint64_t)wsync_dtype_size(t[i].dtype), shape[1] = { t[i].n };
		s_add(tb, t[i].path, t[i].dtype, 1, shape, b[i], (unsigned)i + 1);
		memcpy(h[i], b[i], t[i].n * w);
		h[i][(t[i].n - 1) * w] ^= 0x11;
		h[i][t[i].mid * w] ^= 0x22;
		wsync_tree_add(th, t[i].path, t[i].dtype, 1, shape, h[i], t[i].n * w, &err);
	}
	return s_write(tb, s_path("base.wsync"), 1) == 0 &&
	    s_write(th, s_path("head.wsync"), 2) == 0 ? 0 : -1;
}

/*
 * A delta made over the base is the delta made from the two files, byte for
 * byte, and leaves the base's file the head's, on 1, 2 and 7 threads: sparse,
 * xor and raw forms, a large tensor whose sample is taken, no change at all,
 * changes in tensors' last bytes, fewer than the encoder's block of 32; the
 * same through the base's file kept mapped on tmpfs, the mapping reused.
 */
static void
test_a_delta_made_over_the_base_is_the_same(void)
{
	static const struct { const char *dtype, *fraction; } cases[] = {
		{ "bf16", "0.01" }, { "f32", "0.3" }, { "bf16", "1" }, { "large", "" },
		{ "same", "" }, { "tails", "" },
	};
	static const char *const threads[] = { "1", "2", "7" };
	char shm[] = "/dev/shm/test_delta.XXXXXX", work[256], cmd[96];
	wsync_kept_one_t map = { 0 };
	wsync_err_t err = { 0 };
	/* Without a tmpfs, nothing is kept mapped: the third way is the first again. */
	int tmpfs = wsync_kept_fits("/dev/shm") && mkdtemp(shm) != NULL;

	int fits;

	snprintf(work, sizeof(work), "%s", tmpfs ? shm : s_path("kept"));
	if (!tmpfs && mkdir(work, 0700) < 0)
		exit(70);
	/* Elsewhere, the copy is kept mapped where it lies on a tmpfs all the same. */
	fits = wsync_kept_fits(work);
	strcat(work, "/work.wsync");
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int made, same = 0, mapped = 0;
		if (strcmp(cases[c].dtype, "large") == 0)
			made = s_write_large_and_small() == 0;
		else if (strcmp(cases[c].dtype, "tails") == 0)
			made = s_write_tails() == 0;
		else if (strcmp(cases[c].dtype, "same") == 0)
			made = s_mkstep("bf16", "0.01", 1u << 22) == 0 &&
			    s_copy(s_path("base.wsync"), s_path("head.wsync")) == 0;
		else
			made = s_mkstep(cases[c].dtype, cases[c].fraction, 1u << 22) == 0;
		/* Each thread count: patching, only reading, patching through a kept map. */
		for (size_t k = 0; made && k < 3 * sizeof(threads) / sizeof(threads[0]); k++) {
			int patch = k % 3 != 1, kept = k % 3 == 2;
			char w[256];
			snprintf(w, sizeof(w), "%s", kept ? work : s_path("work.wsync"));
			setenv("WSYNC_THREADS", threads[k / 3], 1);
			made = s_make_over(s_path("base.wsync"), s_path("head.wsync"),
			    s_path("doc.wsync"), w, s_path("over.wdelta"), patch,
			    kept ? &map : NULL, &err) == 0 && s_doc(s_path("base.wsync"), s_path("bdoc.wsync"), &err) == 0 &&
			    s_make(s_path("bdoc.wsync"), s_path("doc.wsync"), s_path("files.wdelta"),
			    NULL, &err) == 0;
			mapped += kept && map.base != NULL;
			same = made && s_same_files(s_path("over.wdelta"), s_path("files.wdelta")) &&
			    s_same_files(w, s_path(patch ? "doc.wsync" : "bdoc.wsync"));
			if (!same)
				printf("# %s %s: %s threads, patch %d kept %d differ (%s)\n",
				    cases[c].dtype, cases[c].fraction, threads[k / 3], patch, kept,
				    err.msg);
			made = made && same;
		}
		unsetenv("WSYNC_THREADS");
		ok(made && same && mapped == (fits ? 3 : 0), "over %s %s: 1, 2 and 7 threads make "
		    "the files' delta and leave the base's file the head's (patching, also through "
		    "a kept mapping) or as it was, byte for byte", cases[c].dtype,
		    cases[c].fraction);
	}
	wsync_kept_one_release(&map);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpfs ? shm : s_path("kept"));
	if (system(cmd) != 0)
		printf("# cannot remove %s\n", tmpfs ? shm : s_path("kept"));
}

/*
 * The delta from base's source (read where it lies, no file of it written,
 * as a push with a safetensors --base makes it) to head's into delta, and
 * the base's content id: what wsync_source_delta_from returned.
 */
static int
s_make_from(const char *base, const char *head, const char *delta, uint64_t *content,
    wsync_err_t *err)
{
	wsync_file_t *hf = wsync_file_open(head, err), *bf = wsync_file_open(base, err);
	wsync_source_t *src = NULL, *bsrc = NULL;
	uint64_t size = 0;
	int dfd = -1, rc = -1;

	if (hf == NULL || bf == NULL ||
	    (src = wsync_source_open_tree(head, wsync_file_model(hf), NULL, err)) == NULL ||
	    (bsrc = wsync_source_open_tree(base, wsync_file_model(bf), NULL, err)) == NULL ||
	    (size = wsync_source_size(src, err)) == 0 ||
	    (dfd = open(delta, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		goto out;
	rc = wsync_source_delta_from(src, size, bsrc, dfd, delta, WSYNC_DELTA_ANY, NULL, content,
	    NULL, err);
out:
	if (dfd >= 0)
		close(dfd);
	wsync_source_destroy(&src);
	wsync_source_destroy(&bsrc);
	wsync_file_close(&hf);
	wsync_file_close(&bf);
	return rc;
}

/* The content id of the .wsync file at path; 0 when it cannot be read. */
static uint64_t
s_content(const char *path)
{
	wsync_err_t err;
	wsync_file_t *f = wsync_file_open(path, &err);
	uint64_t id = f != NULL ? wsync_file_content_id(f) : 0;

	wsync_file_close(&f);
	return id;
}

/*
 * A delta from a base read where it lies (a trainer's file, no .wsync of it)
 * is the delta made from the two files, byte for byte, on 1, 2 and 7 threads,
 * and names the base by the content id of the version it became: sparse,
 * xor and raw forms, a large tensor, no change, and a head of another layout.
 */
static void
test_a_delta_from_the_base_as_it_lies_is_the_same(void)
{
	static const struct { const char *dtype, *fraction; } cases[] = {
		{ "bf16", "0.01" }, { "f32", "0.3" }, { "bf16", "1" }, { "large", "" },
		{ "same", "" }, { "layout", "" },
	};
	static const char *const threads[] = { "1", "2", "7" };
	static const uint64_t shape[1] = { 4096 }, other[1] = { 2048 };
	static unsigned char a[16384], b[16384];
	wsync_err_t err = { 0 };

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int made, same = 0;
		uint64_t content = 0;
		if (strcmp(cases[c].dtype, "large") == 0) {
			made = s_write_large_and_small() == 0;
		} else if (strcmp(cases[c].dtype, "same") == 0) {
			made = s_mkstep("bf16", "0.01", 1u << 22) == 0 &&
			    s_copy(s_path("base.wsync"), s_path("head.wsync")) == 0;
		} else if (strcmp(cases[c].dtype, "layout") == 0) {
			wsync_tree_t *tb = wsync_tree_new("layout", &err);
			wsync_tree_t *th = wsync_tree_new("layout", &err);
			s_add(tb, "a", WSYNC_F32, 1, shape, a, 1);
			s_add(tb, "b", WSYNC_F32, 1, shape, b, 2);
			s_add(th, "a", WSYNC_F32, 1, other, a, 1);
			s_add(th, "b", WSYNC_F32, 1, shape, b, 3);
			made = s_write(tb, s_path("base.wsync"), 1) == 0 &&
			    s_write(th, s_path("head.wsync"), 2) == 0;
		} else {
			made = s_mkstep(cases[c].dtype, cases[c].fraction, 1u << 22) == 0;
		}
		made = made && s_doc(s_path("base.wsync"), s_path("bdoc.wsync"), &err) == 0 &&
		    s_doc(s_path("head.wsync"), s_path("doc.wsync"), &err) == 0 &&
		    s_make(s_path("bdoc.wsync"), s_path("doc.wsync"), s_path("files.wdelta"), NULL,
		    &err) == 0;
		for (size_t k = 0; made && k < sizeof(threads) / sizeof(threads[0]); k++) {
			setenv("WSYNC_THREADS", threads[k], 1);
			made = s_make_from(s_path("base.wsync"), s_path("head.wsync"),
			    s_path("from.wdelta"), &content, &err) == 0;
			same = made && s_same_files(s_path("from.wdelta"), s_path("files.wdelta")) &&
			    content == s_content(s_path("bdoc.wsync"));
			if (!same)
				printf("# %s %s: %s threads differ (%s)\n", cases[c].dtype,
				    cases[c].fraction, threads[k], err.msg);
			made = made && same;
		}
		unsetenv("WSYNC_THREADS");
		ok(made && same, "from the base as it lies, %s %s: 1, 2 and 7 threads make the "
		    "files' delta, naming the base's content id", cases[c].dtype, cases[c].fraction);
	}
}

/*
 * A head whose tensors lie elsewhere than the base's: 2 to patch, nothing
 * written anywhere; read only, the files' delta.
 */
static void
test_a_delta_over_another_layout_is_not_made(void)
{
	static const uint64_t shape[1] = { 4096 }, other[1] = { 2048 };
	static unsigned char a[16384], b[16384];
	wsync_err_t err = { 0 };
	wsync_tree_t *tb = wsync_tree_new("layout", &err), *th = wsync_tree_new("layout", &err);
	size_t len = 0;
	unsigned char *d;
	int rc = -1;

	s_add(tb, "a", WSYNC_F32, 1, shape, a, 1);
	s_add(tb, "b", WSYNC_F32, 1, shape, b, 2);
	s_add(th, "a", WSYNC_F32, 1, other, a, 1);
	s_add(th, "b", WSYNC_F32, 1, shape, b, 3);
	if (s_write(tb, s_path("base.wsync"), 1) == 0 && s_write(th, s_path("head.wsync"), 2) == 0)
		rc = s_make_over(s_path("base.wsync"), s_path("head.wsync"), s_path("doc.wsync"),
		    s_path("work.wsync"), s_path("over.wdelta"), 1, NULL, &err);
	d = s_slurp(s_path("over.wdelta"), &len);
	ok(rc == 2 && d != NULL && len == 0 && s_doc(s_path("base.wsync"), s_path("bdoc.wsync"),
	    &err) == 0 && s_same_files(s_path("work.wsync"), s_path("bdoc.wsync")),
	    "over: a head of another layout gives 2, the base's file and the delta untouched "
	    "(%d, %zu bytes)", rc, len);
	free(d);
	ok(s_make_over(s_path("base.wsync"), s_path("head.wsync"), s_path("doc.wsync"),
	    s_path("work.wsync"), s_path("over.wdelta"), 0, NULL, &err) == 0 &&
	    s_make(s_path("bdoc.wsync"), s_path("doc.wsync"), s_path("files.wdelta"), NULL,
	    &err) == 0 && s_same_files(s_path("over.wdelta"), s_path("files.wdelta")) &&
	    s_same_files(s_path("work.wsync"), s_path("bdoc.wsync")),
	    "over, read only: a head of another layout gets the files' delta, the base as it "
	    "was (%s)", err.msg);
}

/*
 * A large 1-byte tensor changed only where its sample does not look (every
 * chunk but the sampled ones, densely): made over the base, it is judged as
 * the files' delta judges it (from its sample: one change), not from the
 * whole count over mode takes to find its hash, so the delta is the same.
 */
static void
test_a_change_the_sample_skips_is_judged_alike_over(void)
{
	static const uint64_t shape[1] = { 16u << 20 };
	const size_t n = (size_t)shape[0];
	unsigned char *b = malloc(n), *h = malloc(n);
	wsync_err_t err = { 0 };
	wsync_tree_t *tb = wsync_tree_new("skip", &err), *th = wsync_tree_new("skip", &err);
	int made = b != NULL && h != NULL, same = 0;

	if (made) {
		s_add(tb, "q", WSYNC_U8, 1, shape, b, 1);
		memcpy(h, b, n);
		/* Pieces of a MiB, as the maker reads them; it samples one in 8, the fifth. */
		for (size_t k = 0; k < n >> 20; k++)
			if (k % 8 != 4)
				for (size_t j = 0; j < 1u << 20; j++)
					h[(k << 20) + j] ^= 0x5a;
		wsync_tree_add(th, "q", WSYNC_U8, 1, shape, h, n, &err);
		made = s_write(tb, s_path("base.wsync"), 1) == 0 &&
		    s_write(th, s_path("head.wsync"), 2) == 0;
		tb = th = NULL;
	}
	for (int patch = 1; made && patch >= 0; patch--) {
		made = s_make_over(s_path("base.wsync"), s_path("head.wsync"), s_path("doc.wsync"),
		    s_path("work.wsync"), s_path("over.wdelta"), patch, NULL, &err) == 0 &&
		    s_doc(s_path("base.wsync"), s_path("bdoc.wsync"), &err) == 0 &&
		    s_make(s_path("bdoc.wsync"), s_path("doc.wsync"), s_path("files.wdelta"), NULL,
		    &err) == 0;
		same = made && s_same_files(s_path("over.wdelta"), s_path("files.wdelta"));
		made = made && same;
	}
	ok(made && same, "over: a change the sample skips is judged as the files' delta judges "
	    "it, the same delta patching or not (%s)", err.msg);
	wsync_tree_destroy(&tb);
	wsync_tree_destroy(&th);
	free(b);
	free(h);
}

/*
 * A --base file whose bytes were changed in place, its header left saying
 * the hashes it had (so its content id is still the hub's version's): a
 * tensor whose new bytes the head has too is unchanged from it, and the
 * delta made straight from the source carries the tensor's own hash, so the
 * hub's rebuild from the true base fails (the push then goes whole) rather
 * than commit the old bytes under the old hash.
 */
static void
test_an_unchanged_tensor_carries_its_own_hash(void)
{
	static const uint64_t shape[1] = { 262144 };
	static unsigned char a[1u << 20], b[1u << 20], a2[1u << 20];
	wsync_err_t err = { 0 };
	wsync_tree_t *tb = wsync_tree_new("stale", &err), *th = wsync_tree_new("stale", &err);
	wsync_file_t *fb = NULL, *fh = NULL;
	wsync_source_t *src = NULL;
	unsigned char *p = NULL;
	size_t len = 0;
	uint64_t size = 0;
	int made, wfd = -1, dfd = -1, rc = -1;

	s_add(tb, "a", WSYNC_F32, 1, shape, a, 1);
	s_add(tb, "b", WSYNC_F32, 1, shape, b, 2);
	s_add(th, "a", WSYNC_F32, 1, shape, a2, 5);
	s_add(th, "b", WSYNC_F32, 1, shape, b, 2);
	made = s_write(tb, s_path("base.wsync"), 1) == 0 && s_write(th, s_path("head.wsync"), 2) == 0 &&
	    (fb = wsync_file_open(s_path("base.wsync"), &err)) != NULL &&
	    (fh = wsync_file_open(s_path("head.wsync"), &err)) != NULL &&
	    (p = s_slurp(s_path("base.wsync"), &len)) != NULL &&
	    wsync_file_tensor(fb, 0)->offset == wsync_file_tensor(fh, 0)->offset;
	/* The base altered in place: tensor a's bytes the head's, its header as it was. */
	if (made) {
		memcpy(p + wsync_file_tensor(fb, 0)->offset, wsync_file_tensor(fh, 0)->data,
		    (size_t)wsync_file_tensor(fh, 0)->nbytes);
		made = s_spit(s_path("stale.wsync"), p, len) == 0 &&
		    (src = wsync_source_open_tree(s_path("head.wsync"), "stale", NULL, &err)) != NULL &&
		    (size = wsync_source_size(src, &err)) > 0 &&
		    (wfd = open(s_path("stale.wsync"), O_RDONLY)) >= 0 &&
		    (dfd = open(s_path("over.wdelta"), O_WRONLY | O_CREAT | O_TRUNC, 0600)) >= 0;
	}
	if (made)
		rc = wsync_source_delta_over(src, size, wfd, 0, NULL, dfd, "over.wdelta",
		    WSYNC_DELTA_ANY,
		    NULL, &err);
	ok(rc == 0 && s_apply(s_path("base.wsync"), s_path("over.wdelta"), s_path("out.wsync"),
	    &err) == EX_DATAERR && strstr(err.msg, "tensor a:") != NULL,
	    "over, read only: a tensor unchanged from a base altered in place carries its own "
	    "hash: the rebuild from the true base is refused, never the old bytes (%s)", err.msg);
	if (wfd >= 0)
		close(wfd);
	if (dfd >= 0)
		close(dfd);
	free(p);
	wsync_source_destroy(&src);
	wsync_file_close(&fb);
	wsync_file_close(&fh);
}

/* ---- a delta applied while it arrives ---- */

/* The receiver's side: the delta written into its file in pieces, each told to the feed. */
typedef struct s_sender {
	const unsigned char *buf;
	size_t len, first;              /* first: bytes sent before waiting for a tensor */
	size_t stop_at;                 /* 0: all; else the feed stops after these bytes */
	int wait;                       /* for a tensor to be written before sending the rest */
	int hold;                       /* send no more: wait for the apply to stop the feed */
	int fd;
	wsync_delta_feed_t *feed;
	int early;                      /* a tensor was written before the rest was sent */
} s_sender_t;

static int
s_send(s_sender_t *s, size_t from, size_t to)
{
	for (size_t at = from; at < to; ) {
		size_t n = to - at < 4096 ? to - at : 4096;
		if (pwrite(s->fd, s->buf + at, n, (off_t)at) != (ssize_t)n)
			return -1;
		at += n;
		wsync_delta_feed_arrived(s->feed, at);
	}
	return 0;
}

static void *
s_sender(void *arg)
{
	s_sender_t *s = arg;
	struct timespec nap = { 0, 1000000 };

	if (s_send(s, 0, s->first) < 0)
		return NULL;
	if (s->stop_at != 0) {
		wsync_delta_feed_stop(s->feed);
		return NULL;
	}
	/* Bounded: an apply that refuses the delta says so before the rest comes. */
	if (s->hold) {
		for (int ms = 0; ms < 20000 && !wsync_delta_feed_stopped(s->feed); ms++)
			nanosleep(&nap, NULL);
		s->early = wsync_delta_feed_stopped(s->feed);
		/* Else the apply would wait for bytes that never come: the test fails, not hangs. */
		wsync_delta_feed_stop(s->feed);
		return NULL;
	}
	/* Bounded: a tensor whose entry is in is written without the rest, or the test says so. */
	for (int ms = 0; s->wait && ms < 20000 && wsync_delta_feed_applied(s->feed) == 0; ms++)
		nanosleep(&nap, NULL);
	s->early = wsync_delta_feed_applied(s->feed) > 0;
	s_send(s, s->first, s->len);
	return NULL;
}

/* The head's size the next fed applies expect (wsync_delta_feed_expect; 0: none). */
static uint64_t s_fed_expect;

/* Applies buf (a delta of len bytes) to base as it arrives into out; 0 or the error's code. */
static int
s_apply_fed(const char *base, const unsigned char *buf, size_t len, size_t first,
    size_t stop_at, int hold, const char *out, int *early, size_t *applied, wsync_err_t *err)
{
	s_sender_t s = { .buf = buf, .len = len, .first = first, .stop_at = stop_at,
	    .wait = early != NULL && !hold, .hold = hold };
	int b = open(base, O_RDONLY), o = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600), rc;
	uint64_t version = 0, content = 0;
	pthread_t t;

	s.fd = open(s_path("fed.wdelta"), O_RDWR | O_CREAT | O_TRUNC, 0600);
	s.feed = wsync_delta_feed_new(len);
	if (s.feed != NULL && s_fed_expect != 0)
		wsync_delta_feed_expect(s.feed, s_fed_expect);
	if (b < 0 || o < 0 || s.fd < 0 || s.feed == NULL || ftruncate(s.fd, (off_t)len) < 0 ||
	    pthread_create(&t, NULL, s_sender, &s) != 0)
		return -1;
	rc = wsync_delta_apply_fed(b, s.fd, o, "fed", NULL, NULL, s.feed, &version, &content,
	    err) < 0 ? err->code : 0;
	/* The sender first: whether the apply stopped the feed itself is what it reports. */
	if (hold)
		pthread_join(t, NULL);
	/* What failed stops the feed for good: the sender may still be sending. */
	wsync_delta_feed_stop(s.feed);
	if (!hold)
		pthread_join(t, NULL);
	if (early != NULL)
		*early = s.early;
	*applied = wsync_delta_feed_applied(s.feed);
	wsync_delta_feed_free(&s.feed);
	close(b);
	close(o);
	close(s.fd);
	return rc;
}

/* The delta at path with its top-level keys in another order: "tensors" first. */
static int
s_tensors_first(const char *path, const char *to)
{
	size_t len = 0, off = 0;
	unsigned char *buf = s_slurp(path, &len);
	msgpack_unpacked doc;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int rc = -1;

	if (buf == NULL)
		return -1;
	msgpack_unpacked_init(&doc);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_unpack_next(&doc, (const char *)buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    doc.data.type == MSGPACK_OBJECT_MAP) {
		const msgpack_object_map *m = &doc.data.via.map;
		msgpack_pack_map(&pk, m->size);
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t i = 0; i < m->size; i++) {
				const msgpack_object *k = &m->ptr[i].key;
				int tensors = k->via.str.size == 7 && memcmp(k->via.str.ptr,
				    "tensors", 7) == 0;
				if (tensors != (pass == 0))
					continue;
				msgpack_pack_object(&pk, *k);
				msgpack_pack_object(&pk, m->ptr[i].val);
			}
		rc = s_spit(to, sb.data, sb.size);
	}
	msgpack_sbuffer_destroy(&sb);
	msgpack_unpacked_destroy(&doc);
	free(buf);
	return rc;
}

static void
test_a_delta_applied_as_it_arrives_is_the_same(void)
{
	static const char *const threads[] = { "1", "2", "7" };
	wsync_delta_header_t h = { 0 };
	unsigned char *buf = NULL, *other = NULL;
	size_t len = 0, olen = 0, applied = 0, first;
	wsync_delta_stats_t st;
	wsync_err_t err = { 0 };
	char want[256];
	int early = 0;

	int made = s_mkstep("bf16", "0.01", 1u << 22) == 0 &&
	    s_make(s_path("base.wsync"), s_path("head.wsync"), s_path("d.wdelta"), &st,
	    &err) == 0 && s_header(s_path("d.wdelta"), &buf, &len, &h) == 0 && h.ntensors > 2;

	ok(made, "fed: a stepped pair and its delta of several tensors are written");
	if (!made)
		goto out;
	/* Up to the first tensor's data: its entry is whole, the others' still to come. */
	first = (size_t)(h.tensors[0].data_off + h.tensors[0].data_len);
	/* The size announced is the head's: applied as ever. */
	s_fed_expect = h.size;
	for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		int rc;
		setenv("WSYNC_THREADS", threads[k], 1);
		rc = s_apply_fed(s_path("base.wsync"), buf, len, first, 0, 0, s_path("out.wsync"),
		    &early, &applied, &err);
		ok(rc == 0 && s_same_files(s_path("out.wsync"), s_path("head.wsync")) &&
		    applied == h.ntensors,
		    "fed, %s threads: the head is rebuilt byte for byte, %zu of %zu tensors (%s)",
		    threads[k], applied, h.ntensors, err.msg);
		ok(early, "fed, %s threads: the first tensor is written before the rest of the "
		    "delta arrives", threads[k]);
	}
	unsetenv("WSYNC_THREADS");

	/* Stopped halfway: 75, and the output is the caller's to remove. */
	err.msg[0] = '\0';
	ok(s_apply_fed(s_path("base.wsync"), buf, len, len / 2, len / 2, 0, s_path("out.wsync"),
	    NULL, &applied, &err) == EX_TEMPFAIL &&
	    strcmp(err.msg, "fed: the delta stopped arriving") == 0,
	    "fed: a delta that stops arriving gives 75: %s", err.msg);

	/*
	 * Damaged in its first tensor: 65 naming it, as a delta applied whole,
	 * on every thread count, without waiting for the rest of the delta.
	 */
	buf[h.tensors[0].data_off + h.tensors[0].data_len / 2] ^= 0x10;
	for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		int rc;
		setenv("WSYNC_THREADS", threads[k], 1);
		err.msg[0] = '\0';
		rc = s_apply_fed(s_path("base.wsync"), buf, len, first, 0, 1, s_path("out.wsync"),
		    &early, &applied, &err);
		ok(rc == EX_DATAERR && strstr(err.msg, h.tensors[0].path) != NULL && early,
		    "fed, %s threads: a damaged tensor is refused naming it, before the rest "
		    "of the delta came: %s", threads[k], err.msg);
	}
	unsetenv("WSYNC_THREADS");
	buf[h.tensors[0].data_off + h.tensors[0].data_len / 2] ^= 0x10;

	/* Another writer's order: the tensors before the other keys, applied once all is in. */
	err.msg[0] = '\0';
	ok(s_tensors_first(s_path("d.wdelta"), s_path("first.wdelta")) == 0 &&
	    (other = s_slurp(s_path("first.wdelta"), &olen)) != NULL &&
	    s_apply_fed(s_path("base.wsync"), other, olen, olen / 3, 0, 0, s_path("out.wsync"),
	    NULL, &applied, &err) == 0 && s_same_files(s_path("out.wsync"),
	    s_path("head.wsync")),
	    "fed: a delta whose tensors come first is applied once it has arrived (%s)",
	    err.msg);

	/* Another size than announced: 65 before anything is written, in either order. */
	s_fed_expect = h.size + 1;
	snprintf(want, sizeof(want), "fed: it rebuilds a version of %llu bytes, where the "
	    "version announced has %llu", (unsigned long long)h.size,
	    (unsigned long long)h.size + 1);
	for (int order = 0; order < 2 && (order == 0 || other != NULL); order++) {
		struct stat out = { .st_size = -1 };
		err.msg[0] = '\0';
		ok(s_apply_fed(s_path("base.wsync"), order ? other : buf, order ? olen : len,
		    first, 0, 0, s_path("out.wsync"), NULL, &applied, &err) == EX_DATAERR &&
		    strcmp(err.msg, want) == 0 && stat(s_path("out.wsync"), &out) == 0 &&
		    out.st_size == 0, "fed, %s: a head of another size than announced is refused "
		    "with 65, nothing written: %s", order ? "tensors first" : "in order", err.msg);
	}
out:
	s_fed_expect = 0;
	wsync_delta_header_free(&h);
	free(buf);
	free(other);
}

static void
s_clean(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
	if (system(cmd) != 0)
		printf("# cannot remove %s\n", s_dir);
}

int
main(void)
{
	snprintf(s_dir, sizeof(s_dir), "/tmp/test_delta.XXXXXX");
	if (mkdtemp(s_dir) == NULL)
		return 1;
	test_stepped_models_round_trip_within_the_bars();
	test_no_change_and_all_changed_round_trip();
	test_every_change_of_a_tree_round_trips();
	test_a_change_the_sample_skips_is_still_sent();
	test_damage_is_refused_naming_the_tensor();
	test_hostile_headers_give_65();
	test_lying_entries_are_refused();
	test_large_files_parse_from_an_image();
	test_inputs_from_pipes_make_the_same_delta();
	test_thread_counts_make_the_same_bytes();
	test_kept_mappings_rebuild_the_same_bytes();
	test_a_large_tensor_among_small_ones_makes_the_same_bytes();
	test_a_delta_made_over_the_base_is_the_same();
	test_a_delta_over_another_layout_is_not_made();
	test_a_delta_from_the_base_as_it_lies_is_the_same();
	test_an_unchanged_tensor_carries_its_own_hash();
	test_a_change_the_sample_skips_is_judged_alike_over();
	test_a_delta_applied_as_it_arrives_is_the_same();
	s_clean();
	return tap_done();
}
