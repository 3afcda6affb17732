/* relay_follow.c - a relay's thread: follows an upstream hub, mirroring its versions into this hub. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_int.h"
#include "hub_int.h"
#include "relay_int.h"

#define S_CALL_MS 3000          /* bound on one request to the upstream while connected */
#define S_CONNECT_MS 1000       /* how long one upstream has to answer hello */
#define S_SLICE_MS 100          /* how often the thread looks at its stop flag while idle */
#define S_REFUSALS 3            /* a placed parent's refusals of this relay's key, at most */
#define S_LEAVE_MS 1000         /* bound on the last report of a relay that stops */
/*
 * A fetch that took in nothing for this long reports home this often: the
 * root may have moved its parent (a slow one, to the end of the chain,
 * behind this relay), and only a report brings the word.
 */
#define S_QUIET_MS 250
/*
 * A fetch from the root by a relay it probes reports this often, once it
 * told its rate, until S_PROBE_FOR_MS after its first bytes: the root sets
 * its rate beside the other's, and each of the two learns where it goes
 * from its next report (wsync(7), Placement).
 */
#define S_PROBE_MS 25
#define S_PROBE_FOR_MS 1500

#define s_log(rl, ...) wsync_logf((rl)->log, (rl)->log_arg, __VA_ARGS__)

