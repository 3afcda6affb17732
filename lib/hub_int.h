/*
 * hub_int.h - the hub inside: its state, one request, and the functions its
 * files share, in one section per file: hub_endpoint.c, hub_request.c,
 * hub_worker.c, hub_wait.c, hub_upload.c, hub_group.c, hub_read.c, hub_relay.c, hub_arrive.c,
 * hub_subtree.c, hub_place.c,
 * hub_status.c (hub.c,
 * the loop, shares nothing). Names shared between these files start with
 * hub_; those of one file are static and start with s_.
 */
#ifndef WSYNC_HUB_INT_H
#define WSYNC_HUB_INT_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>

#include "auth_int.h"
#include "delta_int.h"
#include "log_int.h"
#include "net_int.h"
#include "peer_int.h"
#include "proto_int.h"
#include "store_int.h"
#include "wsync.h"

/* ---- what the hub bounds (wsync-serve(1), LIMITS) ---- */

#define HUB_MAX_WAIT_MS 3600000         /* one hour: the longest wait a peer may ask */
#define HUB_UPLOADS 16                  /* uploads in flight per hub */
/*
 * Chunks the uploads sent over the socket keep in flight together, shared
 * among them as each begins (at least one each): what the hub's queues hold
 * of them, 32 MiB of 4 MiB chunks, whatever the number of ranks pushing.
 */
#define HUB_UPLOAD_WINDOW 8
#define HUB_PEER_WAITS 64               /* waits pending per peer */
#define HUB_UPLOAD_FILES 64             /* files in one upload */
#define HUB_UPLOAD_IDLE_MS 60000        /* an upload not touched for this long expires */
#define HUB_MAX_FILE (64ull << 30)      /* bytes in one uploaded file */
#define HUB_MAX_WORKERS 4096
#define HUB_CONN_WORKERS 256            /* workers one connection may make known */
#define HUB_RELAY_CONNS 64              /* downstream relays' connections remembered */
#define HUB_WORKER_MODELS 256           /* models one worker follows */
#define HUB_MAX_WAITS 1024
#define HUB_MAX_LIST 1024               /* entries in a list or map of a request */
#define HUB_VIA 512                     /* bytes of a worker's path of relays */
#define HUB_HOP_MS 1500                 /* what a relay on its path may add to a worker's silence */
#define HUB_MAX_HOPS 256                /* relays counted on a worker's path; a longer one counts so */
#define HUB_MAX_NAME (WSYNC_MAX_ID > WSYNC_MAX_MODEL ? WSYNC_MAX_ID : WSYNC_MAX_MODEL)
#define HUB_DELTAS 64                   /* deltas kept, being made or waiting to be */
#define HUB_ARRIVE_GETS 64              /* gets waiting for an arriving version's bytes */
#define HUB_ARRIVE_WAIT_MS 2000         /* the longest one waits: under a relay's 3 s on silence */
#define HUB_GROUPS 4                    /* groups (versions in parts) open at once */
#define HUB_GROUP_PARTS 256             /* parts in one group */
#define HUB_PART_LIVE_MS 3000           /* a part's attempt silent this long may be replaced */
#define HUB_PLACES 256                  /* relays a root places */
#define HUB_PLACE_ALIVE_MS WSYNC_ALIVE_MS /* a relay not reporting for this long is placed no more */
/* The probe (hub_place.c): two rates measured this close are set side by side. */
#define HUB_PROBE_SAME_MS 2000
/* A head no two rates judged while this many versions were committed (and 3 s passed) keeps its place. */
#define HUB_PROBE_VERSIONS 3
#define HUB_ARRIVE_TOPIC ".arriving"    /* announcements of arriving versions: no model id starts so */

/* ---- the hub's state ---- */

/* What a worker did with one model. */
struct hub_wmodel {
	char model[WSYNC_MAX_MODEL + 1];
	int watching;                   /* named in its hello or heads */
	uint64_t applied;               /* 0: none */
	uint64_t failed;                /* version of its last failure; 0: none */
	char *reason;                   /* of that failure */
	double fail_time;
	uint64_t failures;              /* failures reported, every version */
};

