/* keys_int.h - CURVE key files (ZeroMQ certificates) and a client's view of its handshakes. */
#ifndef WSYNC_KEYS_INT_H
#define WSYNC_KEYS_INT_H

#include <stddef.h>

#include "wsync.h"

#define WSYNC_Z85_KEY 40                /* characters of a Z85-encoded 32-byte key */

/* A client's CURVE identity: all three keys set, or on == 0 (no encryption). */
typedef struct wsync_curve {
	int on;
	char public[WSYNC_Z85_KEY + 1];
	char secret[WSYNC_Z85_KEY + 1];
	char server[WSYNC_Z85_KEY + 1];  /* the hub's public key */
} wsync_curve_t;

/*
 * Reads a small key file into text (size bytes, NUL-terminated): 66 when it
 * is missing, 65 when it is not a regular file or does not fit, and when
 * secret, 77 when others may read it.
 */
int wsync_key_file_read(const char *path, int secret, char *text, size_t size,
    wsync_err_t *err);

/*
 * Reads a certificate (czmq's ZPL text): public into public (41 bytes), and
 * when secret is not NULL the secret key too, which must then be in the file
 * and the file private to its owner (77 otherwise). A missing file is 66, a
 * file without the key 65.
 */
int wsync_key_read(const char *path, char *public, char *secret, wsync_err_t *err);

/*
 * The client's keys from key and hub_key (NULL: $WSYNC_KEY, $WSYNC_HUB_KEY):
 * both or neither (64). c->on is 0 when neither is given.
 */
int wsync_curve_load(wsync_curve_t *c, const char *key, const char *hub_key, wsync_err_t *err);

/* Makes sock a CURVE client with c's keys (nothing when c->on is 0); before connecting. */
int wsync_curve_client(void *sock, const wsync_curve_t *c, wsync_err_t *err);

/*
 * Watches sock's handshakes: a PAIR socket that receives its failures, and
 * its connections closed by the peer (caller closes with wsync_curve_unwatch
 * before closing sock). NULL with err on failure.
 */
void *wsync_curve_watch(void *sock, wsync_err_t *err);
/* Stops watching sock and closes *mon, setting it to NULL. */
void wsync_curve_unwatch(void *sock, void **mon);
/*
 * Reads the handshake events waiting on mon: -1 with err (77, saying why in
 * words a person can act on) when a handshake with endpoint failed, else 0;
 * *closed set to 1 when the peer closed a connection that was up.
 */
int wsync_curve_failed(void *mon, const char *endpoint, const wsync_curve_t *c, int *closed,
    wsync_err_t *err);

#endif
