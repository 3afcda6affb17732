/* test_format.c - the .wsync writer and reader: round trips, layout, hostile input. */
#include <fcntl.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sysexits.h>
#include <unistd.h>

#include "tap.h"
#include "wsync.h"

/* A 64-byte aligned buffer of at least len bytes (caller frees). */
static void *
s_aligned(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, 64, len + 64) == 0 ? p : NULL;
}

/* Writes tree through a temporary file and returns its bytes (caller frees). */
static unsigned char *
s_write(wsync_tree_t *tree, size_t *len)
{
	FILE *fp = tmpfile();
	wsync_err_t err;
	unsigned char *buf;
	long n;

	if (fp == NULL || wsync_tree_write_fd(tree, fileno(fp), "tmp", &err) < 0)
		return NULL;
	n = lseek(fileno(fp), 0, SEEK_END);
	buf = s_aligned((size_t)n);
	pread(fileno(fp), buf, (size_t)n, 0);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

/* Parses len bytes of buf (copied to a 64-aligned buffer) and expects failure with code
 * and a message containing want. */
static void
s_refuse(const void *buf, size_t len, int code, const char *want, const char *what)
{
	unsigned char *copy = s_aligned(len);
	wsync_err_t err = { 0 };
	wsync_file_t *f;

	memcpy(copy, buf, len);
	f = wsync_file_open_buffer(copy, len, "bad.wsync", &err);
	ok(f == NULL && err.code == code && strstr(err.msg, want) != NULL,
	    "refuses %s: %s", what, err.msg);
	wsync_file_close(&f);
	free(copy);
}

static void
test_round_trip_every_dtype(void)
{
	static const uint64_t shape8[8] = { 1, 2, 1, 2, 1, 2, 1, 2 };
	unsigned char data[WSYNC_DTYPE_COUNT][64];
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("policy", &err);
	wsync_file_t *f;
	unsigned char *buf;
	size_t len, aligned = 0;

	for (int d = 0; d < WSYNC_DTYPE_COUNT; d++) {
		uint64_t shape[2] = { 2, 4 / wsync_dtype_size(d) + 1 };
		char path[64];
		uint64_t n;
		for (int i = 0; i < 64; i++)
			data[d][i] = (unsigned char)(d * 31 + i);
		wsync_tensor_nbytes(d, 2, shape, &n);
		snprintf(path, sizeof(path), "layer/%s.weight", wsync_dtype_name(d));
		ok(wsync_tree_add(tree, path, d, 2, shape, data[d], n, &err) == 0,
		    "adds a %s tensor", wsync_dtype_name(d));
	}
	ok(wsync_tree_add(tree, "scalar", WSYNC_F32, 0, NULL, data[0], 4, &err) == 0,
	    "adds a scalar");
	ok(wsync_tree_add(tree, "empty", WSYNC_F32, 2, (uint64_t[]){ 0, 5 }, data[0], 0,
	    &err) == 0, "adds a zero-size tensor");
	ok(wsync_tree_add(tree, "deep.x", WSYNC_U8, 8, shape8, data[1], 16, &err) == 0,
	    "adds an 8-dim tensor");
	wsync_tree_set_meta(tree, "step", "7", &err);
	wsync_tree_set_version(tree, 42);
	buf = s_write(tree, &len);
	f = wsync_file_open_buffer(buf, len, "mem", &err);
	ok(f != NULL, "reads back what it wrote%s%s", f ? "" : ": ", f ? "" : err.msg);
	if (f == NULL)
		return;
	ok(wsync_file_count(f) == WSYNC_DTYPE_COUNT + 3, "has every tensor");
	ok(strcmp(wsync_file_model(f), "policy") == 0 && wsync_file_version(f) == 42,
	    "keeps model and version");
	ok(wsync_file_meta_count(f) == 1 && strcmp(wsync_file_meta(f, 0)->value, "7") == 0,
	    "keeps meta");
	for (size_t i = 0; i < wsync_file_count(f); i++)
		aligned += wsync_file_tensor(f, i)->offset % 64 == 0 &&
		    ((uintptr_t)wsync_file_tensor(f, i)->data) % 64 == 0;
	ok(aligned == wsync_file_count(f), "every tensor's data is 64-byte aligned");
	for (int d = 0; d < WSYNC_DTYPE_COUNT; d++) {
		char path[64];
		const wsync_tensor_t *t;
		snprintf(path, sizeof(path), "layer.%s.weight", wsync_dtype_name(d));
		t = wsync_file_find(f, path);
		ok(t != NULL && t->dtype == (wsync_dtype_t)d &&
		    memcmp(t->data, data[d], t->nbytes) == 0, "%s data survives", path);
	}
	ok(wsync_file_find(f, "scalar")->ndim == 0, "a scalar has no dims");
	ok(wsync_file_find(f, "empty")->nbytes == 0, "a zero-size tensor has no bytes");
	ok(wsync_file_find(f, "deep/x")->ndim == 8, "finds a tensor by a slash path");
	ok(wsync_file_find(f, "layer") == NULL, "a subtree is not a tensor");
	ok(wsync_file_verify(f, NULL, NULL, &err) == 0, "verifies");
	{
		uint64_t stamped;
		memcpy(&stamped, buf + wsync_file_version_offset(f), 8);
		ok(be64toh(stamped) == 42, "the version offset points at the stamped version");
	}
	wsync_file_close(&f);
	ok(f == NULL, "close clears the handle");
	wsync_tree_destroy(&tree);
	ok(tree == NULL, "destroy clears the handle");
	free(buf);
}

static void
test_content_id_ignores_layout_and_stamp(void)
{
	float w[4] = { 1, 2, 3, 4 };
	uint64_t shape[1] = { 4 };
	const char *flat_key = "actor.0.weight";
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("m", &err), *flat = wsync_tree_new("other", &err);
	unsigned char *a, *b;
	size_t la, lb;
	wsync_file_t *fa, *fb;

	wsync_tree_add(tree, "actor/0/weight", WSYNC_F32, 1, shape, w, 16, &err);
	wsync_tree_add_keys(flat, &flat_key, 1, WSYNC_F32, 1, shape, w, 16, &err);
	wsync_tree_set_version(flat, 9);
	a = s_write(tree, &la);
	b = s_write(flat, &lb);
	fa = wsync_file_open_buffer(a, la, "a", &err);
	fb = wsync_file_open_buffer(b, lb, "b", &err);
	ok(fa && fb && wsync_file_content_id(fa) == wsync_file_content_id(fb),
	    "tree and flat layouts of the same weights share a content id");
	w[3] = 5;
	wsync_file_close(&fb);
	free(b);
	b = s_write(flat, &lb);
	fb = wsync_file_open_buffer(b, lb, "b", &err);
	ok(fa && fb && wsync_file_content_id(fa) != wsync_file_content_id(fb),
	    "a changed value changes the content id");
	wsync_file_close(&fa);
	wsync_file_close(&fb);
	wsync_tree_destroy(&tree);
	wsync_tree_destroy(&flat);
	free(a);
	free(b);
}

static void
test_builder_refuses(void)
{
	float w[2] = { 0 };
	uint64_t shape[1] = { 2 }, nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("m", &err);
	unsigned char *buf;
	size_t len;

	ok(wsync_tree_new("../etc", &err) == NULL && err.code == EX_USAGE,
	    "refuses a model id with a slash: %s", err.msg);
	ok(wsync_tree_add(tree, "a", WSYNC_F32, 1, shape, w, 4, &err) < 0 &&
	    strstr(err.msg, "shape needs 8 bytes of f32, data has 4"),
	    "refuses a size mismatch: %s", err.msg);
	ok(wsync_tree_add(tree, "a..b", WSYNC_F32, 1, shape, w, 8, &err) < 0,
	    "refuses an empty key: %s", err.msg);
	ok(wsync_tree_add(tree, "a", WSYNC_F32, 9, nine, w, 4, &err) < 0,
	    "refuses 9 dims: %s", err.msg);
	ok(wsync_tree_add(tree, "a", WSYNC_F32, 1, (uint64_t[]){ UINT64_MAX / 2 }, w, 8,
	    &err) < 0, "refuses a shape that overflows: %s", err.msg);
	wsync_tree_add(tree, "a.b", WSYNC_F32, 1, shape, w, 8, &err);
	wsync_tree_add(tree, "a", WSYNC_F32, 1, shape, w, 8, &err);
	ok(s_write(tree, &len) == NULL, "refuses a tensor that is also a subtree");
	wsync_tree_destroy(&tree);
	tree = wsync_tree_new("m", &err);
	wsync_tree_add(tree, "a.b", WSYNC_F32, 1, shape, w, 8, &err);
	wsync_tree_add(tree, "a/b", WSYNC_F32, 1, shape, w, 8, &err);
	ok((buf = s_write(tree, &len)) == NULL, "refuses the same path twice");
	wsync_tree_destroy(&tree);
}

/* Packs the start of a document whose tree is then packed by the caller. */
static void
s_head(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 5);
	msgpack_pack_str_with_body(pk, "wsync", 5);
	msgpack_pack_uint8(pk, 1);
	msgpack_pack_str_with_body(pk, "model", 5);
	msgpack_pack_str_with_body(pk, "m", 1);
	msgpack_pack_str_with_body(pk, "version", 7);
	msgpack_pack_fix_uint64(pk, 0);
	msgpack_pack_str_with_body(pk, "meta", 4);
	msgpack_pack_map(pk, 0);
	msgpack_pack_str_with_body(pk, "tree", 4);
}