struct relay_have *
relay_have(struct hub_relay *rl, const char *model)
{
	struct relay_have *n;

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

static void s_report_now(struct hub_relay *rl);

#ifdef WSYNC_TEST_HOOKS
/*
 * The test-only pause of wsync-serve(1) (WSYNC_TEST_RELAY_GATE=PATH): with
 * half of a version in, the fetch waits until PATH exists (at most 60 s), so
 * that a test sees a downstream relay read it before it is whole. The relay
 * goes on reporting home meanwhile: it is held, not gone; and the time held
 * does not count in its rate, for the root not to move it as slow.
 */
static void
s_gate(struct hub_relay *rl, uint64_t upto)
{
	const char *gate = getenv("WSYNC_TEST_RELAY_GATE");
	int64_t from = wsync_now_ms(), until = from + 60000;

	if (gate == NULL || upto < rl->arriving.size / 2 || rl->told >= rl->arriving.size / 2)
		return;
	while (access(gate, F_OK) < 0 && !rl->stop && wsync_now_ms() < until) {
		zmq_poll(NULL, 0, 20);
		if (wsync_now_ms() - rl->reported_ms >= WSYNC_HEARTBEAT_MS)
			s_report_now(rl);
	}
	rl->in_ms += wsync_now_ms() - from;
}
#endif

/* Whether the root probes this relay, which fetches from it (one of the probe's pair). */
static int
s_probed(const struct hub_relay *rl)
{
	return rl->probed && rl->parent[0] == '\0';
}

/* The rate of the fetch from the upstream followed: bytes in ms, told in the next report. */
static void
s_rate(struct hub_relay *rl, uint64_t bytes, int64_t ms)
{
	rl->rate = bytes * 1000 / (uint64_t)(ms > 0 ? ms : 1);
	snprintf(rl->rate_from, sizeof(rl->rate_from), "%s", rl->up.endpoint);
	rl->rate_root = rl->parent[0] == '\0';
	rl->rate_ms = wsync_now_ms();
#ifdef WSYNC_TEST_HOOKS
	/* The test-only rate of wsync-serve(1): a slow link, without shaping one. */
	if (getenv("WSYNC_TEST_RELAY_RATE") != NULL && !rl->resumed)
		rl->rate = strtoull(getenv("WSYNC_TEST_RELAY_RATE"), NULL, 10);
#endif
}

/*
 * The fetch's word on how much of the version is in (wsync_fetch_temp_t's
 * written): the hub's loop is told, so that it passes the version on while
 * it arrives.
 */
static int
s_written(void *arg, const char *tmp, uint64_t upto)
{
	struct hub_relay *rl = arg;
	relay_arriving_t a = { .v = rl->arriving, .upto = upto };
	int64_t now = wsync_now_ms();
	int moved = upto > rl->in;
	wsync_enc_t e;

	snprintf(rl->tmp, sizeof(rl->tmp), "%s", tmp);
	if (moved) {
		rl->in = upto;
		rl->moved_ms = now;
	}
	/*
	 * The rate counts from the first bytes: the time to reach the parent and
	 * to ask the root for the layout says nothing of the link.
	 */
	if (moved && !rl->in_started) {
		rl->in_started = 1;
		rl->in_from = rl->in;
		rl->in_ms = now;
	}
	/*
	 * The rate so far, for the root to place this relay before the version
	 * is in: told at once the first time, then with each report.
	 */
	if (moved && rl->arriving.size >= RELAY_RATE_MIN && rl->in - rl->in_from >=
	    RELAY_RATE_EARLY && now - rl->in_ms >= (s_probed(rl) ? RELAY_RATE_PROBE_MS :
	    RELAY_RATE_EARLY_MS)) {
		s_rate(rl, rl->in - rl->in_from, now - rl->in_ms);
		if (!rl->rate_told) {
			rl->rate_told = 1;
			rl->reported_ms = 0;
		}
	}
	/*
	 * A long fetch keeps the root hearing from this relay, and the acks
	 * behind it flowing; one held up (nothing in for S_QUIET_MS: the fetch
	 * tells so that often) asks for its place sooner. Not on the first word:
	 * the fetch asks the root for the layout after it, on the connection a
	 * report may end. One the root probes reports more often (S_PROBE_MS).
	 */
	if (rl->told != 0 && (now - rl->reported_ms >= WSYNC_HEARTBEAT_MS ||
	    (now - rl->moved_ms >= S_QUIET_MS && now - rl->reported_ms >= S_QUIET_MS) ||
	    (s_probed(rl) && rl->rate_told && now - rl->in_ms < S_PROBE_FOR_MS &&
	    now - rl->reported_ms >= S_PROBE_MS)))
		s_report_now(rl);
	/*
	 * Placed elsewhere meanwhile (this relay, or the one it fetched from, is
	 * slow): the fetch stops, and resumes from the new parent what is in (or
	 * begins there, nothing being in).
	 */
	if (!rl->halt && strcmp(rl->placed, rl->parent) != 0) {
		s_log(rl, "event=relay-move model=%s version=%" PRIu64 " upstream=%s in=%" PRIu64,
		    rl->fetching, rl->arriving.version, rl->up.endpoint, rl->in);
		rl->halt = 1;
	}
	if (rl->told != 0 && upto <= rl->told)
		return 0;
	snprintf(a.model, sizeof(a.model), "%s", rl->fetching);
	snprintf(a.path, sizeof(a.path), "%s", tmp);
	wsync_enc_init(&e);
	relay_pack(&e, RELAY_MSG_ARRIVING, &a);
	relay_send(rl->pair, RELAY_MSG_ARRIVING, &e, 0);
#ifdef WSYNC_TEST_HOOKS
	s_gate(rl, upto);
#endif
	rl->told = upto > 0 ? upto : 1;
	return 0;
}

/* Tells the hub's loop the version being fetched will not arrive (err says why). */
static void
s_dropped(struct hub_relay *rl, const wsync_err_t *err)
{
	relay_dropped_t d = { .version = rl->arriving.version,
	    .code = (uint64_t)(err->code != 0 ? err->code : EX_SOFTWARE) };
	wsync_enc_t e;

	snprintf(d.model, sizeof(d.model), "%s", rl->fetching);
	snprintf(d.error, sizeof(d.error), "%.*s", (int)sizeof(d.error) - 1, err->msg);
	wsync_enc_init(&e);
	relay_pack(&e, RELAY_MSG_DROPPED, &d);
	relay_send(rl->pair, RELAY_MSG_DROPPED, &e, 0);
}

/* Connects to the next upstream of the list, subscribing to its announcements. */
static int
s_connect(struct hub_relay *rl, wsync_err_t *err)
{
	const char **topics = calloc((size_t)rl->nmodels + 2, sizeof(*topics));
	int n = 0, rc;
	wsync_client_opts_t co = { .endpoint = rl->up.endpoint, .role = "relay",
	    .models = (const char *const *)rl->models, .nmodels = rl->nmodels,
	    .timeout_ms = S_CONNECT_MS, .transfer = WSYNC_TRANSFER_SOCKET,
	    .idle_ms = S_CALL_MS, .stop = &rl->halt, .key = rl->key, .hub_key = rl->hub_key,
	    .close_lost = 1 };

	/* Placed under another relay by the root: that one, with the key the root gave. */
	if (rl->parent[0] != '\0') {
		snprintf(rl->up.endpoint, sizeof(rl->up.endpoint), "%s", rl->parent);
		co.hub_public = rl->parent_key[0] != '\0' ? rl->parent_key : NULL;
	} else {
		wsync_follow_next(&rl->up, (const char *const *)rl->upstreams, rl->nupstreams, 0,
		    err);
	}
	if (topics == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (rl->models == NULL)
		topics[n++] = "";
	for (int i = 0; i < rl->nmodels; i++)
		topics[n++] = rl->models[i];
	/* A version arriving at an upstream that is a relay too (hub_arrive.c). */
	if (rl->models != NULL)
		topics[n++] = HUB_ARRIVE_TOPIC;
	/* Announcements only cut latency: the heads round every heartbeat finds the head. */
	rc = wsync_follow_connect(&rl->up, &co, topics, n, err) < 0 ? -1 : 0;
	free(topics);
	return rc;
}

/* Keeps the report in p (the hub's latest replaces the one before). */
static void
s_keep_report(struct hub_relay *rl, wsync_parts_t *p)
{
	unsigned char *copy = malloc(wsync_part_size(p, 1) + 1);

	if (copy == NULL)
		return;
	memcpy(copy, wsync_part_data(p, 1), wsync_part_size(p, 1));
	free(rl->report);
	rl->report = copy;
	rl->report_len = wsync_part_size(p, 1);
}

/*
 * Reads what the hub sent on the pair, without waiting: reports are kept, a
 * reply goes into *reply when reply is not NULL. 1 when a reply came.
 */
static int
s_pair_read(struct hub_relay *rl, relay_reply_t *reply)
{
	enum relay_msg_kind k;
	wsync_parts_t p;
	wsync_msg_t m;
	int got = 0;

	while (!got && (k = relay_recv(rl->pair, &p, &m)) != RELAY_MSG_NONE) {
		if (k == RELAY_MSG_REPORT)
			s_keep_report(rl, &p);
		else if (k == RELAY_MSG_REPLY && reply != NULL) {
			if (relay_reply_unpack(&m, reply) < 0)
				*reply = (relay_reply_t){ .ok = 0 };
			got = 1;
		}
		wsync_msg_free(&m);
		wsync_parts_close(&p);
	}
	return got;
}

/*
 * Tells the hub's loop the keys of the relays the root placed under this one
 * (admit: a list, or NULL for none), when they changed: it lets them in.
 */
static void
s_admit(struct hub_relay *rl, const msgpack_object *admit)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 1);
	wsync_enc_str(&e, "keys");
	if (admit != NULL && admit->type == MSGPACK_OBJECT_ARRAY)
		msgpack_pack_object(&e.pk, *admit);
	else
		msgpack_pack_array(&e.pk, 0);
	if ((rl->admitted == NULL && admit == NULL) || (rl->admitted != NULL &&
	    rl->admitted_len == e.sb.size && memcmp(rl->admitted, e.sb.data, e.sb.size) == 0)) {
		wsync_enc_free(&e);
		return;
	}
	free(rl->admitted);
	if ((rl->admitted = malloc(e.sb.size)) != NULL)
		memcpy(rl->admitted, e.sb.data, e.sb.size);
	rl->admitted_len = e.sb.size;
	relay_send(rl->pair, RELAY_MSG_ADMIT, &e, 0);
}

