/*
 * xxh3 - the hashing baseline for `wsync-inspect --verify`: XXH3-64 over
 * every tensor's data in a .wsync file, the bytes verify hashes, RUNS times
 * after one untimed pass; prints each pass's seconds and GB/s (10^9 bytes),
 * one pass a line:
 *
 *   xxh3 [-m] FILE RUNS
 *
 * By default the file is mapped once and its pages are in memory before the
 * timed passes. With -m every pass maps the file afresh, as a new
 * `wsync-inspect --verify` process does, so page mapping costs are counted.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "wsync.h"

/* Hashes every tensor's bytes in the image at base; returns a value to keep. */
static uint64_t
s_hash_all(const wsync_file_t *f, const unsigned char *base)
{
	uint64_t acc = 0;

	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		acc += XXH3_64bits(base + t->offset, (size_t)t->nbytes);
	}
	return acc;
}

int
main(int argc, char **argv)
{
	int fresh = argc > 1 && strcmp(argv[1], "-m") == 0, runs, fd;
	const char *path;
	wsync_file_t *f;
	wsync_err_t err;
	struct stat st;
	uint64_t bytes, acc = 0;
	unsigned char *map = NULL;

	if (argc != 3 + fresh || (runs = atoi(argv[2 + fresh])) < 1) {
		fputs("usage: xxh3 [-m] FILE RUNS\n", stderr);
		return 64;
	}
	path = argv[1 + fresh];
	/* The header says where the tensors are; their pages stay untouched here. */
	if ((f = wsync_file_open(path, &err)) == NULL) {
		fprintf(stderr, "xxh3: %s\n", err.msg);
		return err.code;
	}
	bytes = wsync_file_data_bytes(f);
	if ((fd = open(path, O_RDONLY)) < 0 || fstat(fd, &st) < 0) {
		perror(path);
		return 66;
	}
	for (int i = 0; i <= runs; i++) {
		double start = bench_now(), t;

		if (map == NULL && (map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED,
		    fd, 0)) == MAP_FAILED) {
			perror(path);
			return 74;
		}
		acc += s_hash_all(f, map);
		if (fresh) {
			munmap(map, (size_t)st.st_size);
			map = NULL;
		}
		t = bench_now() - start;
		if (i > 0)
			printf("%.6f %.2f\n", t, (double)bytes / t / 1e9);
	}
	/* Printing the hashes keeps the compiler from dropping them. */
	fprintf(stderr, "xxh3: %s: %llu bytes, digests summed %016llx\n", path,
	    (unsigned long long)bytes, (unsigned long long)acc);
	wsync_file_close(&f);
	close(fd);
	return 0;
}
