/* hub_relay.c - a relay's upstream side: a thread mirroring an upstream hub's versions into this hub. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "client_int.h"
#include "hub_int.h"

#define S_CALL_MS 3000          /* bound on one request to the upstream while connected */
#define S_CONNECT_MS 1000       /* how long one upstream has to answer hello */
#define S_SLICE_MS 100          /* how often the thread looks at its stop flag while idle */
#define S_INPROC "inproc://wsync-relay-%p"
#define S_WINDOW 4              /* gets in flight: half a client's, a relay holding a hub's memory too */

/* What the relay has of one model: the newest version it committed, or that failed. */
struct s_have {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	uint64_t failed;
};

/*
 * A version fetched and not handed over yet: one of a round's, handed over
 * with the others at its end, or one fetched as it arrived upstream, kept
 * until the upstream's heads show it committed (with its push's others).
 */
struct s_fetched {
	char model[WSYNC_MAX_MODEL + 1];
	wsync_head_t head;
	char *tmp;
};

/*
 * The mirroring thread's state. The thread owns everything here but the hub's
 * end of the pair; the hub reads only the lists, which never change.
 */
struct hub_relay {
	pthread_t thread;
	int started;
	void *pair;                     /* the thread's end */
	char **upstreams;
	int nupstreams, next;
	char **models;                  /* NULL: every model of the upstream */
	int nmodels;
	char *key, *hub_key;
	char beside[PATH_MAX];          /* STORE/.uploads/relay: fetches go beside it */
	struct s_have *have;
	size_t nhave;
	struct s_fetched fetched[HUB_UPLOAD_FILES];
	size_t nfetched;
	volatile sig_atomic_t stop;
	wsync_client_t *client;
	void *sub;
	char endpoint[512];             /* the upstream in use */
	char name[300];                 /* this hub's, as its upstream knows it */
	char fetching[WSYNC_MAX_MODEL + 1]; /* the model of the version being fetched */
	wsync_head_t arriving;          /* that version, as the upstream described it */
	uint64_t told;                  /* bytes of it the hub was told are in; 0 before the first */
	unsigned char *report;          /* the hub's latest [worker], for upstream; NULL: none */
	size_t report_len;
	wsync_log_fn log;
	void *log_arg;
};

#define s_log(rl, ...) wsync_logf((rl)->log, (rl)->log_arg, __VA_ARGS__)

/* ---- the thread: following the upstream ---- */

static struct s_have *
s_have(struct hub_relay *rl, const char *model)
{
	struct s_have *n;

	for (size_t i = 0; i < rl->nhave; i++)
		if (strcmp(rl->have[i].model, model) == 0)
			return &rl->have[i];
	if ((n = realloc(rl->have, (rl->nhave + 1) * sizeof(*n))) == NULL)
		return NULL;
	rl->have = n;
	n = &rl->have[rl->nhave++];
	memset(n, 0, sizeof(*n));
	snprintf(n->model, sizeof(n->model), "%s", model);
	return n;
}

/* Sends the hub's loop a two-frame message: tag, then body (freed). */
static void
s_tell(struct hub_relay *rl, const char *tag, wsync_enc_t *e)
{
	if (zmq_send(rl->pair, tag, strlen(tag), ZMQ_SNDMORE) >= 0)
		zmq_send(rl->pair, e->sb.data, e->sb.size, 0);
	wsync_enc_free(e);
}

#ifdef WSYNC_TEST_HOOKS
/*
 * The test-only pause of wsync-serve(1) (WSYNC_TEST_RELAY_GATE=PATH): with
 * half of a version in, the fetch waits until PATH exists (at most 60 s), so
 * that a test sees a downstream relay read it before it is whole.
 */
static void
s_gate(struct hub_relay *rl, uint64_t upto)
{
	const char *gate = getenv("WSYNC_TEST_RELAY_GATE");
	int64_t until = wsync_now_ms() + 60000;

	if (gate == NULL || upto < rl->arriving.size / 2 || rl->told >= rl->arriving.size / 2)
		return;
	while (access(gate, F_OK) < 0 && !rl->stop && wsync_now_ms() < until)
		zmq_poll(NULL, 0, 20);
}
#endif

/*
 * The fetch's word on how much of the version is in (client_conn_int.h): the
 * hub's loop is told, so that it passes the version on while it arrives.
 */
static void
s_arrived(void *arg, const char *tmp, uint64_t upto)
{
	struct hub_relay *rl = arg;
	wsync_enc_t e;

	if (rl->told != 0 && upto <= rl->told)
		return;
	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 6);
	wsync_enc_kv_str(&e, "model", rl->fetching);
	wsync_enc_kv_u64(&e, "version", rl->arriving.version);
	wsync_enc_kv_u64(&e, "size", rl->arriving.size);
	wsync_enc_kv_u64(&e, "content", rl->arriving.content);
	wsync_enc_kv_str(&e, "path", tmp);
	wsync_enc_kv_u64(&e, "upto", upto);
	s_tell(rl, "arriving", &e);
