/* hub_endpoint.c - the hub's sockets: a ROUTER and a PUB per endpoint, claiming an ipc socket file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"
#include "keys_int.h"

#define S_PROBE_MS 1000                 /* how long a live hub has to answer a probe */
#define S_SNDHWM 100                    /* replies queued per peer (a get's is 4 MiB) */
#define S_RCVHWM 32                     /* requests queued per connection (a chunk is 4 MiB) */

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
	hub_log(h, "event=reclaim path=\"%s\"", wsync_log_quote(path, quoted, sizeof(quoted)));
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

int
hub_pub_for(const char *endpoint, char *buf, size_t size, wsync_err_t *err)
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

int
hub_endpoints_open(wsync_hub_t *h, const wsync_hub_opts_t *opts, wsync_err_t *err)
{
	if ((h->eps = calloc((size_t)opts->nendpoints, sizeof(*h->eps))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < opts->nendpoints; i++) {
		struct hub_endpoint *ep = &h->eps[h->neps++];
		size_t len = sizeof(ep->pub_endpoint);
		char pub[512];

		snprintf(ep->endpoint, sizeof(ep->endpoint), "%s", opts->endpoints[i]);
		if (hub_pub_for(opts->endpoints[i], pub, sizeof(pub), err) < 0 ||
		    (ep->router = s_socket(ZMQ_ROUTER, S_SNDHWM, S_RCVHWM, err)) == NULL ||
		    (ep->pub = s_socket(ZMQ_PUB, 1000, 1000, err)) == NULL)
			return -1;
		if (h->auth != NULL && (wsync_auth_server(h->auth, ep->router, err) < 0 ||
		    wsync_auth_server(h->auth, ep->pub, err) < 0))
			return -1;
		if (s_bind(h, ep->router, opts->endpoints[i], 1, err) < 0 ||
		    s_bind(h, ep->pub, pub, 0, err) < 0)
			return -1;
		if (zmq_getsockopt(ep->pub, ZMQ_LAST_ENDPOINT, ep->pub_endpoint, &len) < 0)
			return wsync_err_set(err, EX_SOFTWARE, "%s: %s", pub, zmq_strerror(errno));
	}
	h->router = h->eps[0].router;
	return 0;
}

const char *
hub_pub_of(const wsync_hub_t *h, const void *router)
{
	for (int i = 0; i < h->neps; i++)
		if (h->eps[i].router == router)
			return h->eps[i].pub_endpoint;
	return h->eps[0].pub_endpoint;
}

void
hub_publish(wsync_hub_t *h, const char *topic, const void *body, size_t size)
{
	for (int i = 0; i < h->neps; i++)
		if (zmq_send(h->eps[i].pub, topic, strlen(topic), ZMQ_DONTWAIT | ZMQ_SNDMORE) >= 0)
			zmq_send(h->eps[i].pub, body, size, ZMQ_DONTWAIT);
}

void
hub_endpoints_close(wsync_hub_t *h)
{
	for (int i = 0; i < h->neps; i++) {
		if (h->eps[i].router != NULL)
			zmq_close(h->eps[i].router);
		if (h->eps[i].pub != NULL)
			zmq_close(h->eps[i].pub);
	}
	free(h->eps);
	/* Closing is asynchronous in ZeroMQ: the files go now, before a next hub probes. */
	for (size_t i = 0; i < h->nipc; i++) {
		unlink(h->ipc[i]);
		free(h->ipc[i]);
	}
	free(h->ipc);
}
