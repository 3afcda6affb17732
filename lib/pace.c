/* pace.c - the length of a fetch's next get, from the rate its replies arrive at. */
#include "pace_int.h"

void
wsync_pace_init(wsync_pace_t *p, uint64_t max, int idle_ms)
{
	p->max = max;
	p->idle_ms = idle_ms;
	p->chunk = idle_ms > 0 && max > WSYNC_PACE_MIN ? WSYNC_PACE_MIN : max;
	p->rate = 0;
	p->last_ms = 0;
}

void
wsync_pace_arrived(wsync_pace_t *p, uint64_t len, int64_t asked_ms, int64_t now_ms)
{
	/*
	 * Replies come in the order they were asked: the bytes of this one
	 * arrived after the last one did, or after it was asked if the link
	 * was idle in between (that wait counts against the rate: a cautious
	 * estimate).
	 */
	int64_t since = p->last_ms > asked_ms ? p->last_ms : asked_ms;
	double ms = now_ms - since > 1 ? (double)(now_ms - since) : 1.0;
	double sample = (double)len / ms;
	double want;

	p->last_ms = now_ms;
	if (p->idle_ms <= 0)
		return;
	/* A slower link counts at once; a faster one is believed a step at a time. */
	p->rate = p->rate == 0 || sample < p->rate ? sample : (3 * p->rate + sample) / 4;
	want = p->rate * p->idle_ms / 32;
	if (want > 2.0 * (double)p->chunk)
		want = 2.0 * (double)p->chunk;
	if (want > (double)p->max)
		want = (double)p->max;
	p->chunk = (uint64_t)want / WSYNC_PACE_MIN * WSYNC_PACE_MIN;
	if (p->chunk < WSYNC_PACE_MIN)
		p->chunk = p->max < WSYNC_PACE_MIN ? p->max : WSYNC_PACE_MIN;
}
