/*
 * zmq_raw - the raw ZeroMQ limits wsync's transfers are measured against:
 *
 *   zmq_raw stream ENDPOINT BYTES MSG RUNS [FILE [keep]]
 *                                            DEALER asks, ROUTER sends BYTES in
 *                                            MSG-byte messages; prints seconds
 *                                            per run, one a line. With FILE, each
 *                                            run writes what it receives into a
 *                                            new FILE, as a pull must; with keep,
 *                                            into FILE as it is, its pages kept
 *                                            from the run before, as a watcher's
 *                                            recycled file has them
 *   zmq_raw rtt ENDPOINT COUNT RUNS          REQ/REP round trips of 16 bytes;
 *                                            prints seconds per round trip
 *   zmq_raw fanout DIR N COUNT               an update's messages as wsync's
 *                                            protocol has them, and nothing
 *                                            else: a trainer's request to a
 *                                            hub, the hub's publication to N
 *                                            workers (PUB/SUB), each worker's
 *                                            ack and the hub's reply to it, the
 *                                            hub's reply to the trainer once
 *                                            all N acked; prints seconds per
 *                                            update, COUNT lines (ipc sockets
 *                                            in DIR)
 *
 * The server is a forked child, so two processes share the two cores as a hub
 * and a client do. Every message is sent from one reused buffer (zmq_send
 * copies it), as a hub sends from pages that already exist.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"

static void
s_die(const char *what)
{
	fprintf(stderr, "zmq_raw: %s: %s\n", what, zmq_strerror(zmq_errno()));
	exit(70);
}

/* The ROUTER side: for each request, sends bytes in msg-sized messages. */
static void
s_stream_server(const char *endpoint, long long bytes, size_t msg)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_ROUTER);
	char *buf = calloc(1, msg), id[256], req[16];
	int hwm = 0;

	zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	if (buf == NULL || zmq_bind(s, endpoint) < 0)
		s_die("bind");
	for (;;) {
		int idlen = zmq_recv(s, id, sizeof(id), 0);
		if (idlen < 0 || zmq_recv(s, req, sizeof(req), 0) < 0)
			s_die("recv");
		for (long long left = bytes; left > 0; left -= (long long)msg) {
			size_t n = left < (long long)msg ? (size_t)left : msg;
			if (zmq_send(s, id, (size_t)idlen, ZMQ_SNDMORE) < 0 ||
			    zmq_send(s, buf, n, 0) < 0)
				s_die("send");
		}
	}
}

static int
s_stream(const char *endpoint, long long bytes, int runs, const char *file, int keep)
{
	int fd = -1;
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
	int hwm = 0;
	zmq_msg_t m;

	zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	if (zmq_connect(s, endpoint) < 0)
		s_die("connect");
	zmq_msg_init(&m);
	for (int r = 0; r <= runs; r++) {
		double start = bench_now();
		long long got = 0;
		if (file != NULL) {
			if (!keep)
				unlink(file);
			if ((fd = open(file, O_WRONLY | O_CREAT | (keep ? 0 : O_TRUNC), 0600)) < 0 ||
			    fallocate(fd, 0, 0, bytes) < 0) {
				perror(file);
				exit(74);
			}
		}
		zmq_send(s, "go", 2, 0);
		while (got < bytes) {
			if (zmq_msg_recv(&m, s, 0) < 0)
				s_die("recv");
			if (fd >= 0 && pwrite(fd, zmq_msg_data(&m), zmq_msg_size(&m), got) !=
			    (ssize_t)zmq_msg_size(&m)) {
				perror(file);
				exit(74);
			}
			got += (long long)zmq_msg_size(&m);
		}
		if (fd >= 0) {
			close(fd);
			fd = -1;
		}
		/* Run 0 warms up connections and allocator. */
		if (r > 0)
			printf("%.9f\n", bench_now() - start);
	}
	zmq_msg_close(&m);
	zmq_close(s);
	zmq_ctx_term(ctx);
	if (file != NULL)
		unlink(file);
	return 0;
}

static void
s_rtt_server(const char *endpoint)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REP);
	char buf[16];

	if (zmq_bind(s, endpoint) < 0)
		s_die("bind");
	for (;;) {
		if (zmq_recv(s, buf, sizeof(buf), 0) < 0 || zmq_send(s, buf, 16, 0) < 0)
			s_die("echo");
	}
}

static int
s_rtt(const char *endpoint, int count, int runs)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
	char buf[16] = "0123456789abcdef";

	if (zmq_connect(s, endpoint) < 0)
		s_die("connect");
	for (int r = 0; r <= runs; r++) {
		double start = bench_now();
		for (int i = 0; i < count; i++)
			if (zmq_send(s, buf, 16, 0) < 0 || zmq_recv(s, buf, sizeof(buf), 0) < 0)
				s_die("round trip");
		if (r > 0)
			printf("%.9f\n", (bench_now() - start) / count);
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	return 0;
}

/* ---- fanout: the messages of one update, trainer to N workers acked ---- */

struct s_update {
	char kind;                      /* 'u' an update, 'a' an ack */
	long long number;
};

static void *
s_socket(void *ctx, int type, const char *dir, const char *name, int bind)
{
	char endpoint[4200];
	void *s = zmq_socket(ctx, type);

	snprintf(endpoint, sizeof(endpoint), "ipc://%s/%s", dir, name);
	if (s == NULL || (bind ? zmq_bind(s, endpoint) : zmq_connect(s, endpoint)) < 0)
		s_die(endpoint);
	return s;
}

