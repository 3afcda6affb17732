/* hub_wait.c - waits: a reply deferred until workers apply a version, or its timeout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "hub_int.h"

void
hub_wait_free(struct hub_wait *w)
{
	hub_strv_free(w->ids, w->nids);
}

/* 1 when worker w (may be NULL) has applied the waited version or a newer one. */
static int
s_wait_done_by(const struct hub_wait *wt, const struct hub_worker *w)
{
	return hub_applied(w, wt->model) >= wt->version;
}

/*
 * 1 when worker w (may be NULL) reported that it could not apply the waited
 * version or a newer one: a failed version is never retried, so it never will.
 */
static int
s_wait_failed_by(const struct hub_wait *wt, const struct hub_worker *w)
{
	const struct hub_wmodel *wm = w != NULL ? hub_wmodel_find(w, wt->model) : NULL;

	return wm != NULL && wm->failed >= wt->version && !s_wait_done_by(wt, w);
}

/*
 * The number of workers of wt (mode all or ids) that failed its version,
 * when every other one has applied it: waiting longer cannot help. 0 while
 * one is still to answer.
 */
static size_t
s_wait_settled_failed(const wsync_hub_t *h, const struct hub_wait *wt)
{
	size_t failed = 0;

	if (wt->mode == WSYNC_WAIT_COUNT)
		return 0;
	for (size_t i = 0; i < wt->nids; i++) {
		const struct hub_worker *w = hub_worker_find(h, wt->ids[i]);
		if (s_wait_failed_by(wt, w))
			failed++;
		else if (!s_wait_done_by(wt, w))
			return 0;
	}
	return failed;
}

int
hub_wait_satisfied(const wsync_hub_t *h, const struct hub_wait *wt)
{
	uint64_t n = 0;

	if (wt->mode != WSYNC_WAIT_COUNT) {
		for (size_t i = 0; i < wt->nids; i++)
			if (!s_wait_done_by(wt, hub_worker_find(h, wt->ids[i])))
				return 0;
		return 1;
	}
	for (size_t i = 0; i < h->nworkers && n < wt->count; i++)
		n += s_wait_done_by(wt, h->workers[i]);
	return n >= wt->count;
}

/* 1 when worker w belongs in the answer to wt, done or missing as done says. */
static int
s_wait_lists(const struct hub_wait *wt, const struct hub_worker *w, int done)
{
	const struct hub_wmodel *wm = hub_wmodel_find(w, wt->model);

	if (done)
		return s_wait_done_by(wt, w);
	return !s_wait_done_by(wt, w) && wm != NULL && wm->watching;
}

/* The versions field of a commit's wait (nothing for a wait request). */
static void
s_wait_versions(wsync_enc_t *e, const struct hub_wait *wt)
{
	wsync_committed_t c = { .version = wt->version, .size = wt->size,
	    .content = wt->content };

	if (!wt->commit)
		return;
	snprintf(c.model, sizeof(c.model), "%s", wt->model);
	hub_pack_versions(e, &c, 1);
}

