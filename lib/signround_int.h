/* signround_int.h - a verifying worker's round of several models (see signround.c). */
#ifndef WSYNC_SIGNROUND_INT_H
#define WSYNC_SIGNROUND_INT_H

#include "wsync.h"

/* The models a worker fetches in one round, and the keys it takes. */
typedef struct wsync_round {
	const char *const *models;
	int n;
	const wsync_verifykey_t *keys;
	int nkeys;
} wsync_round_t;

/*
 * Checks the versions one round fetched (model i's in tmp[i], NULL when it
 * did not move, described by heads[i]) before any is put in place, where
 * in_place[i] is: each signed by one of o's keys, its bytes the signed ones,
 * its seq above the one in place, and every other model of the round its
 * manifest lists at the signed content once the round is done (the models of
 * one push together or not at all). A refused model gets why[i] ("refused
 * (REASON): ..."), the others an empty why[i] and next[i], what they put in
 * place. -1 only when out of memory. A watcher's round and a pull of several
 * models both check here.
 */
int wsync_check_round(const wsync_round_t *o, const wsync_applied_t *in_place,
    char *const *tmp, const wsync_head_t *heads, char (*why)[WSYNC_MAX_REASON],
    wsync_applied_t *next);

#endif