static void
s_tensor(msgpack_packer *pk, const char *extra)
{
	msgpack_pack_map(pk, extra ? 5 : 4);
	msgpack_pack_str_with_body(pk, "dtype", 5);
	msgpack_pack_str_with_body(pk, "u8", 2);
	msgpack_pack_str_with_body(pk, "shape", 5);
	msgpack_pack_array(pk, 1);
	msgpack_pack_uint8(pk, 1);
	msgpack_pack_str_with_body(pk, "hash", 4);
	msgpack_pack_uint64(pk, 0);
	if (extra) {
		msgpack_pack_str_with_body(pk, extra, strlen(extra));
		msgpack_pack_nil(pk);
	}
	msgpack_pack_str_with_body(pk, "data", 4);
	msgpack_pack_bin_with_body(pk, "x", 1);
}

static void
test_reader_refuses_structure(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	s_head(&pk);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_int(&pk, 7);
	s_tensor(&pk, NULL);
	s_refuse(sb.data, sb.size, EX_DATAERR, "tree: a key is an integer, not a string",
	    "a non-string key");

	msgpack_sbuffer_clear(&sb);
	s_head(&pk);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "w", 1);
	s_tensor(&pk, NULL);
	msgpack_pack_str_with_body(&pk, "w", 1);
	s_tensor(&pk, NULL);
	s_refuse(sb.data, sb.size, EX_DATAERR, "tree: duplicate key \"w\"", "duplicate keys");

	msgpack_sbuffer_clear(&sb);
	s_head(&pk);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "w", 1);
	s_tensor(&pk, "colour");
	s_refuse(sb.data, sb.size, EX_DATAERR, "tensor w: unknown field \"colour\"",
	    "an unknown tensor field");

	msgpack_sbuffer_clear(&sb);
	s_head(&pk);
	for (int i = 0; i < WSYNC_MAX_DEPTH + 1; i++) {
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "d", 1);
	}
	msgpack_pack_map(&pk, 0);
	s_refuse(sb.data, sb.size, EX_DATAERR, "nested deeper than 16 levels",
	    "nesting below the limit of the tree");

	msgpack_sbuffer_clear(&sb);
	for (int i = 0; i < 200; i++)
		msgpack_pack_array(&pk, 1);
	msgpack_pack_nil(&pk);
	sb.data[0] = (char)0x81;
	s_refuse(sb.data, sb.size, EX_DATAERR, "nested deeper than", "deep msgpack nesting");

	msgpack_sbuffer_clear(&sb);
	s_head(&pk);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "w", 1);
	s_tensor(&pk, NULL);
	s_refuse(sb.data, sb.size, EX_DATAERR, "tensor w: data at offset", "misaligned data");
	msgpack_sbuffer_destroy(&sb);

	s_refuse("\xdf\xff\xff\xff\xff", 5, EX_DATAERR, "declares 8589934590 objects",
	    "a map that claims 4 billion entries");
	s_refuse("\x81\xa1x\xc6\x7f\xff\xff\xff", 8, EX_DATAERR, "truncated",
	    "a bin that claims 2 GiB");
	s_refuse("[1,2]", 5, EX_DATAERR, "does not start with a msgpack map", "JSON");
	s_refuse("\x80\x80", 2, EX_DATAERR, "trailing data after the document (1 bytes)", "trailing bytes");
	s_refuse("\x80", 1, EX_DATAERR, "missing top-level field \"wsync\"", "an empty map");
}