/* A worker the hub knows, from its hello, heads, acks and failures (hub_worker.c). */
struct hub_worker {
	char id[WSYNC_MAX_ID + 1];
	char host[WSYNC_MAX_ID + 1];
	uint64_t pid;
	int64_t seen;                   /* monotonic ms; for a worker behind a relay, as it reported */
	int gone;                       /* said bye */
	char conn[WSYNC_PEER_NAME];     /* the connection that made it known */
	char transfer[8];               /* how its last applied version came: link, copy, socket, delta */
	uint64_t wire;                  /* bytes of that version on the wire; 0: none or not said */
	char via[HUB_VIA];              /* the relays it is reached by, "r1>r2"; "": directly */
	uint64_t hops;                  /* how many relays via names (0: it talks to this hub) */
	struct hub_wmodel *models;
	size_t nmodels, cap;
	char **select;                  /* its tensor selection, from its hello; owned */
	size_t nselect;
};

/* How much of one uploaded file arrived. */
struct hub_ufile {
	uint64_t size;                  /* declared: the bytes sent (the delta's, with a base) */
	uint64_t filled;                /* bytes received from offset 0 on, without a gap */
	/*
	 * Sent as a delta from version base (0: whole) of the model, held open
	 * since the begin in base_fd: the chunks fill delta, and the commit
	 * rebuilds the version (head_size bytes) from both into the upload's file.
	 */
	uint64_t base, head_size;
	int base_fd;
	wsync_store_temp_t delta;
	int rebased;                    /* delta rewritten against the hub's base already */
};

/*
 * An upload: a begin..commit transaction (hub_upload.c). A slot is an upload
 * whose files the hub hands out in its store for a writer on its host to fill
 * in place: on the wire a begin with "local": true, in the log transfer=copy.
 */
struct hub_upload {
	uint64_t id;                    /* 0: a free entry */
	wsync_store_temp_t *temps;      /* the files, as the store commits them */
	struct hub_ufile *files;
	size_t nfiles;
	char pusher[WSYNC_MAX_ID + 1];
	char peer[WSYNC_PEER_NAME];     /* who began it */
	uint64_t total, received;       /* bytes declared, and received (a resent chunk counts again) */
	char **targets;                 /* NULL: every worker */
	size_t ntargets;
	int slot;                       /* a slot: its writer fills the files in place, by path */
	size_t recycled;                /* slot: files made of spares (log key recycled=) */
	uint64_t written;               /* slot: the files' summed mtimes when last seen */
	int64_t touched;
};

/* Whom a wait waits for; on the wire the strings "all", "count" and "ids". */

/* A deferred reply: who asked, and what would satisfy them (hub_wait.c). */
struct hub_wait {
	unsigned char ident[256];
	size_t identlen;
	void *router;                   /* the ROUTER the wait came in on, to answer on */
	char peer[WSYNC_PEER_NAME];
	uint64_t req;
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	wsync_wait_mode_t mode;
	uint64_t count;
	char **ids;                     /* WSYNC_WAIT_ALL and WSYNC_WAIT_IDS: the workers waited for */
	size_t nids;
	int64_t start, deadline;
	int commit;                     /* the reply of a commit: versions as well */
	uint64_t size, content;         /* commit: the version's */
};

/* A delta from a base to a head of one model, in STORE/.deltas (hub_delta.c). */
enum hub_delta_state { HUB_DELTA_FREE, HUB_DELTA_QUEUED, HUB_DELTA_MAKING, HUB_DELTA_READY,
    HUB_DELTA_WHOLE };
struct hub_delta {
	enum hub_delta_state state;
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t base, head;
	wsync_version_t file;           /* READY: the delta's file (version: the head's number) */
	char why[160];                  /* WHOLE: why H travels whole */
	int64_t used;                   /* monotonic ms of the last request for it */
};

