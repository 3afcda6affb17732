/* follow.c - a follower: a hub's connection and its announcements (see follow_int.h). */
#include <errno.h>
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
