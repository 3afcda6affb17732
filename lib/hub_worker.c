/* hub_worker.c - the worker registry: hello, heads, acks and failures, bye, liveness. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"
#include "index_int.h"

/*
 * Each relay on the path passes its report on at its own heartbeat, up to
 * one later than the report it merged: what the hub hears of a worker n
 * relays down is up to n heartbeats old however alive the worker is.
 */
int64_t
hub_worker_silence_ms(const struct hub_worker *w)
{
	return WSYNC_ALIVE_MS + (int64_t)w->hops * HUB_HOP_MS;
}

int
hub_worker_alive(const struct hub_worker *w, int64_t now)
{
	return !w->gone && w->seen > 0 && now - w->seen <= hub_worker_silence_ms(w);
}

static const char *
s_worker_name(const void *workers, size_t i)
{
	return ((struct hub_worker *const *)workers)[i]->id;
}

static size_t
s_worker_index(const wsync_hub_t *h, const char *id, int *found)
{
	return wsync_index_find(h->workers, h->nworkers, s_worker_name, id, found);
}

struct hub_worker *
hub_worker_find(const wsync_hub_t *h, const char *id)
{
	int found;
	size_t at = s_worker_index(h, id, &found);

	return found ? h->workers[at] : NULL;
}

void
hub_worker_free(struct hub_worker *w)
{
	for (size_t i = 0; i < w->nmodels; i++)
		free(w->models[i].reason);
	free(w->models);
	hub_strv_free(w->select, w->nselect);
	free(w);
}

static void
s_worker_remove(wsync_hub_t *h, size_t at)
{
	hub_worker_free(h->workers[at]);
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
		if (!hub_worker_alive(h->workers[i], now) &&
		    (oldest == h->nworkers || h->workers[i]->seen < h->workers[oldest]->seen))
			oldest = i;
	if (oldest == h->nworkers)
		return -1;
	hub_log(h, "event=forget worker=%s", h->workers[oldest]->id);
	s_worker_remove(h, oldest);
	return 0;
}

