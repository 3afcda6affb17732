/* net_int.h - ZeroMQ plumbing shared by the hub and the clients. */
#ifndef WSYNC_NET_INT_H
#define WSYNC_NET_INT_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "proto_int.h"

#define WSYNC_MAX_PARTS 4       /* identity, delimiter, message, data */

/* The process's ZeroMQ context, made on first use and kept for the process's life. */
void *wsync_zmq_context(void);

/*
 * Sends one multipart message: [id] (when idlen > 0), an empty delimiter, the
 * encoded message, then data (when data != NULL; dlen may be 0). flags are
 * ZeroMQ send flags (ZMQ_DONTWAIT). -1 with errno on failure.
 */
int wsync_send(void *sock, const void *id, size_t idlen, const wsync_enc_t *msg,
    const void *data, size_t dlen, int flags);

/* The frames of one received message. */
typedef struct wsync_parts {
	zmq_msg_t part[WSYNC_MAX_PARTS];
	int n;                  /* frames kept */
	int extra;              /* frames beyond WSYNC_MAX_PARTS, dropped */
} wsync_parts_t;

/* Receives every frame of one message (blocking unless flags say otherwise); -1 with errno. */
int wsync_recv(void *sock, wsync_parts_t *p, int flags);
/* Closes the frames of p. */
void wsync_parts_close(wsync_parts_t *p);
/* Frame i's bytes and size. */
const void *wsync_part_data(wsync_parts_t *p, int i);
size_t wsync_part_size(wsync_parts_t *p, int i);

/* Wall-clock seconds since the epoch, for version and worker times. */
double wsync_wall_time(void);

#endif
