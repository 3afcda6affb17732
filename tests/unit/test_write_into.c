/* test_write_into.c - copying while hashing, and writing a document into memory
 * or a file of its exact size, byte for byte as the streaming writer does. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "wsync.h"

#define MIB (1u << 20)

/* len bytes of a pattern that differs at every offset (caller frees). */
static unsigned char *
s_pattern(size_t len, unsigned seed)
{
	unsigned char *p = malloc(len + 1);

	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
	return p;
}

/* What wsync_tree_write_fd writes for tree, through a temporary file (caller frees). */
static unsigned char *
s_streamed(wsync_tree_t *tree, size_t *len)
{
	FILE *fp = tmpfile();
	wsync_err_t err;
	unsigned char *buf = NULL;
	off_t n;

	if (fp != NULL && wsync_tree_write_fd(tree, fileno(fp), "tmp", &err) == 0 &&
	    (n = lseek(fileno(fp), 0, SEEK_END)) > 0 && (buf = malloc((size_t)n)) != NULL &&
	    pread(fileno(fp), buf, (size_t)n, 0) == n)
		*len = (size_t)n;
	if (fp != NULL)
		fclose(fp);
	return buf;
}

static void
test_copy_hash(void)
{
	/* Up to 1 MiB a plain copy; then streamed; from 8 MiB hashed by a second thread. */
	static const size_t sizes[] = { 0, 1, 63, 64, 65, 4096, MIB - 1, MIB, MIB + 777,
	    3 * MIB + 5, 8 * MIB - 1, 8 * MIB, 21 * MIB + 3 };
	static const size_t shifts[] = { 0, 1, 17, 63 };
	size_t most = 21 * MIB + 3 + 64;
	unsigned char *src = s_pattern(most, 7), *dst = malloc(most + 128);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
		int copied = 1, hashed = 1, guarded = 1;
		for (size_t j = 0; j < sizeof(shifts) / sizeof(*shifts); j++) {
			size_t n = sizes[i], d = 64 + shifts[j], s = shifts[(j + 1) % 4];
			uint64_t h;
			memset(dst, 0xee, most + 128);
			h = wsync_copy_hash(dst + d, src + s, n);
			copied &= memcmp(dst + d, src + s, n) == 0;
			hashed &= h == wsync_hash(src + s, n);
			guarded &= dst[d - 1] == 0xee && dst[d + n] == 0xee;
		}
		ok(copied && hashed && guarded, "copy_hash of %zu bytes at every alignment: "
		    "copies them, returns their XXH3-64, writes nothing around them", sizes[i]);
	}
	free(src);
	free(dst);
}

/* A tree of every bin header width, a scalar, a zero-size tensor, meta and a stamp. */
static wsync_tree_t *
s_tree(unsigned char *data)
{
	static const uint64_t sizes[] = { 3, 255, 256, 65535, 65536, MIB + 3, 2 * MIB };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("policy", &err);
	size_t off = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
		char path[32];
		snprintf(path, sizeof(path), "layer.%zu.weight", i);
		wsync_tree_add(tree, path, WSYNC_U8, 1, &sizes[i], data + off, sizes[i], &err);
		off += sizes[i] + 1;
	}
	wsync_tree_add(tree, "scalar", WSYNC_F32, 0, NULL, data, 4, &err);
	wsync_tree_add(tree, "empty", WSYNC_I8, 2, (uint64_t[]){ 0, 3 }, data, 0, &err);
	wsync_tree_set_meta(tree, "step", "100", &err);
	wsync_tree_set_version(tree, 9);
	return tree;
}

static void
test_write_into_matches_the_stream(void)
{
	unsigned char *data = s_pattern(4 * MIB, 3), *want, *got;
	wsync_tree_t *tree = s_tree(data);
	wsync_err_t err = { 0 };
	uint64_t size = 0;
	size_t len = 0;

	want = s_streamed(tree, &len);
	ok(wsync_tree_size(tree, &size, &err) == 0 && size == len,
	    "wsync_tree_size is the streamed document's size (%llu)", (unsigned long long)len);
	got = malloc(len);
	memset(got, 0xee, len);
	ok(wsync_tree_write_into(tree, got, len, &err) == 0 && memcmp(got, want, len) == 0,
	    "write_into writes the streamed bytes, hashes included");
	memset(got, 0xee, len);
	ok(wsync_tree_write_into(tree, got, len - 1, &err) == -1 && err.code == 64 &&
	    strcmp(err.msg, "model policy: the document is 3278020 bytes, the memory "
	    "for it 3278019") == 0, "write_into refuses a smaller size (64): %s", err.msg);
	ok(wsync_tree_write_into(tree, got, len + 1, &err) == -1 && err.code == 64,
	    "write_into refuses a larger size (64)");
	ok(got[0] == 0xee && got[len - 1] == 0xee, "a refused write_into writes nothing");
	free(got);
	free(want);
	wsync_tree_destroy(&tree);
	free(data);
}

static void
test_write_map(void)
{
	unsigned char *data = s_pattern(4 * MIB, 5), *want, *got;
	wsync_tree_t *tree = s_tree(data);
	wsync_err_t err = { 0 };
	FILE *fp = tmpfile();
	size_t len = 0;
	int fds[2], ro;
	char path[64];
	struct stat st;

	want = s_streamed(tree, &len);
	got = malloc(len);
	ok(ftruncate(fileno(fp), (off_t)len) == 0 && wsync_tree_write_map(tree, fileno(fp),
	    &err) == 0 && pread(fileno(fp), got, len, 0) == (ssize_t)len &&
	    memcmp(got, want, len) == 0, "write_map fills a file of the size, byte for byte");
	ok(fstat(fileno(fp), &st) == 0 && (size_t)st.st_size == len,
	    "write_map leaves the file's size as it was");
	ftruncate(fileno(fp), (off_t)len + 4096);
	ok(wsync_tree_write_map(tree, fileno(fp), &err) == -1 && err.code == 64 &&
	    strcmp(err.msg, "model policy: the document is 3278020 bytes, the file to "
	    "write it into has 3282116") == 0, "write_map refuses a file of another size "
	    "(64): %s", err.msg);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fileno(fp));
	ftruncate(fileno(fp), (off_t)len);
	ro = open(path, O_RDONLY);
	ok(wsync_tree_write_map(tree, ro, &err) == -1 && err.code == 74 &&
	    strcmp(err.msg, "model policy: cannot map the file to write into: Permission "
	    "denied (is it open for reading and writing?)") == 0,
	    "write_map refuses a read-only descriptor (74): %s", err.msg);
	close(ro);
	ok(pipe(fds) == 0 && wsync_tree_write_map(tree, fds[0], &err) == -1 &&
	    err.code == 64 && strcmp(err.msg, "model policy: the file to write into is not a "
	    "regular file") == 0,
	    "write_map refuses a pipe (64): %s", err.msg);
	close(fds[0]);
	close(fds[1]);
	fclose(fp);
	free(got);
	free(want);
	wsync_tree_destroy(&tree);
	free(data);
}

int
main(void)
{
	test_copy_hash();
	test_write_into_matches_the_stream();
	test_write_map();
	return tap_done();
}
