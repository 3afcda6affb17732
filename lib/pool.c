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

unsigned
wsync_threads(void)
{
	const char *s = getenv("WSYNC_THREADS");
	cpu_set_t cpus;
	char *end;

	if (s != NULL && *s != '\0') {
		unsigned long v = strtoul(s, &end, 10);
		if (*end == '\0' && v >= 1 && v <= WSYNC_THREADS_MAX && s[0] != '-')
			return (unsigned)v;
	}
	if (sched_getaffinity(0, sizeof(cpus), &cpus) < 0 || CPU_COUNT(&cpus) < 1)
		return 1;
	return CPU_COUNT(&cpus) > WSYNC_THREADS_MAX ? WSYNC_THREADS_MAX :
	    (unsigned)CPU_COUNT(&cpus);
}

typedef struct s_pool {
	wsync_pool_fn fn;
	void *arg;
	size_t n;
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
		if ((rc = p->fn(p->arg, i, w->id)) == 0)
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

int
wsync_pool_run(size_t n, unsigned threads, wsync_pool_fn fn, void *arg, unsigned *failed)
{
	s_pool_t p = { .fn = fn, .arg = arg, .n = n, .failed_item = n };
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