/* The one delta being made, in a thread of its own; the loop hears of its end through a pipe. */
struct hub_delta_job {
	int running;                    /* a thread was started and not joined */
	size_t slot;                    /* its entry in deltas */
	int base_fd, head_fd, out_fd;
	char tmp[PATH_MAX];
	int rc;
	wsync_err_t err;
	wsync_delta_stats_t stats;
	int64_t start;
	int done_fd;                    /* the pipe's write end: the thread writes a byte when done */
	pthread_t thread;
};

/* A get of an arriving version's range that is not in yet, answered when it is (hub_arrive.c). */
struct hub_early_get {
	unsigned char ident[256];
	size_t identlen;
	void *router;
	uint64_t req, off, len;
	int64_t deadline;
};

/* A relay's version on its way from its upstream, read by downstream relays (hub_arrive.c). */
struct hub_arriving {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;               /* 0: none arriving */
	uint64_t size, content;
	int fd;                         /* the file the relay's thread writes, read-only */
	uint64_t upto;                  /* bytes in, from offset 0 without a gap */
	int passed;                     /* a range was served before it was whole (logged once) */
	/* The last one that failed verification here: gets of it still on their way are refused so. */
	char failed_model[WSYNC_MAX_MODEL + 1];
	uint64_t failed;
	struct hub_early_get gets[HUB_ARRIVE_GETS];
	size_t ngets;
};

/* What the hub did since it started, for wsync-inspect --prometheus (hub_status.c). */
struct hub_counters {
	uint64_t uploads;               /* begun (begin, put, slot) */
	uint64_t commits;               /* versions committed */
	uint64_t waits;                 /* begun (wait, or a commit's) */
	uint64_t waits_timed_out;
	uint64_t bytes_served;          /* data of gets */
	uint64_t bytes_received;        /* data of chunks and puts */
	uint64_t refused;               /* requests answered with an error */
	uint64_t dropped;               /* messages dropped unanswered */
};

/*
 * One endpoint the hub listens on: its ROUTER and the PUB announced to the
 * clients that come in on it (hub_endpoint.c). ZeroMQ cannot tell which local
 * endpoint a ROUTER connection came in on, so each endpoint has its own pair.
 */
struct hub_endpoint {
	void *router, *pub;
	char endpoint[512];
	char pub_endpoint[512];         /* as bound: a tcp port chosen by the system */
};

struct wsync_hub {
	struct hub_endpoint *eps;
	int neps;
	void *router;                   /* the ROUTER of the request being served */
	wsync_auth_t *auth;             /* NULL: no keys */
	volatile sig_atomic_t *reload;
	char name[300];                 /* host:pid */
	char origin[64];                /* the store id of the tree's root: this store's, or a relay's upstream's */
	char **ipc;                     /* socket files bound, removed at destroy */
	size_t nipc;
	wsync_store_t *store;
	wsync_kept_t *kept;             /* the store's files kept mapped (on tmpfs, --recycle), or NULL */
	unsigned keep;                  /* versions kept per model */
	unsigned recycle;               /* spares kept (--recycle) */
	wsync_log_fn log;
	void *log_arg;
	struct hub_worker **workers;    /* sorted by id */
	size_t nworkers;
	struct hub_upload uploads[HUB_UPLOADS];
	struct hub_groups *groups;      /* versions in parts (hub_group.c); NULL before the first */
	uint64_t last_upload;
	struct hub_wait *waits;
	size_t nwaits, waits_cap;
	wsync_blocked_t blocked;        /* connections that broke the protocol */
	struct hub_relay *relay;        /* NULL: not a relay (hub_relay.c) */
	void *relay_pair;               /* the hub's end of the relay thread's pair */
	int64_t reported;               /* a relay: when the workers were last reported upstream */
	int subtree_full;               /* the last relay report had workers left out (logged once) */
	struct hub_arriving arriving;   /* a relay: the version its thread is fetching */
	struct hub_place *places;       /* a root: the relays it places, as they came (hub_place.c) */
	size_t nplaces;
	/* Connections that said hello as relays, the newest last: only they read arriving versions. */
	char relay_conns[HUB_RELAY_CONNS][WSYNC_PEER_NAME];
	size_t nrelay_conns;
	struct hub_counters counts;
	struct hub_delta deltas[HUB_DELTAS];
	struct hub_delta_job job;
	int delta_pipe[2];              /* the job's end: the loop polls [0] */
#ifdef WSYNC_TEST_HOOKS
	int flip_get;                   /* WSYNC_TEST_FLIP_GET: spoil the data of gets */
#endif
};

