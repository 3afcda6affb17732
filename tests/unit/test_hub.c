/*
 * test_hub.c - the hub's request decoding and its waits, at the seams of
 * hub_int.h: a real hub on an ipc:// endpoint in a temporary directory, served
 * one request at a time in this thread (wsync_hub_serve), spoken to by a real
 * DEALER; waits checked with hub_wait_satisfied and hub_wait_expiry.
 */
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"
#include "tap.h"

#define S_REPLY_MS 5000                 /* the most a reply may take */

static char s_dir[] = "/tmp/wsync-test-hub.XXXXXX";
static wsync_hub_t *s_hub;
static void *s_dealer;
static uint64_t s_id;

static void
s_quiet(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

static int
s_unlink(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* A hub on ipc://DIR/hub with its store in DIR/store, and a DEALER connected to it. */
static int
s_start(void)
{
	char endpoint[128], store[128];
	const char *endpoints[1] = { endpoint };
	wsync_hub_opts_t o = { .endpoints = endpoints, .nendpoints = 1, .store = store,
	    .keep = 2, .log = s_quiet };
	wsync_err_t err = { 0 };
	int zero = 0;

	if (mkdtemp(s_dir) == NULL)
		return -1;
	snprintf(endpoint, sizeof(endpoint), "ipc://%s/hub", s_dir);
	snprintf(store, sizeof(store), "%s/store", s_dir);
	if ((s_hub = wsync_hub_new(&o, &err)) == NULL) {
		printf("# hub: %s\n", err.msg);
		return -1;
	}
	s_dealer = zmq_socket(wsync_zmq_context(), ZMQ_DEALER);
	zmq_setsockopt(s_dealer, ZMQ_LINGER, &zero, sizeof(zero));
	return zmq_connect(s_dealer, endpoint);
}

static void
s_stop(void)
{
	zmq_close(s_dealer);
	wsync_hub_destroy(&s_hub);
	nftw(s_dir, s_unlink, 16, FTW_DEPTH | FTW_PHYS);
}

/* 1 when sock has a message within S_REPLY_MS. */
static int
s_readable(void *sock)
{
	zmq_pollitem_t item = { sock, 0, ZMQ_POLLIN, 0 };

	return zmq_poll(&item, 1, S_REPLY_MS) == 1;
}

/*
 * Sends request e (freed here) from the DEALER, lets the hub serve it and
 * decodes its reply into m (caller frees with wsync_msg_free); -1 when no
 * reply came.
 */
static int
s_call(wsync_enc_t *e, wsync_msg_t *m)
{
	wsync_parts_t p;
	wsync_err_t err;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	if (wsync_send(s_dealer, NULL, 0, e, NULL, 0, 0) < 0 || !s_readable(s_hub->router) ||
	    wsync_recv(s_hub->router, &p, 0) < 0)
		goto out;
	wsync_hub_serve(s_hub, &p);
	wsync_parts_close(&p);
	if (!s_readable(s_dealer) || wsync_recv(s_dealer, &p, 0) < 0)
		goto out;
	if (p.n == 2)
		rc = wsync_msg_decode(m, wsync_part_data(&p, 1), wsync_part_size(&p, 1), &err);
	wsync_parts_close(&p);
out:
	wsync_enc_free(e);
	return rc;
}

/* Starts a request of op with nfields more fields (and its id); op NULL: no op field. */
static void
s_req(wsync_enc_t *e, const char *op, size_t nfields)
{
	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 1 + (op != NULL));
	wsync_enc_kv_u64(e, "id", ++s_id);
	if (op != NULL)
		wsync_enc_kv_str(e, "op", op);
}

/* 1 when m is a refusal with code and exactly the error text want. */
static int
s_refused(const wsync_msg_t *m, int code, const char *want)
{
	uint64_t id, got = 0;
	char text[512];

	if (m->root == NULL || wsync_msg_u64(m, "id", &id) < 0 || id != s_id ||
	    wsync_obj_true(wsync_msg_get(m, "ok")) || wsync_msg_u64(m, "code", &got) < 0 ||
	    wsync_msg_str(m, "error", text, sizeof(text)) < 0)
		return 0;
	if (got != (uint64_t)code || strcmp(text, want) != 0) {
		printf("# got %" PRIu64 " \"%s\"\n", got, text);
		return 0;
	}
	return 1;
}

/* Sends request e and checks it is refused with code and want. */
static void
s_expect_refusal(wsync_enc_t *e, int code, const char *want, const char *name)
{
	wsync_msg_t m;

	ok(s_call(e, &m) == 0 && s_refused(&m, code, want), "%s", name);
	wsync_msg_free(&m);
}

/* Says hello as watcher worker of model; 0 when the hub said ok. */
static int
s_hello(const char *worker, const char *model)
{
	wsync_enc_t e;
	wsync_msg_t m;
	int rc;

	s_req(&e, "hello", 4);
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "role", "watch");
	wsync_enc_kv_str(&e, "worker", worker);
	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, 1);
	wsync_enc_str(&e, model);
	rc = s_call(&e, &m) == 0 && wsync_obj_true(wsync_msg_get(&m, "ok")) ? 0 : -1;
	wsync_msg_free(&m);
	return rc;
}