/* Connects home: the next upstream of the list, where the reports go. */
static int
s_home_connect(struct hub_relay *rl, wsync_err_t *err)
{
	wsync_client_opts_t co = { .endpoint = rl->upstreams[rl->home_next], .role = "relay",
	    .timeout_ms = S_CONNECT_MS, .transfer = WSYNC_TRANSFER_SOCKET, .idle_ms = S_CALL_MS,
	    .stop = &rl->stop, .key = rl->key, .hub_key = rl->hub_key };

	rl->home_next = (rl->home_next + 1) % rl->nupstreams;
	return (rl->home = wsync_client_new(&co, err)) != NULL ? 0 : -1;
}

/*
 * Sends the hub's latest report of its workers home (op subtree), with where
 * this hub is reached, its rate and a parent it lost; keeps the parent the
 * reply names (wsync(7) RELAYS). Leaving (the hub stops): the report says so,
 * for the root to place no relay under this one from now on. 0 when none
 * was due.
 */
static int
s_report(struct hub_relay *rl, int leaving, wsync_err_t *err)
{
	char parent[sizeof(rl->placed)], key[sizeof(rl->placed_key)];
	int placing = rl->advertise[0] != '\0', lost = rl->lost[0] != '\0' && !leaving;
	int keyed = placing && rl->advertise_key[0] != '\0';
	wsync_parts_t p = { .n = 0 };
	wsync_msg_t m;
	wsync_enc_t e;
	uint64_t id;

	if ((rl->report == NULL || leaving) && !placing)
		return 0;
	if (rl->home == NULL && s_home_connect(rl, err) < 0)
		return -1;
	id = wsync_client_request(rl->home, &e, "subtree", 2 + 5 * placing + keyed + lost +
	    (placing && leaving));
	wsync_enc_kv_str(&e, "relay", rl->name);
	if (placing) {
		wsync_enc_kv_str(&e, "advertise", rl->advertise);
		wsync_enc_kv_u64(&e, "rate", rl->rate);
		wsync_enc_kv_str(&e, "rate_from", rl->rate_from);
		wsync_enc_kv_bool(&e, "rate_root", rl->rate_root);
		wsync_enc_kv_u64(&e, "rate_age", rl->rate_ms != 0 ?
		    (uint64_t)(wsync_now_ms() - rl->rate_ms) : 0);
	}
	if (keyed)
		wsync_enc_kv_str(&e, "advertise_key", rl->advertise_key);
	if (lost)
		wsync_enc_kv_str(&e, "lost", rl->lost);
	if (placing && leaving)
		wsync_enc_kv_bool(&e, "leaving", 1);
	wsync_enc_str(&e, "workers");
	/* Already packed by the hub's loop: the array goes in as it is. */
	if (rl->report != NULL)
		msgpack_sbuffer_write(&e.sb, (const char *)rl->report, rl->report_len);
	else
		msgpack_pack_array(&e.pk, 0);
	free(rl->report);
	rl->report = NULL;
	rl->reported_ms = wsync_now_ms();
	if (wsync_client_call(rl->home, &e, id, NULL, 0, leaving ? S_LEAVE_MS : S_CALL_MS,
	    "subtree", &m, &p, err) < 0) {
		wsync_client_destroy(&rl->home);
		return -1;
	}
	rl->lost[0] = '\0';
	/* Its last word: no parent to follow, no key to let in any more. */
	if (leaving) {
		wsync_client_release(&m, &p);
		return 0;
	}
	/* A hub that places relays names a parent ("": itself); any other, none: the upstream. */
	if (wsync_msg_str(&m, "parent", parent, sizeof(parent)) < 0)
		parent[0] = '\0';
	if (wsync_msg_str(&m, "parent_key", key, sizeof(key)) < 0)
		key[0] = '\0';
	snprintf(rl->placed, sizeof(rl->placed), "%s", parent);
	snprintf(rl->placed_key, sizeof(rl->placed_key), "%s", key);
	rl->probed = wsync_obj_true(wsync_msg_get(&m, "probe"));
	s_admit(rl, wsync_msg_get(&m, "admit"));
	wsync_client_release(&m, &p);
	return 0;
}