struct hub_worker *
hub_worker_touch(wsync_hub_t *h, const char *id, const char *conn, wsync_err_t *err)
{
	int64_t now = wsync_now_ms();
	struct hub_worker *w;
	int found;
	size_t at = s_worker_index(h, id, &found);

	if (found) {
		w = h->workers[at];
		w->seen = now;
		w->gone = 0;
		w->via[0] = '\0';
		w->hops = 0;
		return w;
	}
	/*
	 * One connection cannot make up thousands of workers and crowd real ones
	 * out; a relay's report (conn "relay:...") speaks for a whole subtree.
	 */
	for (size_t i = 0, mine = 0; strncmp(conn, "relay:", 6) != 0 && i < h->nworkers; i++)
		if (strcmp(h->workers[i]->conn, conn) == 0 && ++mine == HUB_CONN_WORKERS) {
			wsync_err_set(err, EX_UNAVAILABLE, "this connection made %d workers known "
			    "already (the most one may)", HUB_CONN_WORKERS);
			return NULL;
		}
	if (h->nworkers == HUB_MAX_WORKERS) {
		if (s_worker_evict(h, now) < 0) {
			wsync_err_set(err, EX_UNAVAILABLE, "the hub already follows %d live workers",
			    HUB_MAX_WORKERS);
			return NULL;
		}
		at = s_worker_index(h, id, &found);
	}
	if ((w = calloc(1, sizeof(*w))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	if (h->workers == NULL &&
	    (h->workers = calloc(HUB_MAX_WORKERS, sizeof(*h->workers))) == NULL) {
		free(w);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	snprintf(w->id, sizeof(w->id), "%s", id);
	snprintf(w->conn, sizeof(w->conn), "%s", conn);
	w->seen = now;
	memmove(&h->workers[at + 1], &h->workers[at], (h->nworkers - at) * sizeof(*h->workers));
	h->workers[at] = w;
	h->nworkers++;
	return w;
}

struct hub_wmodel *
hub_wmodel_find(const struct hub_worker *w, const char *model)
{
	for (size_t i = 0; i < w->nmodels; i++)
		if (strcmp(w->models[i].model, model) == 0)
			return &w->models[i];
	return NULL;
}

struct hub_wmodel *
hub_wmodel_get(struct hub_worker *w, const char *model, wsync_err_t *err)
{
	struct hub_wmodel *wm = hub_wmodel_find(w, model);

	if (wm != NULL)
		return wm;
	if (w->nmodels == HUB_WORKER_MODELS) {
		wsync_err_set(err, EX_USAGE, "worker %s follows %d models already", w->id,
		    HUB_WORKER_MODELS);
		return NULL;
	}
	if (w->nmodels == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 4;
		struct hub_wmodel *nm = realloc(w->models, cap * sizeof(*nm));
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

uint64_t
hub_applied(const struct hub_worker *w, const char *model)
{
	const struct hub_wmodel *wm = w != NULL ? hub_wmodel_find(w, model) : NULL;

	return wm != NULL ? wm->applied : 0;
}

/* Records that worker w has applied version of wm; an ack clears the failures it supersedes. */
static void
s_applied_set(struct hub_wmodel *wm, uint64_t version, int ack)
{
	wm->applied = version;
	if (ack && wm->failed != 0 && wm->failed <= version) {
		wm->failed = 0;
		free(wm->reason);
		wm->reason = NULL;
	}
}

/* 0 for a selection pattern the hub keeps: 1 to 255 printable bytes. */
static int
s_pattern_check(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > WSYNC_MAX_KEY)
		return -1;
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return -1;
	return 0;
}

/*
 * 1 when a hello from host and pid names worker w while another process
 * still runs as w: alive at the hub, and not a restart of it on this host
 * (whose old pid is gone). The hub would count the two as one worker.
 */
static int
s_twin(const struct hub_worker *w, const char *host, uint64_t pid)
{
	char here[WSYNC_MAX_ID + 1] = "";

	if (w == NULL || !hub_worker_alive(w, wsync_now_ms()) || w->pid == 0 || pid == 0 ||
	    (w->pid == pid && strcmp(w->host, host) == 0))
		return 0;
	gethostname(here, sizeof(here) - 1);
	return strcmp(w->host, here) != 0 || kill((pid_t)w->pid, 0) == 0 || errno != ESRCH;
}

/*
 * The models of a hello the store does not have but has one close to (a
 * typo), as "polcy (the hub has policy); ..." in buf; "" when none.
 */
static void
s_typos(const wsync_hub_t *h, char **models, size_t nmodels, char *buf, size_t size)
{
	char close[3 * (WSYNC_MAX_MODEL + 2)];
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < nmodels; i++) {
		int n;
		if (wsync_store_find(h->store, models[i]) != NULL ||
		    hub_models_close(h, models[i], close, sizeof(close)) == 0)
			continue;
		n = snprintf(buf + len, size - len, "%s%s (the hub has %s)", len ? "; " : "",
		    models[i], close);
		if (n < 0 || (size_t)n >= size - len)
			break;
		len += (size_t)n;
	}
}

int
hub_op_hello(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	static const char *const roles[] = { "push", "pull", "watch", "inspect", "relay" };
	char role[16], worker[WSYNC_MAX_ID + 1], host[WSYNC_MAX_ID + 1], **models, **select = NULL;
	uint64_t proto, pid = 0;
	size_t nmodels, nselect = 0, i;
	struct hub_worker *w;
	char twin[WSYNC_MAX_ID + 32] = "", typos[1024];
	wsync_enc_t e;

	if (hub_u64(r, "proto", 1, &proto, err) < 0 || hub_str(r, "role", 1, NULL, role,
	    sizeof(role), err) < 0)
		return -1;
	if (proto != WSYNC_PROTO)
		return wsync_err_set(err, EX_PROTOCOL, "protocol version %" PRIu64 " is not "
		    "supported (this hub speaks %d)", proto, WSYNC_PROTO);
	for (i = 0; i < 5 && strcmp(role, roles[i]) != 0; i++)
		;
	if (i == 5)
		return wsync_err_set(err, EX_PROTOCOL, "role \"%s\" is not push, pull, watch, "
		    "inspect or relay", role);
	if (hub_worker_field(r, strcmp(role, "watch") == 0, worker, err) < 0 ||
	    hub_str(r, "host", 0, wsync_id_check, host, sizeof(host), err) < 0 ||
	    hub_u64(r, "pid", 0, &pid, err) < 0 ||
	    hub_list(wsync_msg_get(&r->msg, "models"), "models", 0, wsync_model_id_check,
	    &models, &nmodels, err) < 0)
		return -1;
	if (hub_list(wsync_msg_get(&r->msg, "select"), "select", 0, s_pattern_check, &select,
	    &nselect, err) < 0)
		goto fail;
	if (worker[0] != '\0' && s_twin(hub_worker_find(h, worker), host, pid)) {
		w = hub_worker_find(h, worker);
		snprintf(twin, sizeof(twin), "host %s pid %" PRIu64, w->host, w->pid);
		hub_log(h, "event=twin worker=%s host=%s pid=%" PRIu64 " other_host=%s "
		    "other_pid=%" PRIu64, worker, host[0] ? host : "-", pid, w->host, w->pid);
	}
	if (worker[0] != '\0') {
		if ((w = hub_worker_touch(h, worker, r->conn, err)) == NULL)
			goto fail;
		snprintf(w->host, sizeof(w->host), "%s", host);
		w->pid = pid;
		hub_strv_free(w->select, w->nselect);
		w->select = select;
		w->nselect = nselect;
		select = NULL;
		nselect = 0;
		/* A worker that says hello again watches what it says now. */
		for (i = 0; i < w->nmodels; i++)
			w->models[i].watching = 0;
		for (i = 0; i < nmodels; i++) {
			struct hub_wmodel *wm = hub_wmodel_get(w, models[i], err);
			if (wm == NULL)
				goto fail;
			wm->watching = 1;
		}
	}
	if (strcmp(role, "relay") == 0)
		hub_arrive_reader_add(h, r->conn);
	s_typos(h, models, nmodels, typos, sizeof(typos));
	hub_log(h, "event=hello role=%s%s%s host=%s pid=%" PRIu64, role, worker[0] ? " worker=" :
	    "", worker, host[0] ? host : "-", pid);
	hub_strv_free(models, nmodels);
	hub_strv_free(select, nselect);
	/* store and store_id let a client on this host take versions from the files. */
	hub_ok(&e, r->id, 8 + (twin[0] != '\0') + (typos[0] != '\0'));
	if (twin[0] != '\0')
		wsync_enc_kv_str(&e, "twin", twin);
	if (typos[0] != '\0')
		wsync_enc_kv_str(&e, "typos", typos);
	wsync_enc_kv_str(&e, "hub", h->name);
	wsync_enc_kv_str(&e, "store", wsync_store_dir(h->store));
	wsync_enc_kv_str(&e, "store_id", wsync_store_id(h->store));
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "pub", hub_pub_of(h, h->router));
	wsync_enc_kv_u64(&e, "chunk", WSYNC_CHUNK);
	wsync_enc_kv_u64(&e, "window", WSYNC_WINDOW);
	wsync_enc_kv_u64(&e, "heartbeat_ms", WSYNC_HEARTBEAT_MS);
	hub_reply(h, r, &e);
	return 0;
fail:
	hub_strv_free(models, nmodels);
	hub_strv_free(select, nselect);
	return -1;
}

/* Packs {version, size, content, time, mtime} of v. */
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

/* The highest version number the store ever gave model (0: none). */
static uint64_t
s_numbered(wsync_hub_t *h, const char *model)
{
	const wsync_model_t *m = wsync_store_find(h->store, model);

	return m != NULL && m->next > 0 ? m->next - 1 : 0;
}

/* Records a heartbeat's applied map {model: version} for worker w. */
static int
s_heads_applied(wsync_hub_t *h, struct hub_worker *w, const msgpack_object *o,
    wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];

	if (o == NULL)
		return 0;
	if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > HUB_MAX_LIST)
		return wsync_err_set(err, EX_PROTOCOL, "field \"applied\" is not a map of model "
		    "ids to versions");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		uint64_t v;
		struct hub_wmodel *wm;
		if (wsync_obj_str(&o->via.map.ptr[i].key, model, sizeof(model)) < 0 ||
		    wsync_model_id_check(model) < 0 ||
		    wsync_obj_u64(&o->via.map.ptr[i].val, &v) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "field \"applied\" is not a map of "
			    "model ids to versions");
		if (v == 0 && hub_wmodel_find(w, model) == NULL)
			continue;
		/*
		 * A number this store never gave (the worker followed another store) is
		 * none; a relay's numbers are its tree's, which may be ahead of it.
		 */
		if (v > 0 && h->relay == NULL && s_numbered(h, model) < v)
			v = 0;
		if ((wm = hub_wmodel_get(w, model, err)) == NULL)
			return -1;
		s_applied_set(wm, v, 0);
	}
	for (uint32_t i = 0; i < o->via.map.size; i++)
		if (wsync_obj_str(&o->via.map.ptr[i].key, model, sizeof(model)) == 0)
			hub_waits_check(h, model);
	return 0;
}

