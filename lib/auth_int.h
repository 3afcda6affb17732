/* auth_int.h - the hub's side of CURVE: its keys, the ZAP handler, allow lists and roles. */
#ifndef WSYNC_AUTH_INT_H
#define WSYNC_AUTH_INT_H

#include <zmq.h>

#include "log_int.h"
#include "wsync.h"

#define WSYNC_AUTH_ITEMS 3              /* poll items an authenticator adds */

typedef struct wsync_auth wsync_auth_t;

/*
 * Checks the hub's endpoints against its keys: without a secret key, a tcp
 * endpoint other hosts can reach is refused (64) unless o->insecure, which
 * logs a warning. With one, reads the hub's secret certificate and the allow
 * lists, and binds the ZAP handler. *out is NULL when the hub runs without
 * keys. Caller destroys with wsync_auth_destroy.
 */
int wsync_auth_new(const wsync_hub_opts_t *o, wsync_auth_t **out, wsync_err_t *err);
/* Unbinds the ZAP handler, frees the lists, sets *a to NULL. */
void wsync_auth_destroy(wsync_auth_t **a);
/* Makes sock a CURVE server and logs its failed handshakes (before it binds). */
int wsync_auth_server(wsync_auth_t *a, void *sock, wsync_err_t *err);
/* Fills items (WSYNC_AUTH_ITEMS at most) with what the hub's loop polls for a; their count. */
int wsync_auth_items(wsync_auth_t *a, zmq_pollitem_t *items);
/* Answers the ZAP requests and logs the handshake failures items show ready. */
void wsync_auth_serve(wsync_auth_t *a, const zmq_pollitem_t *items);
/* Rereads the allow lists; on failure the old ones stay and the error is logged. */
void wsync_auth_reload(wsync_auth_t *a);
/*
 * 0 when the client that sent msg (a frame of its request) may run op; -1
 * with err (77) when its key is only allowed to pull, or no longer allowed.
 */
int wsync_auth_permits(const wsync_auth_t *a, zmq_msg_t *msg, const char *op,
    wsync_err_t *err);
/* The hub's own public key (Z85); "" without keys (a NULL). Borrowed from a. */
const char *wsync_auth_public(const wsync_auth_t *a);
/*
 * Lets in, to pull, the n public keys (Z85) of the relays a root placed
 * under this relay, in place of those it let in before; a key that does not
 * decode is left out. Nothing without keys (a NULL); -1 when out of memory.
 */
int wsync_auth_admit(wsync_auth_t *a, char *const *keys, size_t n);
/* The public key (z85) of the client that sent msg, into buf; "" without keys. */
void wsync_auth_key_of(const wsync_auth_t *a, zmq_msg_t *msg, char *buf, size_t size);

#endif
