/*
 * hub.c - wsync-serve's engine (wsync(7)): one thread polls a ROUTER for
 * requests and publishes announcements on a PUB. It never blocks on a peer:
 * replies go out with ZMQ_DONTWAIT, and a peer whose queue is full loses them
 * (clients retry on timeout).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "auth_int.h"
#include "hub_int.h"
#include "index_int.h"
#include "keys_int.h"
#include "net_int.h"
#include "peer_int.h"
#include "proto_int.h"
#include "store_int.h"

#define S_POLL_MS 100                   /* longest sleep: the timers' resolution */
#define S_PROBE_MS 1000                 /* how long a live hub has to answer a probe */
#define S_BATCH 256                     /* requests served between two timer checks */
#define S_SNDHWM 100                    /* replies queued per peer (a get's is 4 MiB) */
#define S_RCVHWM 32                     /* requests queued per connection (a chunk is 4 MiB) */
#define S_MAX_WAIT_MS 3600000           /* one hour: the longest wait a peer may ask */
#define S_UPLOADS 16                    /* uploads in flight per hub */
#define S_PEER_WAITS 64                 /* waits pending per peer */
#define S_UPLOAD_FILES 64               /* files in one upload */
#define S_UPLOAD_IDLE_MS 60000          /* an upload not touched for this long expires */
#define S_MAX_FILE (64ull << 30)        /* bytes in one uploaded file */
#define S_MAX_WORKERS 4096
#define S_CONN_WORKERS 256              /* workers one connection may make known */
#define S_WORKER_MODELS 256             /* models one worker follows */
#define S_MAX_WAITS 1024
#define S_MAX_LIST 1024                 /* entries in a list or map of a request */
#define S_MAX_NAME (WSYNC_MAX_ID > WSYNC_MAX_MODEL ? WSYNC_MAX_ID : WSYNC_MAX_MODEL)

/* What a worker did with one model. */
struct s_wmodel {
	char model[WSYNC_MAX_MODEL + 1];
	int watching;                   /* named in its hello or heads */
	uint64_t applied;               /* 0: none */
	uint64_t failed;                /* version of its last failure; 0: none */
	char *reason;                   /* of that failure */
	double fail_time;
	uint64_t failures;              /* failures reported, every version */
};

struct s_worker {
	char id[WSYNC_MAX_ID + 1];
	char host[WSYNC_MAX_ID + 1];
	uint64_t pid;
	int64_t seen;                   /* monotonic ms */
	int gone;                       /* said bye */
	char conn[WSYNC_PEER_NAME];     /* the connection that made it known */
	char transfer[8];               /* how its last applied version came: link, copy, socket */
	struct s_wmodel *models;
	size_t nmodels, cap;
};

/* How much of one uploaded file arrived. */
struct s_ufile {
	uint64_t size;                  /* declared */
	uint64_t filled;                /* bytes received from offset 0 on, without a gap */
};

struct s_upload {
	uint64_t id;                    /* 0: a free slot */
	wsync_store_temp_t *temps;      /* the files, as the store commits them */
	struct s_ufile *files;
	size_t nfiles;
	char pusher[WSYNC_MAX_ID + 1];
	char peer[WSYNC_PEER_NAME];     /* who began it */
	uint64_t total, received;       /* bytes declared, and received (a resent chunk counts again) */
	char **targets;                 /* NULL: every worker */
	size_t ntargets;
	int local;                      /* the pusher writes the files itself, by path */
	size_t recycled;                /* local: files made of retired versions' */
	uint64_t written;               /* local: the files' summed mtimes when last seen */
	int64_t touched;
};

enum s_mode { S_ALL, S_COUNT, S_IDS };

/* What the hub did since it started, for wsync-inspect --prometheus. */
struct s_counters {
	uint64_t uploads;               /* begun (begin, put, slot) */
	uint64_t commits;               /* versions committed */
	uint64_t waits;                 /* begun (wait, or a commit's) */
	uint64_t waits_timed_out;
	uint64_t bytes_served;          /* data of gets */
	uint64_t bytes_received;        /* data of chunks and puts */
	uint64_t refused;               /* requests answered with an error */
	uint64_t dropped;               /* messages dropped unanswered */
};

/* A deferred reply: who asked, and what would satisfy them. */
struct s_wait {
	unsigned char ident[256];
	size_t identlen;
	char peer[WSYNC_PEER_NAME];
	uint64_t req;
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	enum s_mode mode;
	uint64_t count;
	char **ids;                     /* S_ALL and S_IDS: the workers waited for */
	size_t nids;
	int64_t start, deadline;
	int commit;                     /* the reply of a commit: versions as well */
	uint64_t size, content;         /* commit: the version's */
};

struct wsync_hub {
	void *router, *pub;
	wsync_auth_t *auth;             /* NULL: no keys */
	volatile int *reload;
	char pub_endpoint[512];
	char name[300];                 /* host:pid */
	char **ipc;                     /* socket files bound, removed at destroy */
	size_t nipc;
	wsync_store_t *store;
	unsigned keep;                  /* versions kept per model */
	wsync_log_fn log;
	void *log_arg;
	struct s_worker **workers;      /* sorted by id */
	size_t nworkers;
	struct s_upload uploads[S_UPLOADS];
	uint64_t last_upload;
	struct s_wait *waits;
	size_t nwaits, waits_cap;
	wsync_blocked_t blocked;        /* connections that broke the protocol */
	char conn[WSYNC_PEER_NAME];     /* the connection of the request being served */
	int flip_get;                   /* WSYNC_TEST_FLIP_GET: spoil the data of gets */
	struct s_counters counts;
};

/* One request being served. */
struct s_req {
	const void *ident;
	size_t identlen;
	uint64_t id;
	char op[16];
	char peer[WSYNC_PEER_NAME];
	wsync_msg_t msg;
	wsync_parts_t *parts;
};

#define s_log(h, ...) wsync_logf((h)->log, (h)->log_arg, __VA_ARGS__)

/* ---- string lists ---- */

static void
s_strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static int
s_strv_has(char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i], s) == 0)
			return 1;
	return 0;
}

/* ---- request fields: anything malformed is a protocol error (76) ---- */

static int
s_missing(const char *key, wsync_err_t *err)
{
	return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is missing", key);
}

/* 0 when s names a way a version reaches a worker. */
static int
s_transfer_check(const char *s)
{
	return strcmp(s, "link") == 0 || strcmp(s, "copy") == 0 || strcmp(s, "socket") == 0 ?
	    0 : -1;
}

/* A string field checked by check (may be NULL); "" in buf when absent and optional. */
static int
s_str(const struct s_req *r, const char *key, int required, int (*check)(const char *),
    char *buf, size_t size, wsync_err_t *err)
{
	const msgpack_object *o = wsync_msg_get(&r->msg, key);

	buf[0] = '\0';
	if (o == NULL)
		return required ? s_missing(key, err) : 0;
	if (wsync_obj_str(o, buf, size) < 0 || (check != NULL && check(buf) < 0)) {
		buf[0] = '\0';
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not %s", key,
		    check == wsync_model_id_check ? "a model id (1 to 64 of A-Z a-z 0-9 . _ -)" :
		    check == wsync_id_check ? "an id (1 to 128 printable ASCII bytes, no space)" :
		    check == s_transfer_check ? "link, copy or socket" :
		    "a string of the right size");
	}
	return 0;
}

static int
s_model(const struct s_req *r, char *buf, wsync_err_t *err)
{
	return s_str(r, "model", 1, wsync_model_id_check, buf, WSYNC_MAX_MODEL + 1, err);
}

static int
s_worker_field(const struct s_req *r, int required, char *buf, wsync_err_t *err)
{
	return s_str(r, "worker", required, wsync_id_check, buf, WSYNC_MAX_ID + 1, err);
}

/* An unsigned field; *v untouched when absent and optional. */
static int
s_u64(const struct s_req *r, const char *key, int required, uint64_t *v, wsync_err_t *err)
{
	const msgpack_object *o = wsync_msg_get(&r->msg, key);

	if (o == NULL)
		return required ? s_missing(key, err) : 0;
	if (wsync_obj_u64(o, v) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not an unsigned integer",
		    key);
	return 0;
}

/* An optional boolean field; 0 when absent. */
static int
s_bool(const struct s_req *r, const char *key, int *v, wsync_err_t *err)
{
	const msgpack_object *o = wsync_msg_get(&r->msg, key);

	*v = 0;
	if (o == NULL)
		return 0;
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not true or false", key);
	*v = o->via.boolean;
	return 0;
}

/*
 * A list of strings, each passing check, copied into *out (caller frees with
 * s_strv_free); *out NULL when absent and optional. At most S_MAX_LIST.
 */
static int
s_list(const msgpack_object *o, const char *key, int required, int (*check)(const char *),
    char ***out, size_t *n, wsync_err_t *err)
{
	char buf[S_MAX_NAME + 1];

	*out = NULL;
	*n = 0;
	if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
		return required ? s_missing(key, err) : 0;
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > S_MAX_LIST)
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not a list of at most %d "
		    "strings", key, S_MAX_LIST);
	if ((*out = calloc(o->via.array.size + 1, sizeof(**out))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (wsync_obj_str(&o->via.array.ptr[i], buf, sizeof(buf)) < 0 || check(buf) < 0) {
			wsync_err_set(err, EX_PROTOCOL, "field \"%s\": entry %u is not %s", key, i,
			    check == wsync_model_id_check ? "a model id" : "an id");
			goto fail;
		}
		if (s_strv_has(*out, *n, buf))
			continue;
		if (((*out)[*n] = strdup(buf)) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
		(*n)++;
	}
	return 0;
fail:
	s_strv_free(*out, *n);
	*out = NULL;
	*n = 0;
	return -1;
}

/* ---- replies ---- */

/* Starts an ok reply to request id with nfields more fields. */
static void
s_ok(wsync_enc_t *e, uint64_t id, size_t nfields)
{
	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 2);
	wsync_enc_kv_u64(e, "id", id);
	wsync_enc_kv_bool(e, "ok", 1);
}

/* Sends a reply to ident and frees it. */
static void
s_send(wsync_hub_t *h, const void *ident, size_t identlen, wsync_enc_t *e)
{
	wsync_send(h->router, ident, identlen, e, NULL, 0, ZMQ_DONTWAIT);
	wsync_enc_free(e);
}

