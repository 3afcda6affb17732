/*
 * passes - each pass of a delta update on 1 thread and on 2 (WSYNC_THREADS),
 * against a memcpy of the model and the simplest program doing the same work:
 *
 *   passes [MIB [DIR [RUNS [THREADS]]]]
 *
 * Writes a bf16 model of MIB MiB (default 2048) in 16 tensors and its step,
 * 1% of the elements changed in their low mantissa bits, into DIR (default
 * /dev/shm), after writing and deleting twice the model's size there, so that
 * no row pays the first touch of memory. Then times, best of RUNS (default 3):
 * the pusher's diff (wsync_delta_make with the hub's limit into an anonymous
 * file, as wsync-push --base of a .wsync file makes it; and as wsync-push
 * --batch makes it, wsync_source_delta_over from H as a safetensors file,
 * read where it lies, the version kept before patched into H as it goes), the hub's diff (the same into a file in DIR), the hub's rebuild
 * (wsync_delta_apply into a spare of its store, whose pages exist, as
 * wsync-serve --recycle does; and, as context, into a new file, as a hub
 * without a spare does) and the watcher's (wsync_delta_apply_fed, the apply
 * a watcher feeds as the delta arrives, here with all of it in, into its
 * file's pages, as wsync-watch --recycle does); one memcpy of the model into
 * existing pages; and two floors on the same threads: hash H and count its changes
 * against B (a diff), copy B, patch the changes and hash (a rebuild).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "delta_int.h"
#include "pool_int.h"
#include "source_int.h"

#define NTENSORS 16

_Noreturn static void
s_die(const char *what, const char *detail)
{
	fprintf(stderr, "passes: %s: %s\n", what, detail);
	exit(70);
}

static uint64_t
s_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Writes and deletes bytes of DIR, so that later files get pages the machine has touched. */
static void
s_warm(const char *dir, uint64_t bytes)
{
	char path[4096];
	int fd;
	void *p;

	snprintf(path, sizeof(path), "%s/passes.warm", dir);
	if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600)) < 0 ||
	    ftruncate(fd, (off_t)bytes) < 0)
		s_die(path, strerror(errno));
	if ((p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		s_die("mmap", strerror(errno));
	memset(p, 1, bytes);
	munmap(p, bytes);
	close(fd);
	unlink(path);
}

/*
 * The model: B's data and H's (made in memory, then read from their files),
 * and per tensor the changed elements' indices.
 */
typedef struct s_model {
	uint16_t *b, *h;
	const uint16_t *bt[NTENSORS], *ht[NTENSORS];   /* each tensor's data in the files */
	uint64_t each;                  /* elements per tensor */
	uint32_t *changes[NTENSORS];
	uint64_t nchanges[NTENSORS];
} s_model_t;

/* Writes the model's data as a .wsync file, or (safetensors) as a safetensors one. */
static void
s_write(const char *path, const uint16_t *data, uint64_t each, uint64_t version, int safetensors)
{
	wsync_err_t err;
	wsync_tree_t *t = wsync_tree_new("bench", &err);

	if (t == NULL)
		s_die(path, err.msg);
	wsync_tree_set_version(t, version);
	for (int i = 0; i < NTENSORS; i++) {
		uint64_t shape[2] = { each / 4096, 4096 };
		char name[64];
		snprintf(name, sizeof(name), "layers.%d.weight", i);
		if (wsync_tree_add(t, name, WSYNC_BF16, 2, shape, data + (uint64_t)i * each,
		    each * 2, &err) < 0)
			s_die(path, err.msg);
	}
	if ((safetensors ? wsync_tree_write_safetensors_file(t, path, &err) :
	    wsync_tree_write_file(t, path, &err)) < 0)
		s_die(path, err.msg);
	wsync_tree_destroy(&t);
}

/* B: bf16 weights of about normal(0, 0.02); H: 1% of them moved in the low mantissa bits. */
static void
s_make_model(s_model_t *m, uint64_t bytes)
{
	uint64_t n = bytes / 2, x = 88172645463325252ULL;

	m->each = n / NTENSORS;
	if ((m->b = malloc(bytes)) == NULL || (m->h = malloc(bytes)) == NULL)
		s_die("malloc", strerror(errno));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = s_next(&x);
		/* sign, exponent 117..123 (2^-10 .. 2^-4), mantissa */
		m->b[i] = (uint16_t)((r & 0x8000) | ((117 + (r >> 16) % 7) << 7) | ((r >> 24) & 0x7f));
	}
	memcpy(m->h, m->b, bytes);
	for (int t = 0; t < NTENSORS; t++) {
		m->changes[t] = malloc(m->each / 50 * sizeof(uint32_t));
		m->nchanges[t] = 0;
		if (m->changes[t] == NULL)
			s_die("malloc", strerror(errno));
		for (uint64_t e = 0; e < m->each; e++) {
			uint64_t r = s_next(&x);
			if (r % 100 != 0 || m->nchanges[t] >= m->each / 50)
				continue;
			m->h[(uint64_t)t * m->each + e] ^= (uint16_t)(1 + (r >> 8) % 3);
			m->changes[t][m->nchanges[t]++] = (uint32_t)e;
		}
	}
}