/* One request being served: everything that lives for one request only. */
struct hub_req {
	const void *ident;
	size_t identlen;
	uint64_t id;
	char op[16];
	char peer[WSYNC_PEER_NAME];     /* the name quotas count it under */
	char conn[WSYNC_PEER_NAME];     /* its connection */
	wsync_msg_t msg;
	wsync_parts_t *parts;
};

#define hub_log(h, ...) wsync_logf((h)->log, (h)->log_arg, __VA_ARGS__)

/* ---- hub_endpoint.c: the ROUTER and PUB sockets and their endpoints ---- */

/*
 * For each of opts' endpoints makes a ROUTER bound to it and a PUB bound
 * beside it (hub_pub_for), both guarded by h->auth (may be NULL).
 */
int hub_endpoints_open(wsync_hub_t *h, const wsync_hub_opts_t *opts, wsync_err_t *err);
/* Closes the sockets and removes the ipc socket files bound. */
void hub_endpoints_close(wsync_hub_t *h);
/* The PUB endpoint for a ROUTER endpoint: ipc://PATH.pub, or tcp://HOST:*. */
int hub_pub_for(const char *endpoint, char *buf, size_t size, wsync_err_t *err);
/* The PUB announced to clients of the ROUTER router (one of h's). */
const char *hub_pub_of(const wsync_hub_t *h, const void *router);
/* Publishes a two-frame announcement, topic and body, on every PUB. */
void hub_publish(wsync_hub_t *h, const char *topic, const void *body, size_t size);

/* ---- hub_request.c: the envelope, the op table, field decoders, replies ---- */

/*
 * Serves one message as received on the ROUTER: [identity][empty][request]
 * or [identity][empty][request][data]. Replies go out on the ROUTER; what
 * does not decode is logged and dropped. p stays the caller's. (Called by
 * hub.c's loop, and by the fuzzer and unit tests without one.)
 */
void wsync_hub_serve(wsync_hub_t *hub, wsync_parts_t *p);

