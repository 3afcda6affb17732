/* clock.h - the benches' clock: monotonic seconds, to the nanosecond. */
#ifndef WSYNC_BENCH_CLOCK_H
#define WSYNC_BENCH_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock, for timing a run; only differences mean anything. */
static inline double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