/* ---- the floors: the same work, written as plainly as it goes ---- */

typedef struct s_floor {
	const s_model_t *m;
	uint16_t *out;
	uint64_t sum;                   /* of the counts and hashes, so none is optimized away */
} s_floor_t;

/* Hashes H's tensor and counts the elements that differ from B's. */
static int
s_floor_diff(void *arg, size_t t, unsigned worker)
{
	s_floor_t *f = arg;
	const uint16_t *b = f->m->bt[t], *h = f->m->ht[t];
	uint64_t k = 0;

	(void)worker;
	for (uint64_t i = 0; i < f->m->each; i++)
		k += b[i] != h[i];
	__atomic_add_fetch(&f->sum, k + wsync_hash(h, f->m->each * 2), __ATOMIC_RELAXED);
	return 0;
}

/* Copies B's tensor, xors the changes in, hashes the result. */
static int
s_floor_rebuild(void *arg, size_t t, unsigned worker)
{
	s_floor_t *f = arg;
	const s_model_t *m = f->m;
	uint16_t *o = f->out + t * m->each;

	(void)worker;
	memcpy(o, m->bt[t], m->each * 2);
	for (uint64_t i = 0; i < m->nchanges[t]; i++)
		o[m->changes[t][i]] ^= 1;
	__atomic_add_fetch(&f->sum, wsync_hash(o, m->each * 2), __ATOMIC_RELAXED);
	return 0;
}

/* ---- the passes ---- */

enum { P_PUSH_DIFF, P_PUSH_BATCH, P_HUB_DIFF, P_HUB_REBUILD, P_WATCH_REBUILD, P_FLOOR_DIFF,
	P_FLOOR_REBUILD, P_HUB_REBUILD_NEW, P_COUNT };
static const char *const s_names[P_COUNT] = {
	"pusher diff", "pusher diff, --batch", "hub diff", "hub rebuild", "watcher rebuild", "floor: hash+diff",
	"floor: copy+patch+hash", "hub rebuild, new file",
};

static int
s_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);

	if (fd < 0)
		s_die(path, strerror(errno));
	return fd;
}

/* Copies the file at from over the file at to (pages that exist), untimed. */
static void
s_copy(const char *from, const char *to)
{
	static unsigned char buf[1 << 20];
	int f = s_open(from, O_RDONLY), t = s_open(to, O_WRONLY | O_CREAT);
	ssize_t n;

	while ((n = read(f, buf, sizeof(buf))) > 0)
		if (write(t, buf, (size_t)n) != n)
			s_die(to, strerror(errno));
	if (n < 0)
		s_die(from, strerror(errno));
	close(f);
	close(t);
}

/*
 * The pusher's diff as wsync-push --batch makes it: H read from its
 * safetensors file, B the version it kept (a .wsync file whose pages exist,
 * made into H as the diff goes). rc as wsync_source_delta_over's; seconds
 * into *s.
 */
static int
s_push_batch(const char *dir, const char *base, double *s, wsync_err_t *err)
{
	char st[4096], kept[4096];
	wsync_source_t *src;
	uint64_t size;
	int k, d, rc;

	snprintf(st, sizeof(st), "%s/passes.head.safetensors", dir);
	/* The hub's spare is the file: its pages exist, and the rebuilds rewrite it after. */
	snprintf(kept, sizeof(kept), "%s/passes.spare.wsync", dir);
	s_copy(base, kept);
	if ((src = wsync_source_open(st, "bench", NULL, err)) == NULL ||
	    (size = wsync_source_size(src, err)) == 0)
		s_die(st, err->msg);
	k = s_open(kept, O_RDWR);
	d = memfd_create("passes", MFD_CLOEXEC);
	*s = bench_now();
	rc = wsync_source_delta_over(src, size, k, 1, NULL, d, "push", WSYNC_DELTA_WORTH, NULL,
	    err);
	*s = bench_now() - *s;
	wsync_source_destroy(&src);
	close(k);
	close(d);
	return rc;
}

