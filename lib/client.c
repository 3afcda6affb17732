/* client.c - the connection to a hub: socket, hello, requests and replies, heads, reports. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"

static const char *const s_transfers[] = { "auto", "link", "copy", "socket", "delta" };

int
wsync_transfer_parse(const char *name)
{
	return wsync_name_index(s_transfers, 4, name);
}

const char *
wsync_transfer_name(int mode)
{
	return wsync_name_of(s_transfers, 5, mode);
}

int
wsync_client_not_visible(const wsync_client_t *c, wsync_err_t *err)
{
	return wsync_err_set(err, EX_USAGE, "transfer by %s: the hub's store is not visible "
	    "from here (another host, user or mount namespace); socket or auto works",
	    wsync_transfer_name(c->transfer));
}

static void
s_close_socket(wsync_client_t *c)
{
	if (c->sock != NULL) {
		wsync_curve_unwatch(c->sock, &c->mon);
		zmq_close(c->sock);
	}
	c->sock = NULL;
}

static int
s_open_socket(wsync_client_t *c, wsync_err_t *err)
{
	int zero = 0;

	if ((c->sock = zmq_socket(wsync_zmq_context(), ZMQ_DEALER)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s",
		    zmq_strerror(errno));
	zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (wsync_curve_client(c->sock, &c->curve, err) < 0 ||
	    (c->mon = wsync_curve_watch(c->sock, err)) == NULL) {
		s_close_socket(c);
		return -1;
	}
	if (zmq_connect(c->sock, c->endpoint) < 0) {
		wsync_err_set(err, EX_USAGE, "endpoint %s: %s", c->endpoint, zmq_strerror(errno));
		s_close_socket(c);
		return -1;
	}
	return 0;
}

uint64_t
wsync_client_request(wsync_client_t *c, wsync_enc_t *e, const char *op, size_t nfields)
{
	uint64_t id = ++c->next_id;

	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 2);
	wsync_enc_kv_str(e, "op", op);
	wsync_enc_kv_u64(e, "id", id);
	return id;
}

int
wsync_client_send(wsync_client_t *c, const wsync_enc_t *e, const void *data, size_t dlen,
    wsync_err_t *err)
{
	if (wsync_send(c->sock, NULL, 0, e, data, dlen, ZMQ_DONTWAIT) < 0)
		return wsync_err_set(err, EX_UNAVAILABLE, "cannot send to %s: %s", c->endpoint,
		    zmq_strerror(errno));
	return 0;
}

void
wsync_client_release(wsync_msg_t *m, wsync_parts_t *p)
{
	wsync_msg_free(m);
	wsync_parts_close(p);
}

int
wsync_client_recv(wsync_client_t *c, int64_t deadline, uint64_t *id, wsync_msg_t *m,
    wsync_parts_t *p, int keep_refusal, wsync_err_t *err)
{
	zmq_pollitem_t items[2] = { { c->sock, 0, ZMQ_POLLIN, 0 }, { c->mon, 0, ZMQ_POLLIN, 0 } };
	int64_t left = deadline - wsync_now_ms();
	int rc;

	*id = 0;
	/*
	 * Closed already: its monitor said so while a reply that came before the
	 * close was being read. What is left of those is read at once, and then
	 * the loss is told, not after the silence bound.
	 */
	if (c->close_lost && c->closed)
		left = 0;
	rc = zmq_poll(items, 2, (long)(left > 0 ? left : 0));
	if (rc < 0 && errno == EINTR)
		return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
	/* A refused handshake is retried by ZeroMQ for ever: only its monitor tells. */
	if (rc > 0 && (items[1].revents & ZMQ_POLLIN) &&
	    wsync_curve_failed(c->mon, c->endpoint, &c->curve, &c->closed, err) < 0)
		return -1;
	/* Closed by the hub, with no reply of it left to read: what was asked is lost. */
	if (c->close_lost && c->closed && !(items[0].revents & ZMQ_POLLIN))
		return wsync_err_set(err, EX_UNAVAILABLE, "%s closed the connection", c->endpoint);
	if (rc <= 0 || !(items[0].revents & ZMQ_POLLIN))
		return rc <= 0 ? 1 : wsync_client_recv(c, deadline, id, m, p, keep_refusal, err);
	if (wsync_recv(c->sock, p, 0) < 0)
		return wsync_err_set(err, EX_UNAVAILABLE, "receive from %s: %s", c->endpoint,
		    zmq_strerror(errno));
	if (p->n < 2 || wsync_part_size(p, 0) != 0) {
		wsync_parts_close(p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply that is not wsync protocol",
		    c->endpoint);
	}
	if (wsync_msg_decode(m, wsync_part_data(p, 1), wsync_part_size(p, 1), err) < 0) {
		char why[sizeof(err->msg)];
		snprintf(why, sizeof(why), "%s", err->msg);
		*id = 0;
		wsync_client_release(m, p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply it cannot read: %s",
		    c->endpoint, why);
	}
	rc = wsync_reply_decode(m, id, err);
	if (*id != 0 && c->hooks != NULL)
		c->hooks->seen(c->hooks_arg, *id, p);
	if (rc == 0)
		return 0;
	if (*id == 0) {
		wsync_client_release(m, p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply without an id", c->endpoint);
	}
	if (!keep_refusal)
		wsync_client_release(m, p);
	return -1;
}

