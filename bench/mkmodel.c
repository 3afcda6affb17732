/*
 * mkmodel - writes a .wsync file of NTENSORS f32 tensors holding BYTES bytes
 * of data in all, for the benchmarks:
 *
 *   mkmodel OUT BYTES NTENSORS
 *
 * Files of different sizes made with the same NTENSORS have the same tree
 * (paths, dtypes, ranks), so only the data differs between them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wsync.h"

/* Bytes of data per row of each tensor; BYTES / NTENSORS must be a multiple. */
#define ROW 4096

static uint64_t
s_number(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v == 0) {
		fprintf(stderr, "mkmodel: %s \"%s\" is not a positive integer\n", what, s);
		exit(64);
	}
	return v;
}

int
main(int argc, char **argv)
{
	uint64_t bytes, n, each, *data;
	wsync_tree_t *tree;
	wsync_err_t err;

	if (argc != 4) {
		fputs("usage: mkmodel OUT BYTES NTENSORS\n", stderr);
		return 64;
	}
	bytes = s_number(argv[2], "BYTES");
	n = s_number(argv[3], "NTENSORS");
	each = bytes / n;
	if (bytes % n != 0 || each % ROW != 0 || each > UINT32_MAX) {
		fprintf(stderr, "mkmodel: BYTES / NTENSORS must be a multiple of %d below 4 GiB\n",
		    ROW);
		return 64;
	}
	if ((data = malloc(bytes)) == NULL) {
		fprintf(stderr, "mkmodel: cannot allocate %llu bytes\n", (unsigned long long)bytes);
		return 71;
	}
	/* Cheap numbers that do not repeat: hashing speed does not depend on them. */
	for (uint64_t i = 0; i < bytes / 8; i++) {
		uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ULL;
		data[i] = x ^ (x >> 31);
	}
	if ((tree = wsync_tree_new("bench", &err)) == NULL)
		goto fail;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t shape[2] = { each / ROW, ROW / 4 };
		char path[64];

		snprintf(path, sizeof(path), "layers.%llu.weight", (unsigned long long)i);
		if (wsync_tree_add(tree, path, WSYNC_F32, 2, shape,
		    (const unsigned char *)data + i * each, each, &err) < 0)
			goto fail;
	}
	if (wsync_tree_write_file(tree, argv[1], &err) < 0)
		goto fail;
	wsync_tree_destroy(&tree);
	free(data);
	return 0;
fail:
	fprintf(stderr, "mkmodel: %s\n", err.msg);
	return err.code;
}