static void
s_reply(wsync_hub_t *h, const struct s_req *r, wsync_enc_t *e)
{
	s_send(h, r->ident, r->identlen, e);
}

/* Starts a refusal with nfields more fields. */
static void
s_refusal(wsync_enc_t *e, uint64_t id, const wsync_err_t *err, size_t nfields)
{
	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 4);
	wsync_enc_kv_u64(e, "id", id);
	wsync_enc_kv_bool(e, "ok", 0);
	wsync_enc_kv_u64(e, "code", (uint64_t)err->code);
	wsync_enc_kv_str(e, "error", err->msg);
}

/* Sends reply e, then data (taken over) as the last frame, without copying it. */
static void
s_reply_data(wsync_hub_t *h, const struct s_req *r, wsync_enc_t *e, zmq_msg_t *data)
{
	const int f = ZMQ_DONTWAIT | ZMQ_SNDMORE;

	if (zmq_send(h->router, r->ident, r->identlen, f) >= 0 &&
	    zmq_send(h->router, "", 0, f) >= 0 &&
	    zmq_send(h->router, e->sb.data, e->sb.size, f) >= 0)
		zmq_msg_send(data, h->router, ZMQ_DONTWAIT);
	zmq_msg_close(data);
	wsync_enc_free(e);
}

/* ---- workers ---- */

static int
s_alive(const struct s_worker *w, int64_t now)
{
	return !w->gone && w->seen > 0 && now - w->seen <= WSYNC_ALIVE_MS;
}

static const char *
s_worker_name(const void *workers, size_t i)
{
	return ((struct s_worker *const *)workers)[i]->id;
}

static size_t
s_worker_index(const wsync_hub_t *h, const char *id, int *found)
{
	return wsync_index_find(h->workers, h->nworkers, s_worker_name, id, found);
}

static struct s_worker *
s_worker_find(const wsync_hub_t *h, const char *id)
{
	int found;
	size_t at = s_worker_index(h, id, &found);

	return found ? h->workers[at] : NULL;
}

static void
s_worker_free(struct s_worker *w)
{
	for (size_t i = 0; i < w->nmodels; i++)
		free(w->models[i].reason);
	free(w->models);
	free(w);
}

static void
s_worker_remove(wsync_hub_t *h, size_t at)
{
	s_worker_free(h->workers[at]);
	memmove(&h->workers[at], &h->workers[at + 1],
	    (h->nworkers - at - 1) * sizeof(*h->workers));
	h->nworkers--;
}

/* Makes room for one more worker by forgetting the longest-dead one; -1 when all live. */
static int
s_worker_evict(wsync_hub_t *h, int64_t now)
{
	size_t oldest = h->nworkers;

	for (size_t i = 0; i < h->nworkers; i++)
		if (!s_alive(h->workers[i], now) &&
		    (oldest == h->nworkers || h->workers[i]->seen < h->workers[oldest]->seen))
			oldest = i;
	if (oldest == h->nworkers)
		return -1;
	s_log(h, "event=forget worker=%s", h->workers[oldest]->id);
	s_worker_remove(h, oldest);
	return 0;
}

