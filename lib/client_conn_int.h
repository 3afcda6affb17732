/* client_conn_int.h - the client's state and the helpers its files (client*.c) share. */
#ifndef WSYNC_CLIENT_CONN_INT_H
#define WSYNC_CLIENT_CONN_INT_H

#include <limits.h>
#include <string.h>

#include "client_int.h"
#include "kept_int.h"
#include "net_int.h"

/* Bytes a transfer handles at a time: pages allocated ahead, or copied or written at once. */
#define WSYNC_CLIENT_STRIDE (32u << 20)
/* What an upload's end that got no answer adds: it may have been committed all the same. */
#define WSYNC_MAYBE_COMMITTED "; the version may still have been committed (see " \
    "wsync-inspect --hub)"

/*
 * A role's hooks on a connection: the connection calls them and knows no role
 * (the push session, push_session.c, is the one there is). NULL: none.
 */
struct wsync_conn_hooks {
	/* Sees every reply with an id (its frames p) before the caller waiting for it. */
	void (*seen)(void *arg, uint64_t id, wsync_parts_t *p);
	/* The connection is made anew: what the hub held for the old one is gone. */
	void (*reset)(void *arg);
	/* The connection is about to close (it still sends and receives); frees arg. */
	void (*end)(void *arg, wsync_client_t *c);
};

struct wsync_client {
	void *sock;
	void *mon;                      /* the socket's handshake failures */
	wsync_curve_t curve;
	char endpoint[512];
	char pub[512];                  /* the hub's PUB endpoint, as this client reaches it */
	char hub[256];                  /* the hub's identity, from hello */
	char role[16];
	char worker[WSYNC_MAX_ID + 1];
	char **models;
	int nmodels;
	char **select;                  /* the selection told in hello; copies */
	int nselect;
	uint64_t next_id;
	uint32_t chunk;
	uint32_t window;
	uint32_t heartbeat_ms;
	char twin[WSYNC_MAX_ID + 32];   /* from hello: another process of this worker id, or "" */
	char typos[1024];               /* from hello: models the hub lacks, close ids it has */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	int transfer;                   /* WSYNC_TRANSFER_*, as asked */
	int store_here;                 /* the hub's store is visible here (same store id) */
	char store[PATH_MAX];           /* the hub's store directory, from hello */
	volatile sig_atomic_t *stop;    /* set non-zero: abandon a long transfer */
	int idle_ms;                    /* > 0: a fetch's bound is on silence, not on all of it */
	int close_lost;                 /* the hub closing the connection fails what waits on it */
	int closed;                     /* the hub closed the connection (its monitor said) */
	const struct wsync_conn_hooks *hooks;
	void *hooks_arg;
};

/* Milliseconds left until deadline (monotonic ms), never negative. */
static inline int
wsync_ms_left(int64_t deadline)
{
	int64_t left = deadline - wsync_now_ms();

	return left > 0 ? (int)left : 0;
}

/* ---- the connection (client.c) ---- */

/* The error (64) for a transfer mode asked for that needs the hub's store visible here. */
int wsync_client_not_visible(const wsync_client_t *c, wsync_err_t *err);

/* ---- a push sent as a delta (client_pushdelta.c) ---- */

struct wsync_source;

/* What one file of a push sends. */
struct wsync_push_send {
	int fd;                         /* the bytes are read from it; -1: from the source */
	uint64_t bytes;                 /* how many: the delta's, or the version's */
	int delta;                      /* 1: the bytes are a delta from a base; 0: whole */
	uint64_t base, base_content;    /* its base's version (0: the hub finds it by content) and content */
	int head_fd;                    /* with a base: the version, sent if the delta is not taken */
	wsync_kept_one_t head_map;      /* head_fd's file kept mapped (--batch's copy, on tmpfs), or none */
	int recalled;                   /* the base's hashes were remembered, not read (pushed_int.h) */
};
/*
 * For item, when its base names what was pushed before of its model (a
 * safetensors file, a checkpoint directory, a .wsync file: laid out as that
 * push did) or the client keeps the version of it pushed last: writes the
 * version src lays out (size bytes) to a scratch file (unless it is a .wsync
 * file sent as it is and not to be kept), makes the delta from that base to
 * it, and fills send with the delta when it is at most half of the version,
 * else with the version (and the reason in c->delta_note). Without either,
 * send stays the source's. -1 with err (66: no such base; 65: a bad one).
 * wsync_client_pushdelta_end frees what send holds.
 */
int wsync_client_pushdelta(wsync_client_t *c, const wsync_push_item_t *item,
    struct wsync_source *src, uint64_t size, struct wsync_push_send *send, wsync_err_t *err);
/* Makes send the version's size bytes instead of its delta (the hub did not take it). */
void wsync_client_pushdelta_whole(struct wsync_push_send *send, uint64_t size);
/* Once item is committed: keeps the version send wrote out, when the client keeps them. */
void wsync_client_pushdelta_keep(wsync_client_t *c, const wsync_push_item_t *item,
    struct wsync_push_send *send);
/* Closes what send holds. */
void wsync_client_pushdelta_end(struct wsync_push_send *send);

/* ---- fetching (client_fetch.c) ---- */

/*
 * Copies size bytes of in to out inside the kernel, a stride at a time, with
 * progress; stops at the stop flag or deadline (0: none).
 */
int wsync_client_copy_fd(const wsync_client_t *c, int in, int out, uint64_t size,
    int64_t deadline, wsync_err_t *err);
/*
 * Gets bytes [0, size) of version of model (with base non-zero: of the delta
 * from base to it) into fd, up to the window of gets in flight, each chunk
 * written at its offset as it comes, and counted in out. written (may be
 * NULL) is told, with written_arg, each time the bytes in without a gap reach
 * further (tmp NULL), as wsync_fetch_temp_t's is; a nonzero return stops the
 * gets (65).
 */