#ifdef WSYNC_TEST_HOOKS
	s_gate(rl, upto);
#endif
	rl->told = upto > 0 ? upto : 1;
}

/* Tells the hub's loop the version being fetched will not arrive (err says why). */
static void
s_dropped(struct hub_relay *rl, const wsync_err_t *err)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 4);
	wsync_enc_kv_str(&e, "model", rl->fetching);
	wsync_enc_kv_u64(&e, "version", rl->arriving.version);
	wsync_enc_kv_u64(&e, "code", (uint64_t)(err->code != 0 ? err->code : EX_SOFTWARE));
	wsync_enc_kv_str(&e, "error", err->msg);
	s_tell(rl, "dropped", &e);
}

static void
s_disconnect(struct hub_relay *rl)
{
	if (rl->sub != NULL)
		zmq_close(rl->sub);
	rl->sub = NULL;
	wsync_client_destroy(&rl->client);
}

/* Connects to the next upstream of the list, subscribing to its announcements. */
static int
s_connect(struct hub_relay *rl, wsync_err_t *err)
{
	wsync_client_opts_t co = { .endpoint = rl->upstreams[rl->next], .role = "relay",
	    .models = (const char *const *)rl->models, .nmodels = rl->nmodels,
	    .timeout_ms = S_CONNECT_MS, .transfer = WSYNC_TRANSFER_SOCKET,
	    .idle_ms = S_CALL_MS, .stop = &rl->stop, .key = rl->key, .hub_key = rl->hub_key };
	int zero = 0;

	snprintf(rl->endpoint, sizeof(rl->endpoint), "%s", rl->upstreams[rl->next]);
	rl->next = (rl->next + 1) % rl->nupstreams;
	if ((rl->client = wsync_client_new(&co, err)) == NULL)
		return -1;
	if (rl->client->window > S_WINDOW)
		rl->client->window = S_WINDOW;
	if ((rl->sub = zmq_socket(wsync_zmq_context(), ZMQ_SUB)) == NULL) {
		s_disconnect(rl);
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s",
		    zmq_strerror(errno));
	}
	zmq_setsockopt(rl->sub, ZMQ_LINGER, &zero, sizeof(zero));
	if (wsync_curve_client(rl->sub, wsync_client_curve(rl->client), err) < 0) {
		s_disconnect(rl);
		return -1;
	}
	if (rl->models == NULL)
		zmq_setsockopt(rl->sub, ZMQ_SUBSCRIBE, "", 0);
	for (int i = 0; i < rl->nmodels; i++)
		zmq_setsockopt(rl->sub, ZMQ_SUBSCRIBE, rl->models[i], strlen(rl->models[i]));
	/* A version arriving at an upstream that is a relay too (hub_arrive.c). */
	if (rl->models != NULL)
		zmq_setsockopt(rl->sub, ZMQ_SUBSCRIBE, HUB_ARRIVE_TOPIC, strlen(HUB_ARRIVE_TOPIC));
	rl->client->arrived = s_arrived;
	rl->client->arrived_arg = rl;
	/* Announcements only cut latency: the heads round every heartbeat finds the head. */
	zmq_connect(rl->sub, wsync_client_pub(rl->client));
	return 0;
}

/*
 * Reads what the hub sent on the pair, without waiting: reports are kept (the
 * latest replaces the one before), a reply goes into *reply (caller frees) when
 * reply is not NULL. 1 when a reply came.
 */
static int
s_pair_read(struct hub_relay *rl, wsync_parts_t *reply)
{
	wsync_parts_t p;

	while (wsync_recv(rl->pair, &p, ZMQ_DONTWAIT) == 0) {
		if (p.n == 2 && wsync_part_size(&p, 0) == 6 &&
		    memcmp(wsync_part_data(&p, 0), "report", 6) == 0) {
			unsigned char *copy = malloc(wsync_part_size(&p, 1) + 1);
			if (copy != NULL) {
				memcpy(copy, wsync_part_data(&p, 1), wsync_part_size(&p, 1));
				free(rl->report);
				rl->report = copy;
				rl->report_len = wsync_part_size(&p, 1);
			}
		} else if (p.n == 2 && reply != NULL) {
			*reply = p;
			return 1;
		}
		wsync_parts_close(&p);
	}
	return 0;
}

