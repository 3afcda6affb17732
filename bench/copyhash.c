/*
 * copyhash - the cost of writing a version into recycled pages: copies BYTES
 * from ordinary memory into a shared memory file whose pages already exist
 * (as a recycled store file's do), RUNS times after one untimed round, and
 * prints one round a line, in seconds:
 *
 *   memcpy  wsync_copy_hash  wsync_tree_write_map
 *
 * memcpy is the limit; wsync_copy_hash copies and hashes in one pass;
 * wsync_tree_write_map writes a whole document of 8 tensors of BYTES / 8
 * into a file of its size, mapping it afresh each time, as a trainer does.
 *
 *   copyhash BYTES RUNS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "wsync.h"

#define NTENSORS 8

/* A shared memory file of size bytes, mapped if map is not NULL; -1 on failure. */
static int
s_memfd(uint64_t size, unsigned char **map)
{
	int fd = memfd_create("copyhash", 0);

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return -1;
	if (map != NULL && (*map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
	    fd, 0)) == MAP_FAILED)
		return -1;
	return fd;
}

int
main(int argc, char **argv)
{
	size_t bytes, part;
	int runs, fd, slot;
	unsigned char *src, *dst;
	wsync_tree_t *tree;
	wsync_err_t err;
	uint64_t size, sum = 0;

	if (argc != 3 || (bytes = strtoull(argv[1], NULL, 10)) < NTENSORS ||
	    (runs = atoi(argv[2])) < 1) {
		fputs("usage: copyhash BYTES RUNS\n", stderr);
		return 64;
	}
	part = bytes / NTENSORS;
	if ((src = malloc(bytes)) == NULL || (fd = s_memfd(bytes, &dst)) < 0) {
		fprintf(stderr, "copyhash: cannot allocate 2 x %zu bytes\n", bytes);
		return 71;
	}
	for (size_t i = 0; i < bytes; i++)
		src[i] = (unsigned char)(i * 2654435761u >> 13);
	if ((tree = wsync_tree_new("bench", &err)) == NULL)
		return 70;
	for (int i = 0; i < NTENSORS; i++) {
		char path[32];
		uint64_t shape[1] = { part };
		snprintf(path, sizeof(path), "layer.%d.weight", i);
		if (wsync_tree_add(tree, path, WSYNC_U8, 1, shape, src + i * part, part,
		    &err) < 0) {
			fprintf(stderr, "copyhash: %s\n", err.msg);
			return 70;
		}
	}
	if (wsync_tree_size(tree, &size, &err) < 0 || (slot = s_memfd(size, NULL)) < 0) {
		fprintf(stderr, "copyhash: cannot make the slot file\n");
		return 71;
	}
	for (int i = 0; i <= runs; i++) {
		double t0, t1, t2, t3;

		t0 = bench_now();
		memcpy(dst, src, bytes);
		t1 = bench_now();
		sum += wsync_copy_hash(dst, src, bytes);
		t2 = bench_now();
		if (wsync_tree_write_map(tree, slot, &err) < 0) {
			fprintf(stderr, "copyhash: %s\n", err.msg);
			return 70;
		}
		t3 = bench_now();
		if (i > 0)
			printf("%.6f %.6f %.6f\n", t1 - t0, t2 - t1, t3 - t2);
	}
	fprintf(stderr, "copyhash: checksum %016llx\n", (unsigned long long)sum);
	wsync_tree_destroy(&tree);
	close(slot);
	munmap(dst, bytes);
	close(fd);
	free(src);
	return 0;
}