/* The worker with this id, made when new, marked seen now. */
static struct s_worker *
s_worker_touch(wsync_hub_t *h, const char *id, wsync_err_t *err)
{
	int64_t now = wsync_now_ms();
	struct s_worker *w;
	int found;
	size_t at = s_worker_index(h, id, &found);

	if (found) {
		w = h->workers[at];
		w->seen = now;
		w->gone = 0;
		return w;
	}
	/* One connection cannot make up thousands of workers and crowd real ones out. */
	for (size_t i = 0, mine = 0; i < h->nworkers; i++)
		if (strcmp(h->workers[i]->conn, h->conn) == 0 && ++mine == S_CONN_WORKERS) {
			wsync_err_set(err, EX_UNAVAILABLE, "this connection made %d workers known "
			    "already (the most one may)", S_CONN_WORKERS);
			return NULL;
		}
	if (h->nworkers == S_MAX_WORKERS) {
		if (s_worker_evict(h, now) < 0) {
			wsync_err_set(err, EX_UNAVAILABLE, "the hub already follows %d live workers",
			    S_MAX_WORKERS);
			return NULL;
		}
		at = s_worker_index(h, id, &found);
	}
	if ((w = calloc(1, sizeof(*w))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	if (h->workers == NULL &&
	    (h->workers = calloc(S_MAX_WORKERS, sizeof(*h->workers))) == NULL) {
		free(w);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	snprintf(w->id, sizeof(w->id), "%s", id);
	snprintf(w->conn, sizeof(w->conn), "%s", h->conn);
	w->seen = now;
	memmove(&h->workers[at + 1], &h->workers[at], (h->nworkers - at) * sizeof(*h->workers));
	h->workers[at] = w;
	h->nworkers++;
	return w;
}

static struct s_wmodel *
s_wmodel_find(const struct s_worker *w, const char *model)
{
	for (size_t i = 0; i < w->nmodels; i++)
		if (strcmp(w->models[i].model, model) == 0)
			return &w->models[i];
	return NULL;
}

/* The worker's record of model, made when new. */
static struct s_wmodel *
s_wmodel_get(struct s_worker *w, const char *model, wsync_err_t *err)
{
	struct s_wmodel *wm = s_wmodel_find(w, model);

	if (wm != NULL)
		return wm;
	if (w->nmodels == S_WORKER_MODELS) {
		wsync_err_set(err, EX_USAGE, "worker %s follows %d models already", w->id,
		    S_WORKER_MODELS);
		return NULL;
	}
	if (w->nmodels == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 4;
		struct s_wmodel *nm = realloc(w->models, cap * sizeof(*nm));
		if (nm == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			return NULL;
		}
		w->models = nm;
		w->cap = cap;
	}
	wm = &w->models[w->nmodels++];
	memset(wm, 0, sizeof(*wm));
	snprintf(wm->model, sizeof(wm->model), "%s", model);
	return wm;
}

static uint64_t
s_applied(const struct s_worker *w, const char *model)
{
	const struct s_wmodel *wm = w != NULL ? s_wmodel_find(w, model) : NULL;

	return wm != NULL ? wm->applied : 0;
}

/* Records that worker w has applied version of wm; an ack clears the failures it supersedes. */
static void
s_applied_set(struct s_wmodel *wm, uint64_t version, int ack)
{
	wm->applied = version;
	if (ack && wm->failed != 0 && wm->failed <= version) {
		wm->failed = 0;
		free(wm->reason);
		wm->reason = NULL;
	}
}

/* ---- waits ---- */

static void
s_wait_free(struct s_wait *w)
{
	s_strv_free(w->ids, w->nids);
}

/* 1 when worker w (may be NULL) has applied the waited version or a newer one. */
static int
s_wait_done_by(const struct s_wait *wt, const struct s_worker *w)
{
	return s_applied(w, wt->model) >= wt->version;
}

static int
s_wait_satisfied(const wsync_hub_t *h, const struct s_wait *wt)
{
	uint64_t n = 0;

	if (wt->mode != S_COUNT) {
		for (size_t i = 0; i < wt->nids; i++)
			if (!s_wait_done_by(wt, s_worker_find(h, wt->ids[i])))
				return 0;
		return 1;
	}
	for (size_t i = 0; i < h->nworkers && n < wt->count; i++)
		n += s_wait_done_by(wt, h->workers[i]);
	return n >= wt->count;
}

/* 1 when worker w belongs in the answer to wt, done or missing as done says. */
static int
s_wait_lists(const struct s_wait *wt, const struct s_worker *w, int done)
{
	const struct s_wmodel *wm = s_wmodel_find(w, wt->model);

	if (done)
		return s_wait_done_by(wt, w);
	return !s_wait_done_by(wt, w) && wm != NULL && wm->watching;
}

/* A commit's versions: [{model, version, size, content}], n of them. */
static void
s_pack_versions(wsync_enc_t *e, const wsync_committed_t *c, size_t n)
{
	wsync_enc_str(e, "versions");
	msgpack_pack_array(&e->pk, n);
	for (size_t i = 0; i < n; i++) {
		msgpack_pack_map(&e->pk, 4);
		wsync_enc_kv_str(e, "model", c[i].model);
		wsync_enc_kv_u64(e, "version", c[i].version);
		wsync_enc_kv_u64(e, "size", c[i].size);
		wsync_enc_kv_u64(e, "content", c[i].content);
	}
}

/* The versions field of a commit's wait (nothing for a wait request). */
static void
s_wait_versions(wsync_enc_t *e, const struct s_wait *wt)
{
	wsync_committed_t c = { .version = wt->version, .size = wt->size,
	    .content = wt->content };

	if (!wt->commit)
		return;
	snprintf(c.model, sizeof(c.model), "%s", wt->model);
	s_pack_versions(e, &c, 1);
}

/* The satisfied wait's reply: workers: [{worker, version}] (and a commit's versions). */
static void
s_wait_answer(wsync_hub_t *h, const struct s_wait *wt)
{
	wsync_enc_t e;
	size_t n = 0;

	s_ok(&e, wt->req, 1 + wt->commit);
	s_wait_versions(&e, wt);
	wsync_enc_str(&e, "workers");
	if (wt->mode != S_COUNT) {
		msgpack_pack_array(&e.pk, wt->nids);
		for (size_t i = 0; i < wt->nids; i++) {
			msgpack_pack_map(&e.pk, 2);
			wsync_enc_kv_str(&e, "worker", wt->ids[i]);
			wsync_enc_kv_u64(&e, "version", s_applied(s_worker_find(h, wt->ids[i]),
			    wt->model));
		}
	} else {
		for (size_t i = 0; i < h->nworkers; i++)
			n += s_wait_lists(wt, h->workers[i], 1);
		msgpack_pack_array(&e.pk, n);
		for (size_t i = 0; i < h->nworkers; i++) {
			if (!s_wait_lists(wt, h->workers[i], 1))
				continue;
			msgpack_pack_map(&e.pk, 2);
			wsync_enc_kv_str(&e, "worker", h->workers[i]->id);
			wsync_enc_kv_u64(&e, "version", s_applied(h->workers[i], wt->model));
		}
	}
	s_send(h, wt->ident, wt->identlen, &e);
	s_log(h, "event=waited model=%s version=%" PRIu64 " ms=%" PRId64, wt->model, wt->version,
	    wsync_now_ms() - wt->start);
}

/* One entry of a timed-out wait's missing list. */
static void
s_missing_entry(wsync_enc_t *e, const struct s_wait *wt, const char *id,
    const struct s_worker *w, int64_t now)
{
	const struct s_wmodel *wm = w != NULL ? s_wmodel_find(w, wt->model) : NULL;
	int failed = wm != NULL && wm->failed != 0;

	msgpack_pack_map(&e->pk, 3 + failed);
	wsync_enc_kv_str(e, "worker", id);
	wsync_enc_kv_u64(e, "version", wm != NULL ? wm->applied : 0);
	wsync_enc_str(e, "seen");
	/* A worker never seen has no "seconds ago". */
	if (w != NULL)
		msgpack_pack_double(&e->pk, (double)(now - w->seen) / 1000.0);
	else
		msgpack_pack_nil(&e->pk);
	if (failed)
		wsync_enc_kv_str(e, "failure", wm->reason);
}

/* The timed-out wait's refusal: code 75 and missing: [{worker, version, seen, failure}]. */
static void
s_wait_expire(wsync_hub_t *h, const struct s_wait *wt, int64_t now)
{
	wsync_err_t err;
	wsync_enc_t e;
	size_t total = 0, missing = 0;

	if (wt->mode != S_COUNT) {
		total = wt->nids;
		for (size_t i = 0; i < wt->nids; i++)
			missing += !s_wait_done_by(wt, s_worker_find(h, wt->ids[i]));
		wsync_err_set(&err, EX_TEMPFAIL, "%s version %" PRIu64 ": %zu of %zu workers have "
		    "not applied it after %.1f s", wt->model, wt->version, missing, total,
		    (double)(wt->deadline - wt->start) / 1000.0);
	} else {
		for (size_t i = 0; i < h->nworkers; i++) {
			total += s_wait_lists(wt, h->workers[i], 1);
			missing += s_wait_lists(wt, h->workers[i], 0);
		}
		wsync_err_set(&err, EX_TEMPFAIL, "%s version %" PRIu64 ": %zu of %" PRIu64 " workers "
		    "have applied it after %.1f s", wt->model, wt->version, total, wt->count,
		    (double)(wt->deadline - wt->start) / 1000.0);
	}
	s_refusal(&e, wt->req, &err, 1 + wt->commit);
	s_wait_versions(&e, wt);
	wsync_enc_str(&e, "missing");
	msgpack_pack_array(&e.pk, missing);
	if (wt->mode != S_COUNT) {
		for (size_t i = 0; i < wt->nids; i++) {
			struct s_worker *w = s_worker_find(h, wt->ids[i]);
			if (!s_wait_done_by(wt, w))
				s_missing_entry(&e, wt, wt->ids[i], w, now);
		}
	} else {
		for (size_t i = 0; i < h->nworkers; i++)
			if (s_wait_lists(wt, h->workers[i], 0))
				s_missing_entry(&e, wt, h->workers[i]->id, h->workers[i], now);
	}
	s_send(h, wt->ident, wt->identlen, &e);
	h->counts.waits_timed_out++;
	s_log(h, "event=timeout model=%s version=%" PRIu64 " missing=%zu", wt->model,
	    wt->version, missing);
}

static void
s_wait_remove(wsync_hub_t *h, size_t i)
{
	s_wait_free(&h->waits[i]);
	h->waits[i] = h->waits[--h->nwaits];
}

/* Answers the waits on model that are now satisfied. */
static void
s_waits_check(wsync_hub_t *h, const char *model)
{
	for (size_t i = 0; i < h->nwaits;) {
		if (strcmp(h->waits[i].model, model) == 0 && s_wait_satisfied(h, &h->waits[i])) {
			s_wait_answer(h, &h->waits[i]);
			s_wait_remove(h, i);
		} else
			i++;
	}
}

/* ---- uploads ---- */

/* Upload id of the client r comes from; another client's is refused (77). */
static struct s_upload *
s_upload_find(wsync_hub_t *h, const struct s_req *r, uint64_t id, wsync_err_t *err)
{
	for (int i = 0; i < S_UPLOADS; i++) {
		if (id == 0 || h->uploads[i].id != id)
			continue;
		if (strcmp(h->uploads[i].peer, r->peer) != 0) {
			wsync_err_set(err, EX_NOPERM, "upload %" PRIu64 " is another client's", id);
			return NULL;
		}
		return &h->uploads[i];
	}
	wsync_err_set(err, EX_NOINPUT, "upload %" PRIu64 " does not exist (it expired, was "
	    "aborted or committed)", id);
	return NULL;
}

/* A handed-over upload whose files were written since last seen is touched. */
static void
s_upload_progress(struct s_upload *u, int64_t now)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < u->nfiles; i++) {
		struct stat st;
		if (u->temps[i].fd >= 0 && fstat(u->temps[i].fd, &st) == 0)
			sum += (uint64_t)st.st_mtim.tv_sec * 1000000000u +
			    (uint64_t)st.st_mtim.tv_nsec;
	}
	if (sum != u->written) {
		u->written = sum;
		u->touched = now;
	}
}

/* Frees an upload's slot; its temporary files are removed unless a commit consumed them. */
static void
s_upload_end(struct s_upload *u)
{
	for (size_t i = 0; i < u->nfiles; i++)
		wsync_store_temp_remove(&u->temps[i]);
	free(u->temps);
	free(u->files);
	s_strv_free(u->targets, u->ntargets);
	memset(u, 0, sizeof(*u));
}

/* ---- the ops ---- */

static int
s_op_hello(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	static const char *const roles[] = { "push", "pull", "watch", "inspect" };
	char role[16], worker[WSYNC_MAX_ID + 1], host[WSYNC_MAX_ID + 1], **models;
	uint64_t proto, pid = 0;
	size_t nmodels, i;
	struct s_worker *w;
	wsync_enc_t e;

	if (s_u64(r, "proto", 1, &proto, err) < 0 || s_str(r, "role", 1, NULL, role,
	    sizeof(role), err) < 0)
		return -1;
	if (proto != WSYNC_PROTO)
		return wsync_err_set(err, EX_PROTOCOL, "protocol version %" PRIu64 " is not "
		    "supported (this hub speaks %d)", proto, WSYNC_PROTO);
	for (i = 0; i < 4 && strcmp(role, roles[i]) != 0; i++)
		;
	if (i == 4)
		return wsync_err_set(err, EX_PROTOCOL, "role \"%s\" is not push, pull, watch or "
		    "inspect", role);
	if (s_worker_field(r, strcmp(role, "watch") == 0, worker, err) < 0 ||
	    s_str(r, "host", 0, wsync_id_check, host, sizeof(host), err) < 0 ||
	    s_u64(r, "pid", 0, &pid, err) < 0 ||
	    s_list(wsync_msg_get(&r->msg, "models"), "models", 0, wsync_model_id_check,
	    &models, &nmodels, err) < 0)
		return -1;
	if (worker[0] != '\0') {
		if ((w = s_worker_touch(h, worker, err)) == NULL)
			goto fail;
		snprintf(w->host, sizeof(w->host), "%s", host);
		w->pid = pid;
		/* A worker that says hello again watches what it says now. */
		for (i = 0; i < w->nmodels; i++)
			w->models[i].watching = 0;
		for (i = 0; i < nmodels; i++) {
			struct s_wmodel *wm = s_wmodel_get(w, models[i], err);
			if (wm == NULL)
				goto fail;
			wm->watching = 1;
		}
	}
	s_log(h, "event=hello role=%s%s%s host=%s pid=%" PRIu64, role, worker[0] ? " worker=" :
	    "", worker, host[0] ? host : "-", pid);
	s_strv_free(models, nmodels);
	/* store and store_id let a client on this host take versions from the files. */
	s_ok(&e, r->id, 8);
	wsync_enc_kv_str(&e, "hub", h->name);
	wsync_enc_kv_str(&e, "store", wsync_store_dir(h->store));
	wsync_enc_kv_str(&e, "store_id", wsync_store_id(h->store));
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "pub", h->pub_endpoint);
	wsync_enc_kv_u64(&e, "chunk", WSYNC_CHUNK);
	wsync_enc_kv_u64(&e, "window", WSYNC_WINDOW);
	wsync_enc_kv_u64(&e, "heartbeat_ms", WSYNC_HEARTBEAT_MS);
	s_reply(h, r, &e);
	return 0;
fail:
	s_strv_free(models, nmodels);
	return -1;
}

/* Packs {version, size, content, time} of v. */
static void
s_pack_head(wsync_enc_t *e, const wsync_version_t *v)
{
	msgpack_pack_map(&e->pk, 5);
	wsync_enc_kv_u64(e, "version", v->version);
	wsync_enc_kv_u64(e, "size", v->size);
	wsync_enc_kv_u64(e, "content", v->content);
	wsync_enc_kv_double(e, "time", v->time);
	wsync_enc_kv_u64(e, "mtime", v->mtime_ns);
}

/* Records a heartbeat's applied map {model: version} for worker w. */
/* The highest version number the store ever gave model (0: none). */
static uint64_t
s_numbered(wsync_hub_t *h, const char *model)
{
	const wsync_model_t *m = wsync_store_find(h->store, model);

	return m != NULL && m->next > 0 ? m->next - 1 : 0;
}

static int
s_heads_applied(wsync_hub_t *h, struct s_worker *w, const msgpack_object *o,
    wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];

	if (o == NULL)
		return 0;
	if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > S_MAX_LIST)
		return wsync_err_set(err, EX_PROTOCOL, "field \"applied\" is not a map of model "
		    "ids to versions");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		uint64_t v;
		struct s_wmodel *wm;
		if (wsync_obj_str(&o->via.map.ptr[i].key, model, sizeof(model)) < 0 ||
		    wsync_model_id_check(model) < 0 ||
		    wsync_obj_u64(&o->via.map.ptr[i].val, &v) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "field \"applied\" is not a map of "
			    "model ids to versions");
		if (v == 0 && s_wmodel_find(w, model) == NULL)
			continue;
		/* A number this store never gave (the worker followed another store) is none. */
		if (v > 0 && s_numbered(h, model) < v)
			v = 0;
		if ((wm = s_wmodel_get(w, model, err)) == NULL)
			return -1;
		s_applied_set(wm, v, 0);
	}
	for (uint32_t i = 0; i < o->via.map.size; i++)
		if (wsync_obj_str(&o->via.map.ptr[i].key, model, sizeof(model)) == 0)
			s_waits_check(h, model);
	return 0;
}

