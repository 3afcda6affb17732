/*
 * hub_arrive.c - a relay's version on its way: passed on to downstream relays
 * before it is whole. While the relay's thread fetches a version from its
 * upstream (hub_relay.c), it tells the loop the file it writes and how much of
 * it is in; a downstream relay learns of the version from heads (asked with
 * "arriving") and an announcement on the topic ".arriving", and reads it with
 * gets that say "arriving": a range that is in is served from the file, one
 * that is not waits for it, at most HUB_ARRIVE_WAIT_MS. Workers never ask
 * either way, so they only ever see versions this hub verified whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"
#include "io_int.h"

/* Refuses g with err. */
static void
s_refuse(wsync_hub_t *h, const struct hub_early_get *g, const wsync_err_t *err)
{
	wsync_enc_t e;

	hub_refusal(&e, g->req, err, 0);
	hub_send(h, g->router, g->ident, g->identlen, &e);
}

/* Sends a get's reply of len bytes at off of the arriving file to g's asker. */
static void
s_serve(wsync_hub_t *h, const struct hub_early_get *g)
{
	struct hub_arriving *a = &h->arriving;
	wsync_err_t err = { 0 };
	zmq_msg_t data;
	wsync_enc_t e;

	if (zmq_msg_init_size(&data, g->len) < 0)
		wsync_err_set(&err, EX_SOFTWARE, "out of memory");
	else if (wsync_read_at(a->fd, zmq_msg_data(&data), g->len, g->off) < 0) {
		zmq_msg_close(&data);
		wsync_err_set(&err, EX_IOERR, "model \"%s\" version %" PRIu64 ": cannot read "
		    "what arrived: %s", a->model, a->version, strerror(errno));
	}
	if (err.code != 0) {
		s_refuse(h, g, &err);
		return;
	}
	hub_ok(&e, g->req, 2);
	wsync_enc_kv_u64(&e, "off", g->off);
	wsync_enc_kv_u64(&e, "len", g->len);
	hub_send_data(h, g->router, g->ident, g->identlen, &e, &data);
	h->counts.bytes_served += g->len;
	if (!a->passed) {
		a->passed = 1;
		hub_log(h, "event=pass-on model=%s version=%" PRIu64 " off=%" PRIu64 " len=%"
		    PRIu64 " arrived=%" PRIu64 " size=%" PRIu64, a->model, a->version, g->off,
		    g->len, a->upto, a->size);
	}
}

/*
 * Answers the gets waiting for what has arrived now, lowest offset first: a
 * relay below hashes what it reads as a stream, and a reply out of order
 * would have it read the whole version again to verify it.
 */
static void
s_answer(wsync_hub_t *h)
{
	struct hub_arriving *a = &h->arriving;

	for (;;) {
		size_t at = a->ngets;
		for (size_t i = 0; i < a->ngets; i++)
			if (a->gets[i].off + a->gets[i].len <= a->upto &&
			    (at == a->ngets || a->gets[i].off < a->gets[at].off))
				at = i;
		if (at == a->ngets)
			return;
		s_serve(h, &a->gets[at]);
		a->gets[at] = a->gets[--a->ngets];
	}
}

int
hub_arrive_has(const wsync_hub_t *h, const char *model, uint64_t version)
{
	const struct hub_arriving *a = &h->arriving;

	return a->version != 0 && a->version == version && strcmp(a->model, model) == 0;
}

int
hub_arrive_failed(const wsync_hub_t *h, const char *model, uint64_t version, wsync_err_t *err)
{
	const struct hub_arriving *a = &h->arriving;

	if (a->failed == 0 || a->failed != version || strcmp(a->failed_model, model) != 0)
		return 0;
	wsync_err_set(err, EX_NOINPUT, "model \"%s\" version %" PRIu64 " did not arrive whole at "
	    "this relay: it failed verification (ask again: it is fetched again)", model, version);
	return 1;
}

int
hub_arrive_get(wsync_hub_t *h, const struct hub_req *r, uint64_t off, uint64_t len,
    wsync_err_t *err)
{
	struct hub_arriving *a = &h->arriving;
	struct hub_early_get g = { .router = h->router, .req = r->id, .off = off, .len = len };

	if (off > a->size)
		return wsync_err_set(err, EX_USAGE, "offset %" PRIu64 " is beyond the end of "
		    "model \"%s\" version %" PRIu64 " (%" PRIu64 " bytes)", off, a->model,
		    a->version, a->size);
	if (g.len > a->size - off)
		g.len = a->size - off;
	memcpy(g.ident, r->ident, r->identlen);
	g.identlen = r->identlen;
	if (off + g.len <= a->upto) {
		s_serve(h, &g);
		return 0;
	}
	if (a->ngets == HUB_ARRIVE_GETS)
		return wsync_err_set(err, EX_TEMPFAIL, "model \"%s\" version %" PRIu64 " is "
		    "arriving and %d gets wait for it already", a->model, a->version,
		    HUB_ARRIVE_GETS);
	g.deadline = wsync_now_ms() + HUB_ARRIVE_WAIT_MS;
	a->gets[a->ngets++] = g;
	return 0;
}