/* A valid one-tensor file, then each field broken in place. */
static void
test_reader_refuses_fields(void)
{
	uint32_t w[4] = { 1, 2, 3, 4 };
	uint64_t shape[2] = { 2, 2 };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("m", &err);
	unsigned char *buf, *p;
	size_t len;

	wsync_tree_add(tree, "enc.w", WSYNC_I32, 2, shape, w, 16, &err);
	buf = s_write(tree, &len);
	wsync_tree_destroy(&tree);

	for (size_t cut = 1; cut < len; cut += 7)
		if (cut == 1 || cut + 7 >= len)
			s_refuse(buf, cut, EX_DATAERR, "truncated", "a truncated file");
	p = memmem(buf, len, "i32", 3);
	memcpy(p, "i17", 3);
	s_refuse(buf, len, EX_DATAERR, "tensor enc.w: unknown dtype \"i17\"", "an unknown dtype");
	memcpy(p, "i16", 3);
	s_refuse(buf, len, EX_DATAERR, "tensor enc.w: shape needs 8 bytes of i16, data has 16",
	    "a shape/size mismatch");
	memcpy(p, "i32", 3);
	p = memmem(buf, len, "\x92\x02\x02", 3);
	p[2] = 0x03;
	s_refuse(buf, len, EX_DATAERR, "shape needs 24 bytes of i32, data has 16",
	    "a lying shape");
	p[2] = 0x02;
	p = memmem(buf, len, "\xc4\x10", 2);
	ok(p != NULL, "a 16-byte tensor uses bin8");
	p[1] = 0x7f;
	s_refuse(buf, len, EX_DATAERR, "truncated", "a lying bin length");
	p[1] = 0x10;
	buf[len - 1] ^= 1;
	{
		wsync_file_t *f = wsync_file_open_buffer(buf, len, "flip.wsync", &err);
		ok(f != NULL && wsync_file_verify(f, NULL, NULL, &err) < 0 &&
		    strcmp(err.msg, "flip.wsync: tensor enc.w: data does not match its hash") == 0,
		    "verify names a flipped bit's tensor: %s", err.msg);
		wsync_file_close(&f);
	}
	free(buf);
}