static int
s_op_heads(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1], **models;
	const wsync_version_t **heads = NULL;
	const char **ids = NULL;
	size_t nmodels, n = 0, cap;
	struct s_worker *w = NULL;
	wsync_enc_t e;
	int rc = -1;

	if (s_worker_field(r, 0, worker, err) < 0 ||
	    s_list(wsync_msg_get(&r->msg, "models"), "models", 0, wsync_model_id_check,
	    &models, &nmodels, err) < 0)
		return -1;
	if (worker[0] != '\0') {
		if ((w = s_worker_touch(h, worker, err)) == NULL)
			goto done;
		for (size_t i = 0; i < nmodels; i++) {
			struct s_wmodel *wm = s_wmodel_get(w, models[i], err);
			if (wm == NULL)
				goto done;
			wm->watching = 1;
		}
		if (s_heads_applied(h, w, wsync_msg_get(&r->msg, "applied"), err) < 0)
			goto done;
	}
	cap = models != NULL ? nmodels : wsync_store_count(h->store);
	heads = calloc(cap + 1, sizeof(*heads));
	ids = calloc(cap + 1, sizeof(*ids));
	if (heads == NULL || ids == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < cap; i++) {
		const wsync_model_t *m = models != NULL ? wsync_store_find(h->store, models[i]) :
		    wsync_store_model(h->store, i);
		const wsync_version_t *v = m != NULL ? wsync_model_head(m, w ? w->id : NULL) : NULL;
		if (v != NULL) {
			ids[n] = m->id;
			heads[n++] = v;
		}
	}
	/* Who answers: a watcher that sees these change knows the hub restarted. */
	s_ok(&e, r->id, 3);
	wsync_enc_kv_str(&e, "hub", h->name);
	wsync_enc_kv_str(&e, "store", wsync_store_id(h->store));
	wsync_enc_str(&e, "heads");
	msgpack_pack_map(&e.pk, n);
	for (size_t i = 0; i < n; i++) {
		wsync_enc_str(&e, ids[i]);
		s_pack_head(&e, heads[i]);
	}
	s_reply(h, r, &e);
	rc = 0;
done:
	free(heads);
	free(ids);
	s_strv_free(models, nmodels);
	return rc;
}

/* Explains why model m has no version number version. */
static int
s_no_version(const wsync_model_t *m, uint64_t version, unsigned keep, wsync_err_t *err)
{
	const wsync_version_t *newest = wsync_model_newest(m);

	if (newest == NULL)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", m->id);
	if (version > newest->version)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version %" PRIu64,
		    m->id, version);
	return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version %" PRIu64 " any more "
	    "(retired: the hub keeps the last %u)", m->id, version, keep);
}

/* Looks up model (66 when unknown) and version (0: the head worker sees). */
static const wsync_version_t *
s_lookup(wsync_hub_t *h, const char *model, uint64_t version, const char *worker,
    wsync_err_t *err)
{
	const wsync_model_t *m = wsync_store_find(h->store, model);
	const wsync_version_t *v;

	if (m == NULL) {
		wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", model);
		return NULL;
	}
	v = version == 0 ? wsync_model_head(m, worker) : wsync_model_version(m, version);
	if (v != NULL)
		return v;
	if (version == 0 && wsync_model_newest(m) != NULL)
		wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version for %s%s", m->id,
		    worker ? "worker " : "everyone (only versions pushed to named workers)",
		    worker ? worker : "");
	else
		s_no_version(m, version, h->keep, err);
	return NULL;
}

static int
s_op_stat(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1], worker[WSYNC_MAX_ID + 1];
	const wsync_version_t *v;
	uint64_t version;
	wsync_enc_t e;

	if (s_model(r, model, err) < 0 || s_u64(r, "version", 1, &version, err) < 0 ||
	    s_worker_field(r, 0, worker, err) < 0)
		return -1;
	if (worker[0] != '\0' && s_worker_touch(h, worker, err) == NULL)
		return -1;
	if ((v = s_lookup(h, model, version, worker[0] ? worker : NULL, err)) == NULL)
		return -1;
	s_ok(&e, r->id, 6);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", v->version);
	wsync_enc_kv_u64(&e, "size", v->size);
	wsync_enc_kv_u64(&e, "content", v->content);
	wsync_enc_kv_double(&e, "time", v->time);
	wsync_enc_kv_u64(&e, "mtime", v->mtime_ns);
	s_reply(h, r, &e);
	return 0;
}

/*
 * The test-only fault of wsync-serve(1) (WSYNC_TEST_FLIP_GET): the chunk is
 * copied with its last bit flipped, as a link that corrupts data would.
 */
static int
s_flip_last(zmq_msg_t *data, wsync_err_t *err)
{
	zmq_msg_t copy;
	size_t len = zmq_msg_size(data);

	if (len == 0)
		return 0;
	if (zmq_msg_init_size(&copy, len) < 0) {
		zmq_msg_close(data);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	memcpy(zmq_msg_data(&copy), zmq_msg_data(data), len);
	((unsigned char *)zmq_msg_data(&copy))[len - 1] ^= 1;
	zmq_msg_close(data);
	*data = copy;
	return 0;
}

static int
s_op_get(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version, off, len;
	const wsync_version_t *v;
	zmq_msg_t data;
	wsync_enc_t e;

	char worker[WSYNC_MAX_ID + 1];

	if (s_model(r, model, err) < 0 || s_u64(r, "version", 1, &version, err) < 0 ||
	    s_u64(r, "off", 1, &off, err) < 0 || s_u64(r, "len", 1, &len, err) < 0 ||
	    s_worker_field(r, 0, worker, err) < 0)
		return -1;
	/* A worker busy fetching a large version is alive. */
	if (worker[0] != '\0' && s_worker_touch(h, worker, err) == NULL)
		return -1;
	if (version == 0)
		return wsync_err_set(err, EX_USAGE, "get needs a version number (stat finds the "
		    "head)");
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "get of %" PRIu64 " bytes is over the chunk "
		    "size of %u", len, WSYNC_CHUNK);
	if ((v = s_lookup(h, model, version, NULL, err)) == NULL)
		return -1;
	if (off > v->size)
		return wsync_err_set(err, EX_USAGE, "offset %" PRIu64 " is beyond the end of "
		    "model \"%s\" version %" PRIu64 " (%" PRIu64 " bytes)", off, model, version,
		    v->size);
	if (len > v->size - off)
		len = v->size - off;
	/* Sent straight from the mapped file: no copy, and no fresh pages per chunk. */
	if (wsync_version_msg((wsync_version_t *)v, off, len, &data, err) < 0)
		return -1;
	if (h->flip_get && s_flip_last(&data, err) < 0)
		return -1;
	s_ok(&e, r->id, 2);
	wsync_enc_kv_u64(&e, "off", off);
	wsync_enc_kv_u64(&e, "len", len);
	s_reply_data(h, r, &e, &data);
	h->counts.bytes_served += len;
	return 0;
}

/* Reads begin's files: [{model, size}] into u. */
static int
s_begin_files(wsync_hub_t *h, const msgpack_object *o, struct s_upload *u, wsync_err_t *err)
{
	if (o == NULL)
		return s_missing("files", err);
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
	    o->via.array.size > S_UPLOAD_FILES)
		return wsync_err_set(err, EX_PROTOCOL, "field \"files\" is not a list of 1 to %d "
		    "files", S_UPLOAD_FILES);
	if ((u->temps = calloc(o->via.array.size, sizeof(*u->temps))) == NULL ||
	    (u->files = calloc(o->via.array.size, sizeof(*u->files))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *f = &o->via.array.ptr[i];
		char model[WSYNC_MAX_MODEL + 1];
		uint64_t size;
		if (wsync_obj_str(wsync_obj_get(f, "model"), model, sizeof(model)) < 0 ||
		    wsync_model_id_check(model) < 0 ||
		    wsync_obj_u64(wsync_obj_get(f, "size"), &size) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "files[%u] is not {model: a model id, "
			    "size: an unsigned integer}", i);
		if (size == 0 || size > S_MAX_FILE)
			return wsync_err_set(err, EX_USAGE, "file %u (model %s) has %" PRIu64 " bytes:"
			    " a file has 1 byte to 64 GiB", i, model, size);
		u->files[i].size = size;
		if (u->local) {
			/* Written in place: sized now, and of a spare's existing pages if free. */
			int rc = wsync_store_slot_open(h->store, model, size, &u->temps[i], err);
			if (rc < 0)
				return -1;
			u->recycled += (size_t)rc;
		} else if (wsync_store_temp_open(h->store, model, &u->temps[i], err) < 0)
			return -1;
		u->nfiles = i + 1;
	}
	return 0;
}

static int
s_upload_open(wsync_hub_t *h, struct s_req *r, struct s_upload **up, wsync_err_t *err)
{
	struct s_upload *u = NULL;
	char list[512] = "";
	size_t n = 0, mine = 0;
	uint64_t pending = 0;

	for (int i = 0; i < S_UPLOADS; i++) {
		const struct s_upload *o = &h->uploads[i];
		if (o->id == 0 && u == NULL)
			u = &h->uploads[i];
		if (o->id != 0 && strcmp(o->peer, r->peer) == 0)
			mine++;
		for (size_t j = 0; o->id != 0 && j < o->nfiles; j++)
			pending += o->files[j].size - o->files[j].filled;
	}
	if (u == NULL)
		return wsync_err_set(err, EX_UNAVAILABLE, "the hub has %d uploads in flight "
		    "already; try again later", S_UPLOADS);
	/* One peer cannot take every slot: others still get to push. */
	if (mine >= WSYNC_PEER_UPLOADS)
		return wsync_err_set(err, EX_UNAVAILABLE, "this client has %d uploads in flight "
		    "already (the most one may have); try again later", WSYNC_PEER_UPLOADS);
	if (s_str(r, "pusher", 0, wsync_id_check, u->pusher, sizeof(u->pusher), err) < 0 ||
	    s_bool(r, "local", &u->local, err) < 0 ||
	    s_list(wsync_msg_get(&r->msg, "workers"), "workers", 0, wsync_id_check,
	    &u->targets, &u->ntargets, err) < 0 ||
	    s_begin_files(h, wsync_msg_get(&r->msg, "files"), u, err) < 0)
		goto fail;
	for (size_t i = 0; i < u->nfiles; i++)
		u->total += u->files[i].size;
	if (wsync_space_check(wsync_store_dir(h->store), u->total, pending, err) < 0)
		goto fail;
	if (u->targets != NULL && u->ntargets == 0) {
		wsync_err_set(err, EX_USAGE, "field \"workers\" is empty: the version would reach "
		    "nobody");
		goto fail;
	}
	u->id = ++h->last_upload;
	h->counts.uploads++;
	u->touched = wsync_now_ms();
	snprintf(u->peer, sizeof(u->peer), "%s", r->peer);
	for (size_t i = 0; i < u->nfiles; i++)
		n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0, "%s%s",
		    i ? "," : "", u->temps[i].model);
	s_log(h, "event=begin upload=%" PRIu64 " models=%s pusher=%s recycled=%zu transfer=%s",
	    u->id, list, u->pusher[0] ? u->pusher : "-", u->recycled,
	    u->local ? "copy" : "socket");
	*up = u;
	return 0;
