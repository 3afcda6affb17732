/* hub_request.c - one request: its envelope, the op table, field decoders, replies, refusals. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "hub_int.h"

/* ---- string lists ---- */

void
hub_strv_free(char **v, size_t n)
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

/* ---- field decoders: anything malformed is a protocol error (76) ---- */

int
hub_missing(const char *key, wsync_err_t *err)
{
	return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is missing", key);
}

int
hub_transfer_check(const char *s)
{
	return strcmp(s, "link") == 0 || strcmp(s, "copy") == 0 || strcmp(s, "socket") == 0 ||
	    strcmp(s, "delta") == 0 ? 0 : -1;
}

int
hub_str(const struct hub_req *r, const char *key, int required, int (*check)(const char *),
    char *buf, size_t size, wsync_err_t *err)
{
	const msgpack_object *o = wsync_msg_get(&r->msg, key);

	buf[0] = '\0';
	if (o == NULL)
		return required ? hub_missing(key, err) : 0;
	if (wsync_obj_str(o, buf, size) < 0 || (check != NULL && check(buf) < 0)) {
		buf[0] = '\0';
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not %s", key,
		    check == wsync_model_id_check ? "a model id (1 to 64 of A-Z a-z 0-9 . _ -)" :
		    check == wsync_id_check ? "an id (1 to 128 printable ASCII bytes, no space)" :
		    check == hub_transfer_check ? "link, copy, socket or delta" :
		    "a string of the right size");
	}
	return 0;
}

int
hub_model_field(const struct hub_req *r, char *buf, wsync_err_t *err)
{
	return hub_str(r, "model", 1, wsync_model_id_check, buf, WSYNC_MAX_MODEL + 1, err);
}

int
hub_worker_field(const struct hub_req *r, int required, char *buf, wsync_err_t *err)
{
	return hub_str(r, "worker", required, wsync_id_check, buf, WSYNC_MAX_ID + 1, err);
}

int
hub_u64(const struct hub_req *r, const char *key, int required, uint64_t *v, wsync_err_t *err)
{
	const msgpack_object *o = wsync_msg_get(&r->msg, key);

	if (o == NULL)
		return required ? hub_missing(key, err) : 0;
	if (wsync_obj_u64(o, v) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not an unsigned integer",
		    key);
	return 0;
}

int
hub_bool(const struct hub_req *r, const char *key, int *v, wsync_err_t *err)
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

int
hub_list(const msgpack_object *o, const char *key, int required, int (*check)(const char *),
    char ***out, size_t *n, wsync_err_t *err)
{
	char buf[HUB_MAX_NAME + 1];

	*out = NULL;
	*n = 0;
	if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
		return required ? hub_missing(key, err) : 0;
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > HUB_MAX_LIST)
		return wsync_err_set(err, EX_PROTOCOL, "field \"%s\" is not a list of at most %d "
		    "strings", key, HUB_MAX_LIST);
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
	hub_strv_free(*out, *n);
	*out = NULL;
	*n = 0;
	return -1;
}

/* ---- replies ---- */

void
hub_ok(wsync_enc_t *e, uint64_t id, size_t nfields)
{
	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 2);
	wsync_enc_kv_u64(e, "id", id);
	wsync_enc_kv_bool(e, "ok", 1);
}

void
hub_send(wsync_hub_t *h, void *router, const void *ident, size_t identlen, wsync_enc_t *e)
{
	(void)h;
	wsync_send(router, ident, identlen, e, NULL, 0, ZMQ_DONTWAIT);
	wsync_enc_free(e);
}

void
hub_reply(wsync_hub_t *h, const struct hub_req *r, wsync_enc_t *e)
{
	hub_send(h, h->router, r->ident, r->identlen, e);
}

void
hub_refusal(wsync_enc_t *e, uint64_t id, const wsync_err_t *err, size_t nfields)
{
	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 4);
	wsync_enc_kv_u64(e, "id", id);
	wsync_enc_kv_bool(e, "ok", 0);
	wsync_enc_kv_u64(e, "code", (uint64_t)err->code);
	wsync_enc_kv_str(e, "error", err->msg);
}

void
hub_send_data(wsync_hub_t *h, void *router, const void *ident, size_t identlen,
    wsync_enc_t *e, zmq_msg_t *data)
{
	const int f = ZMQ_DONTWAIT | ZMQ_SNDMORE;

	(void)h;
	if (zmq_send(router, ident, identlen, f) >= 0 && zmq_send(router, "", 0, f) >= 0 &&
	    zmq_send(router, e->sb.data, e->sb.size, f) >= 0)
		zmq_msg_send(data, router, ZMQ_DONTWAIT);
	zmq_msg_close(data);
	wsync_enc_free(e);
}

