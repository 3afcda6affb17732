/* client_int.h - the client's state and the fetch steps the watcher shares with pull. */
#ifndef WSYNC_CLIENT_INT_H
#define WSYNC_CLIENT_INT_H

#include <limits.h>

#include "keys_int.h"
#include "net_int.h"
#include "wsync.h"

/*
 * A slot asked for ahead of need (a commit's next): its begin's id, what it
 * was asked for, and its reply's bytes once they came.
 */
struct wsync_ahead {
	uint64_t id;                    /* 0: none */
	char key[1024];                 /* its models, sizes and workers */
	int64_t at;                     /* when it was asked for (monotonic ms) */
	char *reply;                    /* NULL until its reply came */
	size_t len;
};

struct wsync_client {
	void *sock;
	void *mon;                      /* the socket's handshake failures */
	wsync_curve_t curve;
	char endpoint[512];
	char pub[512];                  /* the hub's PUB endpoint, as this client reaches it */
	char hub[256];                  /* the hub's identity, from hello */
	char heads_hub[256];            /* the identity in the last heads reply */
	char heads_store[64];           /* the store id in the last heads reply */
	char role[16];
	char worker[WSYNC_MAX_ID + 1];
	char **models;
	int nmodels;
	uint64_t next_id;
	uint32_t chunk;
	uint32_t window;
	uint32_t heartbeat_ms;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	int transfer;                   /* WSYNC_TRANSFER_*, as asked */
	int local;                      /* the hub's store is visible here (same store id) */
	char store[PATH_MAX];           /* the hub's store directory, from hello */
	const char *used;               /* how the last fetch travelled */
	volatile sig_atomic_t *stop;    /* set non-zero: abandon a long transfer */
	int idle_ms;                    /* > 0: a fetch's bound is on silence, not on all of it */
	struct wsync_ahead ahead;
};

/*
 * Fetches version (0: head) of model into a new temporary file beside path,
 * verified; *tmp (caller frees) names it. The caller renames or unlinks it.
 * When known is not NULL it describes the version (from a heads reply) and
 * spares the stat round trip.
 */
int wsync_client_fetch_temp(wsync_client_t *c, const char *model, uint64_t version,
    const wsync_head_t *known, const char *worker, const char *path, char **tmp,
    wsync_head_t *got, int timeout_ms, wsync_err_t *err);

/* Reports an applied (reason NULL) or failed version, with how it travelled (may be NULL). */
int wsync_client_report_how(wsync_client_t *c, const char *worker, const char *model,
    uint64_t version, const char *reason, const char *transfer, int timeout_ms,
    wsync_err_t *err);

#endif