/* Reports that worker applied (reason NULL) or failed to apply version of model. */
static int
s_report(const char *worker, const char *model, uint64_t version, const char *reason)
{
	wsync_enc_t e;
	wsync_msg_t m;
	int rc;

	s_req(&e, reason != NULL ? "fail" : "ack", 3 + (reason != NULL));
	wsync_enc_kv_str(&e, "worker", worker);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", version);
	if (reason != NULL)
		wsync_enc_kv_str(&e, "reason", reason);
	rc = s_call(&e, &m) == 0 && wsync_obj_true(wsync_msg_get(&m, "ok")) ? 0 : -1;
	wsync_msg_free(&m);
	return rc;
}

static void
test_decoding(void)
{
	wsync_enc_t e;

	s_req(&e, "hello", 1);
	wsync_enc_kv_str(&e, "role", "pull");
	s_expect_refusal(&e, EX_PROTOCOL, "field \"proto\" is missing",
	    "a hello without proto is refused (76) naming the field");

	s_req(&e, "hello", 2);
	wsync_enc_kv_str(&e, "proto", "1");
	wsync_enc_kv_str(&e, "role", "pull");
	s_expect_refusal(&e, EX_PROTOCOL, "field \"proto\" is not an unsigned integer",
	    "a hello whose proto is a string is refused (76)");

	s_req(&e, "stat", 1);
	wsync_enc_kv_u64(&e, "model", 7);
	s_expect_refusal(&e, EX_PROTOCOL,
	    "field \"model\" is not a model id (1 to 64 of A-Z a-z 0-9 . _ -)",
	    "a model that is not a string is refused (76) with what a model id is");

	s_req(&e, "hello", 3);
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "role", "watch");
	wsync_enc_kv_str(&e, "worker", "has space");
	s_expect_refusal(&e, EX_PROTOCOL,
	    "field \"worker\" is not an id (1 to 128 printable ASCII bytes, no space)",
	    "a worker id with a space is refused (76)");

	s_req(&e, "ack", 4);
	wsync_enc_kv_str(&e, "worker", "w1");
	wsync_enc_kv_str(&e, "model", "m");
	wsync_enc_kv_u64(&e, "version", 1);
	wsync_enc_kv_str(&e, "transfer", "carrier-pigeon");
	s_expect_refusal(&e, EX_PROTOCOL, "field \"transfer\" is not link, copy, socket or delta",
	    "an ack with an unknown transfer is refused (76)");

	s_req(&e, "heads", 1);
	wsync_enc_kv_str(&e, "models", "m");
	s_expect_refusal(&e, EX_PROTOCOL, "field \"models\" is not a list of at most 1024 "
	    "strings", "heads with models not a list is refused (76)");

	s_req(&e, "frob", 0);
	s_expect_refusal(&e, EX_PROTOCOL, "unknown op \"frob\"",
	    "an unknown op is refused (76) naming it");

	s_req(&e, NULL, 0);
	s_expect_refusal(&e, EX_PROTOCOL, "field \"op\" is missing or not a known op",
	    "a request without an op is refused (76)");

	ok(hub_op_find("ack") == hub_op_ack_or_fail && hub_op_find("fail") == hub_op_ack_or_fail,
	    "ack and fail are served by hub_op_ack_or_fail");
	ok(hub_op_find("report") == NULL && hub_op_find("") == NULL,
	    "an op the hub does not serve has no handler");
}

/* A wait for version 1 of model m in mode; timeout_ms 0: without one. */
static void
s_wait_req(wsync_enc_t *e, const char *mode, uint64_t timeout_ms)
{
	s_req(e, "wait", 3 + (timeout_ms != 0));
	wsync_enc_kv_str(e, "model", "m");
	wsync_enc_kv_u64(e, "version", 1);
	wsync_enc_kv_str(e, "mode", mode);
	if (timeout_ms != 0)
		wsync_enc_kv_u64(e, "timeout_ms", timeout_ms);
}