void
hub_reply_data(wsync_hub_t *h, const struct hub_req *r, wsync_enc_t *e, zmq_msg_t *data)
{
	hub_send_data(h, h->router, r->ident, r->identlen, e, data);
}

/* ---- the envelope and the op table ---- */

/* Every op the hub serves, and where (wsync(7) documents each). */
static const struct {
	const char *op;
	hub_op_fn *fn;
} s_ops[] = {
	{ "abort", hub_op_abort },
	{ "ack", hub_op_ack_or_fail },
	{ "begin", hub_op_begin },
	{ "bye", hub_op_bye },
	{ "chunk", hub_op_chunk },
	{ "commit", hub_op_commit },
	{ "delta", hub_op_delta },
	{ "fail", hub_op_ack_or_fail },
	{ "get", hub_op_get },
	{ "heads", hub_op_heads },
	{ "hello", hub_op_hello },
	{ "layout", hub_op_layout },
	{ "put", hub_op_put },
	{ "stat", hub_op_stat },
	{ "status", hub_op_status },
	{ "subtree", hub_op_subtree },
	{ "wait", hub_op_wait },
};

hub_op_fn *
hub_op_find(const char *op)
{
	for (size_t i = 0; i < sizeof(s_ops) / sizeof(s_ops[0]); i++)
		if (strcmp(op, s_ops[i].op) == 0)
			return s_ops[i].fn;
	return NULL;
}

void
wsync_hub_serve(wsync_hub_t *h, wsync_parts_t *p)
{
	struct hub_req r = { .parts = p };
	char quoted[2200];
	wsync_err_t err = { 0 };
	wsync_enc_t e;
	hub_op_fn *fn;
	int64_t now = wsync_now_ms();

	/* A connection that broke the protocol is not worth an answer for a while. */
	if (wsync_blocked_has(&h->blocked, wsync_part_data(p, 0), wsync_part_size(p, 0), now)) {
		h->counts.dropped++;
		return;
	}
	wsync_peer_name(p, r.peer);
	wsync_conn_name(p, r.conn);
	/* Identities are per ROUTER: a connection's name says which endpoint it came in on. */
	for (int k = 1; k < h->neps; k++)
		if (h->router == h->eps[k].router) {
			size_t n = strnlen(r.conn, sizeof(r.conn) - 4);
			snprintf(r.conn + n, sizeof(r.conn) - n, "@%d", k);
			if (strncmp(r.peer, "conn:", 5) == 0)
				memcpy(r.peer, r.conn, sizeof(r.peer));
		}
	if (p->n < 3 || p->extra > 0 || wsync_part_size(p, 1) != 0) {
		hub_log(h, "event=drop peer=%s error=\"not [identity][empty][request] or with one "
		    "data frame\" frames=%d", r.peer, p->n + p->extra);
		wsync_blocked_add(&h->blocked, wsync_part_data(p, 0), wsync_part_size(p, 0), now);
		h->counts.dropped++;
		return;
	}
	r.ident = wsync_part_data(p, 0);
	r.identlen = wsync_part_size(p, 0);
	if (wsync_msg_decode(&r.msg, wsync_part_data(p, 2), wsync_part_size(p, 2), &err) < 0 ||
	    wsync_msg_u64(&r.msg, "id", &r.id) < 0) {
		if (err.code == 0)
			wsync_err_set(&err, EX_PROTOCOL, "a request without an unsigned \"id\"");
		hub_log(h, "event=drop peer=%s error=\"%s\"", r.peer, wsync_log_quote(err.msg,
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
	if ((fn = hub_op_find(r.op)) == NULL) {
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
	if (fn(h, &r, &err) == 0) {
		wsync_msg_free(&r.msg);
		return;
	}
refuse:
	h->counts.refused++;
	hub_log(h, "event=refuse op=%s id=%" PRIu64 " code=%d error=\"%s\"", r.op[0] ? r.op : "-",
	    r.id, err.code, wsync_log_quote(err.msg, quoted, sizeof(quoted)));
	hub_refusal(&e, r.id, &err, 0);
	hub_reply(h, &r, &e);
	wsync_msg_free(&r.msg);
}
