/*
 * pool_int.h - a pass's work split over threads: items handed out in order to
 * whichever thread is free, each thread with buffers of its own.
 */
#ifndef WSYNC_POOL_INT_H
#define WSYNC_POOL_INT_H

#include <stddef.h>
#include <stdint.h>

#define WSYNC_THREADS_MAX 256

/*
 * The threads a pass may use: WSYNC_THREADS when it is a number from 1 to
 * WSYNC_THREADS_MAX, else the CPUs this process may run on.
 */
unsigned wsync_threads(void);

/*
 * The bytes a pass gives each of its threads at least: below, a thread costs
 * more to start than it saves (a 256 KiB version verified on 2 threads took
 * longer than on 1).
 */
#define WSYNC_THREAD_BYTES (1u << 20)

/* wsync_threads(), but no more than one per WSYNC_THREAD_BYTES of a pass over bytes. */
unsigned wsync_threads_for(uint64_t bytes);

/*
 * The threads of a pass over bytes of a version that came in parts, pushed
 * by as many processes at once: wsync_threads(), raised to one per part where
 * it is less (up to the CPUs this process may run on), no more than one per
 * WSYNC_THREAD_BYTES: the ranks' parallelism is not lost at the hub, which
 * rebuilds their union in one pass.
 */
unsigned wsync_threads_parts(uint64_t bytes, unsigned parts);

/* One item of a pass, run by the thread numbered worker (0 .. threads - 1): 0, or nonzero to stop. */
typedef int (*wsync_pool_fn)(void *arg, size_t item, unsigned worker);

/*
 * Runs fn(arg, item, worker) for every item in [0, n), on this thread (worker
 * 0) and up to threads - 1 others, which it ends before returning. Items are
 * handed out in increasing order; a worker whose item returns nonzero takes
 * no more, and none is handed out after it. Returns 0, or the nonzero value
 * of the lowest item that failed, with *failed (may be NULL) the worker that
 * ran it: every item below it ran, so which one that is does not depend on
 * the threads' timing.
 */
int wsync_pool_run(size_t n, unsigned threads, wsync_pool_fn fn, void *arg, unsigned *failed);

/* The size of an item of a pass: its bytes. */
typedef uint64_t (*wsync_pool_size_fn)(void *arg, size_t item);

/*
 * As wsync_pool_run, the items handed out largest first by size(arg, item)
 * (ties in increasing order), so that a large tensor is not the last to
 * start while the other threads wait for it: 16 tensors on 7 threads, or one
 * large one among small ones, end sooner. "Below" in wsync_pool_run reads
 * "handed out before": the failure reported is the first one in that order.
 */
int wsync_pool_run_sized(size_t n, unsigned threads, wsync_pool_fn fn, wsync_pool_size_fn size,
    void *arg, unsigned *failed);

/*
 * Runs fn(arg) in a detached thread of its own, for work the caller does not
 * wait for (freeing a large file's pages); 0 once it started, -1 when it
 * could not (then fn was not called: the caller does the work itself).
 */
int wsync_detach(void *(*fn)(void *), void *arg);

#endif