/* The satisfied wait's reply: workers: [{worker, version}] (and a commit's versions). */
static void
s_wait_answer(wsync_hub_t *h, const struct hub_wait *wt)
{
	wsync_enc_t e;
	size_t n = 0;

	hub_ok(&e, wt->req, 1 + wt->commit);
	s_wait_versions(&e, wt);
	wsync_enc_str(&e, "workers");
	if (wt->mode != WSYNC_WAIT_COUNT) {
		msgpack_pack_array(&e.pk, wt->nids);
		for (size_t i = 0; i < wt->nids; i++) {
			msgpack_pack_map(&e.pk, 2);
			wsync_enc_kv_str(&e, "worker", wt->ids[i]);
			wsync_enc_kv_u64(&e, "version", hub_applied(hub_worker_find(h, wt->ids[i]),
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
			wsync_enc_kv_u64(&e, "version", hub_applied(h->workers[i], wt->model));
		}
	}
	hub_send(h, wt->router, wt->ident, wt->identlen, &e);
	hub_log(h, "event=waited model=%s version=%" PRIu64 " ms=%" PRId64, wt->model, wt->version,
	    wsync_now_ms() - wt->start);
}

/* One entry of a timed-out wait's missing list. */
static void
s_missing_entry(wsync_enc_t *e, const struct hub_wait *wt, const char *id,
    const struct hub_worker *w, int64_t now)
{
	const struct hub_wmodel *wm = w != NULL ? hub_wmodel_find(w, wt->model) : NULL;
	int failed = wm != NULL && wm->failed != 0, via = w != NULL && w->via[0] != '\0';

	msgpack_pack_map(&e->pk, 3 + failed + via);
	wsync_enc_kv_str(e, "worker", id);
	if (via)
		wsync_enc_kv_str(e, "via", w->via);
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

/* Encodes into e the refusal of wt with err and the workers missing; their number. */
static size_t
s_wait_refusal(const wsync_hub_t *h, const struct hub_wait *wt, int64_t now,
    const wsync_err_t *err, wsync_enc_t *e)
{
	size_t missing = 0;

	if (wt->mode != WSYNC_WAIT_COUNT)
		for (size_t i = 0; i < wt->nids; i++)
			missing += !s_wait_done_by(wt, hub_worker_find(h, wt->ids[i]));
	else
		for (size_t i = 0; i < h->nworkers; i++)
			missing += s_wait_lists(wt, h->workers[i], 0);
	hub_refusal(e, wt->req, err, 1 + wt->commit);
	s_wait_versions(e, wt);
	wsync_enc_str(e, "missing");
	msgpack_pack_array(&e->pk, missing);
	if (wt->mode != WSYNC_WAIT_COUNT) {
		for (size_t i = 0; i < wt->nids; i++) {
			struct hub_worker *w = hub_worker_find(h, wt->ids[i]);
			if (!s_wait_done_by(wt, w))
				s_missing_entry(e, wt, wt->ids[i], w, now);
		}
	} else {
		for (size_t i = 0; i < h->nworkers; i++)
			if (s_wait_lists(wt, h->workers[i], 0))
				s_missing_entry(e, wt, h->workers[i]->id, h->workers[i], now);
	}
	return missing;
}

size_t
hub_wait_expiry(const wsync_hub_t *h, const struct hub_wait *wt, int64_t now, wsync_enc_t *e)
{
	wsync_err_t err;
	size_t total = 0, missing = 0;

	if (wt->mode != WSYNC_WAIT_COUNT) {
		total = wt->nids;
		for (size_t i = 0; i < wt->nids; i++)
			missing += !s_wait_done_by(wt, hub_worker_find(h, wt->ids[i]));
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
	return s_wait_refusal(h, wt, now, &err, e);
}

/*
 * Refuses wt, whose workers have all answered, failed workers of them
 * included, with code 65 and the missing list (each with its failure).
 */
static void
s_wait_fail(wsync_hub_t *h, const struct hub_wait *wt, size_t failed)
{
	wsync_enc_t e;
	wsync_err_t err;

	wsync_err_set(&err, EX_DATAERR, "%s version %" PRIu64 ": %zu of %zu workers could not "
	    "apply it (a failed version is never retried)", wt->model, wt->version, failed,
	    wt->nids);
	s_wait_refusal(h, wt, wsync_now_ms(), &err, &e);
	hub_send(h, wt->router, wt->ident, wt->identlen, &e);
	hub_log(h, "event=waited model=%s version=%" PRIu64 " failed=%zu ms=%" PRId64, wt->model,
	    wt->version, failed, wsync_now_ms() - wt->start);
}

/* Refuses the timed-out wait wt. */
static void
s_wait_expire(wsync_hub_t *h, const struct hub_wait *wt, int64_t now)
{
	wsync_enc_t e;
	size_t missing = hub_wait_expiry(h, wt, now, &e);

	hub_send(h, wt->router, wt->ident, wt->identlen, &e);
	h->counts.waits_timed_out++;
	hub_log(h, "event=timeout model=%s version=%" PRIu64 " missing=%zu", wt->model,
	    wt->version, missing);
}

static void
s_wait_remove(wsync_hub_t *h, size_t i)
{
	hub_wait_free(&h->waits[i]);
	h->waits[i] = h->waits[--h->nwaits];
}

void
hub_waits_check(wsync_hub_t *h, const char *model)
{
	for (size_t i = 0; i < h->nwaits;) {
		size_t failed = 0;
		if (strcmp(h->waits[i].model, model) != 0) {
			i++;
			continue;
		}
		if (hub_wait_satisfied(h, &h->waits[i]))
			s_wait_answer(h, &h->waits[i]);
		else if ((failed = s_wait_settled_failed(h, &h->waits[i])) > 0)
			s_wait_fail(h, &h->waits[i], failed);
		else {
			i++;
			continue;
		}
		s_wait_remove(h, i);
	}
}

void
hub_waits_expire(wsync_hub_t *h, int64_t now)
{
	for (size_t i = 0; i < h->nwaits;) {
		if (h->waits[i].deadline <= now) {
			s_wait_expire(h, &h->waits[i], now);
			s_wait_remove(h, i);
		} else
			i++;
	}
}

/* The workers a wait "all" waits for: the version's targets, else the live watchers. */
static int
s_wait_all(wsync_hub_t *h, const wsync_model_t *m, struct hub_wait *wt, wsync_err_t *err)
{
	const wsync_version_t *v = wsync_model_version(m, wt->version);
	int64_t now = wsync_now_ms();
	size_t n = 0;

	if (v != NULL && v->targets != NULL)
		n = v->ntargets;
	else
		for (size_t i = 0; i < h->nworkers; i++) {
			const struct hub_wmodel *wm = hub_wmodel_find(h->workers[i], wt->model);
			n += wm != NULL && wm->watching && hub_worker_alive(h->workers[i], now);
		}
	if ((wt->ids = calloc(n + 1, sizeof(*wt->ids))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; v != NULL && v->targets != NULL && i < v->ntargets; i++)
		if ((wt->ids[wt->nids++] = strdup(v->targets[i])) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; (v == NULL || v->targets == NULL) && i < h->nworkers; i++) {
		const struct hub_wmodel *wm = hub_wmodel_find(h->workers[i], wt->model);
		if (wm == NULL || !wm->watching || !hub_worker_alive(h->workers[i], now))
			continue;
		if ((wt->ids[wt->nids++] = strdup(h->workers[i]->id)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
}

int
hub_wait_mode_parse(const char *s, wsync_wait_mode_t *mode)
{
	int m = wsync_wait_parse(s);

	if (m < 0)
		return -1;
	*mode = (wsync_wait_mode_t)m;
	return 0;
}

int
hub_wait_parse(wsync_hub_t *h, const struct hub_req *r, struct hub_wait *wt,
    uint64_t *timeout, wsync_err_t *err)
{
	char mode[8];
	size_t mine = 0;

	if (hub_str(r, "mode", 1, NULL, mode, sizeof(mode), err) < 0 ||
	    hub_u64(r, "timeout_ms", 1, timeout, err) < 0)
		return -1;
	if (*timeout > HUB_MAX_WAIT_MS)
		return wsync_err_set(err, EX_USAGE, "a wait of %" PRIu64 " ms is longer than the "
		    "hub keeps one (%d ms)", *timeout, HUB_MAX_WAIT_MS);
	if (hub_wait_mode_parse(mode, &wt->mode) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "wait mode \"%s\" is not all, count or ids",
		    mode);
	if (wt->mode == WSYNC_WAIT_COUNT && hub_u64(r, "count", 1, &wt->count, err) < 0)
		return -1;
	if (wt->mode == WSYNC_WAIT_IDS && hub_list(wsync_msg_get(&r->msg, "ids"), "ids", 1,
	    wsync_id_check, &wt->ids, &wt->nids, err) < 0)
		return -1;
	if (h->nwaits == HUB_MAX_WAITS)
		return wsync_err_set(err, EX_UNAVAILABLE, "the hub has %d waits pending already",
		    HUB_MAX_WAITS);
	for (size_t i = 0; i < h->nwaits; i++)
		if (strcmp(h->waits[i].peer, r->peer) == 0 && ++mine == HUB_PEER_WAITS)
			return wsync_err_set(err, EX_UNAVAILABLE, "this client has %d waits pending "
			    "already (the most one may have)", HUB_PEER_WAITS);
	return 0;
}

int
hub_wait_start(wsync_hub_t *h, const struct hub_req *r, const wsync_model_t *m,
    struct hub_wait *wt, int64_t start, uint64_t timeout, wsync_err_t *err)
{
	size_t failed = 0;

	snprintf(wt->peer, sizeof(wt->peer), "%s", r->peer);
	if (wt->mode == WSYNC_WAIT_ALL && s_wait_all(h, m, wt, err) < 0)
		return -1;
	wt->router = h->router;
	memcpy(wt->ident, r->ident, r->identlen);
	wt->identlen = r->identlen;
	wt->req = r->id;
	wt->start = start;
	wt->deadline = start + (int64_t)(timeout < INT32_MAX ? timeout : INT32_MAX);
	h->counts.waits++;
	hub_log(h, "event=wait model=%s version=%" PRIu64 " mode=%s workers=%zu timeout_ms=%"
	    PRIu64, wt->model, wt->version, wsync_wait_name(wt->mode),
	    wt->mode == WSYNC_WAIT_COUNT ? (size_t)wt->count : wt->nids, timeout);
	if (hub_wait_satisfied(h, wt) || (failed = s_wait_settled_failed(h, wt)) > 0) {
		if (failed > 0)
			s_wait_fail(h, wt, failed);
		else
			s_wait_answer(h, wt);
		hub_wait_free(wt);
		return 0;
	}
	if (h->nwaits == h->waits_cap) {
		size_t cap = h->waits_cap ? h->waits_cap * 2 : 8;
		struct hub_wait *nw = realloc(h->waits, cap * sizeof(*nw));
		if (nw == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		h->waits = nw;
		h->waits_cap = cap;
	}
	h->waits[h->nwaits++] = *wt;
	return 0;
}

int
hub_op_wait(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	struct hub_wait wt = { .mode = WSYNC_WAIT_ALL };
	const wsync_model_t *m;
	uint64_t timeout;

	if (hub_model_field(r, wt.model, err) < 0 ||
	    hub_u64(r, "version", 1, &wt.version, err) < 0 ||
	    hub_wait_parse(h, r, &wt, &timeout, err) < 0)
		goto fail;
	if ((m = wsync_store_find(h->store, wt.model)) == NULL) {
		hub_no_model(h, wt.model, err);
		goto fail;
	}
	if (wt.version == 0) {
		wsync_err_set(err, EX_USAGE, "wait for version 0: versions start at 1");
		goto fail;
	}
	if (wsync_model_newest(m) == NULL || wt.version > wsync_model_newest(m)->version) {
		hub_no_version(m, wt.version, h->keep, err);
		goto fail;
	}
	if (hub_wait_start(h, r, m, &wt, wsync_now_ms(), timeout, err) < 0)
		goto fail;
	return 0;
fail:
	hub_wait_free(&wt);
	return -1;
}
