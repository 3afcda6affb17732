/* hub_status.c - the status document: every model's versions and every worker's state. */

#include "hub_int.h"

/* The failure of w to show: the latest one not cleared by an ack. */
static const struct hub_wmodel *
s_last_failure(const struct hub_worker *w)
{
	const struct hub_wmodel *last = NULL;

	for (size_t i = 0; i < w->nmodels; i++)
		if (w->models[i].failed != 0 &&
		    (last == NULL || w->models[i].fail_time > last->fail_time))
			last = &w->models[i];
	return last;
}

static void
s_pack_worker(wsync_enc_t *e, const struct hub_worker *w, int64_t now)
{
	const struct hub_wmodel *failure = s_last_failure(w);
	size_t watching = 0, applied = 0, failing = 0;

	for (size_t i = 0; i < w->nmodels; i++) {
		watching += w->models[i].watching;
		applied += w->models[i].applied != 0;
		failing += w->models[i].failures != 0;
	}
	msgpack_pack_map(&e->pk, 12 + (w->nselect > 0));
	wsync_enc_kv_str(e, "worker", w->id);
	wsync_enc_kv_str(e, "via", w->via);
	if (w->nselect > 0) {
		wsync_enc_str(e, "select");
		msgpack_pack_array(&e->pk, w->nselect);
		for (size_t i = 0; i < w->nselect; i++)
			wsync_enc_str(e, w->select[i]);
	}
	wsync_enc_kv_str(e, "transfer", w->transfer[0] ? w->transfer : "-");
	wsync_enc_kv_u64(e, "wire", w->wire);
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
	wsync_enc_kv_bool(e, "alive", hub_worker_alive(w, now));
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

	for (int i = 0; i < HUB_UPLOADS; i++)
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

int
hub_op_status(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	int64_t now = wsync_now_ms();
	size_t nmodels = wsync_store_count(h->store), placed = hub_place_expire(h);
	wsync_enc_t e;

	(void)err;
	hub_ok(&e, r->id, 4 + (placed > 0));
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
	/* A root with relays placed: who feeds whom. */
	if (placed > 0)
		hub_place_pack(h, &e);
	hub_reply(h, r, &e);
	return 0;
}
