/*
 * pool.c - a pass's work split over threads (pool_int.h).
 *
 * Threads are started for a pass and joined at its end: a pass over a model
 * takes milliseconds or more, a thread's start microseconds, and nothing is
 * left running between passes. Items go out in order from one counter; what
 * a pass writes is put together by item, never by the thread that made it,
 * so its output does not depend on how many threads there are or on which
 * finished first.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "pool_int.h"

/* The CPUs this process may run on, from 1 to WSYNC_THREADS_MAX. */
static unsigned
s_cpus(void)
{
	cpu_set_t cpus;

	if (sched_getaffinity(0, sizeof(cpus), &cpus) < 0 || CPU_COUNT(&cpus) < 1)
		return 1;
	return CPU_COUNT(&cpus) > WSYNC_THREADS_MAX ? WSYNC_THREADS_MAX :
	    (unsigned)CPU_COUNT(&cpus);
}

unsigned
wsync_threads(void)
{
	const char *s = getenv("WSYNC_THREADS");
	char *end;

	if (s != NULL && *s != '\0') {
		unsigned long v = strtoul(s, &end, 10);
		if (*end == '\0' && v >= 1 && v <= WSYNC_THREADS_MAX && s[0] != '-')
			return (unsigned)v;
	}
	return s_cpus();
}

/* n, but no more than one per WSYNC_THREAD_BYTES of bytes, and at least 1. */
static unsigned
s_for(unsigned n, uint64_t bytes)
{
	uint64_t most = bytes / WSYNC_THREAD_BYTES;

	return most < 1 ? 1 : most < n ? (unsigned)most : n;
}

unsigned
wsync_threads_for(uint64_t bytes)
{
	return s_for(wsync_threads(), bytes);
}

unsigned
wsync_threads_parts(uint64_t bytes, unsigned parts)
{
	unsigned n = wsync_threads(), cpus = s_cpus(), least = parts < cpus ? parts : cpus;

	return s_for(n > least ? n : least, bytes);
}

typedef struct s_pool {
	wsync_pool_fn fn;
	void *arg;
	size_t n;
	const size_t *order;            /* the k-th item handed out; NULL: k itself */
	atomic_size_t next;             /* the next item handed out */
	atomic_size_t stop;             /* items from here on are not handed out */
	pthread_mutex_t lock;           /* guards the failure below */
	size_t failed_item;             /* the lowest item that failed, n when none */
	int rc;
	unsigned failed_worker;
} s_pool_t;

typedef struct s_worker {
	s_pool_t *p;
	unsigned id;
	pthread_t thread;
} s_worker_t;

static void *
s_work(void *arg)
{
	s_worker_t *w = arg;
	s_pool_t *p = w->p;

	for (;;) {
		size_t i = atomic_fetch_add(&p->next, 1);
		int rc;
		if (i >= p->n || i >= atomic_load(&p->stop))
			break;
		if ((rc = p->fn(p->arg, p->order != NULL ? p->order[i] : i, w->id)) == 0)
			continue;
		pthread_mutex_lock(&p->lock);
		if (i < p->failed_item) {
			p->failed_item = i;
			p->rc = rc;
			p->failed_worker = w->id;
		}
		pthread_mutex_unlock(&p->lock);
		/* Items below i are out already; none above it need start. */
		for (size_t s = atomic_load(&p->stop); i < s &&
		    !atomic_compare_exchange_weak(&p->stop, &s, i);)
			;
		break;
	}
	return NULL;
}

/* Runs the pass, the k-th item handed out order[k] (order NULL: k). */
static int
s_run(size_t n, const size_t *order, unsigned threads, wsync_pool_fn fn, void *arg,
    unsigned *failed)
{
	s_pool_t p = { .fn = fn, .arg = arg, .n = n, .order = order, .failed_item = n };
	s_worker_t w[WSYNC_THREADS_MAX];
	unsigned started = 1;

	if (threads < 1)
		threads = 1;
	if (threads > WSYNC_THREADS_MAX)
		threads = WSYNC_THREADS_MAX;
	if (threads > n)
		threads = n > 0 ? (unsigned)n : 1;
	atomic_init(&p.next, 0);
	atomic_init(&p.stop, SIZE_MAX);
	pthread_mutex_init(&p.lock, NULL);
	for (unsigned k = 0; k < threads; k++)
		w[k] = (s_worker_t){ .p = &p, .id = k };
	/* A thread that cannot start leaves its items to the others. */
	while (started < threads && pthread_create(&w[started].thread, NULL, s_work,
	    &w[started]) == 0)
		started++;
	s_work(&w[0]);
	for (unsigned k = 1; k < started; k++)
		pthread_join(w[k].thread, NULL);
	pthread_mutex_destroy(&p.lock);
	if (p.rc != 0 && failed != NULL)
		*failed = p.failed_worker;
	return p.rc;
}

/* An item and its size, sorted largest first, ties by item. */
typedef struct s_sized {
	uint64_t size;
	size_t item;
} s_sized_t;

static int
s_larger_first(const void *a, const void *b)
{
	const s_sized_t *x = a, *y = b;

	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return x->item < y->item ? -1 : x->item > y->item;
}

int
wsync_pool_run_sized(size_t n, unsigned threads, wsync_pool_fn fn, wsync_pool_size_fn size,
    void *arg, unsigned *failed)
{
	s_sized_t *sized = n > 1 ? malloc(n * sizeof(*sized)) : NULL;
	size_t *order = sized != NULL ? malloc(n * sizeof(*order)) : NULL;
	int rc;

	/* Without the memory to sort, the items go out in their order. */
	if (order != NULL) {
		for (size_t i = 0; i < n; i++)
			sized[i] = (s_sized_t){ size(arg, i), i };
		qsort(sized, n, sizeof(*sized), s_larger_first);
		for (size_t k = 0; k < n; k++)
			order[k] = sized[k].item;
	}
	free(sized);
	rc = s_run(n, order, threads, fn, arg, failed);
	free(order);
	return rc;
}

int
wsync_pool_run(size_t n, unsigned threads, wsync_pool_fn fn, void *arg, unsigned *failed)
{
	return s_run(n, NULL, threads, fn, arg, failed);
}

int
wsync_detach(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int started = 0;

	if (pthread_attr_init(&attr) == 0) {
		started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
		    pthread_create(&t, &attr, fn, arg) == 0;
		pthread_attr_destroy(&attr);
	}
	return started ? 0 : -1;
}