int wsync_client_get_all(wsync_client_t *c, const char *model, uint64_t version,
    uint64_t base, uint64_t size, const char *worker, int fd, wsync_fetched_t *out,
    int (*written)(void *arg, const char *tmp, uint64_t upto), void *written_arg,
    int64_t deadline, wsync_err_t *err);

/* ---- deltas (client_delta.c) ---- */

/*
 * Fetches version out->head of f->model as a delta from the file f->base and
 * rebuilds it, verified, into a new temporary file beside path (a spare of
 * recycle when one is free and nothing is selected), named in buf and open
 * as *fd; with a selection (sel not NULL, not empty), only the tensors it
 * takes, and only when the delta is smaller than their bytes in the base.
 * With keep (a buffer of PATH_MAX), the delta itself stays in a temporary
 * file beside path, named there, for the caller ("" unless it applied).
 * 0 when done (out says so); 1 when the version must come whole (why in
 * out->delta_note; the hub heard of a delta that did not apply); -1 with err
 * when the hub is lost or the fetch was stopped.
 */
int wsync_client_fetch_delta(wsync_client_t *c, const wsync_fetch_t *f,
    wsync_fetched_t *out, const char *path, char *buf, size_t size, int *fd,
    const wsync_ckpt_out_t *sel, wsync_recycle_t *recycle, char *keep, int64_t deadline,
    wsync_err_t *err);

/* ---- uploading (client_upload.c) ---- */

/* Packs what begin and put declare: the files (models and sizes), pusher, target workers. */
void wsync_client_pack_files(wsync_enc_t *e, const wsync_slot_ask_t *files,
    const struct wsync_push_send *send);
/* Aborts upload, waiting 1 s at most, for a caller that has an error to report already. */
void wsync_client_abort_quietly(wsync_client_t *c, uint64_t upload);

/* ---- signing (client_sign.c) ---- */

/* Signs a push of the n trees with the client's key: its next sequence number taken. */
int wsync_client_sign_trees(wsync_client_t *c, wsync_tree_t *const *trees, int n,
    wsync_err_t *err);

/* ---- committing and waiting (client_commit.c) ---- */

/*
 * After a commit or put was sent and its answer did not come: when the client
 * was stopped (a signal), says so in err, and that it may be committed.
 */
void wsync_client_stopped_commit(const wsync_client_t *c, wsync_err_t *err);
/* Reads the versions a commit or put reply gives into items; 76 without them. */
int wsync_client_versions(wsync_client_t *c, const wsync_msg_t *m, wsync_push_item_t *items,
    int n, wsync_err_t *err);

/* ---- slots (client_slot.c) ---- */

/*
 * Opens for writing the n slot files a begin's reply names, in fds (and
 * copies their paths into paths[i], malloc'd, when paths is not NULL). 0; 1
 * when they cannot be written from here (another user, a read-only mount); -1
 * with err.
 */
int wsync_client_slot_files(wsync_client_t *c, const wsync_msg_t *m, const uint64_t *sizes,
    int n, int *fds, char **paths, wsync_err_t *err);
/* Asks for slot a as the next slot, without waiting; forgotten if it cannot be asked. */
void wsync_client_next_ask(wsync_client_t *c, const wsync_slot_ask_t *a);

/* ---- byte ranges of a version (client_fetch.c, client_select.c) ---- */

/* Bytes [off, off + len) of a version. */
typedef struct wsync_range {
	uint64_t off, len;
} wsync_range_t;

/*
 * Gets the n ranges (in order, inside the version) of version out->head of
 * model into fd at their offsets, with up to window gets in flight; counts
 * them in out.
 */
int wsync_client_get_ranges(wsync_client_t *c, const char *model, wsync_fetched_t *out,
    const char *worker, int fd, const wsync_range_t *ranges, size_t n, int64_t deadline,
    wsync_err_t *err);
/* Where each tensor's data lies in a version (op layout), in file order. */
typedef struct wsync_layout {
	char **paths;
	wsync_range_t *data;            /* {0, 0} for an empty tensor */
	size_t n;
} wsync_layout_t;
/*
 * Asks the hub for the layout of version h of model into l (caller frees with
 * wsync_layout_free): each tensor's data inside the version, in order, else
 * 76. -1 with err.
 */
int wsync_client_layout(wsync_client_t *c, const char *model, const wsync_head_t *h,
    const char *worker, int64_t deadline, wsync_layout_t *l, wsync_err_t *err);
/* Frees what l holds. */
void wsync_layout_free(wsync_layout_t *l);
/* 1 when a fetch of selection sel takes the tensor at path: selected, or a small file. */
int wsync_client_selects(const wsync_ckpt_out_t *sel, const char *path);
/*
 * Gets version out->head of model into fd (already that long) in part: asks
 * the hub where each tensor's data lies (op layout), then gets every byte
 * outside the data (the headers) and the data of the tensors sel selects and
 * of the small files (WSYNC_CKPT_FILES); every other byte stays zero.
 */
int wsync_client_get_selected(wsync_client_t *c, const char *model, wsync_fetched_t *out,
    const char *worker, const wsync_ckpt_out_t *sel, int fd, int64_t deadline,
    wsync_err_t *err);
/*
 * Checks a file wsync_client_get_selected filled: its content id (from the
 * headers' hashes) and stamp are version h's, and every selected tensor's
 * data matches its hash.
 */
int wsync_client_verify_selected(int fd, const char *model, const wsync_head_t *h,
    const wsync_ckpt_out_t *sel, wsync_err_t *err);

#endif
