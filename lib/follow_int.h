/*
 * follow_int.h - a follower: a connection to a hub and its announcements,
 * what the watcher (watch.c) and a relay's thread (relay_follow.c) both use
 * to follow a hub. It fetches and pushes nothing itself.
 */
#ifndef WSYNC_FOLLOW_INT_H
#define WSYNC_FOLLOW_INT_H

#include "net_int.h"
#include "signround_int.h"
#include "wsync.h"

/* A hub followed: the connection (NULL: none) and its subscription to announcements. */
typedef struct wsync_follower {
	wsync_client_t *client;
	void *sub;
	char endpoint[512];             /* the hub in use (or tried next) */
	int next;                       /* the index of the endpoint after it, in a list */
} wsync_follower_t;

/*
 * Connects to co->endpoint and subscribes to the announcements of the n
 * topics (a model's id, or a prefix; "" for every one). 0 when connected
 * and subscribed; 1 when connected but the subscription could not be made
 * (err says why: announcements only cut latency); -1 with err, nothing
 * connected.
 */
int wsync_follow_connect(wsync_follower_t *f, const wsync_client_opts_t *co,
    const char *const *topics, int n, wsync_err_t *err);
/* Closes the connection and the subscription; nothing when there is none. */
void wsync_follow_disconnect(wsync_follower_t *f);
/*
 * Makes the next of the n endpoints the one in use (f->endpoint), resolved
 * when resolve is set; the list starts over after its last. -1 with err.
 */
int wsync_follow_next(wsync_follower_t *f, const char *const *endpoints, int n,
    int resolve, wsync_err_t *err);
/* Fills item to poll for announcements (none without a subscription: sock NULL). */
void wsync_follow_item(const wsync_follower_t *f, zmq_pollitem_t *item);
/* Takes the next announcement without waiting, into p (the caller closes it); -1: none. */
int wsync_follow_news(wsync_follower_t *f, wsync_parts_t *p);

/* A model's version in a heads reply. */
typedef struct wsync_follow_head {
	char model[WSYNC_MAX_MODEL + 1];
	wsync_head_t head;
} wsync_follow_head_t;

/* What a heads round asks; every pointer borrowed for the call. */
typedef struct wsync_follow_ask {
	const char *const *models;      /* the n models asked; NULL: every model the hub has */
	int n;
	const char *worker;             /* NULL: as any client; else a heartbeat, saying: */
	const wsync_round_model_t *m;   /* the worker's n models, each one's applied */
	int arriving;                   /* the versions on their way to the hub too (a relay's) */
} wsync_follow_ask_t;

/* A heads reply; wsync_follow_heads_free frees its lists. */
typedef struct wsync_follow_heads {
	wsync_heads_from_t from;
	wsync_follow_head_t *heads;     /* every head the reply gives, in its order */
	size_t nheads;
	wsync_follow_head_t *arriving;  /* asked with arriving: the versions on their way */
	size_t narriving;
} wsync_follow_heads_t;

/*
 * A heads round with the hub followed (f->client), the request that both
 * the watcher and a relay's thread make: the reply in r (the caller frees it
 * with wsync_follow_heads_free, also after -1). -1 with err; 76 for a reply
 * whose heads do not decode.
 */
int wsync_follow_heads(wsync_follower_t *f, const wsync_follow_ask_t *a,
    wsync_follow_heads_t *r, int timeout_ms, wsync_err_t *err);
/* The head list (n of them, from a reply) gives model; version 0: none. */
wsync_head_t wsync_follow_head_of(const wsync_follow_head_t *list, size_t n, const char *model);
/* Frees r's lists. */
void wsync_follow_heads_free(wsync_follow_heads_t *r);

#endif