static void
test_wait_modes(void)
{
	wsync_wait_mode_t mode = WSYNC_WAIT_COUNT;
	wsync_enc_t e;
	int good;

	good = hub_wait_mode_parse("all", &mode) == 0 && mode == WSYNC_WAIT_ALL;
	good = good && hub_wait_mode_parse("count", &mode) == 0 && mode == WSYNC_WAIT_COUNT;
	good = good && hub_wait_mode_parse("ids", &mode) == 0 && mode == WSYNC_WAIT_IDS;
	ok(good, "the wait modes all, count and ids parse");
	ok(hub_wait_mode_parse("some", &mode) < 0 && hub_wait_mode_parse("", &mode) < 0 &&
	    hub_wait_mode_parse("ALL", &mode) < 0 && mode == WSYNC_WAIT_IDS,
	    "another mode does not parse and leaves the mode alone");
	ok(strcmp(wsync_wait_name(WSYNC_WAIT_ALL), "all") == 0 &&
	    strcmp(wsync_wait_name(WSYNC_WAIT_COUNT), "count") == 0 &&
	    strcmp(wsync_wait_name(WSYNC_WAIT_IDS), "ids") == 0,
	    "each mode is named as on the wire");

	s_wait_req(&e, "some", 10);
	s_expect_refusal(&e, EX_PROTOCOL, "wait mode \"some\" is not all, count or ids",
	    "a wait of an unknown mode is refused (76)");
	s_wait_req(&e, "all", 0);
	s_expect_refusal(&e, EX_PROTOCOL, "field \"timeout_ms\" is missing",
	    "a wait without timeout_ms is refused (76)");
	s_wait_req(&e, "ids", 10);
	s_expect_refusal(&e, EX_PROTOCOL, "field \"ids\" is missing",
	    "a wait of mode ids without ids is refused (76)");
}

/* A wait on version of model "m" for the n workers ids (mode ids), or for count. */
static struct hub_wait
s_wait(wsync_wait_mode_t mode, uint64_t version, char **ids, size_t n, uint64_t count)
{
	struct hub_wait wt = { .mode = mode, .version = version, .ids = ids, .nids = n,
	    .count = count, .start = 1000, .deadline = 2500 };

	snprintf(wt.model, sizeof(wt.model), "m");
	return wt;
}

static void
test_wait_satisfied(void)
{
	char *ids[] = { "w1", "w2" };
	struct hub_wait wt = s_wait(WSYNC_WAIT_IDS, 1, ids, 2, 0);
	struct hub_wait two = s_wait(WSYNC_WAIT_COUNT, 1, NULL, 0, 2);
	struct hub_wait three = s_wait(WSYNC_WAIT_COUNT, 1, NULL, 0, 3);
	struct hub_wait four = s_wait(WSYNC_WAIT_COUNT, 1, NULL, 0, 4);

	ok(s_hello("w1", "m") == 0 && s_hello("w2", "m") == 0 && s_hello("w3", "other") == 0,
	    "three workers say hello");
	ok(!hub_wait_satisfied(s_hub, &wt), "a wait for w1 and w2 is not satisfied before acks");
	ok(s_report("w1", "m", 1, NULL) == 0, "w1 acks version 1");
	ok(!hub_wait_satisfied(s_hub, &wt), "nor by the ack of one of them");
	ok(s_report("w3", "m", 1, NULL) == 0 && !hub_wait_satisfied(s_hub, &wt),
	    "nor by the ack of a worker it does not wait for");
	ok(s_report("w2", "m", 1, NULL) == 0 && hub_wait_satisfied(s_hub, &wt),
	    "it is satisfied once both acked");
	ok(hub_wait_satisfied(s_hub, &two) && hub_wait_satisfied(s_hub, &three),
	    "a wait for a count is satisfied by that many acks");
	ok(!hub_wait_satisfied(s_hub, &four), "but not by fewer");
	wt.version = 2;
	ok(!hub_wait_satisfied(s_hub, &wt), "acks of an older version do not satisfy a wait");
	ok(s_report("w1", "m", 3, NULL) == 0 && s_report("w2", "m", 2, NULL) == 0 &&
	    hub_wait_satisfied(s_hub, &wt), "acks of that version or a newer one do");
}

