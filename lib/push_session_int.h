/*
 * push_session_int.h - a push session: what a client's pushes remember
 * between pushes (the versions kept as bases, the next slot, the signer),
 * beside the connection and hooked to it (struct wsync_conn_hooks); a
 * client that never pushes has none. push_session.c makes and ends it; the
 * push files (client_upload.c, client_slot.c, client_sign.c,
 * client_pushdelta.c, client_commit.c) use it.
 */
#ifndef WSYNC_PUSH_SESSION_INT_H
#define WSYNC_PUSH_SESSION_INT_H

#include <limits.h>
#include <stdint.h>

#include "client_conn_int.h"
#include "kept_int.h"

/*
 * The next slot: one asked for ahead of need, with a commit (client_slot.c).
 * Its begin's request id, what it was asked for, and its reply's bytes once
 * they came.
 */
struct wsync_next_slot {
	uint64_t id;                    /* 0: none */
	char key[1024];                 /* its models, sizes and workers */
	int64_t at;                     /* when it was asked for (monotonic ms) */
	char *reply;                    /* NULL until its reply came */
	size_t len;
};

/* The most models whose last pushed version a client keeps (wsync_client_keep_pushed). */
#define WSYNC_KEPT_MAX 16

/* A version this client pushed, kept as the base of the next push of its model. */
struct wsync_kept {
	char model[WSYNC_MAX_MODEL + 1];
	int fd;                         /* a scratch file: the version as sent */
	/* The scratch file of the version before it, whose pages the next is written over; -1: none. */
	int spare;
	/* fd's file, made into each next version, kept mapped (on tmpfs), or none. */
	wsync_kept_one_t map;
	uint64_t version, content;
};

/* What a client's pushes remember. */
struct wsync_push_session {
	int keep_pushed;                /* keeps the last version pushed of each model */
	struct wsync_kept kept[WSYNC_KEPT_MAX];
	int nkept;
	struct wsync_next_slot next_slot;
	wsync_signkey_t *sign;          /* NULL: pushes are not signed */
	char sign_path[PATH_MAX];       /* the key's file; its counter is beside it */
	uint64_t sign_seq;              /* the next push's sequence number; 0: the counter's */
	char delta_note[WSYNC_MAX_REASON]; /* why the last push with a base went whole */
	/* A push is part part of parts (0: a whole version) of the version named group. */
	uint32_t part, parts;
	uint64_t group;
};

/* c's push session, made and hooked to the connection on first use; NULL with err (70). */
struct wsync_push_session *wsync_push_session(wsync_client_t *c, wsync_err_t *err);
/* c's push session; NULL when c has pushed nothing and set nothing for pushes. */
struct wsync_push_session *wsync_push_find(const wsync_client_t *c);
/* Forgets the next slot (its reply, if kept); the hub drops it with the connection. */
void wsync_push_next_forget(struct wsync_push_session *ps);
/* Aborts the next slot once its reply came (within timeout_ms), and forgets it (client_slot.c). */
void wsync_client_next_drop(wsync_client_t *c, int timeout_ms);

#endif