/* Sends the hub's latest report of its workers upstream (op subtree); 0 when none. */
static int
s_report(struct hub_relay *rl, wsync_err_t *err)
{
	wsync_parts_t p = { .n = 0 };
	wsync_msg_t m;
	wsync_enc_t e;
	uint64_t id;

	if (rl->report == NULL)
		return 0;
	id = wsync_client_request(rl->client, &e, "subtree", 2);
	wsync_enc_kv_str(&e, "relay", rl->name);
	wsync_enc_str(&e, "workers");
	/* Already packed by the hub's loop: the array goes in as it is. */
	msgpack_sbuffer_write(&e.sb, (const char *)rl->report, rl->report_len);
	free(rl->report);
	rl->report = NULL;
	if (wsync_client_call(rl->client, &e, id, NULL, 0, S_CALL_MS, "subtree", &m, &p,
	    err) < 0)
		return -1;
	wsync_client_release(&m, &p);
	return 0;
}

/* Forgets fetched version i, unlinking its file. */
static void
s_fetched_drop(struct hub_relay *rl, size_t i)
{
	unlink(rl->fetched[i].tmp);
	free(rl->fetched[i].tmp);
	rl->fetched[i] = rl->fetched[--rl->nfetched];
}

/*
 * Hands the n fetched versions in take to the hub's loop, to be committed
 * together as the upstream committed them, and waits for the commit; 0 when
 * committed.
 */
static int
s_hand_over(struct hub_relay *rl, const size_t *take, size_t n, const char *origin,
    wsync_err_t *err)
{
	zmq_pollitem_t item = { rl->pair, 0, ZMQ_POLLIN, 0 };
	wsync_parts_t p;
	wsync_msg_t m;
	wsync_enc_t e;
	int ok = 0;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 5);
	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, n);
	for (size_t i = 0; i < n; i++)
		wsync_enc_str(&e, rl->fetched[take[i]].model);
	wsync_enc_str(&e, "versions");
	msgpack_pack_array(&e.pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_uint64(&e.pk, rl->fetched[take[i]].head.version);
	wsync_enc_str(&e, "paths");
	msgpack_pack_array(&e.pk, n);
	for (size_t i = 0; i < n; i++)
		wsync_enc_str(&e, rl->fetched[take[i]].tmp);
	wsync_enc_kv_str(&e, "origin", origin);
	wsync_enc_kv_str(&e, "upstream", rl->endpoint);
	if (zmq_send(rl->pair, e.sb.data, e.sb.size, 0) < 0) {
		wsync_enc_free(&e);
		return wsync_err_set(err, EX_SOFTWARE, "relay: cannot hand over: %s",
		    zmq_strerror(errno));
	}
	wsync_enc_free(&e);
	/* The hub answers every hand-over, unless it stops: then so does this thread. */
	while (!rl->stop && !s_pair_read(rl, &p))
		zmq_poll(&item, 1, S_SLICE_MS);
	if (rl->stop)
		return wsync_err_set(err, EX_TEMPFAIL, "the hub stops");
	if (wsync_msg_decode(&m, wsync_part_data(&p, 1), wsync_part_size(&p, 1), err) == 0) {
		const msgpack_object *o = wsync_msg_get(&m, "ok");
		ok = o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
		if (!ok && wsync_msg_str(&m, "error", err->msg, sizeof(err->msg)) == 0)
			err->code = EX_DATAERR;
	}
	wsync_msg_free(&m);
	wsync_parts_close(&p);
	return ok ? 0 : -1;
}

/*
 * Fetches version head of model unless the relay has it, fetched or
 * committed (or it failed here), passing it on while it arrives; it is kept
 * in rl->fetched. 0 when done or skipped, -1 with err when the upstream was
 * lost.
 */
