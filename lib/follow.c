/* follow.c - a follower: a hub's connection and its announcements (see follow_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "client_int.h"
#include "follow_int.h"

int
wsync_follow_connect(wsync_follower_t *f, const wsync_client_opts_t *co,
    const char *const *topics, int n, wsync_err_t *err)
{
	int zero = 0;

	if ((f->client = wsync_client_new(co, err)) == NULL)
		return -1;
	if ((f->sub = zmq_socket(wsync_zmq_context(), ZMQ_SUB)) == NULL) {
		wsync_client_destroy(&f->client);
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s",
		    zmq_strerror(errno));
	}
	zmq_setsockopt(f->sub, ZMQ_LINGER, &zero, sizeof(zero));
	if (wsync_curve_client(f->sub, wsync_client_curve(f->client), err) < 0) {
		wsync_follow_disconnect(f);
		return -1;
	}
	for (int i = 0; i < n; i++)
		zmq_setsockopt(f->sub, ZMQ_SUBSCRIBE, topics[i], strlen(topics[i]));
	/* Announcements only cut latency: without them, heartbeats still find the head. */
	if (zmq_connect(f->sub, wsync_client_pub(f->client)) < 0) {
		wsync_err_set(err, EX_UNAVAILABLE, "cannot subscribe at %s: %s",
		    wsync_client_pub(f->client), zmq_strerror(errno));
		return 1;
	}
	return 0;
}

void
wsync_follow_disconnect(wsync_follower_t *f)
{
	if (f->sub != NULL)
		zmq_close(f->sub);
	f->sub = NULL;
	wsync_client_destroy(&f->client);
}

int
wsync_follow_next(wsync_follower_t *f, const char *const *endpoints, int n, int resolve,
    wsync_err_t *err)
{
	if (resolve && wsync_endpoint_resolve(endpoints[f->next], f->endpoint,
	    sizeof(f->endpoint), err) < 0)
		return -1;
	if (!resolve)
		snprintf(f->endpoint, sizeof(f->endpoint), "%s", endpoints[f->next]);
	f->next = (f->next + 1) % n;
	return 0;
}

void
wsync_follow_item(const wsync_follower_t *f, zmq_pollitem_t *item)
{
	*item = (zmq_pollitem_t){ f->sub, 0, ZMQ_POLLIN, 0 };
}

int
wsync_follow_news(wsync_follower_t *f, wsync_parts_t *p)
{
	return f->sub != NULL ? wsync_recv(f->sub, p, ZMQ_DONTWAIT) : -1;
}

/* Decodes the map o of a heads reply (heads, or arriving) into a list of *n; -1 with err. */
static int
s_heads_list(const wsync_follower_t *f, const msgpack_object *o, wsync_follow_head_t **list,
    size_t *n, wsync_err_t *err)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_MAP || o->via.map.size == 0)
		return 0;
	if ((*list = calloc(o->via.map.size, sizeof(**list))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		wsync_follow_head_t *h = &(*list)[i];
		if (wsync_obj_str(&o->via.map.ptr[i].key, h->model, sizeof(h->model)) < 0 ||
		    wsync_model_id_check(h->model) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "%s: a heads reply that does not "
			    "decode", wsync_client_endpoint(f->client));
		if (wsync_head_decode(&o->via.map.ptr[i].val, &h->head) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "%s: a heads reply for %s without "
			    "version, size or content", wsync_client_endpoint(f->client), h->model);
		*n = i + 1;
	}
	return 0;
}

int
wsync_follow_heads(wsync_follower_t *f, const wsync_follow_ask_t *a, wsync_follow_heads_t *r,
    int timeout_ms, wsync_err_t *err)
{
	int beat = a->worker != NULL && a->m != NULL;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(f->client, &e, "heads", (a->models != NULL) +
	    2 * (size_t)beat + (a->arriving != 0));
	int rc;

	memset(r, 0, sizeof(*r));
	if (a->models != NULL) {
		wsync_enc_str(&e, "models");
		msgpack_pack_array(&e.pk, (size_t)a->n);
		for (int i = 0; i < a->n; i++)
			wsync_enc_str(&e, a->models[i]);
	}
	if (beat) {
		wsync_enc_kv_str(&e, "worker", a->worker);
		wsync_enc_str(&e, "applied");
		msgpack_pack_map(&e.pk, (size_t)a->n);
		for (int i = 0; i < a->n; i++)
			wsync_enc_kv_u64(&e, a->models[i], a->m[i].applied);
	}
	if (a->arriving)
		wsync_enc_kv_bool(&e, "arriving", 1);
	if (wsync_client_call(f->client, &e, id, NULL, 0, timeout_ms, "heads", &m, &p, err) < 0)
		return -1;
	wsync_client_heads_from(&m, &r->from);
	rc = s_heads_list(f, wsync_msg_get(&m, "heads"), &r->heads, &r->nheads, err);
	if (rc == 0 && a->arriving)
		rc = s_heads_list(f, wsync_msg_get(&m, "arriving"), &r->arriving, &r->narriving,
		    err);
	wsync_client_release(&m, &p);
	return rc;
}

wsync_head_t
wsync_follow_head_of(const wsync_follow_head_t *list, size_t n, const char *model)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i].model, model) == 0)
			return list[i].head;
	return (wsync_head_t){ 0 };
}

void
wsync_follow_heads_free(wsync_follow_heads_t *r)
{
	free(r->heads);
	free(r->arriving);
	r->heads = r->arriving = NULL;
	r->nheads = r->narriving = 0;
}