fail:
	s_upload_end(u);
	return -1;
}

static int
s_op_begin(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	struct s_upload *u;
	wsync_enc_t e;

	if (s_upload_open(h, r, &u, err) < 0)
		return -1;
	s_ok(&e, r->id, u->local ? 2 : 1);
	wsync_enc_kv_u64(&e, "upload", u->id);
	if (u->local) {
		/* The pusher shares this host and store: it writes the files in place itself. */
		wsync_enc_str(&e, "paths");
		msgpack_pack_array(&e.pk, u->nfiles);
		for (size_t i = 0; i < u->nfiles; i++)
			wsync_enc_str(&e, u->temps[i].path);
	}
	s_reply(h, r, &e);
	return 0;
}

/* Writes len bytes at off of file into upload u, refusing gaps and overruns. */
static int
s_upload_write(struct s_upload *u, uint64_t file, uint64_t off, const char *data,
    uint64_t len, wsync_err_t *err)
{
	struct s_ufile *f;
	uint64_t done = 0;

	if (file >= u->nfiles)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " has no file %" PRIu64,
		    u->id, file);
	/* Its pusher writes it in the store: bytes sent here could ride on a trusted commit. */
	if (u->local)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " is written in place in the "
		    "store, not sent", u->id);
	f = &u->files[file];
	if (off > f->filled)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %" PRIu64 ": a chunk "
		    "at offset %" PRIu64 " leaves a gap (%" PRIu64 " bytes received)", u->id, file,
		    off, f->filled);
	if (len > f->size - off)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %" PRIu64 ": a chunk "
		    "of %" PRIu64 " bytes at offset %" PRIu64 " goes past its size of %" PRIu64,
		    u->id, file, len, off, f->size);
	while (done < len) {
		ssize_t n = pwrite(u->temps[file].fd, data + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wsync_err_set(err, EX_IOERR, "upload %" PRIu64 " file %" PRIu64 ": "
			    "cannot write: %s", u->id, file, n < 0 ? strerror(errno) : "no progress");
		done += (uint64_t)n;
	}
	if (off + len > f->filled)
		f->filled = off + len;
	u->touched = wsync_now_ms();
	return 0;
}

static int
s_op_chunk(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	uint64_t id, file, off, len;
	struct s_upload *u;
	wsync_enc_t e;

	if (s_u64(r, "upload", 1, &id, err) < 0 || s_u64(r, "file", 1, &file, err) < 0 ||
	    s_u64(r, "off", 1, &off, err) < 0)
		return -1;
	if (r->parts->n != 4)
		return wsync_err_set(err, EX_PROTOCOL, "a chunk without its data frame");
	if ((u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	len = wsync_part_size(r->parts, 3);
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "a chunk of %" PRIu64 " bytes is over the "
		    "chunk size of %u", len, WSYNC_CHUNK);
	/* Resending is fine; rewriting the same bytes for ever to keep a slot is not. */
	if ((u->received += len) > 2 * u->total + (uint64_t)WSYNC_WINDOW * WSYNC_CHUNK) {
		s_log(h, "event=abort upload=%" PRIu64 " peer=%s reason=\"sent more than twice "
		    "its size\"", id, u->peer);
		s_upload_end(u);
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " was sent more than twice "
		    "its %" PRIu64 " bytes: dropped", id, u->total);
	}
	if (s_upload_write(u, file, off, wsync_part_data(r->parts, 3), len, err) < 0)
		return -1;
	h->counts.bytes_received += len;
	s_ok(&e, r->id, 0);
	s_reply(h, r, &e);
	return 0;
}

/*
 * Announces a committed version on PUB: topic model, then {model, version, size,
 * content, workers, group}; group names every model of the same commit, so a
 * watcher of several knows when it must take them together.
 */
static void
s_announce(wsync_hub_t *h, const wsync_committed_t *c, const struct s_upload *u)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 7);
	wsync_enc_str(&e, "group");
	msgpack_pack_array(&e.pk, u->nfiles);
	for (size_t i = 0; i < u->nfiles; i++)
		wsync_enc_str(&e, u->temps[i].model);
	wsync_enc_kv_str(&e, "model", c->model);
	wsync_enc_kv_u64(&e, "version", c->version);
	wsync_enc_kv_u64(&e, "size", c->size);
	wsync_enc_kv_u64(&e, "content", c->content);
	wsync_enc_kv_u64(&e, "mtime", c->mtime_ns);
	wsync_enc_str(&e, "workers");
	if (u->targets == NULL)
		msgpack_pack_nil(&e.pk);
	else {
		msgpack_pack_array(&e.pk, u->ntargets);
		for (size_t i = 0; i < u->ntargets; i++)
			wsync_enc_str(&e, u->targets[i]);
	}
	if (zmq_send(h->pub, c->model, strlen(c->model), ZMQ_DONTWAIT | ZMQ_SNDMORE) >= 0)
		zmq_send(h->pub, e.sb.data, e.sb.size, ZMQ_DONTWAIT);
	wsync_enc_free(&e);
}

static int s_wait_parse(wsync_hub_t *h, struct s_req *r, struct s_wait *wt,
    uint64_t *timeout, wsync_err_t *err);
static int s_wait_start(wsync_hub_t *h, const struct s_req *r, const wsync_model_t *m,
    struct s_wait *wt, int64_t start, uint64_t timeout, wsync_err_t *err);

/*
 * Commits every file of u together, announces the versions and answers r with
 * them: at once, or, when r asks for a wait (its mode, for one file), once
 * that wait is over.
 */
static int
s_upload_commit(wsync_hub_t *h, struct s_req *r, struct s_upload *u, wsync_err_t *err)
{
	wsync_committed_t out[S_UPLOAD_FILES];
	char targets[512] = "";
	wsync_commit_info_t info;
	wsync_enc_t e;
	struct s_wait wt = { .mode = S_ALL, .commit = 1 };
	int waits = wsync_msg_get(&r->msg, "mode") != NULL, rc = 0;
	int64_t asked = wsync_now_ms();         /* the wait's timeout runs from here */
	uint64_t id = u->id, timeout = 0;
	size_t n = 0;

	for (size_t i = 0; i < u->nfiles; i++) {
		struct stat st;
		if (u->local && fstat(u->temps[i].fd, &st) == 0 && (uint64_t)st.st_size ==
		    u->files[i].size)
			u->files[i].filled = u->files[i].size;
		if (u->files[i].filled != u->files[i].size)
			return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %zu (model %s) "
			    "has %" PRIu64 " of its %" PRIu64 " bytes", id, i, u->temps[i].model,
			    u->files[i].filled, u->files[i].size);
	}
	info.pusher = u->pusher;
	info.time = wsync_wall_time();
	info.targets = (const char *const *)u->targets;
	info.ntargets = u->ntargets;
	if (s_bool(r, "trust", &info.trust, err) < 0)
		return -1;
	if (info.trust && !u->local)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " came through the socket: "
		    "the hub verifies it (trust is for files written in its store)", id);
	if (waits && u->nfiles != 1)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " has %zu files: a commit "
		    "waits for one model's version (wait for each after the commit)", id,
		    u->nfiles);
	if (waits && s_wait_parse(h, r, &wt, &timeout, err) < 0) {
		s_wait_free(&wt);
		return -1;
	}
	/* On success the store consumed the temporary files: s_upload_end leaves them. */
	if (wsync_store_commit(h->store, u->temps, u->nfiles, &info, out, err) < 0) {
		s_wait_free(&wt);
		s_upload_end(u);
		return -1;
	}
	h->counts.commits += u->nfiles;
	if (!waits) {
		s_ok(&e, r->id, 1);
		s_pack_versions(&e, out, u->nfiles);
		s_reply(h, r, &e);
	}
	for (size_t i = 0; i < u->ntargets; i++)
		n += (size_t)snprintf(targets + n, n < sizeof(targets) ? sizeof(targets) - n : 0,
		    "%s%s", i ? "," : " workers=", u->targets[i]);
	for (size_t i = 0; i < u->nfiles; i++) {
		s_log(h, "event=commit model=%s version=%" PRIu64 " size=%" PRIu64 " content=%016"
		    PRIx64 " pusher=%s upload=%" PRIu64 "%s%s", out[i].model, out[i].version,
		    out[i].size, out[i].content, u->pusher[0] ? u->pusher : "-", id, targets,
		    info.trust ? " verified=no" : "");
		s_announce(h, &out[i], u);
	}
	for (size_t i = 0; i < u->nfiles; i++)
		s_waits_check(h, out[i].model);
	s_upload_end(u);
	if (waits) {
		memcpy(wt.model, out[0].model, sizeof(wt.model));
		wt.version = out[0].version;
		wt.size = out[0].size;
		wt.content = out[0].content;
		if ((rc = s_wait_start(h, r, wsync_store_find(h->store, wt.model), &wt, asked,
		    timeout, err)) < 0)
			s_wait_free(&wt);
	}
	return rc;
}

