/*
 * hub.c - wsync-serve's engine (wsync(7)): making and ending a hub, and its
 * loop. One thread polls a ROUTER per endpoint for requests (hub_request.c
 * serves them) and publishes announcements on each endpoint's PUB. It never blocks on a peer: replies go
 * out with ZMQ_DONTWAIT, and a peer whose queue is full loses them (clients
 * retry on timeout). Between requests, timers expire waits and idle uploads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"

#define S_POLL_MS 100                   /* longest sleep: the timers' resolution */
#define S_BATCH 256                     /* requests served between two timer checks */

/* Answers waits whose time ran out and drops uploads left idle. */
/*
 * The files a recycling hub keeps mapped: each model's round, the versions
 * kept and the one being written, and the spares (WSYNC_KEPT_MAPS at most).
 */
static unsigned
s_kept_max(const wsync_hub_t *h)
{
	uint64_t models = wsync_store_count(h->store), n;

	n = ((uint64_t)h->keep + 1) * (models > 0 ? models : 1) + h->recycle;
	return n < WSYNC_KEPT_MAPS ? (unsigned)n : WSYNC_KEPT_MAPS;
}

static void
s_timers(wsync_hub_t *h)
{
	int64_t now = wsync_now_ms();

	hub_waits_expire(h, now);
	hub_uploads_expire(h, now);
	hub_relay_report(h, now);
	hub_arrive_expire(h, now);
	hub_deltas_tick(h);
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
wsync_hub_run(wsync_hub_t *h, volatile sig_atomic_t *stop, wsync_err_t *err)
{
	zmq_pollitem_t *items = calloc((size_t)h->neps + 2 + WSYNC_AUTH_ITEMS, sizeof(*items));
	int nitems, relay = h->neps;

	if (items == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < h->neps; i++)
		items[i] = (zmq_pollitem_t){ h->eps[i].router, 0, ZMQ_POLLIN, 0 };
	/* A relay's thread hands over what it mirrored: the store is this loop's alone. */
	items[relay] = (zmq_pollitem_t){ h->relay_pair, -1, h->relay_pair ? ZMQ_POLLIN : 0, 0 };
	nitems = h->neps + 1 + wsync_auth_items(h->auth, &items[h->neps + 1]);

	/* A delta made in its thread wakes the loop (hub_delta.c). */
	items[nitems++] = (zmq_pollitem_t){ NULL, h->delta_pipe[0], ZMQ_POLLIN, 0 };

	while (!*stop) {
		if (h->reload != NULL && *h->reload) {
			*h->reload = 0;
			wsync_auth_reload(h->auth);
		}
		if (zmq_poll(items, nitems, s_poll_ms(h)) < 0) {
			if (errno == EINTR)
				continue;
			free(items);
			return wsync_err_set(err, EX_SOFTWARE, "poll: %s", zmq_strerror(errno));
		}
		/* Handshakes first: a client's first request waits on its ZAP answer. */
		wsync_auth_serve(h->auth, &items[h->neps + 1]);
		if (items[relay].revents & ZMQ_POLLIN)
			hub_relay_serve(h);
		for (int k = 0; k < h->neps; k++) {
			h->router = h->eps[k].router;
			for (int i = 0; i < S_BATCH && !*stop; i++) {
				wsync_parts_t p;
				if (wsync_recv(h->router, &p, ZMQ_DONTWAIT) < 0) {
					if (errno == EAGAIN || errno == EINTR)
						break;
					free(items);
					return wsync_err_set(err, EX_SOFTWARE, "receive: %s",
					    zmq_strerror(errno));
				}
				wsync_hub_serve(h, &p);
				wsync_parts_close(&p);
			}
		}
		/* Versions retired by these requests are closed now that they are answered. */
		wsync_store_bury(h->store);
		wsync_kept_set_max(h->kept, s_kept_max(h));
		wsync_kept_sweep(h->kept);
		s_timers(h);
	}
	free(items);
	hub_uploads_stop(h);
	hub_log(h, "event=stop waits_dropped=%zu", h->nwaits);
	return 0;
}

wsync_hub_t *
wsync_hub_new(const wsync_hub_opts_t *opts, wsync_err_t *err)
{
	char host[256] = "unknown", quoted[2048];
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
	h->delta_pipe[0] = h->delta_pipe[1] = -1;
	h->arriving.fd = -1;
#ifdef WSYNC_TEST_HOOKS
	h->flip_get = getenv("WSYNC_TEST_FLIP_GET") != NULL;
#endif
	gethostname(host, sizeof(host) - 1);
	snprintf(h->name, sizeof(h->name), "%s:%ld", host, (long)getpid());
	h->reload = opts->reload;
	if (wsync_auth_new(opts, &h->auth, err) < 0 || hub_endpoints_open(h, opts, err) < 0)
		goto fail;
	if ((h->store = wsync_store_open(opts->store, opts->keep, opts->log, opts->log_arg,
	    err)) == NULL)
		goto fail;
	wsync_store_set_spares(h->store, opts->recycle);
	/*
	 * A recycling store on tmpfs: its files go round (version, spare, slot),
	 * each kept mapped, so that rebuilding a pushed delta copies from mapping
	 * to mapping (kept_int.h); as many as s_kept_max.
	 */
	h->recycle = opts->recycle;
	if (opts->recycle > 0 && wsync_kept_fits(wsync_store_dir(h->store)))
		h->kept = wsync_kept_new(s_kept_max(h));
	if (hub_deltas_open(h, err) < 0 || hub_relay_start(h, opts, err) < 0)
		goto fail;
	hub_log(h, "event=store dir=\"%s\" models=%zu keep=%u recycle=%u", wsync_log_quote(
	    wsync_store_dir(h->store), quoted, sizeof(quoted)), wsync_store_count(h->store),
	    opts->keep, opts->recycle);
	for (int i = 0; i < h->neps; i++)
		hub_log(h, "event=listen endpoint=%s pub=%s hub=%s", h->eps[i].endpoint,
		    h->eps[i].pub_endpoint, h->name);
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
	hub_relay_stop(h);
	hub_place_free(h);
	hub_arrive_end(h, EX_TEMPFAIL, "the hub stops");
	for (int i = 0; i < HUB_UPLOADS; i++)
		hub_upload_end(&h->uploads[i]);
	hub_groups_stop(h);
	for (size_t i = 0; i < h->nwaits; i++)
		hub_wait_free(&h->waits[i]);
	free(h->waits);
	for (size_t i = 0; i < h->nworkers; i++)
		hub_worker_free(h->workers[i]);
	free(h->workers);
	wsync_auth_destroy(&h->auth);
	hub_endpoints_close(h);
	hub_deltas_close(h);
	wsync_kept_free(&h->kept);
	wsync_store_close(&h->store);
	free(h);
	*hp = NULL;
}
