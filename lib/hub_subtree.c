/* hub_subtree.c - acks end to end: a relay's report of the workers behind it, made and merged. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "hub_int.h"

/* 1 when w is to be reported: workers long dead are left out, the upstream forgets them too. */
static int
s_reported(const struct hub_worker *w, int64_t now)
{
	return now - w->seen <= 10 * hub_worker_silence_ms(w);
}

/* Packs one worker: {worker, host, pid, ago, gone, via, hops, models: {model: {...}}}. */
static void
s_pack_worker(wsync_enc_t *e, const struct hub_worker *w, int64_t now)
{
	msgpack_pack_map(&e->pk, 8);
	wsync_enc_kv_str(e, "worker", w->id);
	wsync_enc_kv_str(e, "host", w->host);
	wsync_enc_kv_u64(e, "pid", w->pid);
	wsync_enc_kv_u64(e, "ago", (uint64_t)(now > w->seen ? now - w->seen : 0));
	wsync_enc_kv_bool(e, "gone", w->gone);
	wsync_enc_kv_str(e, "via", w->via);
	wsync_enc_kv_u64(e, "hops", w->hops);
	wsync_enc_str(e, "models");
	msgpack_pack_map(&e->pk, w->nmodels);
	for (size_t i = 0; i < w->nmodels; i++) {
		const struct hub_wmodel *wm = &w->models[i];
		wsync_enc_str(e, wm->model);
		msgpack_pack_map(&e->pk, 5);
		wsync_enc_kv_bool(e, "watching", wm->watching);
		wsync_enc_kv_u64(e, "applied", wm->applied);
		wsync_enc_kv_u64(e, "failed", wm->failed);
		wsync_enc_kv_u64(e, "failures", wm->failures);
		wsync_enc_kv_str(e, "reason", wm->reason != NULL ? wm->reason : "");
	}
}

size_t
hub_subtree_pack(const wsync_hub_t *h, wsync_enc_t *e)
{
	int64_t now = wsync_now_ms();
	size_t n = 0;

	for (size_t i = 0; i < h->nworkers; i++)
		n += s_reported(h->workers[i], now);
	msgpack_pack_array(&e->pk, n);
	for (size_t i = 0; i < h->nworkers; i++)
		if (s_reported(h->workers[i], now))
			s_pack_worker(e, h->workers[i], now);
	return n;
}

/*
 * Sets what one reported model record says into w's record of it: 1 when it
 * brings this hub news of an ack or a failure, 0 when not, -1 with err.
 */
