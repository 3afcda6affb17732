/*
 * digest - the candidates for a signature's data digest over the same
 * buffer, RUNS times after one untimed pass, in GB/s (10^9 bytes):
 *
 *   digest MIB RUNS
 *
 * XXH3-64 (the format's hash: no defence against an attacker) is the floor;
 * BLAKE2b-256 (libsodium) and SHA-256 (OpenSSL, on the CPU's SHA extensions
 * where it has them) are the cryptographic candidates; then what signing and
 * verifying pay: SHA-256 and XXH3 in one pass (wsync_tree_digest), and that
 * while copying (wsync_copy_digest) against a plain memcpy. Prints the
 * median of each.
 */
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "clock.h"
#include "sign_int.h"

enum { S_XXH3, S_BLAKE2B, S_SHA256, S_BOTH, S_MEMCPY, S_COPY, S_ROWS };

static const char *const s_names[S_ROWS] = {
	"XXH3-64 (libxxhash)", "BLAKE2b-256 (libsodium)", "SHA-256 (OpenSSL)",
	"SHA-256 + XXH3, one pass (sign)", "memcpy", "copy + SHA-256 + XXH3 (receive)",
};

static int
s_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One pass of row over n bytes; returns something to keep the work alive. */
static unsigned
s_pass(int row, unsigned char *dst, const unsigned char *src, size_t n)
{
	uint8_t out[64] = { 0 };
	uint64_t h = 0;
	unsigned len;
	wsync_err_t err;

	switch (row) {
	case S_XXH3: h = XXH3_64bits(src, n); break;
	case S_BLAKE2B: crypto_generichash(out, 32, src, n, NULL, 0); break;
	case S_SHA256: EVP_Digest(src, n, out, &len, EVP_sha256(), NULL); break;
	case S_BOTH: wsync_data_digest(src, n, out, &h, &err); break;
	case S_MEMCPY: memcpy(dst, src, n); out[0] = dst[n - 1]; break;
	case S_COPY: wsync_copy_digest(dst, src, n, out, &h, &err); break;
	}
	return (unsigned)h + out[0];
}

int
main(int argc, char **argv)
{
	size_t mib, n;
	int runs;
	unsigned char *src, *dst;
	double t[64];
	unsigned keep = 0;

	if (argc != 3 || (mib = strtoul(argv[1], NULL, 10)) < 1 || (runs = atoi(argv[2])) < 1 ||
	    runs > 64) {
		fputs("usage: digest MIB RUNS (1 to 64)\n", stderr);
		return 64;
	}
	n = mib << 20;
	if (sodium_init() < 0 || (src = malloc(n)) == NULL || (dst = malloc(n)) == NULL) {
		fputs("digest: no memory or no libsodium\n", stderr);
		return 70;
	}
	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)(i * 2654435761u >> 13);
	memset(dst, 0, n);
	printf("%-34s %8s   (%zu MiB, median of %d)\n", "digest", "GB/s", mib, runs);
	for (int row = 0; row < S_ROWS; row++) {
		keep += s_pass(row, dst, src, n);
		for (int r = 0; r < runs; r++) {
			double t0 = bench_now();
			keep += s_pass(row, dst, src, n);
			t[r] = bench_now() - t0;
		}
		qsort(t, (size_t)runs, sizeof(t[0]), s_cmp);
		printf("%-34s %8.2f\n", s_names[row], (double)n / t[runs / 2] / 1e9);
	}
	free(src);
	free(dst);
	return keep == 42 ? 1 : 0;
}