static void
test_wait_expiry(void)
{
	char *ids[] = { "w1", "w2", "nobody" };
	struct hub_wait wt = s_wait(WSYNC_WAIT_IDS, 4, ids, 3, 0);
	const msgpack_object *missing;
	char worker[3][16] = { "", "", "" }, failure[64] = "";
	uint64_t versions[3] = { 9, 9, 9 };
	size_t n;
	wsync_msg_t m;
	wsync_err_t err;
	wsync_enc_t e;

	/* w1 has 4, w2 failed on it and has 2, nobody was never seen. */
	ok(s_report("w1", "m", 4, NULL) == 0 && s_report("w2", "m", 4, "bad hash") == 0,
	    "w1 acks version 4, w2 reports a failure");
	wt.req = s_id;
	n = hub_wait_expiry(s_hub, &wt, wsync_now_ms(), &e);
	ok(n == 2, "two of three workers are missing");
	ok(wsync_msg_decode(&m, e.sb.data, e.sb.size, &err) == 0, "the refusal decodes");
	ok(s_refused(&m, EX_TEMPFAIL, "m version 4: 2 of 3 workers have not applied it after "
	    "1.5 s"), "it is code 75 saying how many have not applied it and after how long");
	missing = wsync_msg_get(&m, "missing");
	ok(missing != NULL && missing->type == MSGPACK_OBJECT_ARRAY &&
	    missing->via.array.size == 2, "it lists the missing workers");
	for (uint32_t i = 0; missing != NULL && i < missing->via.array.size && i < 2; i++) {
		const msgpack_object *o = &missing->via.array.ptr[i];
		wsync_obj_str(wsync_obj_get(o, "worker"), worker[i], sizeof(worker[i]));
		wsync_obj_u64(wsync_obj_get(o, "version"), &versions[i]);
		if (i == 0)
			wsync_obj_str(wsync_obj_get(o, "failure"), failure, sizeof(failure));
	}
	ok(strcmp(worker[0], "w2") == 0 && versions[0] == 2 && strcmp(failure, "bad hash") == 0,
	    "w2 is named with the version it has and its failure");
	ok(strcmp(worker[1], "nobody") == 0 && versions[1] == 0 && missing != NULL &&
	    wsync_obj_get(&missing->via.array.ptr[1], "seen")->type == MSGPACK_OBJECT_NIL,
	    "a worker never seen is named with version 0 and no seen time");
	wsync_msg_free(&m);
	wsync_enc_free(&e);
}

/* The delta op's refusals, each with its code and exact text (wsync(7), delta). */
static void
test_delta_refusals(void)
{
	wsync_enc_t e;

	s_req(&e, "delta", 3);
	wsync_enc_kv_str(&e, "model", "policy");
	wsync_enc_kv_u64(&e, "version", 2);
	wsync_enc_kv_u64(&e, "base_content", 7);
	s_expect_refusal(&e, EX_PROTOCOL, "field \"base\" is missing",
	    "a delta without its base is refused (76) naming the field");

	s_req(&e, "delta", 4);
	wsync_enc_kv_str(&e, "model", "policy");
	wsync_enc_kv_u64(&e, "version", 2);
	wsync_enc_kv_u64(&e, "base", 2);
	wsync_enc_kv_u64(&e, "base_content", 7);
	s_expect_refusal(&e, EX_USAGE, "a delta goes from an older version to a newer one "
	    "(base 2, version 2)", "a delta from a base not older than its head is refused (64)");

	s_req(&e, "delta", 4);
	wsync_enc_kv_str(&e, "model", "nomodel");
	wsync_enc_kv_u64(&e, "version", 2);
	wsync_enc_kv_u64(&e, "base", 1);
	wsync_enc_kv_u64(&e, "base_content", 7);
	s_expect_refusal(&e, EX_NOINPUT, "model \"nomodel\" has no version",
	    "a delta of a model the hub does not have is refused (66)");

	s_req(&e, "get", 5);
	wsync_enc_kv_str(&e, "model", "nomodel");
	wsync_enc_kv_u64(&e, "version", 2);
	wsync_enc_kv_u64(&e, "base", 1);
	wsync_enc_kv_u64(&e, "off", 0);
	wsync_enc_kv_u64(&e, "len", 1);
	s_expect_refusal(&e, EX_NOINPUT, "model \"nomodel\" has no delta from version 1 to 2 "
	    "(ask for it with the delta op)", "a get of a delta not made is refused (66)");
}

int
main(void)
{
	if (s_start() < 0) {
		ok(0, "a hub starts on an ipc endpoint in a temporary directory");
		return tap_done();
	}
	test_decoding();
	test_wait_modes();
	test_wait_satisfied();
	test_wait_expiry();
	test_delta_refusals();
	s_stop();
	return tap_done();
}
