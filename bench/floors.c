/*
 * floors - the floors under a delta update of two model files, for the
 * large-update benchmarks (bench/update):
 *
 *   floors BASE HEAD RUNS
 *
 * BASE and HEAD are files of one size (two versions of a model laid out
 * alike: .wsync or safetensors), read as bf16 elements. After one run
 * untimed, each run prints the
 * seconds of four passes on a line: one memcpy of HEAD into pages that exist
 * (one thread); the simplest diff, hashing HEAD (XXH3-64) and collecting the
 * elements that differ from BASE with their new values; the simplest
 * rebuild, copying BASE into pages that exist, patching those elements in and
 * hashing the result; and the same diff with both files read as a process
 * reads them (pread in 1 MiB pieces into page-aligned buffers), not mapped
 * beforehand. The diffs and the rebuild split the files into 64 pieces over
 * WSYNC_THREADS threads (default: the CPUs), as wsync's passes do.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "hash_int.h"
#include "pool_int.h"

#define PIECES 64
#define READ_PIECE (1u << 20)

typedef struct s_floors {
	const uint16_t *b, *h;
	uint16_t *out;
	uint64_t n;                     /* elements */
	uint64_t cap;                   /* changes a piece may hold */
	uint32_t *idx[PIECES];          /* each piece's changed elements, from its start */
	uint16_t *val[PIECES];
	uint64_t nchanged[PIECES];
	uint64_t sum;                   /* of the hashes, so that none is left out */
	int bfd, hfd;                   /* the files, for the diff that reads them */
} s_floors_t;

static void
s_die(const char *what, const char *detail)
{
	fprintf(stderr, "floors: %s: %s\n", what, detail);
	exit(70);
}

static void
s_piece(const s_floors_t *f, size_t p, uint64_t *start, uint64_t *len)
{
	uint64_t each = f->n / PIECES;

	*start = p * each;
	*len = p + 1 == PIECES ? f->n - *start : each;
}

/* Hashes HEAD's piece and collects the elements that differ from BASE's. */
static int
s_diff(void *arg, size_t p, unsigned worker)
{
	s_floors_t *f = arg;
	uint64_t start, len, k = 0;

	(void)worker;
	s_piece(f, p, &start, &len);
	for (uint64_t i = 0; i < len; i++)
		if (f->b[start + i] != f->h[start + i]) {
			if (k == f->cap)
				return 1;
			f->idx[p][k] = (uint32_t)i;
			f->val[p][k++] = f->h[start + i];
		}
	f->nchanged[p] = k;
	__atomic_add_fetch(&f->sum, XXH3_64bits(f->h + start, len * 2), __ATOMIC_RELAXED);
	return 0;
}

/* As s_diff, BASE's and HEAD's piece read from their files a MiB at a time. */
static int
s_diff_read(void *arg, size_t p, unsigned worker)
{
	s_floors_t *f = arg;
	uint16_t *b = aligned_alloc(4096, READ_PIECE), *h = aligned_alloc(4096, READ_PIECE);
	uint64_t start, len, k = 0;
	XXH3_state_t state;

	(void)worker;
	if (b == NULL || h == NULL)
		s_die("aligned_alloc", strerror(errno));
	s_piece(f, p, &start, &len);
	XXH3_64bits_reset(&state);
	for (uint64_t at = 0; at < len; at += READ_PIECE / 2) {
		uint64_t n = len - at < READ_PIECE / 2 ? len - at : READ_PIECE / 2;
		if (pread(f->bfd, b, n * 2, (off_t)((start + at) * 2)) != (ssize_t)(n * 2) ||
		    pread(f->hfd, h, n * 2, (off_t)((start + at) * 2)) != (ssize_t)(n * 2))
			s_die("pread", strerror(errno));
		for (uint64_t i = 0; i < n && k <= f->cap; i++)
			if (b[i] != h[i] && k++ < f->cap) {
				f->idx[p][k - 1] = (uint32_t)(at + i);
				f->val[p][k - 1] = h[i];
			}
		wsync_hash_update(&state, h, n * 2);
	}
	free(b);
	free(h);
	if (k > f->cap)
		return 1;
	f->nchanged[p] = k;
	__atomic_add_fetch(&f->sum, XXH3_64bits_digest(&state), __ATOMIC_RELAXED);
	return 0;
}

