/* client_int.h - what the library's other files use of a client beyond the public API. */
#ifndef WSYNC_CLIENT_INT_H
#define WSYNC_CLIENT_INT_H

#include <stdint.h>

#include "keys_int.h"
#include "net_int.h"
#include "proto_int.h"
#include "watch_recycle_int.h"
#include "wsync.h"

/* ---- the connection (client.c) ---- */

/* Starts request op with nfields more fields in e (the caller frees it); returns its id. */
uint64_t wsync_client_request(wsync_client_t *c, wsync_enc_t *e, const char *op,
    size_t nfields);
/* Sends the request e, then data (may be NULL), without blocking; 69 when it cannot. */
int wsync_client_send(wsync_client_t *c, const wsync_enc_t *e, const void *data, size_t dlen,
    wsync_err_t *err);
/* Frees a reply received by wsync_client_recv, wsync_client_await or wsync_client_call. */
void wsync_client_release(wsync_msg_t *m, wsync_parts_t *p);
/*
 * Receives the next reply before deadline (monotonic ms). Returns 0 with the
 * reply in m and p (the caller frees both), 1 on timeout, or -1 with err set
 * and nothing to free: a malformed reply (*id 0) or a refusal (*id its id),
 * which keep_refusal leaves in m and p for the caller to read and free.
 */
int wsync_client_recv(wsync_client_t *c, int64_t deadline, uint64_t *id, wsync_msg_t *m,
    wsync_parts_t *p, int keep_refusal, wsync_err_t *err);
/*
 * Receives the reply to request id before deadline; replies to other requests
 * are dropped. 0 with it in m and p (the caller frees both), 1 on timeout, -1
 * with err; a refusal of id is 2 when keep_refusal, with err, and m and p.
 */
int wsync_client_await(wsync_client_t *c, uint64_t id, int64_t deadline, wsync_msg_t *m,
    wsync_parts_t *p, int keep_refusal, wsync_err_t *err);
/*
 * Sends request e (freed) with data and waits timeout_ms for its reply: 0 with
 * it in m and p (the caller frees both); -1 with err, 75 on timeout naming what.
 */
int wsync_client_call(wsync_client_t *c, wsync_enc_t *e, uint64_t id, const void *data,
    size_t dlen, int timeout_ms, const char *what, wsync_msg_t *m, wsync_parts_t *p,
    wsync_err_t *err);

/* Reads who answered a heads request from its reply m into from. */
void wsync_client_heads_from(const wsync_msg_t *m, wsync_heads_from_t *from);

/* The hub's identity, from hello; borrowed until the client is destroyed or reconnects. */
const char *wsync_client_hub(const wsync_client_t *c);
/* The hub's PUB endpoint as this client reaches it; borrowed as wsync_client_hub. */
const char *wsync_client_pub(const wsync_client_t *c);
/* The client's CURVE keys, for another socket to the same hub; borrowed until destroy. */
const wsync_curve_t *wsync_client_curve(const wsync_client_t *c);
/* How often the hub wants to hear from a worker (from hello), in ms. */
uint32_t wsync_client_heartbeat_ms(const wsync_client_t *c);
/*
 * From hello: "host H pid P" of another live process with this client's worker
 * id, or "" (none); borrowed as wsync_client_hub.
 */
const char *wsync_client_twin(const wsync_client_t *c);
/*
 * From hello: the models named that the hub has no version of but has ids
 * close to, "polcy (the hub has policy); ...", or ""; borrowed as above.
 */
const char *wsync_client_typos(const wsync_client_t *c);

/*
 * A fetch into a new temporary file beside a path: what to fetch, and known
 * (may be NULL), the version as a heads reply described it, which spares the
 * stat round trip. Every pointer is borrowed for the call.
 */
typedef struct wsync_fetch_temp {
	wsync_fetch_t what;
	const wsync_head_t *known;
	const char *beside;
	/* NULL, or spares a version sent over the socket is written into when one is free. */
	wsync_recycle_t *recycle;
	/*
	 * With patterns: over the socket, only the headers and the selected
	 * tensors (and the small files of a checkpoint directory) are fetched;
	 * the rest of the temporary file stays zeros (wsync-watch --select).
	 */
	const wsync_ckpt_out_t *select;
	/* > 0: at most this many gets in flight, when fewer than the hub's window. */
	unsigned window;
	/* Gets may read a version still arriving at the hub (a relay's; wsync(7), get). */
	int arriving;
	/* > 0: no get asks for more than this many bytes (a relay's piece, wsync(7) RELAYS). */
	uint64_t piece;
	/*
	 * NULL, or a temporary file beside f->beside holding the first
	 * resume_upto bytes of this same version, from a fetch that was cut off:
	 * only the rest is fetched, into it, and the whole is verified.
	 */
	const char *resume;
	uint64_t resume_upto;
	/*
	 * Set: a fetch over the socket that is cut off (not one whose bytes do
	 * not verify) keeps its temporary file, for a later fetch to resume; its
	 * name and how much is in were told to written.
	 */
	int keep_cut;
	/*
	 * NULL, or told, as a fetch over the socket writes the whole version into
	 * its temporary file tmp, how much of it is in from offset 0 without a
	 * gap: upto 0 once the file is made, then more as gets come back. A
	 * nonzero return stops the gets (65).
	 */
	int (*written)(void *arg, const char *tmp, uint64_t upto);
	void *written_arg;
	/*
	 * NULL, or a buffer of PATH_MAX: a version that came as a delta from
	 * what.base leaves the delta in a temporary file beside f->beside, named
	 * here, for the caller to keep or remove (a relay serves it on as it came:
	 * wsync(7) RELAYS); "" when the version came whole.
	 */
	char *keep_delta;
	/*
	 * NULL, or another hub to ask first where the version's tensors lie: a
	 * relay asks its root, which committed the version, where the parent it
	 * fetches from may have it only arriving (no layout yet); the chunks
	 * are then hashed as they arrive and verifying reads none of them again.
	 * A layout that is not the version's costs only that read (a hash found
	 * counts only where the file says a tensor lies). Used after written's
	 * first call (upto 0), which must leave that client as it is.
	 */
	struct wsync_client *layout_from;
} wsync_fetch_temp_t;

/*
 * Fetches f->what into a new temporary file beside f->beside, verified; *tmp
 * (caller frees) names it, *got says what came and how. The caller renames
 * or unlinks it.
 */
int wsync_client_fetch_temp(wsync_client_t *c, const wsync_fetch_temp_t *f, char **tmp,
    wsync_fetched_t *got, int timeout_ms, wsync_err_t *err);

#endif
