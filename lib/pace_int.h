/*
 * pace_int.h - how much a fetch asks for at a time. ZeroMQ hands a reply over
 * only whole, so a fetch that takes a reply's arrival as its sign of progress
 * must ask for replies that arrive well within its bound on silence, at the
 * rate they arrive: the pace measures that rate and sizes each get to what
 * arrives in a thirty-second of the bound, from a small first one up to the
 * hub's chunk. A slow link then slows a transfer down and never looks dead,
 * and a reply on its way still arrives in time when the link's share falls
 * 16-fold (15 more watchers starting to fetch from the same hub); a fast link
 * gets the hub's chunk after a few replies.
 */
#ifndef WSYNC_PACE_INT_H
#define WSYNC_PACE_INT_H

#include <stdint.h>

#define WSYNC_PACE_MIN (64u << 10)      /* the smallest get, and the first ones */

/* A fetch's pace: plain values, no resources. */
typedef struct {
	uint64_t chunk;         /* the length to ask for next */
	uint64_t max;           /* the hub's chunk: never more */
	int idle_ms;            /* the bound on silence; <= 0: none, every get is max */
	double rate;            /* bytes per ms measured so far; 0 before the first reply */
	int64_t last_ms;        /* when the last reply arrived (monotonic ms) */
} wsync_pace_t;

/* Starts a pace for a fetch whose gets may be up to max bytes. */
void wsync_pace_init(wsync_pace_t *p, uint64_t max, int idle_ms);
/*
 * Counts a reply of len bytes that arrived at now_ms, asked for at asked_ms:
 * updates the measured rate and the next get's length.
 */
void wsync_pace_arrived(wsync_pace_t *p, uint64_t len, int64_t asked_ms, int64_t now_ms);

#endif