/* The hub: publishes each update, replies to each ack, and to the trainer after the Nth. */
static void
s_fanout_hub(const char *dir, int n)
{
	void *ctx = zmq_ctx_new(), *router = s_socket(ctx, ZMQ_ROUTER, dir, "hub", 1);
	void *pub = s_socket(ctx, ZMQ_PUB, dir, "pub", 1);
	char id[256], trainer[256];
	int tlen = 0, acks = 0;
	struct s_update u, now = { 0, -1 };

	for (;;) {
		int idlen = zmq_recv(router, id, sizeof(id), 0);
		if (idlen < 0 || zmq_recv(router, &u, sizeof(u), 0) != (int)sizeof(u))
			s_die("hub receive");
		if (u.kind == 'u') {
			memcpy(trainer, id, (size_t)idlen);
			tlen = idlen;
			now = u;
			acks = 0;
			if (zmq_send(pub, &u, sizeof(u), 0) < 0)
				s_die("publish");
			continue;
		}
		/* The waiting trainer hears first, as wsync's hub answers a wait first. */
		if (u.number == now.number && ++acks == n &&
		    (zmq_send(router, trainer, (size_t)tlen, ZMQ_SNDMORE) < 0 ||
		    zmq_send(router, &now, sizeof(now), 0) < 0))
			s_die("reply to the trainer");
		if (zmq_send(router, id, (size_t)idlen, ZMQ_SNDMORE) < 0 ||
		    zmq_send(router, &u, sizeof(u), 0) < 0)
			s_die("reply to an ack");
	}
}

/* A worker: acks each update it hears of, and waits for the ack's reply. */
static void
s_fanout_worker(const char *dir)
{
	void *ctx = zmq_ctx_new(), *sub = s_socket(ctx, ZMQ_SUB, dir, "pub", 0);
	void *ack = s_socket(ctx, ZMQ_DEALER, dir, "hub", 0);
	struct s_update u;

	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	for (;;) {
		if (zmq_recv(sub, &u, sizeof(u), 0) != (int)sizeof(u))
			s_die("worker receive");
		u.kind = 'a';
		if (zmq_send(ack, &u, sizeof(u), 0) < 0 || zmq_recv(ack, &u, sizeof(u), 0) < 0)
			s_die("ack");
	}
}

/* The trainer: updates until all N workers ack one (they have subscribed), then COUNT timed. */
static int
s_fanout(const char *dir, int count)
{
	void *ctx = zmq_ctx_new(), *s = s_socket(ctx, ZMQ_DEALER, dir, "hub", 0);
	struct s_update u = { 'u', 0 }, got;
	double give_up = bench_now() + 20;

	for (int joined = 0; !joined; u.number++) {
		zmq_pollitem_t item = { s, 0, ZMQ_POLLIN, 0 };
		if (bench_now() > give_up) {
			fprintf(stderr, "zmq_raw: the workers did not all subscribe within 20 s\n");
			exit(75);
		}
		if (zmq_send(s, &u, sizeof(u), 0) < 0)
			s_die("update");
		while (zmq_poll(&item, 1, 200) > 0 && zmq_recv(s, &got, sizeof(got), 0) > 0)
			joined |= got.number == u.number;
	}
	for (int i = 0; i < count; i++, u.number++) {
		double start = bench_now();
		if (zmq_send(s, &u, sizeof(u), 0) < 0 || zmq_recv(s, &got, sizeof(got), 0) < 0)
			s_die("update");
		printf("%.9f\n", bench_now() - start);
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	return 0;
}

/* zmq_raw fanout DIR N COUNT: a hub and N workers forked, the trainer here. */
static int
s_fanout_main(const char *dir, int n, int count)
{
	pid_t pids[65];
	int rc, forked = 0;

	if (n < 1 || n > 64 || count < 1) {
		fprintf(stderr, "zmq_raw: fanout wants 1 to 64 workers and 1 or more updates\n");
		return 64;
	}
	for (; forked <= n; forked++) {
		if ((pids[forked] = fork()) < 0)
			break;
		if (pids[forked] == 0) {
			if (forked == 0)
				s_fanout_hub(dir, n);
			else
				s_fanout_worker(dir);
			_exit(0);
		}
	}
	if (forked <= n) {
		perror("zmq_raw: fork");
		rc = 71;
	} else
		rc = s_fanout(dir, count);
	for (int i = 0; i < forked; i++) {
		kill(pids[i], SIGTERM);
		waitpid(pids[i], NULL, 0);
	}
	return rc;
}

int
main(int argc, char **argv)
{
	pid_t pid;
	int rc, stream = (argc == 6 || argc == 7 || (argc == 8 && strcmp(argv[7], "keep") == 0)) &&
	    strcmp(argv[1], "stream") == 0;

	if (argc == 5 && strcmp(argv[1], "fanout") == 0)
		return s_fanout_main(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (!stream && !(argc == 5 && strcmp(argv[1], "rtt") == 0)) {
		fprintf(stderr, "usage: zmq_raw stream ENDPOINT BYTES MSG RUNS [FILE [keep]]\n"
		    "       zmq_raw rtt ENDPOINT COUNT RUNS\n"
		    "       zmq_raw fanout DIR N COUNT\n");
		return 64;
	}
	if ((pid = fork()) == 0) {
		if (stream)
			s_stream_server(argv[2], atoll(argv[3]), (size_t)atoll(argv[4]));
		else
			s_rtt_server(argv[2]);
		_exit(0);
	}
	rc = stream ? s_stream(argv[2], atoll(argv[3]), atoi(argv[5]), argc >= 7 ? argv[6] : NULL,
	    argc == 8) :
	    s_rtt(argv[2], atoi(argv[3]), atoi(argv[4]));
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return rc;
}
