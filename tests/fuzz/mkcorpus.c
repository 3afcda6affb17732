/*
 * mkcorpus.c - writes the fuzzers' seed files: small valid .wsync and
 * safetensors files made by libwsync's writers, and hostile variants of them
 * (truncated, lying lengths, deep nesting, duplicate and non-string keys...).
 *
 *   mkcorpus FILE-DIR SAFETENSORS-DIR
 *
 * The seeds are committed (tests/fuzz/corpus-*); `make -f tests/fuzz/Makefile
 * corpus` regenerates them.
 */
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wsync.h"

/* A file image being built or patched. */
struct image {
	unsigned char *p;
	size_t len;
};

static const char *s_file_dir, *s_st_dir;

static void
s_die(const char *fmt, ...)
{
	va_list ap;

	fputs("mkcorpus: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void
s_save(const char *dir, const char *name, const void *p, size_t len)
{
	char path[4096];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((fp = fopen(path, "wb")) == NULL || fwrite(p, 1, len, fp) != len ||
	    fclose(fp) != 0)
		s_die("%s: %s", path, strerror(errno));
}

/* The bytes a writer produced: written to a memfd, read back. */
static struct image
s_written(wsync_tree_t *tree, int safetensors)
{
	struct image im;
	wsync_err_t err;
	struct stat st;
	int fd = memfd_create("mkcorpus", 0);

	if (fd < 0)
		s_die("memfd_create: %s", strerror(errno));
	if ((safetensors ? wsync_tree_write_safetensors_fd(tree, fd, "seed", &err) :
	    wsync_tree_write_fd(tree, fd, "seed", &err)) < 0)
		s_die("%s", err.msg);
	if (fstat(fd, &st) < 0 || (im.p = malloc((size_t)st.st_size + 1)) == NULL)
		s_die("fstat or malloc: %s", strerror(errno));
	im.len = (size_t)st.st_size;
	if (pread(fd, im.p, im.len, 0) != (ssize_t)im.len)
		s_die("pread: %s", strerror(errno));
	close(fd);
	return im;
}

/* The offset of the first occurrence of needle; dies when absent. */
static size_t
s_find(const struct image *im, const void *needle, size_t n)
{
	const unsigned char *at = memmem(im->p, im->len, needle, n);

	if (at == NULL)
		s_die("pattern of %zu bytes not found", n);
	return (size_t)(at - im->p);
}

/* Saves im with the first occurrence of from (n bytes) replaced by to (same length). */
static void
s_patched(const char *dir, const char *name, const struct image *im, const void *from,
    const void *to, size_t n)
{
	unsigned char *copy = malloc(im->len);
	size_t at = s_find(im, from, n);

	if (copy == NULL)
		s_die("out of memory");
	memcpy(copy, im->p, im->len);
	memcpy(copy + at, to, n);
	s_save(dir, name, copy, im->len);
	free(copy);
}

/* Dies unless a libwsync call succeeded. */
static void
s_ok(int rc, const wsync_err_t *err)
{
	if (rc < 0)
		s_die("%s", err->msg);
}

static wsync_tree_t *
s_tree_new(const char *model)
{
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new(model, &err);

	if (tree == NULL)
		s_die("%s", err.msg);
	return tree;
}

static void
s_add(wsync_tree_t *tree, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, const void *data)
{
	wsync_err_t err;
	uint64_t nbytes;

	if (wsync_tensor_nbytes(dtype, ndim, shape, &nbytes) < 0)
		s_die("%s: shape overflows", path);
	s_ok(wsync_tree_add(tree, path, dtype, ndim, shape, data, nbytes, &err), &err);
}

static unsigned char s_bytes[4096];

/* Every dtype, a scalar, a zero-size tensor, meta, a stamped version. */
static wsync_tree_t *
s_tree_all(void)
{
	static const uint64_t s42[] = { 4, 2 }, s4[] = { 4 }, s0[] = { 0 }, s3[] = { 3 },
	    s221[] = { 2, 2, 1 }, s300[] = { 300 };
	wsync_tree_t *tree = s_tree_new("policy");
	wsync_err_t err;

	wsync_tree_set_version(tree, 7);
	s_ok(wsync_tree_set_meta(tree, "step", "1200", &err), &err);
	s_ok(wsync_tree_set_meta(tree, "note", "dots.and/slashes", &err), &err);
	s_add(tree, "actor.0.weight", WSYNC_F32, 2, s42, s_bytes);
	s_add(tree, "actor.0.bias", WSYNC_F32, 1, s4, s_bytes + 64);
	s_add(tree, "actor.1.weight", WSYNC_BF16, 2, s42, s_bytes + 128);
	s_add(tree, "critic.v", WSYNC_F64, 0, s0, s_bytes + 256);
	s_add(tree, "critic.empty", WSYNC_F16, 1, s0, s_bytes);
	s_add(tree, "mask", WSYNC_BOOL, 1, s3, s_bytes + 512);
	s_add(tree, "stats.count", WSYNC_I64, 1, s3, s_bytes + 1024);
	s_add(tree, "stats.ids", WSYNC_I32, 1, s3, s_bytes + 1100);
	s_add(tree, "stats.small", WSYNC_I16, 3, s221, s_bytes + 1200);
	s_add(tree, "stats.tiny", WSYNC_I8, 1, s3, s_bytes + 1300);
	s_add(tree, "stats.bytes", WSYNC_U8, 1, s300, s_bytes + 1400);
	s_add(tree, "fp8.e4m3", WSYNC_F8E4M3, 1, s4, s_bytes + 2000);
	s_add(tree, "fp8.e5m2", WSYNC_F8E5M2, 1, s4, s_bytes + 2100);
	return tree;
}

/* Two tensors, one byte each: the base of most hostile variants. */
static wsync_tree_t *
s_tree_ab(void)
{
	static const uint64_t s1[] = { 1 };
	wsync_tree_t *tree = s_tree_new("m");

	s_add(tree, "a", WSYNC_U8, 1, s1, "\x11");
	s_add(tree, "b", WSYNC_U8, 1, s1, "\x22");
	return tree;
}

static void
s_seed_tree(const char *name, wsync_tree_t *tree, int also_safetensors)
{
	struct image im = s_written(tree, 0);
	char stname[256];

	s_save(s_file_dir, name, im.p, im.len);
	free(im.p);
	if (also_safetensors) {
		im = s_written(tree, 1);
		snprintf(stname, sizeof(stname), "%.*s.safetensors",
		    (int)(strcspn(name, ".")), name);
		s_save(s_st_dir, stname, im.p, im.len);
		free(im.p);
	}
}

static void
s_valid_seeds(void)
{
	static const uint64_t s2[] = { 2 };
	const char *flat[] = { "actor.0.weight" }, *data[] = { "data", "w" };
	const char *slash[] = { "enc/layer", "w" }, *dotted[] = { "enc", "layer", "w" };
	const char *deep[WSYNC_MAX_DEPTH] = { "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8",
	    "l9", "l10", "l11", "l12", "l13", "l14", "l15", "w" };
	wsync_err_t err;
	wsync_tree_t *tree;

	tree = s_tree_new("empty");
	s_seed_tree("valid-empty.wsync", tree, 1);
	wsync_tree_destroy(&tree);

	tree = s_tree_all();
	s_seed_tree("valid-all-dtypes.wsync", tree, 1);
	wsync_tree_destroy(&tree);

	tree = s_tree_ab();
	s_seed_tree("valid-two.wsync", tree, 1);
	wsync_tree_destroy(&tree);

	tree = s_tree_new("flat");
	s_ok(wsync_tree_add_keys(tree, flat, 1, WSYNC_F32, 1, s2, s_bytes, 8, &err), &err);
	s_ok(wsync_tree_add(tree, "actor.0.bias", WSYNC_F32, 1, s2, s_bytes + 8, 8, &err),
	    &err);
	s_seed_tree("valid-flat-and-nested.wsync", tree, 0);
	wsync_tree_destroy(&tree);

	/* Paths enc/layer.w and enc.layer.w: find must tell them apart. */
	tree = s_tree_new("slash");
	s_ok(wsync_tree_add_keys(tree, slash, 2, WSYNC_U8, 1, s2, s_bytes, 2, &err), &err);
	s_ok(wsync_tree_add_keys(tree, dotted, 3, WSYNC_U8, 1, s2, s_bytes + 2, 2, &err), &err);
	s_seed_tree("valid-slash-keys.wsync", tree, 1);
	wsync_tree_destroy(&tree);

	tree = s_tree_new("deep");
	s_ok(wsync_tree_add_keys(tree, deep, WSYNC_MAX_DEPTH, WSYNC_U8, 1, s2, s_bytes, 2,
	    &err), &err);
	s_ok(wsync_tree_add_keys(tree, data, 2, WSYNC_U8, 1, s2, s_bytes, 2, &err), &err);
	s_seed_tree("valid-deep-and-data-subtree.wsync", tree, 0);
	wsync_tree_destroy(&tree);
}

static void
s_hostile_seeds(void)
{
	wsync_tree_t *tree = s_tree_all();
	struct image all = s_written(tree, 0), ab;
	size_t at;

	wsync_tree_destroy(&tree);
	s_save(s_file_dir, "trunc-half.wsync", all.p, all.len / 2);
	s_save(s_file_dir, "trunc-one-short.wsync", all.p, all.len - 1);
	s_save(s_file_dir, "trunc-header.wsync", all.p, 40);
	/* The first 4-byte data bin (fp8.e4m3): declare 255 bytes where 4 follow. */
	at = s_find(&all, "\xa4" "data" "\xc4\x04", 7);
	all.p[at + 6] = 0xff;
	s_save(s_file_dir, "lying-bin-length.wsync", all.p, all.len);
	all.p[at + 6] = 0x04;
	all.p[all.len] = 0;
	s_save(s_file_dir, "trailing-byte.wsync", all.p, all.len + 1);
	s_patched(s_file_dir, "lying-root-map.wsync", &all, "\x85\xa5wsync", "\x8f\xa5wsync", 7);
	s_patched(s_file_dir, "dtype-unknown.wsync", &all, "\xa3" "f32", "\xa3" "f17", 4);
	s_patched(s_file_dir, "shape-mismatch.wsync", &all, "\x92\x04\x02", "\x92\x04\x03", 3);
	s_patched(s_file_dir, "format-version-2.wsync", &all, "wsync\x01", "wsync\x02", 6);
	s_patched(s_file_dir, "field-unknown.wsync", &all, "\xa4meta", "\xa4mete", 5);
	s_patched(s_file_dir, "model-bad.wsync", &all, "policy", ".olicy", 6);
	free(all.p);

	tree = s_tree_ab();
	ab = s_written(tree, 0);
	wsync_tree_destroy(&tree);
	s_patched(s_file_dir, "key-duplicate.wsync", &ab, "\xa1" "b\x85", "\xa1" "a\x85", 3);
	s_patched(s_file_dir, "key-not-string.wsync", &ab, "\xa1" "b\x85", "\xcc" "b\x85", 3);
	s_patched(s_file_dir, "hash-wrong.wsync", &ab, "\xc4\x01\x22", "\xc4\x01\x23", 3);
	free(ab.p);
}

/* The document a hand-packed seed is built in. */
static msgpack_sbuffer s_sb;
static msgpack_packer s_pk;

static void
s_key(const char *key)
{
	msgpack_pack_str_with_body(&s_pk, key, strlen(key));
}

/* Packs one tensor map whose data lands skew bytes past a 64-byte boundary. */
static void
s_pack_tensor(const char *dtype, uint64_t dim, const void *data, size_t n, unsigned skew)
{
	static const char zeros[128];
	unsigned pad;

	msgpack_pack_map(&s_pk, 5);
	s_key("dtype");
	s_key(dtype);
	s_key("shape");
	msgpack_pack_array(&s_pk, 1);
	msgpack_pack_uint64(&s_pk, dim);
	s_key("hash");
	msgpack_pack_fix_uint64(&s_pk, wsync_hash(data, n));
	s_key("pad");
	/* The pad bin's header, the "data" key and a bin8 header follow. */
	pad = (unsigned)((64 - (s_sb.size + 2 + 5 + 2) % 64) % 64 + skew);
	msgpack_pack_bin_with_body(&s_pk, zeros, pad);
	s_key("data");
	msgpack_pack_bin_with_body(&s_pk, data, n);
}

/* Starts a document: the root map and its first three fields, "meta" next. */
static void
s_begin(void)
{
	msgpack_sbuffer_clear(&s_sb);
	msgpack_pack_map(&s_pk, 5);
	s_key("wsync");
	msgpack_pack_uint8(&s_pk, 1);
	s_key("model");
	s_key("m");
	s_key("version");
	msgpack_pack_fix_uint64(&s_pk, 1);
	s_key("meta");
}

/* Starts a document with empty meta; the tree's value comes next. */
static void
s_begin_tree(void)
{
	s_begin();
	msgpack_pack_map(&s_pk, 0);
	s_key("tree");
}

static void
s_done(const char *name)
{
	s_save(s_file_dir, name, s_sb.data, s_sb.size);
}

/* Documents libwsync's writer does not produce. */
static void
s_packed_seeds(void)
{
	char key[WSYNC_MAX_KEY + 1];

	msgpack_sbuffer_init(&s_sb);
	msgpack_packer_init(&s_pk, &s_sb, msgpack_sbuffer_write);

	s_begin_tree();
	msgpack_pack_map(&s_pk, 1);
	s_key("w");
	s_pack_tensor("u8", 4, "abcd", 4, 1);
	s_done("data-misaligned.wsync");

	/* Readers take the fields in any order and the version in any encoding. */
	msgpack_sbuffer_clear(&s_sb);
	msgpack_pack_map(&s_pk, 5);
	s_key("tree");
	msgpack_pack_map(&s_pk, 0);
	s_key("version");
	msgpack_pack_uint8(&s_pk, 3);
	s_key("meta");
	msgpack_pack_map(&s_pk, 0);
	s_key("model");
	s_key("m");
	s_key("wsync");
	msgpack_pack_uint8(&s_pk, 1);
	s_done("valid-reordered-version-fixint.wsync");

	/* "a.b" flat and a -> b nested: one path twice. */
	s_begin_tree();
	msgpack_pack_map(&s_pk, 2);
	s_key("a.b");
	s_pack_tensor("u8", 1, "x", 1, 0);
	s_key("a");
	msgpack_pack_map(&s_pk, 1);
	s_key("b");
	s_pack_tensor("u8", 1, "y", 1, 0);
	s_done("path-twice.wsync");

	/* Five keys of 255 bytes: a path over 1024 bytes. */
	memset(key, 'k', WSYNC_MAX_KEY);
	key[WSYNC_MAX_KEY] = '\0';
	s_begin_tree();
	for (int i = 0; i < 5; i++) {
		msgpack_pack_map(&s_pk, 1);
		s_key(key);
	}
	s_pack_tensor("u8", 1, "x", 1, 0);
	s_done("path-too-long.wsync");

	/* 2^62 x 16 f64 elements: the byte size overflows 64 bits. */
	s_begin_tree();
	msgpack_pack_map(&s_pk, 1);
	s_key("w");
	msgpack_pack_map(&s_pk, 4);
	s_key("dtype");
	s_key("f64");
	s_key("shape");
	msgpack_pack_array(&s_pk, 2);
	msgpack_pack_uint64(&s_pk, 1ULL << 62);
	msgpack_pack_uint64(&s_pk, 16);
	s_key("hash");
	msgpack_pack_fix_uint64(&s_pk, 0);
	s_key("data");
	msgpack_pack_bin_with_body(&s_pk, "12345678", 8);
	s_done("shape-overflow.wsync");

	/* A tensor map with a field the format does not have, and no "hash". */
	s_begin_tree();
	msgpack_pack_map(&s_pk, 1);
	s_key("w");
	msgpack_pack_map(&s_pk, 4);
	s_key("dtype");
	s_key("u8");
	s_key("shape");
	msgpack_pack_array(&s_pk, 0);
	s_key("grad");
	msgpack_pack_true(&s_pk);
	s_key("data");
	msgpack_pack_bin_with_body(&s_pk, "x", 1);
	s_done("tensor-field-unknown.wsync");

	/* A leaf that is neither a tensor nor a subtree. */
	s_begin_tree();
	msgpack_pack_map(&s_pk, 1);
	s_key("w");
	msgpack_pack_int8(&s_pk, -5);
	s_done("leaf-not-map.wsync");

	/* Meta: one entry over the limit; a value holding a NUL byte. */
	s_begin();
	msgpack_pack_map(&s_pk, WSYNC_MAX_META + 1);
	for (int i = 0; i <= WSYNC_MAX_META; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		s_key(key);
		s_key("");
	}
	s_key("tree");
	msgpack_pack_map(&s_pk, 0);
	s_done("meta-too-many.wsync");
	s_begin();
	msgpack_pack_map(&s_pk, 1);
	s_key("k");
	msgpack_pack_str_with_body(&s_pk, "a\0b", 3);
	s_key("tree");
	msgpack_pack_map(&s_pk, 0);
	s_done("meta-value-nul.wsync");

	/* 40 nested subtrees: deeper than the format allows. */
	s_begin_tree();
	for (int i = 0; i < 40; i++) {
		msgpack_pack_map(&s_pk, 1);
		s_key("d");
	}
	msgpack_pack_map(&s_pk, 0);
	s_done("deep-tree.wsync");

	/* 5000 nested arrays as meta: a parser that recurses blows its stack. */
	s_begin();
	for (int i = 0; i < 5000; i++)
		msgpack_pack_array(&s_pk, 1);
	msgpack_pack_nil(&s_pk);
	s_key("tree");
	msgpack_pack_map(&s_pk, 0);
	s_done("deep-arrays.wsync");

	/* A tree that claims four billion entries. */
	s_begin_tree();
	msgpack_pack_map(&s_pk, 0xffffffffu);
	s_done("lying-map32.wsync");
	msgpack_sbuffer_destroy(&s_sb);
}

/* A safetensors file: header length, header, then datalen bytes of data. */
static void
s_st(const char *name, const char *header, size_t datalen)
{
	size_t hlen = strlen(header);
	unsigned char *p = calloc(1, 8 + hlen + datalen + 1);

	if (p == NULL)
		s_die("out of memory");
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(p + 8, header, hlen);
	for (size_t i = 0; i < datalen; i++)
		p[8 + hlen + i] = (unsigned char)(i * 7);
	s_save(s_st_dir, name, p, 8 + hlen + datalen);
	free(p);
}

static void
s_safetensors_seeds(void)
{
	char big[8192];
	size_t n;

	s_st("valid-shuffled.safetensors", "{\n \"b\": {\"shape\": [2], \"dtype\": \"I16\", "
	    "\"data_offsets\": [4, 8]},\n \"__metadata__\": {\"format\": \"pt\"},\n "
	    "\"a.x\": {\"data_offsets\": [0, 4], \"dtype\": \"F32\", \"shape\": []}\n}   ", 8);
	s_st("valid-empty-header.safetensors", "{}      ", 0);
	s_st("valid-overlapping.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
	    "\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2,2],"
	    "\"data_offsets\":[0,4]}}", 4);
	s_st("header-not-object.safetensors", "[1, 2, 3]", 0);
	s_st("header-bad-json.safetensors", "{\"a\": {\"dtype\": \"F32\", ", 0);
	s_st("dtype-unknown.safetensors", "{\"a\":{\"dtype\":\"F17\",\"shape\":[1],"
	    "\"data_offsets\":[0,4]}}", 4);
	s_st("shape-negative.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],"
	    "\"data_offsets\":[0,1]}}", 1);
	s_st("shape-nine-dims.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":"
	    "[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
	s_st("shape-overflow.safetensors", "{\"a\":{\"dtype\":\"F64\",\"shape\":"
	    "[4611686018427387904,16],\"data_offsets\":[0,8]}}", 8);
	s_st("shape-mismatch.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
	    "\"data_offsets\":[0,8]}}", 8);
	s_st("offsets-beyond.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[16],"
	    "\"data_offsets\":[0,16]}}", 4);
	s_st("offsets-reversed.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],"
	    "\"data_offsets\":[4,0]}}", 4);
	s_st("offsets-float.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0.5,1.5]}}", 4);
	s_st("key-duplicate.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}", 1);
	s_st("name-empty.safetensors", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}", 1);
	s_st("name-nul.safetensors", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}", 1);
	s_st("metadata-not-object.safetensors", "{\"__metadata__\":[\"x\"]}", 0);
	s_st("metadata-not-string.safetensors", "{\"__metadata__\":{\"k\":1}}", 0);
	n = (size_t)snprintf(big, sizeof(big), "{\"");
	memset(big + n, 'n', 2000);
	n += 2000;
	snprintf(big + n, sizeof(big) - n, "\":{\"dtype\":\"U8\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}");
	s_st("name-2000-bytes.safetensors", big, 1);
	/* A long name of 2-byte characters: messages must cut it between characters. */
	n = (size_t)snprintf(big, sizeof(big), "{\"");
	for (int i = 0; i < 700; i++, n += 2)
		memcpy(big + n, "\xc3\xa9", 2);
	snprintf(big + n, sizeof(big) - n, "\":{\"dtype\":\"F\\u001b[31m\",\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}");
	s_st("name-utf8-long-dtype-escape.safetensors", big, 1);
	memset(big, '[', 4000);
	memset(big + 4000, ']', 4000);
	big[8000] = '\0';
	s_st("deep-json.safetensors", big, 0);

	/* A header length of 65535 in a file of 10 bytes. */
	s_save(s_st_dir, "lying-header-length.safetensors",
	    "\xff\xff\0\0\0\0\0\0{}", 10);
}

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fputs("usage: mkcorpus FILE-DIR SAFETENSORS-DIR\n", stderr);
		return 64;
	}
	s_file_dir = argv[1];
	s_st_dir = argv[2];
	for (size_t i = 0; i < sizeof(s_bytes); i++)
		s_bytes[i] = (unsigned char)(i * 37 + 11);
	/* The bool tensor's elements are 0 or 1. */
	for (size_t i = 512; i < 515; i++)
		s_bytes[i] &= 1;
	s_valid_seeds();
	s_hostile_seeds();
	s_packed_seeds();
	s_safetensors_seeds();
	return 0;
}
