/* watch_sign_int.h - a verifying watcher's round (see watch_sign.c). */
#ifndef WSYNC_WATCH_SIGN_INT_H
#define WSYNC_WATCH_SIGN_INT_H

#include "wsync.h"

/*
 * Checks the versions one round of the watcher o fetched (model i's in
 * tmp[i], NULL when it did not move, described by heads[i]) before any is
 * put in place, where in_place[i] is: each signed by one of o's keys, its
 * bytes the signed ones, its seq above the one in place, and every other
 * watched model its manifest lists at the signed content once the round is
 * done (the models of one push together or not at all). A refused model
 * gets why[i] ("refused (REASON): ..."), the others an empty why[i] and
 * next[i], what they put in place. -1 only when out of memory.
 */
int wsync_watch_check_round(const wsync_watch_opts_t *o, const wsync_applied_t *in_place,
    char *const *tmp, const wsync_head_t *heads, char (*why)[WSYNC_MAX_REASON],
    wsync_applied_t *next);

#endif
