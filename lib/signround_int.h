/* signround_int.h - a verifying worker's round of several models (see signround.c). */
#ifndef WSYNC_SIGNROUND_INT_H
#define WSYNC_SIGNROUND_INT_H

#include "watch_recycle_int.h"
#include "wsync.h"

/*
 * One model of a worker's round: what the hub says of it, what was fetched
 * and what is in place. A watcher keeps one for each model it follows, from
 * round to round (a heads round fills head, follow.c); a pull of several
 * models, one for its single round.
 */
typedef struct wsync_round_model {
	uint64_t applied;               /* the version last put in place (0: none) */
	uint64_t failed;                /* the last version that could not be: not fetched again */
	wsync_head_t head;              /* the hub's head; once fetched, the version fetched */
	char *tmp;                      /* fetched, not yet in place; NULL: nothing this round */
	int transfer;                   /* how tmp came (WSYNC_TRANSFER_*) */
	uint64_t wire;                  /* its bytes on the wire */
	wsync_applied_t in_place;       /* verifying: what the output holds */
	wsync_applied_t next;           /* verifying: what tmp puts in place */
	char why[WSYNC_MAX_REASON];     /* verifying: why tmp is refused; "" when it is not */
	uint64_t aged;                  /* a watcher's: the seq last said to be too old */
	int own;                        /* a watcher's: the output is a file it wrote */
	wsync_recycle_t spare;          /* a watcher's: replaced outputs, with --recycle */
	int *leases;                    /* a watcher's, with keep: leased outputs, newest last */
} wsync_round_model_t;

/* The models a worker fetches in one round, and the keys it takes. */
typedef struct wsync_round {
	const char *const *models;
	int n;
	const wsync_verifykey_t *keys;
	int nkeys;
} wsync_round_t;

/*
 * Checks the versions one round fetched (model i's m[i]: tmp, NULL when it
 * did not move, described by head) before any is put in place, where
 * in_place is: each signed by one of o's keys, its bytes the signed ones,
 * its seq above the one in place, and every other model of the round its
 * manifest lists at the signed content once the round is done (the models of
 * one push together or not at all). A refused model gets why ("refused
 * (REASON): ..."), the others an empty why and next, what they put in place.
 * -1 only when out of memory. A watcher's round and a pull of several models
 * both check here.
 */
int wsync_check_round(const wsync_round_t *o, wsync_round_model_t *m);

#endif