/* Copies BASE's piece, patches the changes in, hashes the result. */
static int
s_rebuild(void *arg, size_t p, unsigned worker)
{
	s_floors_t *f = arg;
	uint64_t start, len;
	uint16_t *o;

	(void)worker;
	s_piece(f, p, &start, &len);
	o = f->out + start;
	memcpy(o, f->b + start, len * 2);
	for (uint64_t k = 0; k < f->nchanged[p]; k++)
		o[f->idx[p][k]] = f->val[p][k];
	__atomic_add_fetch(&f->sum, XXH3_64bits(o, len * 2), __ATOMIC_RELAXED);
	return 0;
}

/* path mapped, its pages in; its descriptor into *fd, kept open for reads. */
static const void *
s_map(const char *path, uint64_t *size, int *fd)
{
	struct stat st;
	void *p;

	if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(*fd, &st) < 0)
		s_die(path, strerror(errno));
	*size = (uint64_t)st.st_size;
	p = mmap(NULL, *size, PROT_READ, MAP_SHARED | MAP_POPULATE, *fd, 0);
	if (p == MAP_FAILED)
		s_die(path, strerror(errno));
	return p;
}

int
main(int argc, char **argv)
{
	s_floors_t f = { 0 };
	uint64_t bsize, hsize;
	unsigned threads = wsync_threads();
	int runs = argc == 4 ? atoi(argv[3]) : 0;

	if (runs < 1) {
		fputs("usage: floors BASE HEAD RUNS\n", stderr);
		return 64;
	}
	f.b = s_map(argv[1], &bsize, &f.bfd);
	f.h = s_map(argv[2], &hsize, &f.hfd);
	if (bsize != hsize || bsize % 2 != 0 || bsize / 2 < PIECES || bsize / 2 / PIECES > UINT32_MAX)
		s_die(argv[2], "not a file of BASE's size in bf16 elements");
	f.n = bsize / 2;
	/* A step changes about 1% of the elements: room for 1/16 of them. */
	f.cap = f.n / PIECES / 16 + 1;
	for (int p = 0; p < PIECES; p++)
		if ((f.idx[p] = malloc(f.cap * sizeof(*f.idx[p]))) == NULL ||
		    (f.val[p] = malloc(f.cap * sizeof(*f.val[p]))) == NULL)
			s_die("malloc", strerror(errno));
	if ((f.out = malloc(bsize)) == NULL)
		s_die("malloc", strerror(errno));
	memset(f.out, 0, bsize);
	for (int r = 0; r <= runs; r++) {
		double t0 = bench_now(), copy, diff, rebuild;

		memcpy(f.out, f.h, bsize);
		copy = bench_now() - t0;
		t0 = bench_now();
		if (wsync_pool_run(PIECES, threads, s_diff, &f, NULL) != 0)
			s_die(argv[2], "more than 1/16 of its elements differ from BASE's");
		diff = bench_now() - t0;
		t0 = bench_now();
		wsync_pool_run(PIECES, threads, s_rebuild, &f, NULL);
		rebuild = bench_now() - t0;
		t0 = bench_now();
		if (wsync_pool_run(PIECES, threads, s_diff_read, &f, NULL) != 0)
			s_die(argv[2], "more than 1/16 of its elements differ from BASE's");
		if (r > 0)
			printf("%.9f %.9f %.9f %.9f\n", copy, diff, rebuild, bench_now() - t0);
	}
	if (memcmp(f.out, f.h, bsize) != 0)
		s_die(argv[2], "the rebuilt copy differs from HEAD");
	for (int p = 0; p < PIECES; p++) {
		free(f.idx[p]);
		free(f.val[p]);
	}
	free(f.out);
	return 0;
}