int
wsync_client_await(wsync_client_t *c, uint64_t id, int64_t deadline, wsync_msg_t *m,
    wsync_parts_t *p, int keep_refusal, wsync_err_t *err)
{
	for (;;) {
		uint64_t got;
		int rc = wsync_client_recv(c, deadline, &got, m, p, keep_refusal, err);
		if (rc == 1 || got == id)
			return rc < 0 && keep_refusal ? 2 : rc;
		if (got == 0 && rc < 0)
			return -1;
		if (rc == 0 || keep_refusal)
			wsync_client_release(m, p);
	}
}

int
wsync_client_call(wsync_client_t *c, wsync_enc_t *e, uint64_t id, const void *data,
    size_t dlen, int timeout_ms, const char *what, wsync_msg_t *m, wsync_parts_t *p,
    wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	int rc = wsync_client_send(c, e, data, dlen, err);

	wsync_enc_free(e);
	if (rc < 0)
		return -1;
	if ((rc = wsync_client_await(c, id, deadline, m, p, 0, err)) == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "%s: no answer from %s within the "
		    "timeout", what, c->endpoint);
	return rc;
}

/* The PUB endpoint as this client reaches it: a tcp host the client used itself. */
static void
s_pub_endpoint(wsync_client_t *c, const char *pub)
{
	const char *host_end, *port;

	snprintf(c->pub, sizeof(c->pub), "%s", pub);
	if (strncmp(c->endpoint, "tcp://", 6) != 0 || strncmp(pub, "tcp://", 6) != 0)
		return;
	host_end = strrchr(c->endpoint + 6, ':');
	port = strrchr(pub + 6, ':');
	if (host_end != NULL && port != NULL)
		snprintf(c->pub, sizeof(c->pub), "%.*s%s", (int)(host_end - c->endpoint),
		    c->endpoint, port);
}

/*
 * Whether the hub's store is visible here: its directory (from hello) holds
 * an .id file with the store id the hub gave. Another host, user or mount
 * namespace fails this, and versions then travel over the socket.
 */
static void
s_find_store(wsync_client_t *c, const wsync_msg_t *m)
{
	char id[64], path[PATH_MAX + 8], seen[33];
	ssize_t n = -1;
	int fd;

	c->store_here = 0;
	if (wsync_msg_str(m, "store", c->store, sizeof(c->store)) < 0 ||
	    wsync_msg_str(m, "store_id", id, sizeof(id)) < 0 || c->store[0] != '/')
		return;
	snprintf(path, sizeof(path), "%s/.id", c->store);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, seen, 32);
		close(fd);
	}
	seen[n == 32 ? 32 : 0] = '\0';
	c->store_here = n == 32 && strcmp(seen, id) == 0;
}