static int
s_fetch(struct hub_relay *rl, const char *model, const wsync_head_t *head, wsync_err_t *err)
{
	const wsync_fetch_temp_t f = { .what = { .model = model, .version = head->version },
	    .known = head, .beside = rl->beside };
	struct s_have *have = s_have(rl, model);
	struct s_fetched *to;
	wsync_head_t got;
	char *tmp = NULL;

	if (have == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (head->version <= have->version || head->version == have->failed)
		return 0;
	for (size_t i = 0; i < rl->nfetched; i++)
		if (strcmp(rl->fetched[i].model, model) == 0 &&
		    rl->fetched[i].head.version == head->version)
			return 0;
	if (rl->nfetched == HUB_UPLOAD_FILES)
		return 0;
	snprintf(rl->fetching, sizeof(rl->fetching), "%s", model);
	rl->arriving = *head;
	rl->told = 0;
	if (wsync_client_fetch_temp(rl->client, &f, &tmp, &got, S_CALL_MS, err) < 0) {
		s_dropped(rl, err);
		/* Retired while we fetched it (or dropped by a relay above): the next round. */
		if (err->code == EX_NOINPUT)
			return 0;
		if (err->code == EX_DATAERR) {
			s_log(rl, "event=relay-fail model=%s version=%" PRIu64 " upstream=%s "
			    "error=\"%s\"", model, head->version, rl->endpoint, err->msg);
			have->failed = head->version;
			return 0;
		}
		return -1;
	}
	to = &rl->fetched[rl->nfetched++];
	snprintf(to->model, sizeof(to->model), "%s", model);
	to->head = got;
	to->tmp = tmp;
	return 0;
}

/* Whether head is newer than what the relay has of model (and did not fail here). */
static int
s_newer(struct hub_relay *rl, const char *model, const wsync_head_t *head)
{
	struct s_have *have = s_have(rl, model);

	return have != NULL && head->version > have->version && head->version != have->failed;
}

/* The version the map heads gives model; 0: none. */
static uint64_t
s_head_of(const msgpack_object *heads, const char *model)
{
	char id[WSYNC_MAX_MODEL + 1];
	wsync_head_t head = { 0 };

	for (uint32_t k = 0; k < heads->via.map.size; k++)
		if (wsync_obj_str(&heads->via.map.ptr[k].key, id, sizeof(id)) == 0 &&
		    strcmp(id, model) == 0 && wsync_head_decode(&heads->via.map.ptr[k].val,
		    &head) == 0)
			return head.version;
	return 0;
}

/*
 * Hands over, together, the fetched versions that are the upstream's heads
 * (the map heads: a push's models all new or all old), and forgets those
 * the heads passed. With all, only when every newer head was fetched:
 * nothing else is committed without the others of its push. 0 when done,
 * -1 with err when the hub stops.
 */
static int
s_commit_heads(struct hub_relay *rl, const msgpack_object *heads, int all, const char *origin,
    wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	size_t take[HUB_UPLOAD_FILES], n = 0;
	struct s_have *have;
	int rc = 0, whole = 1;

	for (uint32_t k = 0; k < heads->via.map.size; k++) {
		wsync_head_t head;
		size_t i = 0;
		if (wsync_obj_str(&heads->via.map.ptr[k].key, model, sizeof(model)) < 0 ||
		    wsync_head_decode(&heads->via.map.ptr[k].val, &head) < 0 ||
		    !s_newer(rl, model, &head))
			continue;
		while (i < rl->nfetched && (strcmp(rl->fetched[i].model, model) != 0 ||
		    rl->fetched[i].head.version != head.version))
			i++;
		if (i < rl->nfetched && n < HUB_UPLOAD_FILES)
			take[n++] = i;
		else
			whole = 0;
	}
	if (all && !whole)
		n = 0;
	if (n > 0 && s_hand_over(rl, take, n, origin, err) < 0) {
		if (err->code == EX_TEMPFAIL)
			rc = -1;
		for (size_t i = 0; i < n && rc == 0; i++)
			if ((have = s_have(rl, rl->fetched[take[i]].model)) != NULL)
				have->failed = rl->fetched[take[i]].head.version;
	} else {
		for (size_t i = 0; i < n; i++)
			if ((have = s_have(rl, rl->fetched[take[i]].model)) != NULL)
				have->version = rl->fetched[take[i]].head.version;
	}
	/* From the last index down, so that the ones before keep their places. */
	for (size_t i = rl->nfetched; i-- > 0;) {
		have = s_have(rl, rl->fetched[i].model);
		if (have == NULL || rl->fetched[i].head.version <= have->version ||
		    rl->fetched[i].head.version == have->failed ||
		    rl->fetched[i].head.version < s_head_of(heads, rl->fetched[i].model))
			s_fetched_drop(rl, i);
	}
	return rc;
}

/* Decodes entry i of a heads or arriving map into model and head; -1 with err. */
static int
s_entry(struct hub_relay *rl, const msgpack_object *map, uint32_t i, char *model,
    wsync_head_t *head, wsync_err_t *err)
{
	if (wsync_obj_str(&map->via.map.ptr[i].key, model, WSYNC_MAX_MODEL + 1) < 0 ||
	    wsync_model_id_check(model) < 0 ||
	    wsync_head_decode(&map->via.map.ptr[i].val, head) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s: a heads reply that does not decode",
		    rl->endpoint);
	return 0;
}

/* The number of the version of model arriving upstream (the map arriving); 0: none. */
static uint64_t
s_arriving_of(const msgpack_object *arriving, const char *model)
{
	char id[WSYNC_MAX_MODEL + 1];
	wsync_head_t head;

	for (uint32_t i = 0; arriving != NULL && arriving->type == MSGPACK_OBJECT_MAP &&
	    i < arriving->via.map.size; i++)
		if (wsync_obj_str(&arriving->via.map.ptr[i].key, id, sizeof(id)) == 0 &&
		    strcmp(id, model) == 0 &&
		    wsync_head_decode(&arriving->via.map.ptr[i].val, &head) == 0)
			return head.version;
	return 0;
}

/*
 * One round: the upstream's heads (of the models mirrored, or all) and the
 * versions on their way to it (when it is a relay too), then each version
 * newer than the relay's mirrored, the newest of each model. -1 with err
 * when the upstream was lost.
 */
static int
s_round(struct hub_relay *rl, wsync_err_t *err)
{
	char origin[64] = "", model[WSYNC_MAX_MODEL + 1];
	const msgpack_object *heads, *arriving;
	wsync_parts_t p = { .n = 0 };
	wsync_msg_t m;
	wsync_enc_t e;
	uint64_t id = wsync_client_request(rl->client, &e, "heads", rl->models ? 2 : 1);
	int rc = 0, others = 0;

	wsync_enc_kv_bool(&e, "arriving", 1);
	if (rl->models != NULL) {
		wsync_enc_str(&e, "models");
		msgpack_pack_array(&e.pk, (size_t)rl->nmodels);
		for (int i = 0; i < rl->nmodels; i++)
			wsync_enc_str(&e, rl->models[i]);
	}
	if (wsync_client_call(rl->client, &e, id, NULL, 0, S_CALL_MS, "heads", &m, &p, err) < 0)
		return -1;
	if (wsync_msg_str(&m, "origin", origin, sizeof(origin)) < 0 &&
	    wsync_msg_str(&m, "store", origin, sizeof(origin)) < 0)
		origin[0] = '\0';
	heads = wsync_msg_get(&m, "heads");
	arriving = wsync_msg_get(&m, "arriving");
	if (heads == NULL || heads->type != MSGPACK_OBJECT_MAP)
		heads = NULL;
	/*
	 * A head with a newer version on its way is skipped for that one, taken
	 * as it arrives, unless another model moved too: then every newer head
	 * is fetched, so that the models of one push are committed together.
	 */
	for (uint32_t i = 0; heads != NULL && i < heads->via.map.size && rc == 0; i++) {
		wsync_head_t head;
		if ((rc = s_entry(rl, heads, i, model, &head, err)) == 0 &&
		    s_newer(rl, model, &head) && s_arriving_of(arriving, model) <= head.version)
			others++;
	}
	for (uint32_t i = 0; heads != NULL && i < heads->via.map.size && !rl->stop &&
	    rc == 0; i++) {
		wsync_head_t head;
		if ((rc = s_entry(rl, heads, i, model, &head, err)) == 0 &&
		    (others > 0 || s_arriving_of(arriving, model) <= head.version))
			rc = s_fetch(rl, model, &head, err);
	}
	for (uint32_t i = 0; arriving != NULL && arriving->type == MSGPACK_OBJECT_MAP &&
	    i < arriving->via.map.size && !rl->stop && rc == 0; i++) {
		wsync_head_t head;
		if ((rc = s_entry(rl, arriving, i, model, &head, err)) == 0)
			rc = s_fetch(rl, model, &head, err);
	}
	/* The heads are what the upstream committed together: so are they here. */
	if (rc == 0 && heads != NULL && !rl->stop)
		rc = s_commit_heads(rl, heads, others > 0, origin, err);
	wsync_client_release(&m, &p);
	return rc;
}

/* Waits up to ms for an announcement from the upstream (keeping the hub's reports); 1 when one came. */
static int
s_wait_news(struct hub_relay *rl, int ms)
{
	int64_t deadline = wsync_now_ms() + ms, left;
	int news = 0;

	while (!news && !rl->stop && (left = deadline - wsync_now_ms()) > 0) {
		zmq_pollitem_t items[2] = { { rl->pair, 0, ZMQ_POLLIN, 0 },
		    { rl->sub, 0, ZMQ_POLLIN, 0 } };
		wsync_parts_t p;
		if (zmq_poll(items, rl->sub != NULL ? 2 : 1, left < S_SLICE_MS ? (long)left :
		    S_SLICE_MS) <= 0)
			continue;
		/* A report to pass on (an ack behind us) is news too. */
		if (items[0].revents & ZMQ_POLLIN) {
			s_pair_read(rl, NULL);
			news = rl->report != NULL && rl->client != NULL;
		}
		while (rl->sub != NULL && wsync_recv(rl->sub, &p, ZMQ_DONTWAIT) == 0) {
			news = 1;
			wsync_parts_close(&p);
		}
	}
	return news;
}

static void *
s_thread(void *arg)
{
	struct hub_relay *rl = arg;
	char quoted[2200];
	int said = 0;

	while (!rl->stop) {
		wsync_err_t err;
		if (rl->client == NULL) {
			if (s_connect(rl, &err) < 0) {
				if (!said++)
					s_log(rl, "event=relay-wait upstream=%s error=\"%s\"",
					    rl->endpoint, wsync_log_quote(err.msg, quoted,
					    sizeof(quoted)));
				/* A refused key is not let in by trying harder: once a heartbeat. */
				s_wait_news(rl, err.code == EX_NOPERM ? WSYNC_HEARTBEAT_MS :
				    S_SLICE_MS);
				continue;
			}
			said = 0;
			s_log(rl, "event=relay-connect upstream=%s hub=%s", rl->endpoint,
			    wsync_client_hub(rl->client));
		}
		if (s_round(rl, &err) < 0 || s_report(rl, &err) < 0) {
			if (rl->stop)
				break;
			s_log(rl, "event=relay-lost upstream=%s error=\"%s\"", rl->endpoint,
			    wsync_log_quote(err.msg, quoted, sizeof(quoted)));
			s_disconnect(rl);
			continue;
		}
		s_wait_news(rl, (int)wsync_client_heartbeat_ms(rl->client));
	}
	s_disconnect(rl);
	return NULL;
}

/* ---- the hub's side: starting, stopping, committing what the thread hands over ---- */

static char *
s_strdup(const char *s, int *bad)
{
	char *d = s != NULL ? strdup(s) : NULL;

	if (s != NULL && d == NULL)
		*bad = 1;
	return d;
}

/* Reads the origin a relay's store came from (STORE/.origin) into h->origin. */
static void
s_origin_load(wsync_hub_t *h)
{
	char path[PATH_MAX], id[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/.origin", wsync_store_dir(h->store));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	n = read(fd, id, sizeof(id) - 1);
	close(fd);
	if (n > 0) {
		id[n] = '\0';
		id[strcspn(id, "\n")] = '\0';
		snprintf(h->origin, sizeof(h->origin), "%s", id);
	}
}

/* Keeps origin as the tree's root, in memory and in STORE/.origin (so a restart keeps it). */
static void
s_origin_set(wsync_hub_t *h, const char *origin)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	int fd;

	if (origin[0] == '\0' || strcmp(origin, h->origin) == 0)
		return;
	snprintf(h->origin, sizeof(h->origin), "%s", origin);
	snprintf(path, sizeof(path), "%s/.origin", wsync_store_dir(h->store));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		return;
	if (write(fd, origin, strlen(origin)) == (ssize_t)strlen(origin) && fsync(fd) == 0)
		rename(tmp, path);
	close(fd);
	unlink(tmp);
}

int
hub_relay_start(wsync_hub_t *h, const wsync_hub_opts_t *o, wsync_err_t *err)
{
	struct hub_relay *rl;
	char inproc[64];
	int bad = 0, zero = 0;

	if (o->nupstreams == 0)
		return 0;
	if ((rl = h->relay = calloc(1, sizeof(*rl))) == NULL ||
	    (rl->upstreams = calloc((size_t)o->nupstreams, sizeof(char *))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < o->nupstreams; i++) {
		rl->upstreams[i] = s_strdup(o->upstreams[i], &bad);
		rl->nupstreams++;
	}
	if (o->nupstream_models > 0 && (rl->models = calloc((size_t)o->nupstream_models,
	    sizeof(char *))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < o->nupstream_models; i++) {
		rl->models[i] = s_strdup(o->upstream_models[i], &bad);
		rl->nmodels++;
	}
	rl->key = s_strdup(o->upstream_key, &bad);
	rl->hub_key = s_strdup(o->upstream_hub_key, &bad);
	if (bad)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	rl->log = h->log;
	rl->log_arg = h->log_arg;
	snprintf(rl->name, sizeof(rl->name), "%s", h->name);
	snprintf(rl->beside, sizeof(rl->beside), "%s/.uploads/relay", wsync_store_dir(h->store));
	/* What the store has: the thread mirrors only what is newer. */
	for (size_t i = 0; i < wsync_store_count(h->store); i++) {
		const wsync_model_t *m = wsync_store_model(h->store, i);
		struct s_have *have = s_have(rl, m->id);
		if (have == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		have->version = m->next > 0 ? m->next - 1 : 0;
	}
	s_origin_load(h);
	snprintf(inproc, sizeof(inproc), S_INPROC, (void *)rl);
	if ((h->relay_pair = zmq_socket(wsync_zmq_context(), ZMQ_PAIR)) == NULL ||
	    (rl->pair = zmq_socket(wsync_zmq_context(), ZMQ_PAIR)) == NULL ||
	    zmq_bind(h->relay_pair, inproc) < 0 || zmq_connect(rl->pair, inproc) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "relay: %s", zmq_strerror(errno));
	zmq_setsockopt(h->relay_pair, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(rl->pair, ZMQ_LINGER, &zero, sizeof(zero));
	if ((errno = pthread_create(&rl->thread, NULL, s_thread, rl)) != 0)
		return wsync_err_set(err, EX_SOFTWARE, "relay: cannot start a thread: %s",
		    strerror(errno));
	rl->started = 1;
	for (int i = 0; i < rl->nupstreams; i++)
		hub_log(h, "event=upstream endpoint=%s", rl->upstreams[i]);
	return 0;
}

void
hub_relay_stop(wsync_hub_t *h)
{
	struct hub_relay *rl = h->relay;

	if (rl == NULL)
		return;
	rl->stop = 1;
	if (rl->started)
		pthread_join(rl->thread, NULL);
	if (rl->pair != NULL)
		zmq_close(rl->pair);
	if (h->relay_pair != NULL)
		zmq_close(h->relay_pair);
	h->relay_pair = NULL;
	for (int i = 0; i < rl->nupstreams; i++)
		free(rl->upstreams[i]);
	free(rl->upstreams);
	for (int i = 0; i < rl->nmodels; i++)
		free(rl->models[i]);
	free(rl->models);
	free(rl->key);
	free(rl->hub_key);
	free(rl->have);
	while (rl->nfetched > 0)
		s_fetched_drop(rl, rl->nfetched - 1);
	free(rl->report);
	free(rl);
	h->relay = NULL;
}

int
hub_relay_mirrors(const wsync_hub_t *h, const char *model, wsync_err_t *err)
{
	const struct hub_relay *rl = h->relay;
	int all = rl != NULL && rl->models == NULL;

	for (int i = 0; !all && rl != NULL && i < rl->nmodels; i++)
		all = strcmp(rl->models[i], model) == 0;
	if (!all)
		return 0;
	wsync_err_set(err, EX_NOPERM, "model %s is mirrored from the upstream %s: push it there",
	    model, rl->upstreams[0]);
	return 1;
}

/* Array key of m, of n entries when n > 0; NULL when not so. */
static const msgpack_object *
s_msg_array(const wsync_msg_t *m, const char *key, uint32_t n)
{
	const msgpack_object *a = wsync_msg_get(m, key);

	return a != NULL && a->type == MSGPACK_OBJECT_ARRAY && a->via.array.size > 0 &&
	    a->via.array.size <= HUB_UPLOAD_FILES && (n == 0 || a->via.array.size == n) ? a : NULL;
}

/*
 * Commits the versions the thread fetched together, as its upstream did,
 * with the upstream's numbers, and announces them as one group.
 */
static int
s_commit(wsync_hub_t *h, const wsync_msg_t *m, wsync_err_t *err)
{
	char origin[64] = "", upstream[512];
	wsync_store_temp_t *t = calloc(HUB_UPLOAD_FILES, sizeof(*t));
	uint64_t versions[HUB_UPLOAD_FILES];
	wsync_commit_info_t info = { .pusher = "", .time = wsync_wall_time(), .trust = 1 };
	wsync_committed_t out[HUB_UPLOAD_FILES];
	const msgpack_object *models = s_msg_array(m, "models", 0), *v = NULL, *paths = NULL;
	uint32_t n = models != NULL ? models->via.array.size : 0, opened = 0;
	int rc = -1;

	if (t == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (models != NULL) {
		v = s_msg_array(m, "versions", n);
		paths = s_msg_array(m, "paths", n);
	}
	for (uint32_t i = 0; v != NULL && paths != NULL && i < n; i++) {
		t[i] = (wsync_store_temp_t){ .fd = -1 };
		if (wsync_obj_str(&models->via.array.ptr[i], t[i].model, sizeof(t[i].model)) < 0 ||
		    wsync_obj_str(&paths->via.array.ptr[i], t[i].path, sizeof(t[i].path)) < 0 ||
		    wsync_obj_u64(&v->via.array.ptr[i], &versions[i]) < 0)
			v = NULL;
	}
	if (v == NULL || paths == NULL) {
		free(t);
		return wsync_err_set(err, EX_SOFTWARE, "relay: a hand-over that does not decode");
	}
	wsync_msg_str(m, "origin", origin, sizeof(origin));
	if (wsync_msg_str(m, "upstream", upstream, sizeof(upstream)) < 0)
		snprintf(upstream, sizeof(upstream), "%s", h->relay->upstreams[0]);
	/* Verified by the fetch already: hashing it again would double the relay's work. */
	info.versions = versions;
	for (; opened < n; opened++)
		if ((t[opened].fd = open(t[opened].path, O_RDWR | O_CLOEXEC)) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: %s", t[opened].path, strerror(errno));
			goto out;
		}
	if (wsync_store_commit(h->store, t, n, &info, out, err) < 0)
		goto out;
	rc = 0;
	opened = 0;
	s_origin_set(h, origin);
	for (uint32_t i = 0; i < n; i++)
		hub_log(h, "event=commit model=%s version=%" PRIu64 " size=%" PRIu64 " content=%016"
		    PRIx64 " pusher=- relay=%s", out[i].model, out[i].version, out[i].size,
		    out[i].content, upstream);
	for (uint32_t i = 0; i < n; i++)
		hub_announce(h, &out[i], t, n, NULL, 0);
	for (uint32_t i = 0; i < n; i++)
		hub_waits_check(h, out[i].model);
out:
	for (uint32_t i = 0; i < opened; i++)
		close(t[i].fd);
	free(t);
	return rc;
}

/* The thread's word on the version it fetches: arriving (how much is in) or dropped. */
static void
s_arriving_news(wsync_hub_t *h, wsync_parts_t *p)
{
	char model[WSYNC_MAX_MODEL + 1], path[PATH_MAX], why[WSYNC_MAX_REASON] = "";
	int dropped = wsync_part_size(p, 0) == 7 && memcmp(wsync_part_data(p, 0), "dropped",
	    7) == 0;
	wsync_head_t v = { 0 };
	uint64_t upto = 0, code = 0;
	wsync_err_t err = { 0 };
	wsync_msg_t m;

	if (wsync_msg_decode(&m, wsync_part_data(p, 1), wsync_part_size(p, 1), &err) == 0 &&
	    wsync_msg_str(&m, "model", model, sizeof(model)) == 0 &&
	    wsync_msg_u64(&m, "version", &v.version) == 0) {
		if (dropped && hub_arrive_has(h, model, v.version)) {
			wsync_msg_u64(&m, "code", &code);
			wsync_msg_str(&m, "error", why, sizeof(why));
			hub_arrive_end(h, (int)code, why);
		} else if (!dropped && wsync_msg_u64(&m, "size", &v.size) == 0 &&
		    wsync_msg_u64(&m, "content", &v.content) == 0 &&
		    wsync_msg_str(&m, "path", path, sizeof(path)) == 0 &&
		    wsync_msg_u64(&m, "upto", &upto) == 0) {
			if (!hub_arrive_has(h, model, v.version))
				hub_arrive_begin(h, model, &v, path);
			hub_arrive_progress(h, upto);
		}
	}
	wsync_msg_free(&m);
}

/* Ends the version arriving here when it is one of the hand-over m's. */
static void
s_arrive_end_of(wsync_hub_t *h, const wsync_msg_t *m, int ok, const wsync_err_t *err)
{
	const msgpack_object *models = wsync_msg_get(m, "models"), *v = wsync_msg_get(m, "versions");
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;

	for (uint32_t i = 0; models != NULL && models->type == MSGPACK_OBJECT_ARRAY &&
	    v != NULL && v->type == MSGPACK_OBJECT_ARRAY && i < models->via.array.size &&
	    i < v->via.array.size; i++)
		if (wsync_obj_str(&models->via.array.ptr[i], model, sizeof(model)) == 0 &&
		    wsync_obj_u64(&v->via.array.ptr[i], &version) == 0 &&
		    hub_arrive_has(h, model, version)) {
			hub_arrive_end(h, ok ? 0 : EX_DATAERR, err->msg);
			return;
		}
}

void
hub_relay_serve(wsync_hub_t *h)
{
	char quoted[2200];
	wsync_parts_t p;
	wsync_msg_t m;
	wsync_err_t err;
	wsync_enc_t e;
	int ok, decoded;

	while (wsync_recv(h->relay_pair, &p, ZMQ_DONTWAIT) == 0) {
		if (p.n == 2) {
			s_arriving_news(h, &p);
			wsync_parts_close(&p);
			continue;
		}
		memset(&err, 0, sizeof(err));
		decoded = wsync_msg_decode(&m, wsync_part_data(&p, 0), wsync_part_size(&p, 0),
		    &err) == 0;
		ok = decoded && s_commit(h, &m, &err) == 0;
		if (!ok)
			hub_log(h, "event=relay-refuse error=\"%s\"", wsync_log_quote(err.msg,
			    quoted, sizeof(quoted)));
		/* Committed, the version is served from the store; refused, nowhere. */
		if (decoded && h->arriving.version != 0)
			s_arrive_end_of(h, &m, ok, &err);
		wsync_msg_free(&m);
		wsync_parts_close(&p);
		wsync_enc_init(&e);
		msgpack_pack_map(&e.pk, ok ? 1 : 2);
		wsync_enc_kv_bool(&e, "ok", ok);
		if (!ok)
			wsync_enc_kv_str(&e, "error", err.msg);
		if (zmq_send(h->relay_pair, "reply", 5, ZMQ_DONTWAIT | ZMQ_SNDMORE) >= 0)
			zmq_send(h->relay_pair, e.sb.data, e.sb.size, ZMQ_DONTWAIT);
		wsync_enc_free(&e);
	}
}

void
hub_relay_report(wsync_hub_t *h, int64_t now)
{
	wsync_enc_t e;

	if (h->relay == NULL || now - h->reported < WSYNC_HEARTBEAT_MS)
		return;
	h->reported = now;
	wsync_enc_init(&e);
	hub_subtree_pack(h, &e);
	if (zmq_send(h->relay_pair, "report", 6, ZMQ_DONTWAIT | ZMQ_SNDMORE) >= 0)
		zmq_send(h->relay_pair, e.sb.data, e.sb.size, ZMQ_DONTWAIT);
	wsync_enc_free(&e);
}
