/*
 * mkstep - a bf16 model of 16 tensors and its next training step, for the
 * large-update benchmarks (bench/update):
 *
 *   mkstep MIB BASE HEAD [PARTS]
 *
 * Writes BASE (version 1) and HEAD (version 2), .wsync files of MIB MiB of
 * bf16 weights (MIB a multiple of 16) in tensors layers.0.weight ..
 * layers.15.weight, weights of about normal(0, 0.02) as passes.c makes them;
 * HEAD has 1% of the elements moved in their low mantissa bits, as a step of
 * an optimizer moves bf16 weights. With PARTS, also writes BASE and HEAD with
 * .R.wsync for .wsync, for R from 0 to PARTS - 1 (PARTS dividing 16): rank
 * R's tensors, the Rth
 * run of 16 / PARTS of them, as the ranks of a sharded trainer hold them.
 * Holds one copy of the model in memory.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wsync.h"

#define NTENSORS 16
#define COLS 4096

/* Writes tensors [from, to) of data into path, stamped version. */
static int
s_write(const char *path, const uint16_t *data, uint64_t each, int from, int to,
    uint64_t version, wsync_err_t *err)
{
	wsync_tree_t *t = wsync_tree_new("bench", err);
	int rc = 0;

	if (t == NULL)
		return -1;
	wsync_tree_set_version(t, version);
	for (int i = from; i < to && rc == 0; i++) {
		uint64_t shape[2] = { each / COLS, COLS };
		char name[64];

		snprintf(name, sizeof(name), "layers.%d.weight", i);
		rc = wsync_tree_add(t, name, WSYNC_BF16, 2, shape, data + (uint64_t)i * each,
		    each * 2, err);
	}
	if (rc == 0)
		rc = wsync_tree_write_file(t, path, err);
	wsync_tree_destroy(&t);
	return rc;
}

/* Writes the whole model to path (NAME.wsync) and, with parts, each part to NAME.R.wsync. */
static int
s_write_all(const char *path, const uint16_t *data, uint64_t each, int parts,
    uint64_t version, wsync_err_t *err)
{
	char part[4096];

	if (s_write(path, data, each, 0, NTENSORS, version, err) < 0)
		return -1;
	for (int r = 0; r < parts; r++) {
		snprintf(part, sizeof(part), "%.*s.%d.wsync", (int)(strlen(path) - 6), path, r);
		if (s_write(part, data, each, r * (NTENSORS / parts), (r + 1) * (NTENSORS / parts),
		    version, err) < 0)
			return -1;
	}
	return 0;
}

static int
s_wsync(const char *path)
{
	size_t n = strlen(path);

	return n > 6 && strcmp(path + n - 6, ".wsync") == 0;
}

int
main(int argc, char **argv)
{
	uint64_t mib, n, x = 88172645463325252ULL;
	int parts = argc > 4 ? atoi(argv[4]) : 0;
	uint16_t *w;
	wsync_err_t err;
	char *end;

	errno = 0;
	mib = argc > 3 ? strtoull(argv[1], &end, 10) : 0;
	if (argc < 4 || argc > 5 || errno != 0 || *end != '\0' || mib == 0 || mib % 16 != 0 ||
	    parts < 0 || parts > NTENSORS || (parts > 0 && NTENSORS % parts != 0) ||
	    !s_wsync(argv[2]) || !s_wsync(argv[3])) {
		fputs("usage: mkstep MIB BASE.wsync HEAD.wsync [PARTS] (MIB a multiple of 16, "
		    "PARTS dividing 16)\n", stderr);
		return 64;
	}
	n = mib << 19;                  /* bf16 elements */
	if ((w = malloc(n * 2)) == NULL) {
		fprintf(stderr, "mkstep: cannot allocate %llu MiB\n", (unsigned long long)mib);
		return 71;
	}
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		/* sign, exponent 117..123 (2^-10 .. 2^-4), mantissa */
		w[i] = (uint16_t)((x & 0x8000) | ((117 + (x >> 16) % 7) << 7) | ((x >> 24) & 0x7f));
	}
	if (s_write_all(argv[2], w, n / NTENSORS, parts, 1, &err) < 0)
		goto fail;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if (x % 100 == 0)
			w[i] ^= (uint16_t)(1 + (x >> 8) % 3);
	}
	if (s_write_all(argv[3], w, n / NTENSORS, parts, 2, &err) < 0)
		goto fail;
	free(w);
	return 0;
fail:
	fprintf(stderr, "mkstep: %s\n", err.msg);
	free(w);
	return err.code;
}