static int
s_merge_model(struct hub_worker *w, const char *model, const msgpack_object *o,
    wsync_err_t *err)
{
	int news;
	char reason[WSYNC_MAX_REASON + 1] = "";
	struct hub_wmodel *wm;
	uint64_t applied = 0, failed = 0;
	const msgpack_object *watching = wsync_obj_get(o, "watching");

	if (o->type != MSGPACK_OBJECT_MAP ||
	    wsync_obj_u64(wsync_obj_get(o, "applied"), &applied) < 0 ||
	    wsync_obj_u64(wsync_obj_get(o, "failed"), &failed) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "worker %s: model %s is not {watching, "
		    "applied, failed, reason}", w->id, model);
	wsync_obj_str(wsync_obj_get(o, "reason"), reason, sizeof(reason));
	if ((wm = hub_wmodel_get(w, model, err)) == NULL)
		return -1;
	wsync_obj_u64(wsync_obj_get(o, "failures"), &wm->failures);
	wm->watching = watching != NULL && watching->type == MSGPACK_OBJECT_BOOLEAN &&
	    watching->via.boolean;
	news = applied != wm->applied || failed != wm->failed;
	wm->applied = applied;
	if (failed != wm->failed) {
		char *copy = failed != 0 ? strdup(reason) : NULL;
		if (failed != 0 && copy == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		free(wm->reason);
		wm->reason = copy;
		wm->failed = failed;
		wm->fail_time = wsync_wall_time();
	}
	return news;
}

/*
 * Merges one reported worker, reached through relay: 1 when it brings news
 * (a worker new here, or as s_merge_model says), 0 when not, -1 with err.
 */
#define S_MAX_AGO_MS ((uint64_t)1 << 40)  /* about 35 years */

/* Whether a worker reached via path is reached through relay (its first hop). */
static int
s_via(const char *path, const char *relay)
{
	size_t n = strlen(relay);

	return strncmp(path, relay, n) == 0 && (path[n] == '\0' || path[n] == '>');
}

static int
s_merge_worker(wsync_hub_t *h, struct hub_req *r, const char *relay, const msgpack_object *o,
    int64_t now, wsync_err_t *err)
{
	char id[WSYNC_MAX_ID + 1], host[WSYNC_MAX_ID + 1] = "", via[HUB_VIA] = "";
	char conn[WSYNC_PEER_NAME + 8];
	const msgpack_object *models = wsync_obj_get(o, "models"), *gone = wsync_obj_get(o, "gone");
	struct hub_worker *w;
	uint64_t ago = 0, pid = 0, hops = 0;
	int news = 0, rc;

	if (wsync_obj_str(wsync_obj_get(o, "worker"), id, sizeof(id)) < 0 || wsync_id_check(id) < 0 ||
	    wsync_obj_u64(wsync_obj_get(o, "ago"), &ago) < 0 || models == NULL ||
	    models->type != MSGPACK_OBJECT_MAP || models->via.map.size > HUB_WORKER_MODELS)
		return wsync_err_set(err, EX_PROTOCOL, "field \"workers\" is not a list of {worker, "
		    "ago, models, ...}");
	wsync_obj_str(wsync_obj_get(o, "host"), host, sizeof(host));
	wsync_obj_u64(wsync_obj_get(o, "pid"), &pid);
	wsync_obj_str(wsync_obj_get(o, "via"), via, sizeof(via));
	wsync_obj_u64(wsync_obj_get(o, "hops"), &hops);
	/* Bounded: a relay's word cannot make a time before the clock's range. */
	if (ago > S_MAX_AGO_MS)
		ago = S_MAX_AGO_MS;
	/* A fresher word from elsewhere (the worker failed over to us or another relay) wins. */
	w = hub_worker_find(h, id);
	if (w != NULL && w->seen > now - (int64_t)ago && !s_via(w->via, relay))
		return 0;
	/* A worker this hub did not know is news too: a wait for all is to count it. */
	news = w == NULL;
	/* A relay speaks for many workers: its connection is not held to one connection's share. */
	snprintf(conn, sizeof(conn), "relay:%s", r->conn);
	if ((w = hub_worker_touch(h, id, conn, err)) == NULL)
		return -1;
	w->seen = now - (int64_t)ago;
	w->gone = gone != NULL && gone->type == MSGPACK_OBJECT_BOOLEAN && gone->via.boolean;
	w->pid = pid;
	snprintf(w->host, sizeof(w->host), "%s", host);
	snprintf(w->via, sizeof(w->via), "%s%s%s", relay, via[0] ? ">" : "", via);
	w->hops = hops < HUB_MAX_HOPS ? hops + 1 : HUB_MAX_HOPS;
	for (uint32_t i = 0; i < models->via.map.size; i++) {
		char model[WSYNC_MAX_MODEL + 1];
		if (wsync_obj_str(&models->via.map.ptr[i].key, model, sizeof(model)) < 0 ||
		    wsync_model_id_check(model) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "worker %s: a model that is not a "
			    "model id", id);
		if ((rc = s_merge_model(w, model, &models->via.map.ptr[i].val, err)) < 0)
			return -1;
		news |= rc;
	}
	return news;
}

int
hub_op_subtree(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char relay[WSYNC_MAX_ID + 1];
	const msgpack_object *workers = wsync_msg_get(&r->msg, "workers");
	int64_t now = wsync_now_ms();
	wsync_enc_t e;
	int news = 0, rc, full = 0;
	char quoted[4 * sizeof(err->msg) + 8];

	if (hub_str(r, "relay", 1, wsync_id_check, relay, sizeof(relay), err) < 0)
		return -1;
	if (workers == NULL || workers->type != MSGPACK_OBJECT_ARRAY ||
	    workers->via.array.size > HUB_MAX_WORKERS)
		return wsync_err_set(err, EX_PROTOCOL, "field \"workers\" is not a list of at most "
		    "%d workers", HUB_MAX_WORKERS);
	for (uint32_t i = 0; i < workers->via.array.size; i++) {
		if ((rc = s_merge_worker(h, r, relay, &workers->via.array.ptr[i], now, err)) < 0 &&
		    err->code != EX_UNAVAILABLE)
			return -1;
		/*
		 * No room for one more worker: the rest of the report, and the
		 * placement, go on. Logged once, until a report fits again.
		 */
		if (rc < 0 && full++ == 0 && !h->subtree_full)
			hub_log(h, "event=subtree-full relay=%s reason=\"%s\"", relay,
			    wsync_log_quote(err->msg, quoted, sizeof(quoted)));
		news |= rc > 0;
	}
	h->subtree_full = full > 0;
	/* An ack from below goes on up at once, as the relay's own workers' do (hub_worker.c). */
	if (news)
		h->reported = 0;
	/* A root places the relays that say where they are reached; a relay places none. */
	if (h->relay == NULL && wsync_msg_get(&r->msg, "advertise") != NULL) {
		if (hub_place_reply(h, r, relay, &e, err) < 0)
			return -1;
	} else {
		hub_ok(&e, r->id, 0);
	}
	/* Any model may have moved: every wait is checked. */
	for (size_t i = 0; i < wsync_store_count(h->store); i++)
		hub_waits_check(h, wsync_store_model(h->store, i)->id);
	hub_reply(h, r, &e);
	return 0;
}