/* One run of pass p; seconds. */
static double
s_pass(int p, const char *dir, s_floor_t *fl, unsigned threads)
{
	char base[4096], head[4096], delta[4096], out[4096];
	wsync_err_t err;
	double t0;
	int b, h, d, o, rc = 0;

	snprintf(base, sizeof(base), "%s/passes.base.wsync", dir);
	snprintf(head, sizeof(head), "%s/passes.head.wsync", dir);
	snprintf(delta, sizeof(delta), "%s/passes.wdelta", dir);
	snprintf(out, sizeof(out), "%s/passes.out.wsync", dir);
	b = s_open(base, O_RDONLY);
	h = s_open(head, O_RDONLY);
	switch (p) {
	case P_PUSH_DIFF:
		d = memfd_create("passes", MFD_CLOEXEC);
		t0 = bench_now();
		rc = wsync_delta_make(b, h, d, "push", WSYNC_DELTA_WORTH, NULL, &err);
		break;
	case P_PUSH_BATCH:
		d = -1;
		rc = s_push_batch(dir, base, &t0, &err);
		if (rc != 0)
			s_die(s_names[p], rc < 0 ? err.msg : "the delta is not worth it");
		close(b);
		close(h);
		return t0;
	case P_HUB_DIFF:
		d = s_open(delta, O_WRONLY | O_CREAT | O_TRUNC);
		t0 = bench_now();
		rc = wsync_delta_make(b, h, d, delta, WSYNC_DELTA_WORTH, NULL, &err);
		break;
	case P_HUB_REBUILD:
	case P_WATCH_REBUILD:
	case P_HUB_REBUILD_NEW:
		d = s_open(delta, O_RDONLY);
		/* A spare of the hub's store (--recycle) or the watcher's file: pages that exist. */
		if (p == P_HUB_REBUILD)
			snprintf(out, sizeof(out), "%s/passes.spare.wsync", dir);
		if (p == P_HUB_REBUILD_NEW)
			unlink(out);
		o = s_open(out, O_RDWR | O_CREAT);
		if (p == P_WATCH_REBUILD) {
			/* The watcher's own path: the apply fed as the delta arrives (here, all in). */
			struct stat st;
			wsync_delta_feed_t *feed;

			if (fstat(d, &st) < 0 || (feed = wsync_delta_feed_new((uint64_t)st.st_size))
			    == NULL)
				s_die(delta, strerror(errno));
			t0 = bench_now();
			wsync_delta_feed_arrived(feed, (uint64_t)st.st_size);
			rc = wsync_delta_apply_fed(b, d, o, delta, NULL, NULL, feed, NULL, NULL, &err);
			wsync_delta_feed_free(&feed);
		} else {
			t0 = bench_now();
			rc = wsync_delta_apply(b, d, o, delta, NULL, NULL, &err);
		}
		close(o);
		break;
	case P_FLOOR_DIFF:
		d = -1;
		t0 = bench_now();
		wsync_pool_run(NTENSORS, threads, s_floor_diff, fl, NULL);
		break;
	default:
		d = -1;
		t0 = bench_now();
		wsync_pool_run(NTENSORS, threads, s_floor_rebuild, fl, NULL);
		break;
	}
	t0 = bench_now() - t0;
	if (rc != 0)
		s_die(s_names[p], rc < 0 ? err.msg : "the delta is not worth it");
	close(b);
	close(h);
	if (d >= 0)
		close(d);
	return t0;
}

