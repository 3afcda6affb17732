/*
 * filecopy - the floor of a push into a recycled file: the simplest program
 * that does what wsync-push does with a file on the hub's host, read() of the
 * input a piece at a time, each piece hashed (XXH3-64) while in the cache and
 * pwrite() at its offset into a file whose pages exist (a copy of the input
 * made first, as a recycled store file's pages do). Prints seconds per run,
 * one a line, RUNS runs after one untimed round.
 *
 *   filecopy IN OUT RUNS
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"

/* The piece wsync-push moves at a time (lib/source.c). */
#define PIECE (256u << 10)

/* Copies in into out once, piece by piece, hashing each piece; 0 or -1. */
static int
s_copy(int in, int out, unsigned char *buf, unsigned long long *sum)
{
	off_t off = 0;
	ssize_t n;

	while ((n = pread(in, buf, PIECE, off)) > 0) {
		*sum ^= XXH3_64bits(buf, (size_t)n);
		if (pwrite(out, buf, (size_t)n, off) != n)
			return -1;
		off += n;
	}
	return n < 0 ? -1 : 0;
}

int
main(int argc, char **argv)
{
	unsigned long long sum = 0;
	unsigned char *buf = malloc(PIECE);
	int in, out, runs;

	if (argc != 4 || (runs = atoi(argv[3])) < 1) {
		fputs("usage: filecopy IN OUT RUNS\n", stderr);
		return 64;
	}
	if (buf == NULL || (in = open(argv[1], O_RDONLY)) < 0 ||
	    (out = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600)) < 0) {
		perror("filecopy");
		return 66;
	}
	for (int i = 0; i <= runs; i++) {
		double t0 = bench_now();
		if (s_copy(in, out, buf, &sum) < 0) {
			perror("filecopy");
			return 74;
		}
		if (i > 0)
			printf("%.6f\n", bench_now() - t0);
	}
	fprintf(stderr, "filecopy: checksum %016llx\n", sum);
	close(in);
	close(out);
	free(buf);
	return 0;
}
