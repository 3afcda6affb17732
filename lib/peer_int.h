/* peer_int.h - what the hub bounds per peer: names for quotas, peers it stopped serving, space. */
#ifndef WSYNC_PEER_INT_H
#define WSYNC_PEER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "net_int.h"

#define WSYNC_PEER_NAME 72              /* bytes of a peer's name, NUL included */
#define WSYNC_BLOCKED 64                /* peers remembered as blocked */
#define WSYNC_BLOCK_MS 60000            /* how long a blocked peer stays ignored */

/*
 * The name quotas count a request's sender under: its CURVE key when it has
 * one (every connection with that key is one peer), else its connection
 * ("conn:" and the ROUTER identity in hex). p is [identity][empty][request]...
 */
void wsync_peer_name(wsync_parts_t *p, char *buf);
/* The name of the request's connection alone ("conn:" and the identity in hex). */
void wsync_conn_name(wsync_parts_t *p, char *buf);

/* Connections the hub ignores for a while: those that broke the protocol. */
typedef struct wsync_blocked {
	struct {
		unsigned char id[256];
		size_t len;
		int64_t until;          /* monotonic ms; 0: a free slot */
	} slot[WSYNC_BLOCKED];
} wsync_blocked_t;

/* 1 when the connection with ROUTER identity id is blocked at now. */
int wsync_blocked_has(const wsync_blocked_t *b, const void *id, size_t len, int64_t now);
/* Blocks the connection id until now + WSYNC_BLOCK_MS, forgetting the oldest block when full. */
void wsync_blocked_add(wsync_blocked_t *b, const void *id, size_t len, int64_t now);

/*
 * 0 when the file system of dir has room for need more bytes on top of
 * pending (promised to uploads in progress); else -1 with err (74).
 */
int wsync_space_check(const char *dir, uint64_t need, uint64_t pending, wsync_err_t *err);

#endif
