/*
 * memcpy - the machine's memory bandwidth, for context: copies BYTES between
 * two buffers already faulted in, RUNS times, after one untimed copy, and
 * prints each copy's seconds and GB/s (10^9 bytes), one copy a line:
 *
 *   memcpy BYTES RUNS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

int
main(int argc, char **argv)
{
	size_t bytes;
	int runs;
	unsigned char *src, *dst;
	volatile unsigned char sink;

	if (argc != 3 || (bytes = strtoull(argv[1], NULL, 10)) == 0 ||
	    (runs = atoi(argv[2])) < 1) {
		fputs("usage: memcpy BYTES RUNS\n", stderr);
		return 64;
	}
	if ((src = malloc(bytes)) == NULL || (dst = malloc(bytes)) == NULL) {
		fprintf(stderr, "memcpy: cannot allocate 2 x %zu bytes\n", bytes);
		return 71;
	}
	memset(src, 0x5a, bytes);
	for (int i = 0; i <= runs; i++) {
		double start = bench_now(), t;

		memcpy(dst, src, bytes);
		t = bench_now() - start;
		sink = dst[(size_t)i * 4099 % bytes];
		if (i > 0)
			printf("%.6f %.2f\n", t, (double)bytes / t / 1e9);
		src[0] = sink;
	}
	free(src);
	free(dst);
	return 0;
}