/* Reports home in the middle of a fetch: a failure is only logged, the next report retries. */
static void
s_report_now(struct hub_relay *rl)
{
	char quoted[2200];
	wsync_err_t err;

	s_pair_read(rl, NULL);
	if (s_report(rl, 0, &err) < 0)
		s_log(rl, "event=relay-lost upstream=%s error=\"%s\"", rl->upstreams[0],
		    wsync_log_quote(err.msg, quoted, sizeof(quoted)));
}

void
relay_fetched_drop(struct hub_relay *rl, size_t i)
{
	unlink(rl->fetched[i].tmp);
	free(rl->fetched[i].tmp);
	if (rl->fetched[i].delta != NULL) {
		unlink(rl->fetched[i].delta);
		free(rl->fetched[i].delta);
	}
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
	relay_reply_t reply;

	for (size_t i = 0; i < n; i++) {
		const struct relay_fetched *f = &rl->fetched[take[i]];
		relay_hand_over_t o = { .version = f->head.version, .content = f->head.content,
		    .index = i, .count = n };
		wsync_enc_t e;
		snprintf(o.model, sizeof(o.model), "%s", f->model);
		snprintf(o.path, sizeof(o.path), "%s", f->tmp);
		snprintf(o.origin, sizeof(o.origin), "%s", origin);
		snprintf(o.upstream, sizeof(o.upstream), "%s", rl->up.endpoint);
		snprintf(o.delta, sizeof(o.delta), "%s", f->delta != NULL ? f->delta : "");
		o.base = f->base;
		wsync_enc_init(&e);
		relay_pack(&e, RELAY_MSG_HAND_OVER, &o);
		if (relay_send(rl->pair, RELAY_MSG_HAND_OVER, &e, 0) < 0)
			return wsync_err_set(err, EX_SOFTWARE, "relay: cannot hand over: %s",
			    zmq_strerror(errno));
	}
	/* The hub answers every group handed over, unless it stops: then so does this thread. */
	while (!rl->stop && !s_pair_read(rl, &reply))
		zmq_poll(&item, 1, S_SLICE_MS);
	if (rl->stop)
		return wsync_err_set(err, EX_TEMPFAIL, "the hub stops");
	if (!reply.ok && reply.error[0] != '\0')
		wsync_err_set(err, EX_DATAERR, "%s", reply.error);
	return reply.ok ? 0 : -1;
}