/* What serves one op: 0 when it replied, -1 with err for a refusal. */
typedef int hub_op_fn(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* The handler of op; NULL when the hub serves no such op. */
hub_op_fn *hub_op_find(const char *op);

/*
 * Field decoders. Each reads one field of r's message; anything absent when
 * required or malformed is -1 with err code 76 (EX_PROTOCOL) and a message
 * naming the field.
 */

/* -1 with err: field key is missing. */
int hub_missing(const char *key, wsync_err_t *err);
/* 0 when s names a way a version reaches a worker: link, copy, socket or delta. */
int hub_transfer_check(const char *s);
/* A string field checked by check (may be NULL); "" in buf when absent and optional. */
int hub_str(const struct hub_req *r, const char *key, int required, int (*check)(const char *),
    char *buf, size_t size, wsync_err_t *err);
/* The required "model" field, a model id, into buf of WSYNC_MAX_MODEL + 1. */
int hub_model_field(const struct hub_req *r, char *buf, wsync_err_t *err);
/* The "worker" field, an id, into buf of WSYNC_MAX_ID + 1. */
int hub_worker_field(const struct hub_req *r, int required, char *buf, wsync_err_t *err);
/* An unsigned field; *v untouched when absent and optional. */
int hub_u64(const struct hub_req *r, const char *key, int required, uint64_t *v,
    wsync_err_t *err);
/* An optional boolean field; 0 when absent. */
int hub_bool(const struct hub_req *r, const char *key, int *v, wsync_err_t *err);
/*
 * A list of distinct strings, each passing check, copied into *out (caller
 * frees with hub_strv_free); *out NULL when absent and optional. At most
 * HUB_MAX_LIST.
 */
int hub_list(const msgpack_object *o, const char *key, int required,
    int (*check)(const char *), char ***out, size_t *n, wsync_err_t *err);
/* Frees n strings and their array. */
void hub_strv_free(char **v, size_t n);

/* Starts an ok reply to request id with nfields more fields. */
void hub_ok(wsync_enc_t *e, uint64_t id, size_t nfields);
/* Starts a refusal with nfields more fields. */
void hub_refusal(wsync_enc_t *e, uint64_t id, const wsync_err_t *err, size_t nfields);
/* Sends a reply to ident on router (one of h's ROUTERs) and frees it. */
void hub_send(wsync_hub_t *h, void *router, const void *ident, size_t identlen,
    wsync_enc_t *e);
/* Sends reply e to ident on router, then data (taken over) as the last frame; frees e. */
void hub_send_data(wsync_hub_t *h, void *router, const void *ident, size_t identlen,
    wsync_enc_t *e, zmq_msg_t *data);
/* Sends a reply to r and frees it. */
void hub_reply(wsync_hub_t *h, const struct hub_req *r, wsync_enc_t *e);
/* Sends reply e to r, then data (taken over) as the last frame, without copying it. */
void hub_reply_data(wsync_hub_t *h, const struct hub_req *r, wsync_enc_t *e,
    zmq_msg_t *data);

/* ---- hub_worker.c: the worker registry (hello, heads, acks and failures, bye) ---- */

/*
 * How long w may go unheard of and stay alive: WSYNC_ALIVE_MS, and
 * HUB_HOP_MS more for each relay on its path.
 */
int64_t hub_worker_silence_ms(const struct hub_worker *w);
/* 1 when w said no bye and was heard of within hub_worker_silence_ms(w) of now. */
int hub_worker_alive(const struct hub_worker *w, int64_t now);
/* The worker with this id; NULL when the hub does not know it. */
struct hub_worker *hub_worker_find(const wsync_hub_t *h, const char *id);
/* The worker with this id, made when new (known as connection conn's), marked seen now. */
struct hub_worker *hub_worker_touch(wsync_hub_t *h, const char *id, const char *conn,
    wsync_err_t *err);
/* Frees w and what it holds. */
void hub_worker_free(struct hub_worker *w);
/* What w did with model; NULL when nothing. */
struct hub_wmodel *hub_wmodel_find(const struct hub_worker *w, const char *model);
/* w's record of model, made when new; NULL with err when w follows too many. */
struct hub_wmodel *hub_wmodel_get(struct hub_worker *w, const char *model, wsync_err_t *err);
/* The version of model w (may be NULL) applied last; 0: none. */
uint64_t hub_applied(const struct hub_worker *w, const char *model);

int hub_op_hello(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_heads(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
/* The ops ack and fail: a worker applied a version, or failed to. */
int hub_op_ack_or_fail(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_bye(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* ---- hub_wait.c: waits for workers to apply a version ---- */

/* The mode the wire string s names (wsync_wait_parse); -1 when none. */
int hub_wait_mode_parse(const char *s, wsync_wait_mode_t *mode);
/*
 * Reads a wait's mode, count, ids and timeout_ms from r into wt (the caller
 * frees it with hub_wait_free), once the hub has room for one more of r's waits.
 */
int hub_wait_parse(wsync_hub_t *h, const struct hub_req *r, struct hub_wait *wt,
    uint64_t *timeout, wsync_err_t *err);
/*
 * Starts wt, parsed from r, on its version of m, its timeout running from
 * start: answered at once when it is satisfied already, else kept (and then
 * the hub's). -1 with err: the caller still frees wt.
 */
int hub_wait_start(wsync_hub_t *h, const struct hub_req *r, const wsync_model_t *m,
    struct hub_wait *wt, int64_t start, uint64_t timeout, wsync_err_t *err);
/* 1 when the workers wt waits for have applied its version. */
int hub_wait_satisfied(const wsync_hub_t *h, const struct hub_wait *wt);
/*
 * Encodes the refusal of wt timed out at now into e (caller frees): code 75
 * and missing: [{worker, version, seen, failure}]. The number missing.
 */
size_t hub_wait_expiry(const wsync_hub_t *h, const struct hub_wait *wt, int64_t now,
    wsync_enc_t *e);
/*
 * Answers the waits on model that are now satisfied, and refuses (code 65)
 * those whose workers have all answered, one or more with a failure.
 */
void hub_waits_check(wsync_hub_t *h, const char *model);
/* Refuses the waits whose deadline is past at now. */
void hub_waits_expire(wsync_hub_t *h, int64_t now);
/* Frees what wt holds. */
void hub_wait_free(struct hub_wait *wt);

int hub_op_wait(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* ---- hub_upload.c: uploads and slots (begin, chunk, commit, put, abort, announce) ---- */

/*
 * Announces committed version c on every PUB; group (n files) names the models
 * committed with it, targets (NULL: everyone) who sees it.
 */
void hub_announce(wsync_hub_t *h, const wsync_committed_t *c, const wsync_store_temp_t *group,
    size_t n, char *const *targets, size_t ntargets);
/* A commit's versions: [{model, version, size, content}], n of them. */
void hub_pack_versions(wsync_enc_t *e, const wsync_committed_t *c, size_t n);
/* Drops the uploads (and slots) left idle for HUB_UPLOAD_IDLE_MS at now. */
void hub_uploads_expire(wsync_hub_t *h, int64_t now);
/* Aborts the uploads in progress as the hub stops. */
void hub_uploads_stop(wsync_hub_t *h);
/* Frees an upload's entry; its temporary files are removed unless a commit consumed them. */
void hub_upload_end(struct hub_upload *u);

int hub_op_begin(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_chunk(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_commit(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_put(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_abort(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* ---- hub_group.c: versions in parts (a group's parts, committed as one version) ---- */

/*
 * A begin with "group": reads part, parts, group and timeout_ms, checks them
 * against the group (made when new) and sets *up to the part's entry, for
 * the begin to fill as any upload's. *up NULL when r is no part's begin.
 */
int hub_group_begin(wsync_hub_t *h, struct hub_req *r, struct hub_upload **up,
    wsync_err_t *err);
/* The upload id of a part still being sent; NULL when none. */
struct hub_upload *hub_group_upload(wsync_hub_t *h, uint64_t id);
/*
 * The commit of upload u, whole: 1 when u is no part's. Else verifies the
 * part (one rebuilt from a delta was verified then) and keeps it with r's reply deferred (0), the group committed and
 * every part answered once the last is in; -1 with err when refused.
 */
int hub_group_commit(wsync_hub_t *h, struct hub_req *r, struct hub_upload *u,
    wsync_err_t *err);
/* Groups open: each counts as one upload against HUB_UPLOADS. */
size_t hub_groups_open(const wsync_hub_t *h);
/* Parts being sent (an attempt begun, not yet whole), for HUB_UPLOAD_WINDOW. */
size_t hub_groups_sending(const wsync_hub_t *h);
/*
 * The version the last group of model committed as when one of its parts had
 * content id content (a rank's --base is its part pushed before); 0: none.
 */
uint64_t hub_group_base(const wsync_hub_t *h, const char *model, uint64_t content);
/*
 * Whether upload u is a part sent as a delta whose rebuild waits for its
 * group's union: every part in so far is such a delta from the same version.
 */
int hub_group_defers(wsync_hub_t *h, const struct hub_upload *u);
/* Answers the parts whose pusher's bound ran out at now; drops groups past every bound. */
void hub_groups_expire(wsync_hub_t *h, int64_t now);
/* Drops every group as the hub stops, its parts refused (69). */
void hub_groups_stop(wsync_hub_t *h);

/* ---- hub_read.c: reads (stat, get) ---- */

/* Explains in err (66) why model m has no version number version. */
int hub_no_version(const wsync_model_t *m, uint64_t version, unsigned keep, wsync_err_t *err);
/*
 * The ids of the store's models close to model (another case, or a letter or
 * two off: a typo), as "policy, policy2" in buf; their number (at most 3).
 */
int hub_models_close(const wsync_hub_t *h, const char *model, char *buf, size_t size);
/* Refuses model, which the store does not have (66), naming the close ids. */
int hub_no_model(const wsync_hub_t *h, const char *model, wsync_err_t *err);

/*
 * The version a read request names (fields model, version: 0 for the head,
 * worker: whose head, marked seen); model receives its id (WSYNC_MAX_MODEL + 1
 * bytes). NULL with err (66) when there is none.
 */
const wsync_version_t *hub_read_version(wsync_hub_t *h, struct hub_req *r, char *model,
    wsync_err_t *err);
int hub_op_stat(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
int hub_op_get(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* hub_pushdelta.c: a pushed file sent as a delta from a retained version. */
/*
 * Reads a begin's file entry f of model (uf->size its version's size): with
 * delta and base_content, it comes as a delta of delta bytes from the version
 * base names, or without base from the newest retained version of that
 * content, which is held open; uf->size becomes the delta's size. 66 when the
 * base is not retained, 65 when it is another content (the pusher sends the
 * version whole then).
 */
int hub_pushdelta_begin(wsync_hub_t *h, const msgpack_object *f, const char *model,
    struct hub_ufile *uf, wsync_err_t *err);
/*
 * At the commit: rebuilds file i of u from its base and delta, verified (65
 * when not), the delta first rewritten against the hub's copy of the base.
 */
int hub_pushdelta_apply(wsync_hub_t *h, struct hub_upload *u, size_t i, wsync_err_t *err);
/* The first step of that alone: file i's delta rewritten against the hub's base, once. */
int hub_pushdelta_rebase(wsync_hub_t *h, struct hub_upload *u, size_t i, wsync_err_t *err);
/* Once committed as version: the delta uf brought becomes the one served from its base. */
void hub_pushdelta_keep(wsync_hub_t *h, const struct hub_ufile *uf, const char *model,
    uint64_t version);
/* Closes the base and removes the delta of a file sent as a delta (none: nothing). */
void hub_pushdelta_end(struct hub_ufile *uf);

/* hub_layout.c: each tensor's path and data range in a version, in file order. */
int hub_op_layout(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* ---- hub_relay.c: a relay's upstream side ---- */

/*
 * With opts' upstreams, starts the thread that mirrors their versions (an
 * inproc PAIR, h->relay_pair, hands each over to the hub's loop); 0 and
 * nothing without. Called once the store is open.
 */
int hub_relay_start(wsync_hub_t *h, const wsync_hub_opts_t *opts, wsync_err_t *err);
/* Stops the thread and frees the relay; nothing when h is no relay. */
void hub_relay_stop(wsync_hub_t *h);
/* Commits what the thread handed over on h->relay_pair, and answers it. */
void hub_relay_serve(wsync_hub_t *h);
/* A relay: hands the thread a report of every worker, for upstream, once a heartbeat. */
void hub_relay_report(wsync_hub_t *h, int64_t now);
/* 1 with err (77) when h mirrors model from an upstream, so nobody may push it here. */
int hub_relay_mirrors(const wsync_hub_t *h, const char *model, wsync_err_t *err);

/* ---- hub_arrive.c: a relay's arriving version, passed on to downstream relays ---- */

/* 1 when version of model is the one arriving at h (not committed yet). */
int hub_arrive_has(const wsync_hub_t *h, const char *model, uint64_t version);
/*
 * 1 with err (65) when version of model arrived at h and failed verification:
 * a downstream relay's get of it, sent before it heard, learns that, not 66.
 */
int hub_arrive_failed(const wsync_hub_t *h, const char *model, uint64_t version,
    wsync_err_t *err);
/* Connection conn said hello as a relay: it may read arriving versions. */
void hub_arrive_reader_add(wsync_hub_t *h, const char *conn);
/*
 * 0 when r's connection said hello as a relay; else 77 with err: what is not
 * verified yet is for downstream relays only, never for workers.
 */
int hub_arrive_reader_check(const wsync_hub_t *h, const struct hub_req *r, wsync_err_t *err);
/*
 * Serves r, a get with "arriving" of the arriving version, bytes off..off+len:
 * at once when they are in, else once they are (or refused after
 * HUB_ARRIVE_WAIT_MS). 0 when answered or kept; -1 with err.
 */
int hub_arrive_get(wsync_hub_t *h, const struct hub_req *r, uint64_t off, uint64_t len,
    wsync_err_t *err);
/* Version v of model starts arriving into path: kept, logged, announced on HUB_ARRIVE_TOPIC. */
void hub_arrive_begin(wsync_hub_t *h, const char *model, const wsync_head_t *v, const char *path);
/* upto bytes of the arriving version are in: the gets waiting for them are answered. */
void hub_arrive_progress(wsync_hub_t *h, uint64_t upto);
/*
 * The arriving version is done: committed (code 0: the gets waiting are
 * answered) or dropped (the gets waiting are refused with code and why).
 */
void hub_arrive_end(wsync_hub_t *h, int code, const char *why);
/* Refuses (66) the gets that waited for bytes past their deadline at now. */
void hub_arrive_expire(wsync_hub_t *h, int64_t now);
/* Packs "arriving": {model: {version, size, content}} for heads (models: NULL for all). */
void hub_arrive_pack(const wsync_hub_t *h, char *const *models, size_t nmodels,
    wsync_enc_t *e);

/* ---- hub_subtree.c: acks end to end (a relay's report of its workers) ---- */

/* Packs [worker] of every worker known (and not long dead) into e; how many. */
size_t hub_subtree_pack(const wsync_hub_t *h, wsync_enc_t *e);
/* The op subtree: merges a relay's report into the registry, each worker with its path. */
int hub_op_subtree(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

/* ---- hub_place.c: a root places the relays reporting to it in a chain ---- */

/*
 * A relay's report r (op subtree) with "advertise": keeps where relay is
 * reached (and its hub's key), its "rate" and a parent it "lost" (then no
 * one's parent), and starts r's ok reply in e with the relay's parent ("": this hub), that parent's key, and the keys of
 * the relays placed under it. -1 with err.
 */
int hub_place_reply(wsync_hub_t *h, const struct hub_req *r, const char *relay, wsync_enc_t *e,
    wsync_err_t *err);
/* Forgets the relays that stopped reporting; how many are placed. */
size_t hub_place_expire(wsync_hub_t *h);
/* Packs "relays": [{relay, endpoint, parent, rate, slow, bad}], in the chain's order. */
void hub_place_pack(const wsync_hub_t *h, wsync_enc_t *e);
/* Frees the places. */
void hub_place_free(wsync_hub_t *h);

/* ---- hub_delta.c: deltas between versions, made once in a thread, served by get ---- */

/* Empties STORE/.deltas and makes the job's pipe. */
int hub_deltas_open(wsync_hub_t *h, wsync_err_t *err);
/* Waits for the job, then drops every delta and closes the pipe. */
void hub_deltas_close(wsync_hub_t *h);
/* Finishes a job that ended, drops deltas whose base or head retired, starts the next job. */
void hub_deltas_tick(wsync_hub_t *h);
/*
 * Keeps the deltas in delta_fds (n: pushed, each rewritten for the hub's
 * base; several: the parts of a version) as the ready delta of model from
 * base to head, rewritten again in head's order with head's skeleton and
 * number: no diff pass. Logs event=delta with made=0.
 */
void hub_delta_adopt(wsync_hub_t *h, const char *model, uint64_t base, uint64_t head,
    const int *delta_fds, size_t n);
/* The ready delta of model from base to head, as a file get reads; NULL with err (66). */
const wsync_version_t *hub_delta_file(wsync_hub_t *h, const char *model, uint64_t base,
    uint64_t head, wsync_err_t *err);

int hub_op_delta(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);
/* Opens version of model in the store, read-only: its own descriptor, its own offset; -1. */
int hub_open_version(const wsync_hub_t *h, const char *model, uint64_t version);

/* ---- hub_status.c: the status document ---- */

int hub_op_status(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err);

#endif