static int
s_op_commit(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	struct s_upload *u;
	uint64_t id;

	if (s_u64(r, "upload", 1, &id, err) < 0 || (u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	return s_upload_commit(h, r, u, err);
}

/*
 * A whole small push in one request: begin's fields, then one data frame with
 * every file's bytes one after the other; committed at once.
 */
static int
s_op_put(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	struct s_upload *u;
	const char *data;
	uint64_t len, at = 0;

	if (r->parts->n != 4)
		return wsync_err_set(err, EX_PROTOCOL, "a put without its data frame");
	data = wsync_part_data(r->parts, 3);
	len = wsync_part_size(r->parts, 3);
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is over the chunk "
		    "size of %u: use begin, chunk and commit", len, WSYNC_CHUNK);
	if (s_upload_open(h, r, &u, err) < 0)
		return -1;
	h->counts.bytes_received += len;
	for (size_t i = 0; i < u->nfiles; i++) {
		if (u->files[i].size > len - at) {
			s_upload_end(u);
			return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is shorter than "
			    "its files", len);
		}
		if (s_upload_write(u, i, 0, data + at, u->files[i].size, err) < 0) {
			s_upload_end(u);
			return -1;
		}
		at += u->files[i].size;
	}
	if (at != len) {
		s_upload_end(u);
		return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is longer than its "
		    "files (%" PRIu64 ")", len, at);
	}
	return s_upload_commit(h, r, u, err);
}