/* Forgets the cut-off fetch kept, its file and its version at the hub (nothing when none). */
static void
s_cut_drop(struct hub_relay *rl)
{
	wsync_err_t err = { .code = EX_NOINPUT };

	if (rl->cut.path[0] == '\0')
		return;
	unlink(rl->cut.path);
	snprintf(rl->fetching, sizeof(rl->fetching), "%s", rl->cut.model);
	rl->arriving = rl->cut.head;
	snprintf(err.msg, sizeof(err.msg), "%s version %" PRIu64 ": its fetch was given up",
	    rl->cut.model, rl->cut.head.version);
	s_dropped(rl, &err);
	rl->cut.path[0] = '\0';
}

/*
 * After a fetch failed with err: keeps what came of it to be resumed from
 * the next parent, when it was cut off (not refused) and left its file. 1
 * when kept: the hub goes on passing on what is in.
 */
static int
s_cut_keep(struct hub_relay *rl, const char *model, const wsync_head_t *head,
    const wsync_err_t *err)
{
	if (err->code == EX_DATAERR || rl->in == 0 || rl->tmp[0] == '\0' ||
	    access(rl->tmp, F_OK) < 0)
		return 0;
	s_cut_drop(rl);
	snprintf(rl->cut.model, sizeof(rl->cut.model), "%s", model);
	rl->cut.head = *head;
	snprintf(rl->cut.path, sizeof(rl->cut.path), "%s", rl->tmp);
	rl->cut.upto = rl->in;
	return 1;
}

/*
 * Fetches version head of model unless the relay has it, fetched or
 * committed (or it failed here), passing it on while it arrives; it is kept
 * in rl->fetched. A fetch of it cut off before resumes where it stopped. 0
 * when done or skipped, -1 with err when the upstream was lost, or when the
 * parent the root placed this relay under passed bytes that do not verify
 * of a version it committed (committed: head is one of its heads, not the
 * one arriving there).
 */