int
main(int argc, char **argv)
{
	uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2048, bytes = mib << 20;
	const char *dir = argc > 2 ? argv[2] : "/dev/shm";
	int runs = argc > 3 ? atoi(argv[3]) : 3;
	/* The second column's threads (2 here; more where a machine has the cores). */
	int many = argc > 4 ? atoi(argv[4]) : 2;
	char many_s[16], many_h[24];
	char path[4096];
	double best[P_COUNT][2], copy = 1e9, load[3] = { 0 };
	s_model_t m = { 0 };
	s_floor_t fl = { .m = &m };
	wsync_file_t *bf, *hf;
	unsigned char *dst;
	wsync_err_t err;

	if (mib == 0 || mib % 16 != 0 || runs < 1 || many < 2 || many > 256) {
		fputs("usage: passes [MIB [DIR [RUNS [THREADS]]]] (MIB a multiple of 16, "
		    "THREADS 2 to 256)\n", stderr);
		return 64;
	}
	s_warm(dir, 2 * bytes);
	s_make_model(&m, bytes);
	snprintf(path, sizeof(path), "%s/passes.base.wsync", dir);
	s_write(path, m.b, m.each, 1, 0);
	snprintf(path, sizeof(path), "%s/passes.head.wsync", dir);
	s_write(path, m.h, m.each, 2, 0);
	/* H as the trainer wrote it, for the pusher's --batch diff. */
	snprintf(path, sizeof(path), "%s/passes.head.safetensors", dir);
	s_write(path, m.h, m.each, 2, 1);
	/* The hub's spare and the watcher's file: an older version's pages, as --recycle keeps. */
	snprintf(path, sizeof(path), "%s/passes.spare.wsync", dir);
	s_write(path, m.b, m.each, 1, 0);
	snprintf(path, sizeof(path), "%s/passes.out.wsync", dir);
	s_write(path, m.b, m.each, 1, 0);
	free(m.b);
	free(m.h);
	snprintf(path, sizeof(path), "%s/passes.base.wsync", dir);
	if ((bf = wsync_file_open(path, &err)) == NULL)
		s_die(path, err.msg);
	snprintf(path, sizeof(path), "%s/passes.head.wsync", dir);
	if ((hf = wsync_file_open(path, &err)) == NULL)
		s_die(path, err.msg);
	for (int t = 0; t < NTENSORS; t++) {
		m.bt[t] = wsync_file_tensor(bf, (size_t)t)->data;
		m.ht[t] = wsync_file_tensor(hf, (size_t)t)->data;
	}
	/* The floor's rebuild writes into the pages the memcpy row copies into. */
	if ((dst = malloc(bytes)) == NULL)
		s_die("malloc", strerror(errno));
	memset(dst, 0, bytes);
	fl.out = (uint16_t *)dst;
	for (int r = 0; r < runs; r++) {
		double t0 = bench_now();
		for (int t = 0; t < NTENSORS; t++)
			memcpy(dst + (uint64_t)t * m.each * 2, m.ht[t], m.each * 2);
		t0 = bench_now() - t0;
		copy = t0 < copy ? t0 : copy;
	}
	for (int p = 0; p < P_COUNT; p++)
		for (unsigned k = 0; k < 2; k++) {
			best[p][k] = 1e9;
			snprintf(many_s, sizeof(many_s), "%d", many);
			setenv("WSYNC_THREADS", k == 0 ? "1" : many_s, 1);
			/* A rebuild needs the delta the diff before it wrote. */
			if (p == P_HUB_REBUILD || p == P_WATCH_REBUILD || p == P_HUB_REBUILD_NEW)
				s_pass(P_HUB_DIFF, dir, &fl, k == 0 ? 1 : (unsigned)many);
			for (int r = 0; r < runs; r++) {
				double s = s_pass(p, dir, &fl, k == 0 ? 1 : (unsigned)many);
				best[p][k] = s < best[p][k] ? s : best[p][k];
			}
		}
	wsync_file_close(&bf);
	wsync_file_close(&hf);
	free(dst);
	for (int t = 0; t < NTENSORS; t++)
		free(m.changes[t]);
	getloadavg(load, 3);
	printf("%llu MiB of bf16 in %d tensors, 1%% of elements changed, files in %s, best of "
	    "%d; load average %.2f %.2f %.2f\n", (unsigned long long)mib, NTENSORS, dir, runs,
	    load[0], load[1], load[2]);
	snprintf(many_h, sizeof(many_h), "%d threads", many);
	printf("%-24s %10s %10s %8s %12s\n", "pass", "1 thread", many_h, "speedup",
	    "many / memcpy");
	for (int p = 0; p < P_COUNT; p++)
		printf("%-24s %9.3fs %9.3fs %7.2fx %11.1fx\n", s_names[p], best[p][0], best[p][1],
		    best[p][0] / best[p][1], best[p][1] / copy);
	printf("%-24s %9.3fs\n", "memcpy of the model", copy);
	for (const char *n = "base"; n != NULL; n = strcmp(n, "base") == 0 ? "head" :
	    strcmp(n, "head") == 0 ? "out" : strcmp(n, "out") == 0 ? "spare" : NULL) {
		snprintf(path, sizeof(path), "%s/passes.%s.wsync", dir, n);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/passes.head.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/passes.wdelta", dir);
	unlink(path);
	return 0;
}