int
hub_op_heads(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1], **models;
	const wsync_version_t **heads = NULL;
	const char **ids = NULL;
	size_t nmodels, n = 0, cap;
	struct hub_worker *w = NULL;
	wsync_enc_t e;
	int rc = -1, arriving = 0;

	if (hub_worker_field(r, 0, worker, err) < 0 ||
	    hub_bool(r, "arriving", &arriving, err) < 0 ||
	    (arriving && hub_arrive_reader_check(h, r, err) < 0) ||
	    hub_list(wsync_msg_get(&r->msg, "models"), "models", 0, wsync_model_id_check,
	    &models, &nmodels, err) < 0)
		return -1;
	if (worker[0] != '\0') {
		if ((w = hub_worker_touch(h, worker, r->conn, err)) == NULL)
			goto done;
		for (size_t i = 0; i < nmodels; i++) {
			struct hub_wmodel *wm = hub_wmodel_get(w, models[i], err);
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
	hub_ok(&e, r->id, 4 + (arriving != 0));
	wsync_enc_kv_str(&e, "hub", h->name);
	wsync_enc_kv_str(&e, "store", wsync_store_id(h->store));
	/* A relay that has not heard from its tree yet says "": it cannot tell whose numbers it has. */
	wsync_enc_kv_str(&e, "origin", h->relay != NULL || h->origin[0] ? h->origin :
	    wsync_store_id(h->store));
	wsync_enc_str(&e, "heads");
	msgpack_pack_map(&e.pk, n);
	for (size_t i = 0; i < n; i++) {
		wsync_enc_str(&e, ids[i]);
		s_pack_head(&e, heads[i]);
	}
	/* A downstream relay asks for what is on its way here too (hub_arrive.c). */
	if (arriving)
		hub_arrive_pack(h, models, nmodels, &e);
	hub_reply(h, r, &e);
	rc = 0;
done:
	free(heads);
	free(ids);
	hub_strv_free(models, nmodels);
	return rc;
}

/* ack and fail: worker, model, version, and for fail a reason. */
int
hub_op_ack_or_fail(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1], model[WSYNC_MAX_MODEL + 1];
	char reason[WSYNC_MAX_REASON + 1], quoted[4 * WSYNC_MAX_REASON + 8], transfer[8];
	int fail = strcmp(r->op, "fail") == 0;
	struct hub_worker *w;
	struct hub_wmodel *wm;
	uint64_t version, wire = 0;
	wsync_enc_t e;

	if (hub_worker_field(r, 1, worker, err) < 0 || hub_model_field(r, model, err) < 0 ||
	    hub_u64(r, "version", 1, &version, err) < 0 ||
	    (fail && hub_str(r, "reason", 1, NULL, reason, sizeof(reason), err) < 0) ||
	    hub_str(r, "transfer", 0, hub_transfer_check, transfer, sizeof(transfer), err) < 0 ||
	    hub_u64(r, "wire", 0, &wire, err) < 0)
		return -1;
	if (version == 0)
		return wsync_err_set(err, EX_USAGE, "%s of version 0: versions start at 1", r->op);
	if ((w = hub_worker_touch(h, worker, r->conn, err)) == NULL ||
	    (wm = hub_wmodel_get(w, model, err)) == NULL)
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
		hub_log(h, "event=fail worker=%s model=%s version=%" PRIu64 " reason=\"%s\"", worker,
		    model, version, wsync_log_quote(reason, quoted, sizeof(quoted)));
		hub_waits_check(h, model);
	} else {
		s_applied_set(wm, version, 1);
		if (transfer[0] != '\0') {
			memcpy(w->transfer, transfer, sizeof(w->transfer));
			w->wire = wire;
		}
		if (wire != 0)
			hub_log(h, "event=ack worker=%s model=%s version=%" PRIu64 " transfer=%s "
			    "wire=%" PRIu64, worker, model, version, transfer[0] ? transfer : "-",
			    wire);
		else
			hub_log(h, "event=ack worker=%s model=%s version=%" PRIu64 "%s%s", worker,
			    model, version, transfer[0] ? " transfer=" : "", transfer);
		hub_waits_check(h, model);
	}
	/* A relay tells its upstream at once: a wait at the root is waiting for this. */
	h->reported = 0;
	hub_ok(&e, r->id, 0);
	hub_reply(h, r, &e);
	return 0;
}

int
hub_op_bye(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1];
	struct hub_worker *w;
	wsync_enc_t e;

	if (hub_worker_field(r, 1, worker, err) < 0)
		return -1;
	if ((w = hub_worker_find(h, worker)) != NULL) {
		w->gone = 1;
		hub_log(h, "event=bye worker=%s", worker);
	}
	hub_ok(&e, r->id, 0);
	hub_reply(h, r, &e);
	return 0;
}
