/* net.c - ZeroMQ context, multipart send and receive, clocks. */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "net_int.h"

static void *s_ctx;
static pthread_once_t s_ctx_once = PTHREAD_ONCE_INIT;

static void
s_ctx_make(void)
{
	s_ctx = zmq_ctx_new();
}

void *
wsync_zmq_context(void)
{
	pthread_once(&s_ctx_once, s_ctx_make);
	return s_ctx;
}

int
wsync_send(void *sock, const void *id, size_t idlen, const wsync_enc_t *msg,
    const void *data, size_t dlen, int flags)
{
	int more = data != NULL ? ZMQ_SNDMORE : 0;

	if (idlen > 0 && zmq_send(sock, id, idlen, flags | ZMQ_SNDMORE) < 0)
		return -1;
	if (zmq_send(sock, "", 0, flags | ZMQ_SNDMORE) < 0 ||
	    zmq_send(sock, msg->sb.data, msg->sb.size, flags | more) < 0)
		return -1;
	if (data != NULL && zmq_send(sock, data, dlen, flags) < 0)
		return -1;
	return 0;
}

int
wsync_recv(void *sock, wsync_parts_t *p, int flags)
{
	int more = 1;

	p->n = 0;
	p->extra = 0;
	while (more) {
		zmq_msg_t scratch, *m = p->n < WSYNC_MAX_PARTS ? &p->part[p->n] : &scratch;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, p->n == 0 && p->extra == 0 ? flags : 0) < 0) {
			int saved = errno;
			zmq_msg_close(m);
			wsync_parts_close(p);
			errno = saved;
			return -1;
		}
		more = zmq_msg_more(m);
		if (m == &scratch) {
			zmq_msg_close(m);
			p->extra++;
		} else
			p->n++;
	}
	return 0;
}

void
wsync_parts_close(wsync_parts_t *p)
{
	for (int i = 0; i < p->n; i++)
		zmq_msg_close(&p->part[i]);
	p->n = 0;
}

const void *
wsync_part_data(wsync_parts_t *p, int i)
{
	return zmq_msg_data(&p->part[i]);
}

size_t
wsync_part_size(wsync_parts_t *p, int i)
{
	return zmq_msg_size(&p->part[i]);
}

int64_t
wsync_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double
wsync_wall_time(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
