/* test_client.c - the client's requests and replies, against a fake hub on a ROUTER socket. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "tap.h"

static char s_dir[64];                  /* this run's temporary directory */
static char s_endpoint[128];            /* the fake hub's ipc:// endpoint */

/*
 * Sends a reply with id to the peer whose identity is frame 0 of p: a refusal
 * with code, or (code 0) a success that says which.
 */
static void
s_reply(void *router, wsync_parts_t *p, uint64_t id, uint64_t code, const char *which)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, code == 0 ? 3 : 4);
	wsync_enc_kv_u64(&e, "id", id);
	wsync_enc_kv_bool(&e, "ok", code == 0);
	if (code == 0)
		wsync_enc_kv_str(&e, "which", which);
	else {
		wsync_enc_kv_u64(&e, "code", code);
		wsync_enc_kv_str(&e, "error", "worker w1 may not leave");
	}
	wsync_send(router, wsync_part_data(p, 0), wsync_part_size(p, 0), &e, NULL, 0, 0);
	wsync_enc_free(&e);
}

static void
s_hello_reply(void *router, wsync_parts_t *p, uint64_t id)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 4);
	wsync_enc_kv_u64(&e, "id", id);
	wsync_enc_kv_bool(&e, "ok", 1);
	wsync_enc_kv_str(&e, "pub", "ipc:///nowhere/pub");
	wsync_enc_kv_str(&e, "hub", "fake:1");
	wsync_send(router, wsync_part_data(p, 0), wsync_part_size(p, 0), &e, NULL, 0, 0);
	wsync_enc_free(&e);
}

/*
 * The fake hub: answers each request by its op until it has seen five (or
 * none comes for 10 s). hello: a welcome. status: first a refusal and a reply
 * for other ids (stale), then its own. bye and heads: a refusal (77). abort:
 * nothing.
 */
static void *
s_hub(void *router)
{
	for (int seen = 0; seen < 5; seen++) {
		wsync_parts_t p;
		wsync_msg_t m;
		wsync_err_t err;
		char op[16] = "";
		uint64_t id = 0;

		if (wsync_recv(router, &p, 0) < 0)
			return NULL;
		if (p.n == 3) {
			if (wsync_msg_decode(&m, wsync_part_data(&p, 2), wsync_part_size(&p, 2),
			    &err) == 0) {
				wsync_msg_str(&m, "op", op, sizeof(op));
				wsync_msg_u64(&m, "id", &id);
			}
			wsync_msg_free(&m);
		}
		if (strcmp(op, "hello") == 0)
			s_hello_reply(router, &p, id);
		else if (strcmp(op, "status") == 0) {
			s_reply(router, &p, id - 1, EX_NOPERM, NULL);
			s_reply(router, &p, id + 7, 0, "another");
			s_reply(router, &p, id, 0, "its own");
		} else if (strcmp(op, "bye") == 0 || strcmp(op, "heads") == 0)
			s_reply(router, &p, id, EX_NOPERM, NULL);
		wsync_parts_close(&p);
	}
	return NULL;
}