static int
s_fetch(struct hub_relay *rl, const char *model, const wsync_head_t *head, int committed,
    wsync_err_t *err)
{
	wsync_fetch_temp_t f = { .what = { .model = model, .version = head->version },
	    .known = head, .beside = rl->beside, .window = RELAY_WINDOW, .piece = RELAY_PIECE,
	    .arriving = 1, .keep_cut = 1, .written = s_written, .written_arg = rl,
	    .layout_from = rl->home };
	struct relay_have *have = relay_have(rl, model);
	struct relay_fetched *to;
	wsync_fetched_t got;
	char *tmp = NULL, resume[PATH_MAX], base[PATH_MAX], delta[PATH_MAX];

	if (have == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (head->version <= have->version || head->version == have->failed)
		return 0;
	for (size_t i = 0; i < rl->nfetched; i++)
		if (strcmp(rl->fetched[i].model, model) == 0 &&
		    rl->fetched[i].head.version == head->version)
			return 0;
	if (rl->nfetched == RELAY_GROUP_MAX)
		return 0;
	rl->told = rl->in = 0;
	rl->tmp[0] = '\0';
	if (rl->cut.path[0] != '\0' && strcmp(rl->cut.model, model) == 0) {
		if (rl->cut.head.version == head->version && rl->cut.head.size == head->size &&
		    rl->cut.head.content == head->content) {
			snprintf(resume, sizeof(resume), "%s", rl->cut.path);
			f.resume = resume;
			f.resume_upto = rl->told = rl->in = rl->cut.upto;
			s_log(rl, "event=relay-resume model=%s version=%" PRIu64 " upstream=%s "
			    "from=%" PRIu64, model, head->version, rl->up.endpoint, rl->cut.upto);
			rl->cut.path[0] = '\0';
		} else {
			s_cut_drop(rl);
		}
	}
	/*
	 * From the version the relay has, a delta when the upstream has one (it
	 * committed this version): kept, for the hub to serve on as it came.
	 */
	if (f.resume == NULL && have->version > 0 && wsync_store_version_path(base,
	    sizeof(base), rl->store, model, have->version, 0) == 0) {
		f.what.base = base;
		f.keep_delta = delta;
	}
	snprintf(rl->fetching, sizeof(rl->fetching), "%s", model);
	rl->arriving = *head;
	rl->in_from = rl->in;
	rl->in_ms = rl->moved_ms = wsync_now_ms();
	rl->in_started = 0;
	rl->rate_told = 0;
	rl->resumed = f.resume != NULL;
	if (wsync_client_fetch_temp(rl->up.client, &f, &tmp, &got, S_CALL_MS, err) < 0) {
		/* Not in at the upstream in time (66): the next round resumes it, as a lost one. */
		if (s_cut_keep(rl, model, head, err))
			return err->code == EX_NOINPUT ? 0 : -1;
		s_dropped(rl, err);
		/* Retired while we fetched it (or dropped by a relay above): the next round. */
		if (err->code == EX_NOINPUT)
			return 0;
		if (err->code == EX_DATAERR) {
			s_log(rl, "event=relay-fail model=%s version=%" PRIu64 " upstream=%s "
			    "error=\"%s\"", model, head->version, rl->up.endpoint, err->msg);
			/*
			 * What a cut-off fetch left may be what was spoiled, through
			 * whichever parent: whole, the next round, blaming none.
			 */
			if (f.resume != NULL)
				return 0;
			/*
			 * Spoiled on its way: fetched again through the parent the
			 * root names next. Not when the parent passed the version on
			 * as it arrived there, before it verified it: what failed here
			 * may have failed there too, and it fetches it again itself.
			 */
			if (rl->parent[0] != '\0' && committed)
				return -1;
			if (rl->parent[0] != '\0') {
				snprintf(rl->spoiled_from, sizeof(rl->spoiled_from), "%s",
				    rl->up.endpoint);
				return 0;
			}
			have->failed = head->version;
			return 0;
		}
		return -1;
	}
	/* A delta's time says nothing of the link: only a version fetched whole measures it. */
	if (f.resume == NULL && got.transfer != WSYNC_TRANSFER_DELTA &&
	    got.head.size >= RELAY_RATE_MIN)
		s_rate(rl, got.head.size - rl->in_from, wsync_now_ms() - rl->in_ms + 1);
	to = &rl->fetched[rl->nfetched++];
	snprintf(to->model, sizeof(to->model), "%s", model);
	to->head = got.head;
	to->tmp = tmp;
	to->delta = NULL;
	to->base = 0;
	if (f.keep_delta != NULL && f.keep_delta[0] != '\0') {
		s_log(rl, "event=relay-delta model=%s base=%" PRIu64 " version=%" PRIu64 " bytes=%"
		    PRIu64 " upstream=%s", model, have->version, head->version, got.wire,
		    rl->up.endpoint);
		if ((to->delta = strdup(delta)) == NULL)
			unlink(delta);
		to->base = have->version;
	}
	return 0;
}

/* Whether head is newer than what the relay has of model (and did not fail here). */
static int
s_newer(struct hub_relay *rl, const char *model, const wsync_head_t *head)
{
	struct relay_have *have = relay_have(rl, model);

	return have != NULL && head->version > have->version && head->version != have->failed;
}

/*
 * Hands over, together, the fetched versions that are the upstream's heads
 * (those of the heads reply r: a push's models all new or all old), and
 * forgets those the heads passed. With all, only when every newer head was
 * fetched: nothing else is committed without the others of its push. 0 when
 * done, -1 with err when the hub stops.
 */
static int
s_commit_heads(struct hub_relay *rl, const wsync_follow_heads_t *r, int all, wsync_err_t *err)
{
	size_t take[RELAY_GROUP_MAX], n = 0;
	struct relay_have *have;
	int rc = 0, whole = 1;

	for (size_t k = 0; k < r->nheads; k++) {
		const wsync_follow_head_t *h = &r->heads[k];
		size_t i = 0;
		if (!s_newer(rl, h->model, &h->head))
			continue;
		while (i < rl->nfetched && (strcmp(rl->fetched[i].model, h->model) != 0 ||
		    rl->fetched[i].head.version != h->head.version))
			i++;
		if (i < rl->nfetched && n < RELAY_GROUP_MAX)
			take[n++] = i;
		else
			whole = 0;
	}
	if (all && !whole)
		n = 0;
	if (n > 0 && s_hand_over(rl, take, n, r->from.origin, err) < 0) {
		if (err->code == EX_TEMPFAIL)
			rc = -1;
		for (size_t i = 0; i < n && rc == 0; i++)
			if ((have = relay_have(rl, rl->fetched[take[i]].model)) != NULL)
				have->failed = rl->fetched[take[i]].head.version;
	} else {
		for (size_t i = 0; i < n; i++)
			if ((have = relay_have(rl, rl->fetched[take[i]].model)) != NULL)
				have->version = rl->fetched[take[i]].head.version;
	}
	/* From the last index down, so that the ones before keep their places. */
	for (size_t i = rl->nfetched; i-- > 0;) {
		have = relay_have(rl, rl->fetched[i].model);
		if (have == NULL || rl->fetched[i].head.version <= have->version ||
		    rl->fetched[i].head.version == have->failed ||
		    rl->fetched[i].head.version < wsync_follow_head_of(r->heads, r->nheads,
		    rl->fetched[i].model).version)
			relay_fetched_drop(rl, i);
	}
	return rc;
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
	const wsync_follow_ask_t a = { .models = (const char *const *)rl->models,
	    .n = rl->nmodels, .arriving = 1 };
	wsync_follow_heads_t r;
	/* What it passed on as it arrived did not verify: what it committed is tried next. */
	int rc = 0, others = 0, settle = rl->spoiled_from[0] != '\0' &&
	    strcmp(rl->spoiled_from, rl->up.endpoint) == 0;

	if (wsync_follow_heads(&rl->up, &a, &r, S_CALL_MS, err) < 0) {
		wsync_follow_heads_free(&r);
		return -1;
	}
	rl->spoiled_from[0] = '\0';
	/*
	 * A head with a newer version on its way is skipped for that one, taken
	 * as it arrives, unless another model moved too: then every newer head
	 * is fetched, so that the models of one push are committed together.
	 */
	for (size_t i = 0; i < r.nheads; i++)
		if (s_newer(rl, r.heads[i].model, &r.heads[i].head) && wsync_follow_head_of(
		    r.arriving, r.narriving, r.heads[i].model).version <= r.heads[i].head.version)
			others++;
	for (size_t i = 0; i < r.nheads && !rl->stop && rc == 0; i++)
		if (others > 0 || settle || wsync_follow_head_of(r.arriving, r.narriving,
		    r.heads[i].model).version <= r.heads[i].head.version)
			rc = s_fetch(rl, r.heads[i].model, &r.heads[i].head, 1, err);
	for (size_t i = 0; i < r.narriving && !rl->stop && rc == 0; i++)
		rc = s_fetch(rl, r.arriving[i].model, &r.arriving[i].head, 0, err);
	/* The heads are what the upstream committed together: so are they here. */
	if (rc == 0 && !rl->stop)
		rc = s_commit_heads(rl, &r, others > 0, err);
	wsync_follow_heads_free(&r);
	return rc;
}

/* Waits up to ms for an announcement from the upstream (keeping the hub's reports); 1 when one came. */
static int
s_wait_news(struct hub_relay *rl, int ms)
{
	int64_t deadline = wsync_now_ms() + ms, left;
	int news = 0;

	while (!news && !rl->stop && (left = deadline - wsync_now_ms()) > 0) {
		zmq_pollitem_t items[2] = { { rl->pair, 0, ZMQ_POLLIN, 0 } };
		wsync_parts_t p;
		wsync_follow_item(&rl->up, &items[1]);
		if (zmq_poll(items, items[1].socket != NULL ? 2 : 1, left < S_SLICE_MS ?
		    (long)left : S_SLICE_MS) <= 0)
			continue;
		/* A report to pass on (an ack behind us) is news too. */
		if (items[0].revents & ZMQ_POLLIN) {
			s_pair_read(rl, NULL);
			news = rl->report != NULL && rl->up.client != NULL;
		}
		while (wsync_follow_news(&rl->up, &p) == 0) {
			news = 1;
			wsync_parts_close(&p);
		}
	}
	return news;
}

/*
 * The parent the root placed this relay under is lost, or passed bytes that
 * do not verify: back to the upstream, telling home, which places it again.
 */
static void
s_parent_lost(struct hub_relay *rl)
{
	snprintf(rl->lost, sizeof(rl->lost), "%s", rl->parent);
	rl->parent[0] = rl->placed[0] = '\0';
	rl->parent_key[0] = rl->placed_key[0] = '\0';
}

/* Follows the parent the root named last, from the next round on. */
static void
s_move(struct hub_relay *rl)
{
	s_log(rl, "event=relay-place parent=%s", rl->placed[0] != '\0' ? rl->placed :
	    rl->upstreams[0]);
	snprintf(rl->parent, sizeof(rl->parent), "%s", rl->placed);
	snprintf(rl->parent_key, sizeof(rl->parent_key), "%s", rl->placed_key);
	wsync_follow_disconnect(&rl->up);
}

void *
relay_follow(void *arg)
{
	struct hub_relay *rl = arg;
	char quoted[2200];
	int said = 0, refused = 0;
	wsync_err_t left;

	while (!rl->stop) {
		wsync_err_t err;
		/* Placed before the first round: a joining relay takes its first version in line. */
		if (rl->reported_ms == 0 && rl->advertise[0] != '\0' && s_report(rl, 0, &err) < 0)
			rl->reported_ms = wsync_now_ms();
		if (strcmp(rl->placed, rl->parent) != 0)
			s_move(rl);
		/* A fetch stopped to move has moved: the next ones run (unless the hub stops). */
		rl->halt = rl->stop;
		if (rl->up.client == NULL) {
			if (s_connect(rl, &err) < 0) {
				/*
				 * A parent lets this relay's key in once its own report
				 * brings the root's word (a heartbeat): until then, and
				 * twice more, a refusal is no loss.
				 */
				if (rl->parent[0] != '\0' && err.code == EX_NOPERM &&
				    ++refused < S_REFUSALS) {
					s_wait_news(rl, WSYNC_HEARTBEAT_MS);
					continue;
				}
				if (rl->parent[0] != '\0') {
					s_log(rl, "event=relay-lost upstream=%s error=\"%s\"",
					    rl->up.endpoint, wsync_log_quote(err.msg, quoted,
					    sizeof(quoted)));
					s_parent_lost(rl);
					continue;
				}
				if (!said++)
					s_log(rl, "event=relay-wait upstream=%s error=\"%s\"",
					    rl->up.endpoint, wsync_log_quote(err.msg, quoted,
					    sizeof(quoted)));
				/* A refused key is not let in by trying harder: once a heartbeat. */
				s_wait_news(rl, err.code == EX_NOPERM ? WSYNC_HEARTBEAT_MS :
				    S_SLICE_MS);
				continue;
			}
			said = refused = 0;
			s_log(rl, "event=relay-connect upstream=%s hub=%s", rl->up.endpoint,
			    wsync_client_hub(rl->up.client));
		}
		if (s_round(rl, &err) < 0) {
			if (rl->stop)
				break;
			/* Stopped to follow the parent the root named: no loss, the loop's top moves. */
			if (rl->halt)
				continue;
			s_log(rl, "event=relay-lost upstream=%s error=\"%s\"", rl->up.endpoint,
			    wsync_log_quote(err.msg, quoted, sizeof(quoted)));
			wsync_follow_disconnect(&rl->up);
			if (rl->parent[0] != '\0')
				s_parent_lost(rl);
			s_report_now(rl);
			continue;
		}
		if (s_report(rl, 0, &err) < 0)
			s_log(rl, "event=relay-lost upstream=%s error=\"%s\"", rl->upstreams[0],
			    wsync_log_quote(err.msg, quoted, sizeof(quoted)));
		if (strcmp(rl->placed, rl->parent) == 0)
			s_wait_news(rl, (int)wsync_client_heartbeat_ms(rl->up.client));
	}
	if (rl->cut.path[0] != '\0')
		unlink(rl->cut.path);
	/*
	 * The root hears at once that this relay is gone: a relay restarted on
	 * the same endpoint is not taken for a second one saying it, and none
	 * waits 5 seconds to be placed around this one. Not in reach: it finds
	 * out by the silence, as it would of a relay killed.
	 */
	if (rl->home != NULL && s_report(rl, 1, &left) < 0)
		s_log(rl, "event=relay-leave-unsaid upstream=%s error=\"%s\"", rl->upstreams[0],
		    wsync_log_quote(left.msg, quoted, sizeof(quoted)));
	wsync_client_destroy(&rl->home);
	wsync_follow_disconnect(&rl->up);
	return NULL;
}
