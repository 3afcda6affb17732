/* test_pace.c - a fetch's gets sized to arrive well within its bound on silence. */
#include <stdint.h>

#include "pace_int.h"
#include "tap.h"

#define MIB (1u << 20)

/*
 * Feeds p replies over a link of rate bytes per ms, each asked for long
 * before (the window keeps the link busy), n times; the time now in *t.
 */
static void
s_link(wsync_pace_t *p, double rate, int n, int64_t *t)
{
	for (int i = 0; i < n; i++) {
		uint64_t len = p->chunk;
		*t += (int64_t)((double)len / rate) + 1;
		wsync_pace_arrived(p, len, 0, *t);
	}
}

int
main(void)
{
	wsync_pace_t p;
	int64_t t = 1000;
	int replies = 0;

	wsync_pace_init(&p, 4 * MIB, 0);
	ok(p.chunk == 4 * MIB, "without a bound on silence every get is the hub's chunk");
	s_link(&p, 1.0, 3, &t);
	ok(p.chunk == 4 * MIB, "and stays so on a slow link (a pull bounds the whole fetch)");

	wsync_pace_init(&p, 4 * MIB, 3000);
	ok(p.chunk == WSYNC_PACE_MIN, "with a bound the first gets are small: %llu",
	    (unsigned long long)p.chunk);
	while (p.chunk < 4 * MIB && replies < 20) {
		s_link(&p, 1e6, 1, &t);
		replies++;
	}
	ok(p.chunk == 4 * MIB && replies <= 7, "a 1 GB/s link gets the hub's chunk after %d "
	    "replies", replies);

	/* 5 Mbit/s: 625 bytes per ms. */
	s_link(&p, 625, 10, &t);
	ok(p.chunk == WSYNC_PACE_MIN, "at 5 Mbit/s gets are the smallest, %llu bytes in %llu ms",
	    (unsigned long long)p.chunk, (unsigned long long)(p.chunk / 625));

	/* 100 Mbit/s: 12500 bytes per ms, alone, then shared by 16. */
	wsync_pace_init(&p, 4 * MIB, 3000);
	s_link(&p, 12500, 20, &t);
	ok(p.chunk > 512 << 10 && p.chunk * 16 / 12500 <= 3000 / 2, "100 Mbit/s alone: %llu "
	    "bytes, which would take %llu ms with 16 sharing the link, within half the bound",
	    (unsigned long long)p.chunk, (unsigned long long)(p.chunk * 16 / 12500));
	s_link(&p, 12500.0 / 16, 1, &t);
	ok(p.chunk / (12500 / 16) <= 3000 / 16, "shared by 16, the next get shrinks at once: "
	    "%llu bytes, %llu ms", (unsigned long long)p.chunk,
	    (unsigned long long)(p.chunk / (12500 / 16)));

	/* A reply asked for after the last one arrived: the idle time in between counts. */
	wsync_pace_init(&p, 4 * MIB, 3000);
	wsync_pace_arrived(&p, 64000, 1000, 1064);
	ok(p.rate > 999 && p.rate < 1001, "the rate of the first reply counts from its asking: %.0f",
	    p.rate);
	wsync_pace_arrived(&p, 64000, 2000, 2032);
	ok(p.rate > 1000 && p.rate < 2048, "a faster one is believed a step at a time: %.0f",
	    p.rate);
	ok(p.chunk % WSYNC_PACE_MIN == 0, "gets are whole multiples of %u bytes", WSYNC_PACE_MIN);

	wsync_pace_init(&p, 1000, 3000);
	s_link(&p, 0.01, 2, &t);
	ok(p.chunk == 1000, "a hub chunk smaller than the smallest get is used as it is");
	return tap_done();
}
