/* client_int.h - what the watcher uses of a client beyond the public API. */
#ifndef WSYNC_CLIENT_INT_H
#define WSYNC_CLIENT_INT_H

#include <stdint.h>

#include "keys_int.h"
#include "watch_recycle_int.h"
#include "wsync.h"

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
} wsync_fetch_temp_t;

/*
 * Fetches f->what into a new temporary file beside f->beside, verified; *tmp
 * (caller frees) names it, *got describes it. The caller renames or unlinks it.
 */
int wsync_client_fetch_temp(wsync_client_t *c, const wsync_fetch_temp_t *f, char **tmp,
    wsync_head_t *got, int timeout_ms, wsync_err_t *err);

#endif