static int
s_hello(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	char host[256] = "unknown", pub[512];
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id, v;

	/* A watcher or relay waits for its hub to start; a one-off call need not. */
	if (strcmp(c->role, "watch") != 0 && strcmp(c->role, "relay") != 0 &&
	    wsync_endpoint_absent(c->endpoint))
		return wsync_err_set(err, EX_UNAVAILABLE, "cannot reach %s: no socket there (is "
		    "wsync-serve running?)", c->endpoint);
	gethostname(host, sizeof(host) - 1);
	id = wsync_client_request(c, &e, "hello", (c->worker[0] ? 6 : 5) + (c->nselect > 0));
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "role", c->role);
	if (c->worker[0])
		wsync_enc_kv_str(&e, "worker", c->worker);
	wsync_enc_kv_str(&e, "host", host);
	wsync_enc_kv_u64(&e, "pid", (uint64_t)getpid());
	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, (size_t)c->nmodels);
	for (int i = 0; i < c->nmodels; i++)
		wsync_enc_str(&e, c->models[i]);
	if (c->nselect > 0) {
		wsync_enc_str(&e, "select");
		msgpack_pack_array(&e.pk, (size_t)c->nselect);
		for (int i = 0; i < c->nselect; i++)
			wsync_enc_str(&e, c->select[i]);
	}
	if (wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "hello", &m, &p, err) < 0) {
		if (err->code == EX_TEMPFAIL)
			wsync_err_set(err, EX_UNAVAILABLE, "cannot reach %s after %.1f s (is "
			    "wsync-serve running?)", c->endpoint, timeout_ms / 1000.0);
		return -1;
	}
	if (wsync_msg_str(&m, "pub", pub, sizeof(pub)) < 0 ||
	    wsync_msg_str(&m, "hub", c->hub, sizeof(c->hub)) < 0) {
		wsync_client_release(&m, &p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: hello reply lacks pub or hub",
		    c->endpoint);
	}
	s_pub_endpoint(c, pub);
	s_find_store(c, &m);
	c->chunk = wsync_msg_u64(&m, "chunk", &v) == 0 && v > 0 && v <= WSYNC_CHUNK ?
	    (uint32_t)v : WSYNC_CHUNK;
	c->window = wsync_msg_u64(&m, "window", &v) == 0 && v > 0 && v <= 64 ?
	    (uint32_t)v : WSYNC_WINDOW;
	c->heartbeat_ms = wsync_msg_u64(&m, "heartbeat_ms", &v) == 0 && v >= 10 &&
	    v <= 60000 ? (uint32_t)v : WSYNC_HEARTBEAT_MS;
	if (wsync_msg_str(&m, "twin", c->twin, sizeof(c->twin)) < 0)
		c->twin[0] = '\0';
	if (wsync_msg_str(&m, "typos", c->typos, sizeof(c->typos)) < 0)
		c->typos[0] = '\0';
	wsync_client_release(&m, &p);
	return 0;
}

