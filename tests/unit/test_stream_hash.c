/* test_stream_hash.c - tensors hashed as a fetched file's chunks arrive, where an older output has them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream_hash_int.h"
#include "tap.h"
#include "wsync.h"

#define N 4

static unsigned char data[N][5000];
static const uint64_t sizes[N] = { 5000, 0, 333, 4096 };

/* Writes a .wsync file of N tensors (bytes times mult) at path; 0 or -1. */
static int
write_model(const char *path, int mult)
{
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("m", &err);
	int rc = tree == NULL ? -1 : 0;

	for (int i = 0; i < N && rc == 0; i++) {
		char name[16];
		uint64_t shape[1] = { sizes[i] };
		for (uint64_t j = 0; j < sizes[i]; j++)
			data[i][j] = (unsigned char)(j * 31 + i * mult);
		snprintf(name, sizeof(name), "t%d", i);
		rc = wsync_tree_add(tree, name, WSYNC_U8, 1, shape, data[i], sizes[i], &err);
	}
	if (rc == 0)
		rc = wsync_tree_write_file(tree, path, &err);
	wsync_tree_destroy(&tree);
	return rc;
}

/* Reads the whole file at path; caller frees; its length in *len. */
static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = malloc(1 << 20);

	*len = f != NULL && buf != NULL ? fread(buf, 1, 1 << 20, f) : 0;
	if (f != NULL)
		fclose(f);
	return buf;
}

/* 1 when every tensor of the file at path is known, with its hash as stored. */
static int
all_known(const wsync_stream_hash_t *s, const char *path)
{
	wsync_err_t err;
	wsync_file_t *f = wsync_file_open(path, &err);
	size_t n, found = 0;
	const wsync_known_hash_t *k = wsync_stream_hash_known(s, &n);

	for (size_t i = 0; f != NULL && i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		for (size_t j = 0; j < n; j++)
			if (k[j].at == t->offset && k[j].nbytes == t->nbytes && k[j].done &&
			    k[j].hash == t->hash)
				found++;
	}
	n = f != NULL ? wsync_file_count(f) : 0;
	wsync_file_close(&f);
	return n == N && found == n;
}

/* How many tensors with data s hashed whole (an empty one is whole at once). */
static size_t
done_count(const wsync_stream_hash_t *s)
{
	size_t n, done = 0;
	const wsync_known_hash_t *k = wsync_stream_hash_known(s, &n);

	for (size_t i = 0; i < n; i++)
		done += (size_t)(k[i].done && k[i].nbytes > 0);
	return done;
}

int
main(void)
{
	char dir[] = "/tmp/wsync-unit-XXXXXX", old[64], next[64];
	unsigned char *bytes;
	size_t len;
	wsync_stream_hash_t *s;
	static const size_t chunks[] = { 1, 64, 1000, 4096, 1 << 20 };

	if (mkdtemp(dir) == NULL)
		return 70;
	snprintf(old, sizeof(old), "%s/old.wsync", dir);
	snprintf(next, sizeof(next), "%s/next.wsync", dir);
	if (write_model(old, 1) < 0 || write_model(next, 7) < 0)
		return 70;
	bytes = slurp(next, &len);

	for (size_t c = 0; c < sizeof(chunks) / sizeof(*chunks); c++) {
		s = wsync_stream_hash_new(old);
		for (size_t off = 0; off < len; off += chunks[c])
			wsync_stream_hash_chunk(s, off, bytes + off, len - off < chunks[c] ?
			    len - off : chunks[c]);
		ok(s != NULL && all_known(s, next), "chunks of %zu bytes in order: every tensor "
		    "hashed where the older file has it, as the file stores it", chunks[c]);
		wsync_stream_hash_destroy(&s);
		ok(s == NULL, "destroy sets the pointer to NULL");
	}

	s = wsync_stream_hash_new(old);
	wsync_stream_hash_chunk(s, 0, bytes, 10);
	wsync_stream_hash_chunk(s, 200, bytes + 200, len - 200);
	wsync_stream_hash_chunk(s, 10, bytes + 10, 190);
	ok(done_count(s) == 0, "after a chunk out of order no data is hashed (got %zu)",
	    done_count(s));
	wsync_stream_hash_destroy(&s);

	ok(wsync_stream_hash_new(dir) == NULL, "a directory gives no hasher");
	ok(wsync_stream_hash_new("/nonexistent/x.wsync") == NULL, "a missing file gives none");
	ok(wsync_stream_hash_known(NULL, &len) == NULL && len == 0, "no hasher knows nothing");

	free(bytes);
	unlink(old);
	unlink(next);
	rmdir(dir);
	return tap_done();
}
