/*
 * test_pool.c - a pass split over threads: WSYNC_THREADS read, every item run
 * once, and a failure reported as the lowest item that failed, whatever the
 * number of threads; by size, the largest handed out first.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "pool_int.h"
#include "tap.h"

#define ITEMS 1000

typedef struct s_count {
	atomic_int runs[ITEMS];
	size_t fail_from;               /* items from here on fail with their number */
	unsigned threads;
	atomic_int bad_worker;          /* a worker number out of range was given */
} s_count_t;

static int
s_count_run(void *arg, size_t item, unsigned worker)
{
	s_count_t *c = arg;

	if (worker >= c->threads)
		atomic_store(&c->bad_worker, 1);
	atomic_fetch_add(&c->runs[item], 1);
	return item >= c->fail_from && item % 3 == 0 ? (int)item : 0;
}

static void
test_threads_come_from_the_environment(void)
{
	cpu_set_t cpus;
	unsigned n;

	setenv("WSYNC_THREADS", "7", 1);
	ok(wsync_threads() == 7, "WSYNC_THREADS=7: 7 threads");
	setenv("WSYNC_THREADS", "1", 1);
	ok(wsync_threads() == 1, "WSYNC_THREADS=1: 1 thread");
	unsetenv("WSYNC_THREADS");
	n = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? (unsigned)CPU_COUNT(&cpus) : 1;
	ok(wsync_threads() == n, "unset: the %u CPUs the process may use", n);
	setenv("WSYNC_THREADS", "0", 1);
	ok(wsync_threads() == n, "WSYNC_THREADS=0: the CPUs, as unset");
	setenv("WSYNC_THREADS", "2x", 1);
	ok(wsync_threads() == n, "WSYNC_THREADS=2x: the CPUs, as unset");
	setenv("WSYNC_THREADS", "-2", 1);
	ok(wsync_threads() == n, "WSYNC_THREADS=-2: the CPUs, as unset");
	setenv("WSYNC_THREADS", "7", 1);
	ok(wsync_threads_for(0) == 1 && wsync_threads_for(WSYNC_THREAD_BYTES - 1) == 1,
	    "WSYNC_THREADS=7: a pass over less than WSYNC_THREAD_BYTES runs on 1 thread");
	ok(wsync_threads_for(3 * (uint64_t)WSYNC_THREAD_BYTES) == 3,
	    "WSYNC_THREADS=7: a pass over 3 times WSYNC_THREAD_BYTES on 3");
	ok(wsync_threads_for(UINT64_C(1) << 30) == 7, "WSYNC_THREADS=7: a pass over 1 GiB on 7");
	ok(wsync_threads_parts(UINT64_C(1) << 30, 2) == 7,
	    "WSYNC_THREADS=7: a union of 2 parts on 7, as any pass");
	setenv("WSYNC_THREADS", "1", 1);
	ok(wsync_threads_parts(UINT64_C(1) << 30, 2) == (n < 2 ? n : 2),
	    "WSYNC_THREADS=1: a union of 2 parts on a thread a part, up to the %u CPUs", n);
	ok(wsync_threads_parts(UINT64_C(1) << 30, 1000) == n,
	    "WSYNC_THREADS=1: a union of 1000 parts on the %u CPUs", n);
	ok(wsync_threads_parts(WSYNC_THREAD_BYTES, 2) == 1,
	    "WSYNC_THREADS=1: a union of 2 parts over WSYNC_THREAD_BYTES on 1");
	/* Above the CPUs (256 only where there are more than 8) and below the parts. */
	setenv("WSYNC_THREADS", n < 9 ? "9" : "256", 1);
	ok(wsync_threads_parts(UINT64_C(1) << 30, 1000) == (n < 9 ? 9 : 256),
	    "WSYNC_THREADS=%u: a union of 1000 parts on as many, never fewer for %u CPUs",
	    n < 9 ? 9 : 256, n);
	unsetenv("WSYNC_THREADS");
}

static void
test_every_item_runs_once(void)
{
	static const unsigned threads[] = { 1, 2, 7, 64 };

	for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		s_count_t *c = calloc(1, sizeof(*c));
		int once = 1, rc;
		c->fail_from = ITEMS;
		c->threads = threads[k];
		rc = wsync_pool_run(ITEMS, threads[k], s_count_run, c, NULL);
		for (size_t i = 0; i < ITEMS; i++)
			once = once && atomic_load(&c->runs[i]) == 1;
		ok(rc == 0 && once && !atomic_load(&c->bad_worker), "%u threads: each of %d "
		    "items runs once, on workers numbered below %u", threads[k], ITEMS,
		    threads[k]);
		free(c);
	}
}

static void
test_the_lowest_failure_is_reported(void)
{
	static const unsigned threads[] = { 1, 2, 7 };

	for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		s_count_t *c = calloc(1, sizeof(*c));
		unsigned failed = 99;
		int below = 1, rc;
		c->fail_from = 500;
		c->threads = threads[k];
		rc = wsync_pool_run(ITEMS, threads[k], s_count_run, c, &failed);
		for (size_t i = 0; i < 501; i++)
			below = below && atomic_load(&c->runs[i]) == 1;
		ok(rc == 501 && failed < threads[k] && below, "%u threads: items 500 on fail "
		    "where divisible by 3; 501 is reported (%d), every item up to it ran",
		    threads[k], rc);
		free(c);
	}
	ok(wsync_pool_run(0, 4, s_count_run, NULL, NULL) == 0, "no items: nothing runs");
}

/* Item i's size: 0 to 9 over and over. */
static uint64_t
s_tenth(void *arg, size_t item)
{
	(void)arg;
	return item % 10;
}

/* Runs item after item on one thread, noting the order they came in. */
typedef struct s_order {
	size_t seen[ITEMS];
	size_t n;
} s_order_t;

static int
s_order_run(void *arg, size_t item, unsigned worker)
{
	s_order_t *o = arg;

	(void)worker;
	o->seen[o->n++] = item;
	return 0;
}

static void
test_sized_items_go_out_largest_first(void)
{
	static const unsigned threads[] = { 1, 2, 7 };
	s_order_t *o = calloc(1, sizeof(*o));
	int sorted = 1;

	wsync_pool_run_sized(ITEMS, 1, s_order_run, s_tenth, o, NULL);
	for (size_t k = 1; k < o->n; k++)
		sorted = sorted && (o->seen[k - 1] % 10 > o->seen[k] % 10 ||
		    (o->seen[k - 1] % 10 == o->seen[k] % 10 && o->seen[k - 1] < o->seen[k]));
	ok(o->n == ITEMS && sorted, "sized: %zu items go out largest first, equal sizes in "
	    "increasing order", o->n);
	free(o);
	for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		s_count_t *c = calloc(1, sizeof(*c));
		unsigned failed = 99;
		int rc;
		c->fail_from = 500;
		c->threads = threads[k];
		rc = wsync_pool_run_sized(ITEMS, threads[k], s_count_run, s_tenth, c, &failed);
		ok(rc == 519 && failed < threads[k], "sized, %u threads: items 500 on fail where "
		    "divisible by 3; 519, the first of them handed out (size 9), is reported (%d)",
		    threads[k], rc);
		free(c);
	}
}

int
main(void)
{
	test_threads_come_from_the_environment();
	test_every_item_runs_once();
	test_the_lowest_failure_is_reported();
	test_sized_items_go_out_largest_first();
	return tap_done();
}