wsync_client_t *
wsync_client_new(const wsync_client_opts_t *o, wsync_err_t *err)
{
	wsync_client_t *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	if (wsync_endpoint_resolve(o->endpoint, c->endpoint, sizeof(c->endpoint), err) < 0 ||
	    wsync_curve_load(&c->curve, o->key, o->hub_key, err) < 0)
		goto fail;
	if (c->curve.on && o->hub_public != NULL)
		snprintf(c->curve.server, sizeof(c->curve.server), "%s", o->hub_public);
	snprintf(c->role, sizeof(c->role), "%s", o->role);
	c->progress = o->progress;
	c->progress_arg = o->progress_arg;
	c->transfer = o->transfer;
	c->stop = o->stop;
	c->idle_ms = o->idle_ms;
	if (o->worker != NULL)
		snprintf(c->worker, sizeof(c->worker), "%s", o->worker);
	if ((c->models = calloc((size_t)o->nmodels + 1, sizeof(*c->models))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	for (c->nmodels = 0; c->nmodels < o->nmodels; c->nmodels++) {
		if ((c->models[c->nmodels] = strdup(o->models[c->nmodels])) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
	}
	if (o->nselect > 0 && (c->select = calloc((size_t)o->nselect, sizeof(*c->select))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	for (; c->nselect < o->nselect; c->nselect++) {
		if ((c->select[c->nselect] = strdup(o->select[c->nselect])) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
	}
	if (s_open_socket(c, err) < 0 || s_hello(c, o->timeout_ms, err) < 0)
		goto fail;
	/* From an answered hello on: a close before it is a handshake's, told otherwise. */
	c->close_lost = o->close_lost;
	c->closed = 0;
	return c;
fail:
	wsync_client_destroy(&c);
	return NULL;
}

void
wsync_client_destroy(wsync_client_t **cp)
{
	wsync_client_t *c = *cp;

	if (c == NULL)
		return;
	if (c->hooks != NULL)
		c->hooks->end(c->hooks_arg, c);
	c->hooks = NULL;
	s_close_socket(c);
	for (int i = 0; i < c->nmodels; i++)
		free(c->models[i]);
	free(c->models);
	for (int i = 0; i < c->nselect; i++)
		free(c->select[i]);
	free(c->select);
	free(c);
	*cp = NULL;
}

const char *
wsync_client_endpoint(const wsync_client_t *c)
{
	return c->endpoint;
}

const char *
wsync_client_hub(const wsync_client_t *c)
{
	return c->hub;
}

const char *
wsync_client_pub(const wsync_client_t *c)
{
	return c->pub;
}

const wsync_curve_t *
wsync_client_curve(const wsync_client_t *c)
{
	return &c->curve;
}

uint32_t
wsync_client_heartbeat_ms(const wsync_client_t *c)
{
	return c->heartbeat_ms;
}

const char *
wsync_client_twin(const wsync_client_t *c)
{
	return c->twin;
}

const char *
wsync_client_typos(const wsync_client_t *c)
{
	return c->typos;
}

int
wsync_client_reconnect(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	if (c->hooks != NULL)
		c->hooks->reset(c->hooks_arg);
	s_close_socket(c);
	if (s_open_socket(c, err) < 0)
		return -1;
	return s_hello(c, timeout_ms, err);
}

void
wsync_client_heads_from(const wsync_msg_t *m, wsync_heads_from_t *from)
{
	if (wsync_msg_str(m, "hub", from->hub, sizeof(from->hub)) < 0)
		from->hub[0] = '\0';
	if (wsync_msg_str(m, "store", from->store, sizeof(from->store)) < 0)
		from->store[0] = '\0';
	/* A hub that names no origin is a tree of its own: its store is the origin. */
	if (wsync_msg_str(m, "origin", from->origin, sizeof(from->origin)) < 0)
		snprintf(from->origin, sizeof(from->origin), "%s", from->store);
}

int
wsync_client_heads(wsync_client_t *c, const wsync_heads_ask_t *a, wsync_head_t *heads,
    wsync_heads_from_t *from, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	const msgpack_object *all;
	uint64_t id = wsync_client_request(c, &e, "heads", 1);

	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, (size_t)a->n);
	for (int i = 0; i < a->n; i++)
		wsync_enc_str(&e, a->models[i]);
	if (wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "heads", &m, &p, err) < 0)
		return -1;
	if (from != NULL)
		wsync_client_heads_from(&m, from);
	all = wsync_msg_get(&m, "heads");
	for (int i = 0; i < a->n; i++) {
		const msgpack_object *h = wsync_obj_get(all, a->models[i]);
		if (h == NULL)
			memset(&heads[i], 0, sizeof(heads[i]));
		else if (wsync_head_decode(h, &heads[i]) < 0) {
			wsync_client_release(&m, &p);
			return wsync_err_set(err, EX_PROTOCOL, "%s: a heads reply for %s without "
			    "version, size or content", c->endpoint, a->models[i]);
		}
	}
	wsync_client_release(&m, &p);
	return 0;
}

/* Sends a small request whose reply carries nothing the caller needs. */
static int
s_simple(wsync_client_t *c, wsync_enc_t *e, uint64_t id, int timeout_ms, const char *what,
    wsync_err_t *err)
{
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };

	if (wsync_client_call(c, e, id, NULL, 0, timeout_ms, what, &m, &p, err) < 0)
		return -1;
	wsync_client_release(&m, &p);
	return 0;
}

int
wsync_client_report(wsync_client_t *c, const wsync_report_t *r, int timeout_ms,
    wsync_err_t *err)
{
	const char *op = r->reason != NULL ? "fail" : "ack";
	int said = r->transfer != WSYNC_TRANSFER_AUTO;
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, op, 3 + (r->reason != NULL) + said +
	    (r->wire != 0));

	wsync_enc_kv_str(&e, "worker", r->worker);
	wsync_enc_kv_str(&e, "model", r->model);
	wsync_enc_kv_u64(&e, "version", r->version);
	if (r->reason != NULL)
		wsync_enc_kv_str(&e, "reason", r->reason);
	if (said)
		wsync_enc_kv_str(&e, "transfer", wsync_transfer_name(r->transfer));
	if (r->wire != 0)
		wsync_enc_kv_u64(&e, "wire", r->wire);
	return s_simple(c, &e, id, timeout_ms, op, err);
}

int
wsync_client_bye(wsync_client_t *c, const char *worker, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, "bye", 1);

	wsync_enc_kv_str(&e, "worker", worker);
	return s_simple(c, &e, id, timeout_ms, "bye", err);
}

char *
wsync_client_status_json(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "status", 0);
	json_t *j;
	char *text;

	if (wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "status", &m, &p, err) < 0)
		return NULL;
	j = wsync_obj_json(m.root);
	json_object_del(j, "id");
	json_object_del(j, "ok");
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	wsync_client_release(&m, &p);
	if (text == NULL)
		wsync_err_set(err, EX_PROTOCOL, "%s: a status that is not valid UTF-8",
		    c->endpoint);
	return text;
}