/* Removes dir/name, a socket file ZeroMQ may leave behind. */
static void
s_remove(const char *dir, const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

static wsync_client_t *
s_client(const char *endpoint, int timeout_ms, wsync_err_t *err)
{
	const char *model = "m";

	return wsync_client_new(&(wsync_client_opts_t){ .endpoint = endpoint, .role = "push",
	    .models = &model, .nmodels = 1, .timeout_ms = timeout_ms }, err);
}

static void
test_no_hub(void)
{
	char endpoint[160], want[300];
	wsync_err_t err = { 0 };
	wsync_client_t *c;

	snprintf(endpoint, sizeof(endpoint), "ipc://%s/nohub", s_dir);
	c = s_client(endpoint, 200, &err);
	/* No socket file: answered at once, not after the 0.2 s. */
	snprintf(want, sizeof(want), "cannot reach %s: no socket there (is wsync-serve "
	    "running?)", endpoint);
	ok(c == NULL && err.code == EX_UNAVAILABLE, "no hub: hello gives 69 (got %d)",
	    err.code);
	ok(strcmp(err.msg, want) == 0, "no hub: the message names the endpoint: %s", err.msg);
	wsync_client_destroy(&c);
}

/* The seam under the calls: a refusal kept for the caller to read (a wait's missing list). */
static void
test_keep_refusal(wsync_client_t *c)
{
	wsync_err_t err = { 0 };
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "heads", 0);
	int rc = wsync_client_send(c, &e, NULL, 0, &err);

	wsync_enc_free(&e);
	ok(rc == 0, "a request is sent");
	rc = wsync_client_await(c, id, wsync_now_ms() + 5000, &m, &p, 1, &err);
	ok(rc == 2 && err.code == EX_NOPERM, "await keeps a refusal: 2 with its code (got %d, %d)",
	    rc, err.code);
	if (rc != 2)
		return;
	ok(wsync_msg_get(&m, "error") != NULL, "the kept refusal is there to read");
	wsync_client_release(&m, &p);
}

static void
test_requests(void)
{
	wsync_err_t err = { 0 };
	wsync_client_t *c = s_client(s_endpoint, 5000, &err);
	char *text, want[300];
	int rc;

	ok(c != NULL, "a client says hello to the fake hub%s%s", c ? "" : ": ", c ? "" : err.msg);
	if (c == NULL)
		return;
	ok(strcmp(wsync_client_hub(c), "fake:1") == 0, "hello gives the hub's identity");

	text = wsync_client_status_json(c, 5000, &err);
	ok(text != NULL && strcmp(text, "{\"which\":\"its own\"}") == 0,
	    "await skips a refusal and a reply with other ids, and takes its own: %s",
	    text ? text : err.msg);
	free(text);

	rc = wsync_client_bye(c, "w1", 5000, &err);
	ok(rc < 0 && err.code == EX_NOPERM, "a refusal gives its code (got %d)", err.code);
	ok(strcmp(err.msg, "worker w1 may not leave") == 0, "a refusal gives its message: %s",
	    err.msg);

	memset(&err, 0, sizeof(err));
	rc = wsync_client_abort(c, 5, 200, &err);
	ok(rc < 0 && err.code == EX_TEMPFAIL, "no answer within the timeout gives 75 (got %d)",
	    err.code);
	snprintf(want, sizeof(want), "abort: no answer from %s within the timeout", s_endpoint);
	ok(strcmp(err.msg, want) == 0, "the timeout's message names the request and hub: %s",
	    err.msg);
	test_keep_refusal(c);
	wsync_client_destroy(&c);
}

int
main(void)
{
	int linger = 0, wait_ms = 10000;
	pthread_t hub;
	void *router;

	unsetenv("WSYNC_KEY");
	unsetenv("WSYNC_HUB_KEY");
	unsetenv("WSYNC_ENDPOINT");
	snprintf(s_dir, sizeof(s_dir), "/tmp/wsync-test-client.XXXXXX");
	if (mkdtemp(s_dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(s_endpoint, sizeof(s_endpoint), "ipc://%s/hub", s_dir);
	router = zmq_socket(wsync_zmq_context(), ZMQ_ROUTER);
	zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(router, ZMQ_RCVTIMEO, &wait_ms, sizeof(wait_ms));
	if (router == NULL || zmq_bind(router, s_endpoint) < 0) {
		printf("# cannot bind %s: %s\n", s_endpoint, zmq_strerror(errno));
		return 1;
	}
	test_no_hub();
	pthread_create(&hub, NULL, s_hub, router);
	test_requests();
	pthread_join(hub, NULL);
	zmq_close(router);
	s_remove(s_dir, "hub");
	s_remove(s_dir, "nohub");
	rmdir(s_dir);
	return tap_done();
}