void
hub_arrive_begin(wsync_hub_t *h, const char *model, const wsync_head_t *v, const char *path)
{
	struct hub_arriving *a = &h->arriving;
	wsync_enc_t e;

	if (a->version != 0)
		hub_arrive_end(h, EX_NOINPUT, "another version is arriving");
	if ((a->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		hub_log(h, "event=arriving-unread model=%s version=%" PRIu64 " error=\"%s\"",
		    model, v->version, strerror(errno));
		return;
	}
	snprintf(a->model, sizeof(a->model), "%s", model);
	a->version = v->version;
	a->failed = 0;
	a->size = v->size;
	a->content = v->content;
	a->upto = 0;
	a->passed = 0;
	hub_log(h, "event=arriving model=%s version=%" PRIu64 " size=%" PRIu64, model,
	    v->version, v->size);
	/* A topic no model id starts with: only relays subscribe to it. */
	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 4);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", v->version);
	wsync_enc_kv_u64(&e, "size", v->size);
	wsync_enc_kv_u64(&e, "content", v->content);
	hub_publish(h, HUB_ARRIVE_TOPIC, e.sb.data, e.sb.size);
	wsync_enc_free(&e);
}

void
hub_arrive_progress(wsync_hub_t *h, uint64_t upto)
{
	struct hub_arriving *a = &h->arriving;

	if (a->version == 0 || upto <= a->upto)
		return;
	a->upto = upto < a->size ? upto : a->size;
	s_answer(h);
}

void
hub_arrive_end(wsync_hub_t *h, int code, const char *why)
{
	struct hub_arriving *a = &h->arriving;
	wsync_err_t err = { 0 };

	if (a->version == 0)
		return;
	if (code == 0) {
		/* Committed: all of it is in, and the file is the store's now. */
		a->upto = a->size;
		s_answer(h);
	} else {
		/*
		 * 66, whatever dropped it: the relay below asks again, blaming no
		 * one. This relay got the bad bytes (or lost its upstream) and says
		 * so itself; it is not the one that spoiled them.
		 */
		wsync_err_set(&err, EX_NOINPUT, "model \"%s\" version %" PRIu64 " did not arrive "
		    "whole at this relay: %s", a->model, a->version, why);
		for (size_t i = 0; i < a->ngets; i++)
			s_refuse(h, &a->gets[i], &err);
		hub_log(h, "event=arriving-drop model=%s version=%" PRIu64 " code=%d", a->model,
		    a->version, code);
		if (code == EX_DATAERR) {
			snprintf(a->failed_model, sizeof(a->failed_model), "%s", a->model);
			a->failed = a->version;
		}
	}
	a->ngets = 0;
	close(a->fd);
	a->fd = -1;
	a->version = 0;
}

void
hub_arrive_expire(wsync_hub_t *h, int64_t now)
{
	struct hub_arriving *a = &h->arriving;
	wsync_err_t err = { 0 };

	for (size_t i = 0; i < a->ngets; ) {
		if (a->gets[i].deadline > now) {
			i++;
			continue;
		}
		/* 66: the downstream relay looks again on its next round. */
		wsync_err_set(&err, EX_NOINPUT, "model \"%s\" version %" PRIu64 ": bytes %" PRIu64
		    " to %" PRIu64 " did not arrive at this relay within %d ms", a->model,
		    a->version, a->gets[i].off, a->gets[i].off + a->gets[i].len,
		    HUB_ARRIVE_WAIT_MS);
		s_refuse(h, &a->gets[i], &err);
		a->gets[i] = a->gets[--a->ngets];
	}
}

void
hub_arrive_pack(const wsync_hub_t *h, char *const *models, size_t nmodels, wsync_enc_t *e)
{
	const struct hub_arriving *a = &h->arriving;
	int shown = a->version != 0 && models == NULL;

	for (size_t i = 0; a->version != 0 && !shown && models != NULL && i < nmodels; i++)
		shown = strcmp(models[i], a->model) == 0;
	wsync_enc_str(e, "arriving");
	msgpack_pack_map(&e->pk, shown ? 1 : 0);
	if (!shown)
		return;
	wsync_enc_str(e, a->model);
	msgpack_pack_map(&e->pk, 3);
	wsync_enc_kv_u64(e, "version", a->version);
	wsync_enc_kv_u64(e, "size", a->size);
	wsync_enc_kv_u64(e, "content", a->content);
}

void
hub_arrive_reader_add(wsync_hub_t *h, const char *conn)
{
	size_t i;

	for (i = 0; i < h->nrelay_conns && strcmp(h->relay_conns[i], conn) != 0; i++)
		;
	/* Known already, or the oldest goes: either way it moves to the end. */
	if (i == h->nrelay_conns && h->nrelay_conns == HUB_RELAY_CONNS)
		i = 0;
	else if (i == h->nrelay_conns)
		h->nrelay_conns++;
	memmove(h->relay_conns[i], h->relay_conns[i + 1],
	    (h->nrelay_conns - 1 - i) * sizeof(h->relay_conns[0]));
	snprintf(h->relay_conns[h->nrelay_conns - 1], sizeof(h->relay_conns[0]), "%s", conn);
}

int
hub_arrive_reader_check(const wsync_hub_t *h, const struct hub_req *r, wsync_err_t *err)
{
	for (size_t i = 0; i < h->nrelay_conns; i++)
		if (strcmp(h->relay_conns[i], r->conn) == 0)
			return 0;
	return wsync_err_set(err, EX_NOPERM, "%s with arriving: versions not yet verified here "
	    "are for relays (hello with role relay), not for workers", r->op);
}