static void
test_reads_from_a_pipe(void)
{
	float w[1000];
	uint64_t shape[1] = { 1000 };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("m", &err);
	wsync_file_t *f;
	int fds[2];
	pid_t pid;

	for (int i = 0; i < 1000; i++)
		w[i] = (float)i / 3;
	wsync_tree_add(tree, "w", WSYNC_F32, 1, shape, w, sizeof(w), &err);
	if (pipe(fds) < 0)
		return;
	if ((pid = fork()) == 0) {
		close(fds[0]);
		_exit(wsync_tree_write_fd(tree, fds[1], "pipe", &err) < 0);
	}
	close(fds[1]);
	f = wsync_file_open_fd(fds[0], "pipe", &err);
	close(fds[0]);
	ok(f != NULL && memcmp(wsync_file_find(f, "w")->data, w, sizeof(w)) == 0 &&
	    wsync_file_verify(f, NULL, NULL, &err) == 0,
	    "a file streamed through a pipe reads back whole");
	ok(f != NULL && (uintptr_t)wsync_file_find(f, "w")->data % 64 == 0,
	    "a buffered pipe keeps tensors aligned");
	wsync_file_close(&f);
	wsync_tree_destroy(&tree);
}

static void
test_dtype_values(void)
{
	uint16_t half = 0x3c00, bf = 0x3f80;
	uint8_t e4m3 = 0x38, e5m2 = 0x3c, nan8 = 0x7f;

	ok(wsync_dtype_get(WSYNC_F16, &half, 0) == 1.0, "f16 0x3c00 is 1");
	ok(wsync_dtype_get(WSYNC_BF16, &bf, 0) == 1.0, "bf16 0x3f80 is 1");
	ok(wsync_dtype_get(WSYNC_F8E4M3, &e4m3, 0) == 1.0, "f8e4m3 0x38 is 1");
	ok(wsync_dtype_get(WSYNC_F8E5M2, &e5m2, 0) == 1.0, "f8e5m2 0x3c is 1");
	ok(isnan(wsync_dtype_get(WSYNC_F8E4M3, &nan8, 0)), "f8e4m3 0x7f is NaN");
}

int
main(void)
{
	test_round_trip_every_dtype();
	test_content_id_ignores_layout_and_stamp();
	test_builder_refuses();
	test_reader_refuses_structure();
	test_reader_refuses_fields();
	test_reads_from_a_pipe();
	test_dtype_values();
	return tap_done();
}