static int
s_op_abort(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	struct s_upload *u;
	wsync_enc_t e;
	uint64_t id;

	if (s_u64(r, "upload", 1, &id, err) < 0 || (u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	s_upload_end(u);
	s_log(h, "event=abort upload=%" PRIu64, id);
	s_ok(&e, r->id, 0);
	s_reply(h, r, &e);
	return 0;
}

/* ack and fail: worker, model, version, and for fail a reason. */
static int
s_op_report(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1], model[WSYNC_MAX_MODEL + 1];
	char reason[WSYNC_MAX_REASON + 1], quoted[4 * WSYNC_MAX_REASON + 8], transfer[8];
	int fail = strcmp(r->op, "fail") == 0;
	struct s_worker *w;
	struct s_wmodel *wm;
	uint64_t version;
	wsync_enc_t e;

	if (s_worker_field(r, 1, worker, err) < 0 || s_model(r, model, err) < 0 ||
	    s_u64(r, "version", 1, &version, err) < 0 ||
	    (fail && s_str(r, "reason", 1, NULL, reason, sizeof(reason), err) < 0) ||
	    s_str(r, "transfer", 0, s_transfer_check, transfer, sizeof(transfer), err) < 0)
		return -1;
	if (version == 0)
		return wsync_err_set(err, EX_USAGE, "%s of version 0: versions start at 1", r->op);
	if ((w = s_worker_touch(h, worker, err)) == NULL ||
	    (wm = s_wmodel_get(w, model, err)) == NULL)
		return -1;
	wm->watching = 1;
	if (fail) {
		char *copy = strdup(reason);
		if (copy == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		free(wm->reason);
		wm->reason = copy;
		wm->failed = version;
		wm->fail_time = wsync_wall_time();
		wm->failures++;
		s_log(h, "event=fail worker=%s model=%s version=%" PRIu64 " reason=\"%s\"", worker,
		    model, version, wsync_log_quote(reason, quoted, sizeof(quoted)));
	} else {
		s_applied_set(wm, version, 1);
		if (transfer[0] != '\0')
			memcpy(w->transfer, transfer, sizeof(w->transfer));
		s_log(h, "event=ack worker=%s model=%s version=%" PRIu64 "%s%s", worker, model,
		    version, transfer[0] ? " transfer=" : "", transfer);
		s_waits_check(h, model);
	}
	s_ok(&e, r->id, 0);
	s_reply(h, r, &e);
	return 0;
}

/* The workers a wait "all" waits for: the version's targets, else the live watchers. */
static int
s_wait_all(wsync_hub_t *h, const wsync_model_t *m, struct s_wait *wt, wsync_err_t *err)
{
	const wsync_version_t *v = wsync_model_version(m, wt->version);
	int64_t now = wsync_now_ms();
	size_t n = 0;

	if (v != NULL && v->targets != NULL)
		n = v->ntargets;
	else
		for (size_t i = 0; i < h->nworkers; i++) {
			const struct s_wmodel *wm = s_wmodel_find(h->workers[i], wt->model);
			n += wm != NULL && wm->watching && s_alive(h->workers[i], now);
		}
	if ((wt->ids = calloc(n + 1, sizeof(*wt->ids))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; v != NULL && v->targets != NULL && i < v->ntargets; i++)
		if ((wt->ids[wt->nids++] = strdup(v->targets[i])) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; (v == NULL || v->targets == NULL) && i < h->nworkers; i++) {
		const struct s_wmodel *wm = s_wmodel_find(h->workers[i], wt->model);
		if (wm == NULL || !wm->watching || !s_alive(h->workers[i], now))
			continue;
		if ((wt->ids[wt->nids++] = strdup(h->workers[i]->id)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
}

/*
 * Reads a wait's mode, count, ids and timeout_ms from r into wt (the caller
 * frees it with s_wait_free), once the hub has room for one more of r's waits.
 */
static int
s_wait_parse(wsync_hub_t *h, struct s_req *r, struct s_wait *wt, uint64_t *timeout,
    wsync_err_t *err)
{
	char mode[8];
	size_t mine = 0;

	if (s_str(r, "mode", 1, NULL, mode, sizeof(mode), err) < 0 ||
	    s_u64(r, "timeout_ms", 1, timeout, err) < 0)
		return -1;
	if (*timeout > S_MAX_WAIT_MS)
		return wsync_err_set(err, EX_USAGE, "a wait of %" PRIu64 " ms is longer than the "
		    "hub keeps one (%d ms)", *timeout, S_MAX_WAIT_MS);
	if (strcmp(mode, "count") == 0) {
		wt->mode = S_COUNT;
		if (s_u64(r, "count", 1, &wt->count, err) < 0)
			return -1;
	} else if (strcmp(mode, "ids") == 0) {
		wt->mode = S_IDS;
		if (s_list(wsync_msg_get(&r->msg, "ids"), "ids", 1, wsync_id_check, &wt->ids,
		    &wt->nids, err) < 0)
			return -1;
	} else if (strcmp(mode, "all") == 0)
		wt->mode = S_ALL;
	else
		return wsync_err_set(err, EX_PROTOCOL, "wait mode \"%s\" is not all, count or ids",
		    mode);
	if (h->nwaits == S_MAX_WAITS)
		return wsync_err_set(err, EX_UNAVAILABLE, "the hub has %d waits pending already",
		    S_MAX_WAITS);
	for (size_t i = 0; i < h->nwaits; i++)
		if (strcmp(h->waits[i].peer, r->peer) == 0 && ++mine == S_PEER_WAITS)
			return wsync_err_set(err, EX_UNAVAILABLE, "this client has %d waits pending "
			    "already (the most one may have)", S_PEER_WAITS);
	return 0;
}

/*
 * Starts wt, parsed from r, on its version of m, its timeout running from
 * start: answered at once when it is satisfied already, else kept (and then
 * the hub's). -1 with err: the caller still frees wt.
 */
static int
s_wait_start(wsync_hub_t *h, const struct s_req *r, const wsync_model_t *m, struct s_wait *wt,
    int64_t start, uint64_t timeout, wsync_err_t *err)
{
	static const char *const modes[] = { [S_ALL] = "all", [S_COUNT] = "count",
	    [S_IDS] = "ids" };

	snprintf(wt->peer, sizeof(wt->peer), "%s", r->peer);
	if (wt->mode == S_ALL && s_wait_all(h, m, wt, err) < 0)
		return -1;
	memcpy(wt->ident, r->ident, r->identlen);
	wt->identlen = r->identlen;
	wt->req = r->id;
	wt->start = start;
	wt->deadline = start + (int64_t)(timeout < INT32_MAX ? timeout : INT32_MAX);
	h->counts.waits++;
	s_log(h, "event=wait model=%s version=%" PRIu64 " mode=%s workers=%zu timeout_ms=%"
	    PRIu64, wt->model, wt->version, modes[wt->mode],
	    wt->mode == S_COUNT ? (size_t)wt->count : wt->nids, timeout);
	if (s_wait_satisfied(h, wt)) {
		s_wait_answer(h, wt);
		s_wait_free(wt);
		return 0;
	}
	if (h->nwaits == h->waits_cap) {
		size_t cap = h->waits_cap ? h->waits_cap * 2 : 8;
		struct s_wait *nw = realloc(h->waits, cap * sizeof(*nw));
		if (nw == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		h->waits = nw;
		h->waits_cap = cap;
	}
	h->waits[h->nwaits++] = *wt;
	return 0;
}

static int
s_op_wait(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	struct s_wait wt = { .mode = S_ALL };
	const wsync_model_t *m;
	uint64_t timeout;

	if (s_model(r, wt.model, err) < 0 || s_u64(r, "version", 1, &wt.version, err) < 0 ||
	    s_wait_parse(h, r, &wt, &timeout, err) < 0)
		goto fail;
	if ((m = wsync_store_find(h->store, wt.model)) == NULL) {
		wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", wt.model);
		goto fail;
	}
	if (wt.version == 0) {
		wsync_err_set(err, EX_USAGE, "wait for version 0: versions start at 1");
		goto fail;
	}
	if (wsync_model_newest(m) == NULL || wt.version > wsync_model_newest(m)->version) {
		s_no_version(m, wt.version, h->keep, err);
		goto fail;
	}
	if (s_wait_start(h, r, m, &wt, wsync_now_ms(), timeout, err) < 0)
		goto fail;
	return 0;
fail:
	s_wait_free(&wt);
	return -1;
}

/* The failure of w to show: the latest one not cleared by an ack. */
static const struct s_wmodel *
s_last_failure(const struct s_worker *w)
{
	const struct s_wmodel *last = NULL;

	for (size_t i = 0; i < w->nmodels; i++)
		if (w->models[i].failed != 0 &&
		    (last == NULL || w->models[i].fail_time > last->fail_time))
			last = &w->models[i];
	return last;
}

static void
s_pack_worker(wsync_enc_t *e, const struct s_worker *w, int64_t now)
{
	const struct s_wmodel *failure = s_last_failure(w);
	size_t watching = 0, applied = 0, failing = 0;

	for (size_t i = 0; i < w->nmodels; i++) {
		watching += w->models[i].watching;
		applied += w->models[i].applied != 0;
		failing += w->models[i].failures != 0;
	}
	msgpack_pack_map(&e->pk, 10);
	wsync_enc_kv_str(e, "worker", w->id);
	wsync_enc_kv_str(e, "transfer", w->transfer[0] ? w->transfer : "-");
	wsync_enc_kv_str(e, "host", w->host);
	wsync_enc_kv_u64(e, "pid", w->pid);
	wsync_enc_str(e, "models");
	msgpack_pack_array(&e->pk, watching);
	for (size_t i = 0; i < w->nmodels; i++)
		if (w->models[i].watching)
			wsync_enc_str(e, w->models[i].model);
	wsync_enc_str(e, "applied");
	msgpack_pack_map(&e->pk, applied);
	for (size_t i = 0; i < w->nmodels; i++)
		if (w->models[i].applied != 0)
			wsync_enc_kv_u64(e, w->models[i].model, w->models[i].applied);
	wsync_enc_str(e, "failures");
	msgpack_pack_map(&e->pk, failing);
	for (size_t i = 0; i < w->nmodels; i++)
		if (w->models[i].failures != 0)
			wsync_enc_kv_u64(e, w->models[i].model, w->models[i].failures);
	wsync_enc_kv_double(e, "seen", (double)(now - w->seen) / 1000.0);
	wsync_enc_kv_bool(e, "alive", s_alive(w, now));
	wsync_enc_str(e, "failure");
	if (failure == NULL)
		msgpack_pack_nil(&e->pk);
	else {
		msgpack_pack_map(&e->pk, 3);
		wsync_enc_kv_str(e, "model", failure->model);
		wsync_enc_kv_u64(e, "version", failure->failed);
		wsync_enc_kv_str(e, "reason", failure->reason);
	}
}

static void
s_pack_model(wsync_enc_t *e, const wsync_model_t *m)
{
	const wsync_version_t *newest = wsync_model_newest(m);

	msgpack_pack_map(&e->pk, 3);
	wsync_enc_kv_str(e, "model", m->id);
	wsync_enc_kv_u64(e, "head", newest != NULL ? newest->version : 0);
	wsync_enc_str(e, "versions");
	msgpack_pack_array(&e->pk, m->nversions);
	for (size_t j = 0; j < m->nversions; j++) {
		const wsync_version_t *v = &m->versions[j];
		msgpack_pack_map(&e->pk, 6);
		wsync_enc_kv_u64(e, "version", v->version);
		wsync_enc_kv_u64(e, "size", v->size);
		wsync_enc_kv_u64(e, "content", v->content);
		wsync_enc_kv_double(e, "time", v->time);
		wsync_enc_kv_str(e, "pusher", v->pusher);
		wsync_enc_str(e, "workers");
		if (v->targets == NULL)
			msgpack_pack_nil(&e->pk);
		else {
			msgpack_pack_array(&e->pk, v->ntargets);
			for (size_t k = 0; k < v->ntargets; k++)
				wsync_enc_str(e, v->targets[k]);
		}
	}
}

/* counters: what the hub did since it started, and what it holds open now. */
static void
s_pack_counters(wsync_enc_t *e, const wsync_hub_t *h)
{
	uint64_t open = 0;

	for (int i = 0; i < S_UPLOADS; i++)
		open += h->uploads[i].id != 0;
	wsync_enc_str(e, "counters");
	msgpack_pack_map(&e->pk, 10);
	wsync_enc_kv_u64(e, "uploads", h->counts.uploads);
	wsync_enc_kv_u64(e, "uploads_open", open);
	wsync_enc_kv_u64(e, "commits", h->counts.commits);
	wsync_enc_kv_u64(e, "waits", h->counts.waits);
	wsync_enc_kv_u64(e, "waits_pending", h->nwaits);
	wsync_enc_kv_u64(e, "waits_timed_out", h->counts.waits_timed_out);
	wsync_enc_kv_u64(e, "bytes_served", h->counts.bytes_served);
	wsync_enc_kv_u64(e, "bytes_received", h->counts.bytes_received);
	wsync_enc_kv_u64(e, "refused", h->counts.refused);
	wsync_enc_kv_u64(e, "dropped", h->counts.dropped);
}

static int
s_op_status(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	int64_t now = wsync_now_ms();
	size_t nmodels = wsync_store_count(h->store);
	wsync_enc_t e;

	(void)err;
	s_ok(&e, r->id, 4);
	wsync_enc_kv_str(&e, "hub", h->name);
	s_pack_counters(&e, h);
	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, nmodels);
	for (size_t i = 0; i < nmodels; i++)
		s_pack_model(&e, wsync_store_model(h->store, i));
	wsync_enc_str(&e, "workers");
	msgpack_pack_array(&e.pk, h->nworkers);
	for (size_t i = 0; i < h->nworkers; i++)
		s_pack_worker(&e, h->workers[i], now);
	s_reply(h, r, &e);
	return 0;
}

static int
s_op_bye(wsync_hub_t *h, struct s_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1];
	struct s_worker *w;
	wsync_enc_t e;

	if (s_worker_field(r, 1, worker, err) < 0)
		return -1;
	if ((w = s_worker_find(h, worker)) != NULL) {
		w->gone = 1;
		s_log(h, "event=bye worker=%s", worker);
	}
	s_ok(&e, r->id, 0);
	s_reply(h, r, &e);
	return 0;
}

static const struct {
	const char *op;
	int (*fn)(wsync_hub_t *, struct s_req *, wsync_err_t *);
} s_ops[] = {
	{ "abort", s_op_abort },
	{ "ack", s_op_report },
	{ "begin", s_op_begin },
	{ "bye", s_op_bye },
	{ "chunk", s_op_chunk },
	{ "commit", s_op_commit },
	{ "fail", s_op_report },
	{ "get", s_op_get },
	{ "heads", s_op_heads },
	{ "hello", s_op_hello },
	{ "put", s_op_put },
	{ "stat", s_op_stat },
	{ "status", s_op_status },
	{ "wait", s_op_wait },
};

void
wsync_hub_serve(wsync_hub_t *h, wsync_parts_t *p)
{
	struct s_req r = { .parts = p };
	char quoted[2200];
	wsync_err_t err = { 0 };
	wsync_enc_t e;
	size_t i, nops = sizeof(s_ops) / sizeof(s_ops[0]);

	int64_t now = wsync_now_ms();

	/* A connection that broke the protocol is not worth an answer for a while. */
	if (wsync_blocked_has(&h->blocked, wsync_part_data(p, 0), wsync_part_size(p, 0), now)) {
		h->counts.dropped++;
		return;
	}
	wsync_peer_name(p, r.peer);
	wsync_conn_name(p, h->conn);
	if (p->n < 3 || p->extra > 0 || wsync_part_size(p, 1) != 0) {
		s_log(h, "event=drop peer=%s error=\"not [identity][empty][request] or with one "
		    "data frame\" frames=%d", r.peer, p->n + p->extra);
		h->counts.dropped++;
		wsync_blocked_add(&h->blocked, wsync_part_data(p, 0), wsync_part_size(p, 0), now);
		return;
	}
	r.ident = wsync_part_data(p, 0);
	r.identlen = wsync_part_size(p, 0);
	if (wsync_msg_decode(&r.msg, wsync_part_data(p, 2), wsync_part_size(p, 2), &err) < 0 ||
	    wsync_msg_u64(&r.msg, "id", &r.id) < 0) {
		if (err.code == 0)
			wsync_err_set(&err, EX_PROTOCOL, "a request without an unsigned \"id\"");
		s_log(h, "event=drop peer=%s error=\"%s\"", r.peer, wsync_log_quote(err.msg,
		    quoted, sizeof(quoted)));
		wsync_blocked_add(&h->blocked, r.ident, r.identlen, now);
		wsync_msg_free(&r.msg);
		h->counts.dropped++;
		return;
	}
	if (wsync_msg_str(&r.msg, "op", r.op, sizeof(r.op)) < 0) {
		wsync_err_set(&err, EX_PROTOCOL, "field \"op\" is missing or not a known op");
		goto refuse;
	}
	for (i = 0; i < nops && strcmp(r.op, s_ops[i].op) != 0; i++)
		;
	if (i == nops) {
		wsync_err_set(&err, EX_PROTOCOL, "unknown op \"%s\"", wsync_log_quote(r.op, quoted, 64));
		r.op[0] = '\0';        /* named, quoted, in the error only: the log stays one line */
		goto refuse;
	}
	if (p->n == 4 && strcmp(r.op, "chunk") != 0 && strcmp(r.op, "put") != 0) {
		wsync_err_set(&err, EX_PROTOCOL, "op %s takes no data frame", r.op);
		goto refuse;
	}
	if (wsync_auth_permits(h->auth, &p->part[2], r.op, &err) < 0)
		goto refuse;
	if (s_ops[i].fn(h, &r, &err) == 0) {
		wsync_msg_free(&r.msg);
		return;
	}
refuse:
	h->counts.refused++;
	s_log(h, "event=refuse op=%s id=%" PRIu64 " code=%d error=\"%s\"", r.op[0] ? r.op : "-",
	    r.id, err.code, wsync_log_quote(err.msg, quoted, sizeof(quoted)));
	s_refusal(&e, r.id, &err, 0);
	s_reply(h, &r, &e);
	wsync_msg_free(&r.msg);
}

/* Answers waits whose time ran out and drops uploads left idle. */
static void
s_timers(wsync_hub_t *h)
{
	int64_t now = wsync_now_ms();

	for (size_t i = 0; i < h->nwaits;) {
		if (h->waits[i].deadline <= now) {
			s_wait_expire(h, &h->waits[i], now);
			s_wait_remove(h, i);
		} else
			i++;
	}
	for (int i = 0; i < S_UPLOADS; i++) {
		if (h->uploads[i].id == 0)
			continue;
		/* A pusher writing a handed-over file sends nothing, but the file changes. */
		if (h->uploads[i].local)
			s_upload_progress(&h->uploads[i], now);
		if (now - h->uploads[i].touched >= S_UPLOAD_IDLE_MS) {
			s_log(h, "event=expire upload=%" PRIu64 " idle_ms=%d", h->uploads[i].id,
			    S_UPLOAD_IDLE_MS);
			s_upload_end(&h->uploads[i]);
		}
	}
}

/* How long the next poll may sleep: until the nearest wait deadline, at most S_POLL_MS. */
static long
s_poll_ms(const wsync_hub_t *h)
{
	int64_t now = wsync_now_ms(), ms = S_POLL_MS;

	for (size_t i = 0; i < h->nwaits; i++)
		if (h->waits[i].deadline - now < ms)
			ms = h->waits[i].deadline - now;
	return ms > 0 ? (long)ms : 0;
}

int
wsync_hub_run(wsync_hub_t *h, volatile int *stop, wsync_err_t *err)
{
	zmq_pollitem_t items[1 + WSYNC_AUTH_ITEMS] = { { h->router, 0, ZMQ_POLLIN, 0 } };
	int nitems = 1 + wsync_auth_items(h->auth, &items[1]);

	while (!*stop) {
		if (h->reload != NULL && *h->reload) {
			*h->reload = 0;
			wsync_auth_reload(h->auth);
		}
		if (zmq_poll(items, nitems, s_poll_ms(h)) < 0) {
			if (errno == EINTR)
				continue;
			return wsync_err_set(err, EX_SOFTWARE, "poll: %s", zmq_strerror(errno));
		}
		/* Handshakes first: a client's first request waits on its ZAP answer. */
		wsync_auth_serve(h->auth, &items[1]);
		for (int i = 0; i < S_BATCH && !*stop; i++) {
			wsync_parts_t p;
			if (wsync_recv(h->router, &p, ZMQ_DONTWAIT) < 0) {
				if (errno == EAGAIN || errno == EINTR)
					break;
				return wsync_err_set(err, EX_SOFTWARE, "receive: %s",
				    zmq_strerror(errno));
			}
			wsync_hub_serve(h, &p);
			wsync_parts_close(&p);
		}
		s_timers(h);
	}
	for (int i = 0; i < S_UPLOADS; i++)
		if (h->uploads[i].id != 0) {
			s_log(h, "event=abort upload=%" PRIu64 " reason=\"stopping\"",
			    h->uploads[i].id);
			s_upload_end(&h->uploads[i]);
		}
	s_log(h, "event=stop waits_dropped=%zu", h->nwaits);
	return 0;
}

/* ---- binding ---- */

/* 1 when a hub answers a hello at endpoint within S_PROBE_MS. */
static int
s_probe(const char *endpoint)
{
	void *sock = zmq_socket(wsync_zmq_context(), ZMQ_DEALER), *mon;
	zmq_pollitem_t items[2] = { { sock, 0, ZMQ_POLLIN, 0 } };
	int zero = 0, answered = 0;
	wsync_err_t ignored;
	wsync_enc_t e;

	if (sock == NULL)
		return 0;
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
	/* A hub with keys refuses the handshake instead of answering: that is an answer too. */
	items[1] = (zmq_pollitem_t){ mon = wsync_curve_watch(sock, &ignored), 0, ZMQ_POLLIN, 0 };
	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 4);
	wsync_enc_kv_str(&e, "op", "hello");
	wsync_enc_kv_u64(&e, "id", 1);
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "role", "inspect");
	if (zmq_connect(sock, endpoint) == 0 &&
	    wsync_send(sock, NULL, 0, &e, NULL, 0, ZMQ_DONTWAIT) == 0)
		answered = zmq_poll(items, mon != NULL ? 2 : 1, S_PROBE_MS) > 0;
	wsync_enc_free(&e);
	wsync_curve_unwatch(sock, &mon);
	zmq_close(sock);
	return answered;
}

/*
 * Makes the socket file of an ipc endpoint ours to bind: ZeroMQ would unlink
 * whatever is there, even a live hub's socket. A file nothing answers on is
 * what a crashed hub leaves: it goes.
 */
static int
s_ipc_claim(wsync_hub_t *h, const char *endpoint, int probe, wsync_err_t *err)
{
	const char *path = endpoint + 6;
	char quoted[2048];
	struct stat st;

	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISSOCK(st.st_mode))
		return wsync_err_set(err, EX_UNAVAILABLE, "%s: %s exists and is not a socket",
		    endpoint, path);
	if (probe && s_probe(endpoint))
		return wsync_err_set(err, EX_UNAVAILABLE, "%s is in use by another hub", endpoint);
	if (unlink(path) < 0 && errno != ENOENT)
		return wsync_err_set(err, EX_UNAVAILABLE, "%s: cannot remove the stale socket %s: "
		    "%s", endpoint, path, strerror(errno));
	s_log(h, "event=reclaim path=\"%s\"", wsync_log_quote(path, quoted, sizeof(quoted)));
	return 0;
}

static int
s_bind(wsync_hub_t *h, void *sock, const char *endpoint, int probe, wsync_err_t *err)
{
	int ipc = strncmp(endpoint, "ipc://", 6) == 0;
	char **nipc;

	if (!ipc && strncmp(endpoint, "tcp://", 6) != 0)
		return wsync_err_set(err, EX_USAGE, "endpoint \"%s\": use tcp://HOST:PORT or "
		    "ipc://PATH", endpoint);
	if (ipc && s_ipc_claim(h, endpoint, probe, err) < 0)
		return -1;
	if (zmq_bind(sock, endpoint) < 0) {
		if (errno == EADDRINUSE)
			return wsync_err_set(err, EX_UNAVAILABLE, "%s is in use (by another hub?)",
			    endpoint);
		return wsync_err_set(err, EX_UNAVAILABLE, "%s: cannot bind: %s", endpoint,
		    zmq_strerror(errno));
	}
	if (!ipc)
		return 0;
	if ((nipc = realloc(h->ipc, (h->nipc + 1) * sizeof(*nipc))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	h->ipc = nipc;
	if ((h->ipc[h->nipc] = strdup(endpoint + 6)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	h->nipc++;
	return 0;
}

/* The PUB endpoint for the first ROUTER endpoint: ipc://PATH.pub, or tcp://HOST:*. */
static int
s_pub_for(const char *endpoint, char *buf, size_t size, wsync_err_t *err)
{
	const char *colon = strrchr(endpoint, ':');
	int n;

	if (strncmp(endpoint, "ipc://", 6) == 0)
		n = snprintf(buf, size, "%s.pub", endpoint);
	else if (colon != NULL && colon > endpoint + 6)
		n = snprintf(buf, size, "%.*s:*", (int)(colon - endpoint), endpoint);
	else
		return wsync_err_set(err, EX_USAGE, "endpoint \"%s\": use tcp://HOST:PORT or "
		    "ipc://PATH", endpoint);
	if (n < 0 || (size_t)n >= size)
		return wsync_err_set(err, EX_USAGE, "endpoint \"%s\" is too long", endpoint);
	return 0;
}

static void *
s_socket(int type, int sndhwm, int rcvhwm, wsync_err_t *err)
{
	void *sock = zmq_socket(wsync_zmq_context(), type);
	int64_t maxmsg = (int64_t)WSYNC_CHUNK + 4096;
	int zero = 0;

	if (sock == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s", zmq_strerror(errno));
		return NULL;
	}
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(sock, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm));
	zmq_setsockopt(sock, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
	/* No frame a peer sends is allowed past one chunk: larger ones end its connection. */
	zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
	return sock;
}

wsync_hub_t *
wsync_hub_new(const wsync_hub_opts_t *opts, wsync_err_t *err)
{
	char host[256] = "unknown", pub[512], quoted[2048];
	size_t len = sizeof(pub);
	wsync_hub_t *h;

	if (opts->nendpoints < 1 || opts->endpoints == NULL) {
		wsync_err_set(err, EX_USAGE, "a hub needs at least one endpoint");
		return NULL;
	}
	if (opts->keep < 1) {
		wsync_err_set(err, EX_USAGE, "a hub keeps at least 1 version per model");
		return NULL;
	}
	if ((h = calloc(1, sizeof(*h))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	h->log = opts->log;
	h->log_arg = opts->log_arg;
	h->keep = opts->keep;
	h->flip_get = getenv("WSYNC_TEST_FLIP_GET") != NULL;
	gethostname(host, sizeof(host) - 1);
	snprintf(h->name, sizeof(h->name), "%s:%ld", host, (long)getpid());
	h->reload = opts->reload;
	if (s_pub_for(opts->endpoints[0], pub, sizeof(pub), err) < 0 ||
	    wsync_auth_new(opts, &h->auth, err) < 0 ||
	    (h->router = s_socket(ZMQ_ROUTER, S_SNDHWM, S_RCVHWM, err)) == NULL ||
	    (h->pub = s_socket(ZMQ_PUB, 1000, 1000, err)) == NULL)
		goto fail;
	if (h->auth != NULL && (wsync_auth_server(h->auth, h->router, err) < 0 ||
	    wsync_auth_server(h->auth, h->pub, err) < 0))
		goto fail;
	for (int i = 0; i < opts->nendpoints; i++)
		if (s_bind(h, h->router, opts->endpoints[i], 1, err) < 0)
			goto fail;
	if (s_bind(h, h->pub, pub, 0, err) < 0)
		goto fail;
	if (zmq_getsockopt(h->pub, ZMQ_LAST_ENDPOINT, h->pub_endpoint, &len) < 0) {
		wsync_err_set(err, EX_SOFTWARE, "%s: %s", pub, zmq_strerror(errno));
		goto fail;
	}
	if ((h->store = wsync_store_open(opts->store, opts->keep, opts->log, opts->log_arg,
	    err)) == NULL)
		goto fail;
	wsync_store_set_spares(h->store, opts->recycle);
	s_log(h, "event=store dir=\"%s\" models=%zu keep=%u recycle=%u", wsync_log_quote(
	    wsync_store_dir(h->store), quoted, sizeof(quoted)), wsync_store_count(h->store),
	    opts->keep, opts->recycle);
	for (int i = 0; i < opts->nendpoints; i++)
		s_log(h, "event=listen endpoint=%s%s%s hub=%s", opts->endpoints[i],
		    i == 0 ? " pub=" : "", i == 0 ? h->pub_endpoint : "", h->name);
	return h;
fail:
	wsync_hub_destroy(&h);
	return NULL;
}

void
wsync_hub_destroy(wsync_hub_t **hp)
{
	wsync_hub_t *h = *hp;

	if (h == NULL)
		return;
	for (int i = 0; i < S_UPLOADS; i++)
		s_upload_end(&h->uploads[i]);
	for (size_t i = 0; i < h->nwaits; i++)
		s_wait_free(&h->waits[i]);
	free(h->waits);
	for (size_t i = 0; i < h->nworkers; i++)
		s_worker_free(h->workers[i]);
	free(h->workers);
	wsync_auth_destroy(&h->auth);
	if (h->router != NULL)
		zmq_close(h->router);
	if (h->pub != NULL)
		zmq_close(h->pub);
	/* Closing is asynchronous in ZeroMQ: the files go now, before a next hub probes. */
	for (size_t i = 0; i < h->nipc; i++) {
		unlink(h->ipc[i]);
		free(h->ipc[i]);
	}
	free(h->ipc);
	wsync_store_close(&h->store);
	free(h);
	*hp = NULL;
}
