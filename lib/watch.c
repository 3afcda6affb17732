/* watch.c - the watcher's loop: initial weights, then every new version, latest wins. */
#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"
#include "follow_int.h"
#include "net_int.h"
#include "signround_int.h"

#define S_CALL_MS 3000          /* bound on one request while connected */
#define S_RETRY_MS 1000         /* between attempts to reach a hub */
#define S_PROBE_MS 5000         /* failed over: between looks at the first hub */

/* A watcher's state. */
struct s_watch {
	const wsync_watch_opts_t *o;
	wsync_follower_t hub;   /* the hub followed, and its announcements */
	wsync_round_model_t *m; /* per model, o->models[i]'s at m[i] */
	char store[64];         /* the origin (else store) id the applied versions come from */
	int64_t last_heads;     /* when the last heads round was (monotonic ms) */
	wsync_err_t failure;    /* --once: the first version that could not be applied */
	int64_t last_probe;     /* failed over: when the first hub was last looked at */
};

__attribute__((format(printf, 2, 3)))
static void
s_log(struct s_watch *w, const char *fmt, ...)
{
	char line[1200];
	va_list ap;

	if (w->o->log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	w->o->log(w->o->arg, line);
}

static int
s_connect(struct s_watch *w, int timeout_ms, wsync_err_t *err)
{
	const wsync_watch_opts_t *o = w->o;
	/* A version of any size may take long to fetch: only silence is bounded. */
	wsync_client_opts_t co = { .endpoint = w->hub.endpoint, .role = "watch",
	    .worker = o->worker, .models = o->models, .nmodels = o->nmodels,
	    .timeout_ms = timeout_ms, .transfer = o->transfer, .idle_ms = S_CALL_MS,
	    .key = o->key, .hub_key = o->hub_key,
	    .select = o->select != NULL ? o->select->select : NULL,
	    .nselect = o->select != NULL ? o->select->nselect : 0 };
	int rc = wsync_follow_connect(&w->hub, &co, o->models, o->nmodels, err);

	if (rc == 1)
		s_log(w, "%s", err->msg);
	return rc < 0 ? -1 : 0;
}

/* Removes temporary files a killed watcher left beside its outputs. */
static void
s_remove_leftovers(const wsync_watch_opts_t *o)
{
	for (int i = 0; i < o->nmodels; i++) {
		char pattern[4200];
		glob_t g;
		snprintf(pattern, sizeof(pattern), "%s.tmp.??????", o->paths[i]);
		if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0)
			continue;
		for (size_t j = 0; j < g.gl_pathc; j++)
			unlink(g.gl_pathv[j]);
		globfree(&g);
	}
}

static void
s_drop_temps(struct s_watch *w)
{
	for (int i = 0; i < w->o->nmodels; i++) {
		if (w->m[i].tmp != NULL)
			unlink(w->m[i].tmp);
		free(w->m[i].tmp);
		w->m[i].tmp = NULL;
	}
}

/*
 * Version v of model i could not be applied: never retry it, and tell the hub
 * why. With --once, the watcher ends with code: the version it was to apply
 * will not be.
 */
static void
s_failed(struct s_watch *w, int i, uint64_t v, int code, const char *reason)
{
	const wsync_report_t r = { .worker = w->o->worker, .model = w->o->models[i],
	    .version = v, .reason = reason[0] ? reason : "not applied" };
	wsync_err_t rerr;

	w->m[i].failed = v;
	if (!w->o->once)
		s_log(w, "%s version %" PRIu64 " not applied: %s", w->o->models[i], v, reason);
	else if (w->failure.code == 0)
		wsync_err_set(&w->failure, code, "%s version %" PRIu64 " not applied: %s",
		    w->o->models[i], v, r.reason);
	if (wsync_client_report(w->hub.client, &r, S_CALL_MS, &rerr) < 0)
		s_log(w, "cannot report %s version %" PRIu64 ": %s", w->o->models[i], v, rerr.msg);
}

/*
 * With keep, leases the version just put at model i's output (wsync(7),
 * LEASES), letting go of the one keep + 1 versions back: a hub that recycles
 * leaves the last keep versions alone for readers still on them.
 */
static void
s_lease(struct s_watch *w, int i)
{
	unsigned ring = w->o->keep + 1;
	int *held = w->m[i].leases;

	if (w->o->keep == 0)
		return;
	if (held[0] >= 0)
		close(held[0]);
	memmove(held, held + 1, (ring - 1) * sizeof(*held));
	if ((held[ring - 1] = wsync_lease_open(w->o->paths[i])) < 0)
		s_log(w, "%s: cannot lease: %s", w->o->paths[i], strerror(errno));
}

/* Keeps the worker alive at the hub while the apply callback runs long. */
static void
s_beat(void *ctx)
{
	struct s_watch *w = ctx;
	const wsync_follow_ask_t a = { .models = w->o->models, .n = w->o->nmodels,
	    .worker = w->o->worker, .m = w->m };
	wsync_follow_heads_t r;
	wsync_err_t ignored;

	wsync_follow_heads(&w->hub, &a, &r, S_CALL_MS, &ignored);
	wsync_follow_heads_free(&r);
}

/*
 * After a heads round: when the hub now keeps another store than the one the
 * applied versions came from, its numbers start over, so the watcher's do
 * too, and it takes the new store's head. The hubs of one tree (a root and its
 * relays) name the root's store as their origin and number alike: moving
 * between them changes nothing.
 */
static void
s_store_changed(struct s_watch *w, const char *now)
{
	if (w->store[0] == '\0' || strcmp(w->store, now) == 0) {
		snprintf(w->store, sizeof(w->store), "%s", now);
		return;
	}
	s_log(w, "the hub keeps another store (%s, was %s): following it from its first "
	    "version", now, w->store);
	snprintf(w->store, sizeof(w->store), "%s", now);
	for (int i = 0; i < w->o->nmodels; i++)
		w->m[i].applied = w->m[i].failed = 0;
}

/*
 * Verifying: refuses each fetched version whose signature, seq or push
 * partners do not hold (wsync_check_round); the hub hears why.
 */
static int
s_check_signed(struct s_watch *w, wsync_err_t *err)
{
	wsync_round_t round = { .models = w->o->models, .n = w->o->nmodels,
	    .keys = w->o->verify, .nkeys = w->o->nverify };

	if (wsync_check_round(&round, w->m) < 0) {
		s_drop_temps(w);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	for (int i = 0; i < w->o->nmodels; i++) {
		wsync_round_model_t *m = &w->m[i];
		if (m->tmp == NULL || m->why[0] == '\0')
			continue;
		unlink(m->tmp);
		free(m->tmp);
		m->tmp = NULL;
		s_failed(w, i, m->head.version, EX_DATAERR, m->why);
	}
	return 0;
}

/* Verifying with --max-age: says once a version when the signed one in place is older. */
static void
s_check_age(struct s_watch *w)
{
	for (int i = 0; i < w->o->nmodels && w->o->max_age_s > 0; i++) {
		const wsync_applied_t *a = &w->m[i].in_place;
		uint64_t age = wsync_applied_age_over(a, w->o->max_age_s);
		if (age == 0 || w->m[i].aged == a->seq)
			continue;
		w->m[i].aged = a->seq;
		s_log(w, "%s: the newest signed version (seq %" PRIu64 ") was signed %" PRIu64
		    " s ago, more than the maximum age of %d s: is the trainer or the hub stuck?",
		    w->o->models[i], a->seq, age, w->o->max_age_s);
	}
}

/*
 * One round: learn the heads (and beat), fetch every model that moved, put
 * them all in place, then apply and report each. With only >= 0 the round is
 * about that model alone, at the version an announcement described: no heads
 * request. -1 with err when the hub was lost (reconnect) or the watcher must
 * stop (err->code tells).
 */
static int
s_update(struct s_watch *w, int only, const wsync_head_t *announced, wsync_err_t *err)
{
	const wsync_watch_opts_t *o = w->o;
	const wsync_follow_ask_t a = { .models = o->models, .n = o->nmodels,
	    .worker = o->worker, .m = w->m };
	wsync_follow_heads_t r;
	int moved = 0;

	if (only >= 0)
		w->m[only].head = *announced;
	else {
		if (wsync_follow_heads(&w->hub, &a, &r, S_CALL_MS, err) < 0) {
			wsync_follow_heads_free(&r);
			return -1;
		}
		for (int i = 0; i < o->nmodels; i++)
			w->m[i].head = wsync_follow_head_of(r.heads, r.nheads, o->models[i]);
		wsync_follow_heads_free(&r);
		w->last_heads = wsync_now_ms();
		/* A restarted hub behind the same endpoint: hello again, subscribe anew. */
		if (r.from.hub[0] != '\0' && strcmp(r.from.hub, wsync_client_hub(w->hub.client)) != 0)
			return wsync_err_set(err, EX_TEMPFAIL, "hub %s answers in place of %s",
			    r.from.hub, wsync_client_hub(w->hub.client));
		/* A relay that does not know its tree yet cannot tell: nothing to judge. */
		if (r.from.origin[0] != '\0')
			s_store_changed(w, r.from.origin);
	}
	for (int i = 0; i < o->nmodels; i++) {
		wsync_round_model_t *m = &w->m[i];
		uint64_t v = m->head.version;
		/* The output holds the version applied last: the base of a delta to the head. */
		const wsync_fetch_temp_t f = { .what = { .model = o->models[i], .version = v,
		    .worker = o->worker, .base = o->no_delta ? NULL : o->paths[i] },
		    .known = &m->head, .beside = o->paths[i],
		    .recycle = o->recycle ? &m->spare : NULL, .select = o->select };
		wsync_fetched_t got;
		if ((only >= 0 && i != only) || v <= m->applied || v == m->failed)
			continue;
		if (wsync_client_fetch_temp(w->hub.client, &f, &m->tmp, &got, S_CALL_MS, err) < 0) {
			s_drop_temps(w);
			/* A version retired while we fetched it: the next round finds the newer one. */
			if (err->code == EX_NOINPUT)
				return 0;
			/* Bad bytes, or no room here: that version failed; the hub hears why. */
			if (err->code == EX_DATAERR || err->code == EX_IOERR) {
				s_failed(w, i, v, err->code, err->msg);
				return 0;
			}
			return -1;
		}
		if (got.delta_note[0] != '\0')
			s_log(w, "%s version %" PRIu64 " fetched whole: %s", o->models[i], v,
			    got.delta_note);
		m->head = got.head;
		m->transfer = got.transfer;
		if (o->select != NULL && o->select->nselect > 0 && m->transfer == WSYNC_TRANSFER_SOCKET)
			s_log(w, "%s version %" PRIu64 ": fetched %" PRIu64 " of %" PRIu64 " bytes "
			    "for the selection", o->models[i], v, got.asked, got.head.size);
		m->wire = got.wire;
		moved = 1;
	}
	if (!moved)
		return 0;
	if (o->nverify > 0 && s_check_signed(w, err) < 0)
		return -1;
	for (int i = 0; i < o->nmodels; i++) {
		wsync_round_model_t *m = &w->m[i];
		int rc;
		/* The file being replaced, when this watcher wrote it, is the next one's spare. */
		if (o->recycle && m->tmp != NULL && m->own)
			wsync_recycle_keep(&m->spare, o->paths[i]);
		rc = m->tmp != NULL ? rename(m->tmp, o->paths[i]) : 0;
		if (rc == 0 && m->tmp != NULL)
			m->own = m->transfer == WSYNC_TRANSFER_SOCKET ||
			    m->transfer == WSYNC_TRANSFER_DELTA;
		/* A link to the file the output already is: rename leaves the temporary name. */
		if (rc == 0 && m->tmp != NULL)
			unlink(m->tmp);
		if (rc < 0) {
			char why[WSYNC_MAX_REASON];
			snprintf(why, sizeof(why), "%s: cannot rename into place: %s", o->paths[i],
			    strerror(errno));
			for (int j = 0; j < o->nmodels; j++)
				if (w->m[j].tmp != NULL)
					s_failed(w, j, w->m[j].head.version, EX_IOERR, why);
			s_drop_temps(w);
			return 0;
		}
	}
	for (int i = 0; i < o->nmodels; i++) {
		wsync_round_model_t *m = &w->m[i];
		wsync_update_t u = { .model = o->models[i], .version = m->head.version,
		    .path = o->paths[i], .beat_ms = (int)wsync_client_heartbeat_ms(w->hub.client),
		    .beat = s_beat, .beat_ctx = w };
		wsync_report_t rep = { .worker = o->worker, .model = o->models[i],
		    .transfer = m->transfer, .wire = m->wire };
		wsync_err_t rerr;

		if (m->tmp == NULL)
			continue;
		free(m->tmp);
		m->tmp = NULL;
		s_lease(w, i);
		if (o->apply(o->arg, &u) < 0) {
			s_failed(w, i, u.version, 1, u.reason);
			continue;
		}
		m->applied = rep.version = u.version;
		if (o->nverify > 0)
			m->in_place = m->next;
		if (wsync_client_report(w->hub.client, &rep, S_CALL_MS, &rerr) < 0)
			s_log(w, "cannot report %s version %" PRIu64 ": %s", o->models[i], u.version,
			    rerr.msg);
	}
	return 0;
}

/* 1 when the announcement's list (nil: everyone) names this worker. */
static int
s_for_me(const msgpack_object *workers, const char *me)
{
	char id[WSYNC_MAX_ID + 1];

	if (workers == NULL || workers->type != MSGPACK_OBJECT_ARRAY)
		return 1;
	for (uint32_t i = 0; i < workers->via.array.size; i++)
		if (wsync_obj_str(&workers->via.array.ptr[i], id, sizeof(id)) == 0 &&
		    strcmp(id, me) == 0)
			return 1;
	return 0;
}

/*
 * Reads one announcement of model i: 0 when it brings nothing new for us, 1
 * when a full round is needed, 2 when it alone describes the update (then
 * *head is set). Only a watcher of one model may take the shortcut: for one
 * of several, a lost announcement of a commit of several of them would let it
 * take one model without the others.
 */
static int
s_announcement(struct s_watch *w, wsync_parts_t *p, int i, wsync_head_t *head)
{
	wsync_msg_t m;
	wsync_err_t ignored;
	int rc = 0;

	if (wsync_msg_decode(&m, wsync_part_data(p, 1), wsync_part_size(p, 1), &ignored) < 0) {
		wsync_msg_free(&m);
		return 1;
	}
	memset(head, 0, sizeof(*head));
	if (wsync_msg_u64(&m, "version", &head->version) < 0)
		rc = 1;
	else if (head->version <= w->m[i].applied || head->version == w->m[i].failed ||
	    !s_for_me(wsync_msg_get(&m, "workers"), w->o->worker))
		rc = 0;
	else if (w->o->nmodels > 1 || wsync_msg_u64(&m, "size", &head->size) < 0 ||
	    wsync_msg_u64(&m, "content", &head->content) < 0)
		rc = 1;
	else {
		wsync_msg_u64(&m, "mtime", &head->mtime);
		rc = 2;
	}
	wsync_msg_free(&m);
	return rc;
}

/*
 * Waits up to ms for announcements. 0: none that matters (time for a
 * heartbeat round); 1: a full round is needed; 2: model *only alone moved to
 * *head, as announced.
 */
static int
s_wait_announcement(struct s_watch *w, int ms, int *only, wsync_head_t *head)
{
	const wsync_watch_opts_t *o = w->o;
	int64_t deadline = wsync_now_ms() + ms;
	int64_t left;

	while ((left = deadline - wsync_now_ms()) > 0 && !*o->stop) {
		zmq_pollitem_t item;
		wsync_parts_t p;
		int news = 0, directs = 0;

		wsync_follow_item(&w->hub, &item);
		if (zmq_poll(&item, 1, (long)left) <= 0)
			continue;
		while (wsync_follow_news(&w->hub, &p) == 0) {
			for (int i = 0; p.n == 2 && i < o->nmodels; i++) {
				wsync_head_t h;
				int rc;
				if (wsync_part_size(&p, 0) != strlen(o->models[i]) ||
				    memcmp(wsync_part_data(&p, 0), o->models[i],
				    strlen(o->models[i])) != 0)
					continue;
				rc = s_announcement(w, &p, i, &h);
				if (rc == 2 && directs++ == 0) {
					*only = i;
					*head = h;
				} else if (rc != 0)
					news = 1;
			}
			wsync_parts_close(&p);
		}
		/* Several announcements at once: one full round covers them all. */
		if (news || directs > 1)
			return 1;
		if (directs == 1)
			return 2;
	}
	return 0;
}

/*
 * Moves to the next endpoint of a list (failover); 0 when there is no list.
 * The list starts over after its last, so a hub that comes back is found.
 */
static int
s_next_endpoint(struct s_watch *w, wsync_err_t *err)
{
	const wsync_watch_opts_t *o = w->o;
	int had = w->hub.endpoint[0] != '\0';

	if (o->nendpoints < 1 || (had && o->nendpoints == 1))
		return 0;
	if (wsync_follow_next(&w->hub, o->endpoints, o->nendpoints, 1, err) < 0)
		return -1;
	if (had)
		s_log(w, "trying the next hub, at %s", w->hub.endpoint);
	return 0;
}

/* --once -t: the bound passed with a model not applied; says which and why not. */
static int
s_once_timed_out(struct s_watch *w, wsync_err_t *err)
{
	const wsync_watch_opts_t *o = w->o;
	int i = 0;

	while (i < o->nmodels - 1 && w->m[i].applied > 0)
		i++;
	if (w->m[i].head.version == 0)
		return wsync_err_set(err, EX_TEMPFAIL, "%s: no version within %.1f s (the hub "
		    "at %s has none yet)", o->models[i], o->connect_timeout_ms / 1000.0,
		    w->hub.endpoint);
	return wsync_err_set(err, EX_TEMPFAIL, "%s: version %" PRIu64 " not applied within "
	    "%.1f s", o->models[i], w->m[i].head.version, o->connect_timeout_ms / 1000.0);
}

/*
 * Failed over to another hub of the list: 1 when the first answers again,
 * in the same tree, with every model at least at the version applied (going
 * back to it skips nothing). Looked at once every S_PROBE_MS, as a client
 * that is no worker, so the first hub counts none until the watcher is back.
 */
static int
s_first_back(struct s_watch *w)
{
	const wsync_watch_opts_t *o = w->o;
	const wsync_follow_ask_t a = { .models = o->models, .n = o->nmodels };
	wsync_follower_t first = { .client = NULL };
	wsync_follow_heads_t r = { .heads = NULL };
	wsync_err_t ignored;
	int back = 0;

	if (o->nendpoints < 2 || w->hub.next == 1 || wsync_now_ms() - w->last_probe < S_PROBE_MS)
		return 0;
	w->last_probe = wsync_now_ms();
	if (wsync_endpoint_resolve(o->endpoints[0], first.endpoint, sizeof(first.endpoint),
	    &ignored) < 0 ||
	    (first.client = wsync_client_new(&(wsync_client_opts_t){ .endpoint = first.endpoint,
	    .role = "pull", .timeout_ms = 500, .key = o->key, .hub_key = o->hub_key },
	    &ignored)) == NULL ||
	    wsync_follow_heads(&first, &a, &r, S_CALL_MS, &ignored) < 0)
		goto out;
	back = strcmp(r.from.origin, w->store) == 0;
	for (int i = 0; back && i < o->nmodels; i++)
		back = wsync_follow_head_of(r.heads, r.nheads, o->models[i]).version >=
		    w->m[i].applied;
out:
	wsync_follow_heads_free(&r);
	wsync_follow_disconnect(&first);
	return back;
}

static int
s_run(struct s_watch *w, wsync_err_t *err)
{
	const wsync_watch_opts_t *o = w->o;
	int64_t start = wsync_now_ms();
	/* --once -t: the bound is on the whole run, not on each silence of the hub. */
	const int64_t end = o->once && o->connect_timeout_ms ? start + o->connect_timeout_ms : 0;
	int waiting_said = 0, only = -1;
	int64_t beat;
	wsync_head_t announced = { 0 };

	while (!*o->stop) {
		if (w->hub.client == NULL) {
			int64_t left = o->connect_timeout_ms ?
			    start + o->connect_timeout_ms - wsync_now_ms() : S_RETRY_MS;
			if (left <= 0)
				return wsync_err_set(err, EX_UNAVAILABLE, "cannot reach %s after "
				    "%.1f s (is wsync-serve running?)", w->hub.endpoint,
				    o->connect_timeout_ms / 1000.0);
			if (s_connect(w, (int)(left < S_RETRY_MS ? left : S_RETRY_MS), err) < 0) {
				if (err->code != EX_UNAVAILABLE && err->code != EX_TEMPFAIL)
					return -1;
				if (!waiting_said++)
					s_log(w, "waiting for a hub at %s", w->hub.endpoint);
				if (s_next_endpoint(w, err) < 0)
					return -1;
				continue;
			}
			s_log(w, "connected to hub %s at %s, announcements from %s",
			    wsync_client_hub(w->hub.client), wsync_client_endpoint(w->hub.client),
			    wsync_client_pub(w->hub.client));
			if (wsync_client_twin(w->hub.client)[0] != '\0')
				s_log(w, "another watcher with id %s is connected to this hub (%s, this "
				    "one pid %ld): the hub counts the two as one worker; give each its "
				    "own id", o->worker, wsync_client_twin(w->hub.client),
				    (long)getpid());
			if (wsync_client_typos(w->hub.client)[0] != '\0')
				s_log(w, "no version yet of %s: waiting for one",
				    wsync_client_typos(w->hub.client));
			waiting_said = 0;
		}
		/* Announcements never replace the heartbeat round: one is due every beat. */
		if (only >= 0 && wsync_now_ms() - w->last_heads >=
		    wsync_client_heartbeat_ms(w->hub.client))
			only = -1;
		if (s_update(w, only, &announced, err) < 0) {
			if (*o->stop)
				break;
			if (err->code != EX_TEMPFAIL && err->code != EX_UNAVAILABLE &&
			    err->code != EX_PROTOCOL && err->code != EX_IOERR)
				return -1;
			s_log(w, "lost the hub (%s); reconnecting", err->msg);
			wsync_follow_disconnect(&w->hub);
			if (s_next_endpoint(w, err) < 0)
				return -1;
			if (end == 0)
				start = wsync_now_ms();
			only = -1;
			continue;
		}
		only = -1;
		if (s_first_back(w)) {
			s_log(w, "the first hub, at %s, is back with the versions applied: going back "
			    "to it", o->endpoints[0]);
			wsync_follow_disconnect(&w->hub);
			w->hub.next = 0;
			if (s_next_endpoint(w, err) < 0)
				return -1;
			continue;
		}
		if (o->nverify > 0)
			s_check_age(w);
		for (int i = 0; i < o->nmodels; i++) {
			const wsync_round_model_t *m = &w->m[i];
			if (o->max_lag && m->head.version > m->applied + o->max_lag)
				return wsync_err_set(err, EX_TEMPFAIL, "%s: applied version %" PRIu64
				    " is %" PRIu64 " behind the head %" PRIu64 " (more than %" PRIu64 ")",
				    o->models[i], m->applied, m->head.version - m->applied,
				    m->head.version, o->max_lag);
		}
		if (o->once) {
			int all = 1;
			if (w->failure.code != 0) {
				*err = w->failure;
				return -1;
			}
			for (int i = 0; i < o->nmodels; i++)
				all &= w->m[i].applied > 0;
			if (all)
				return 0;
			if (end != 0 && wsync_now_ms() >= end)
				return s_once_timed_out(w, err);
		}
		beat = wsync_client_heartbeat_ms(w->hub.client);
		if (end != 0 && end - wsync_now_ms() < beat)
			beat = end - wsync_now_ms();
		if (s_wait_announcement(w, (int)beat, &only, &announced) != 2)
			only = -1;
	}
	return 0;
}

int
wsync_watch_run(const wsync_watch_opts_t *o, wsync_err_t *err)
{
	struct s_watch w = { .o = o };
	int rc = -1;

	if ((w.m = calloc((size_t)o->nmodels, sizeof(*w.m))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (int i = 0; o->keep > 0 && i < o->nmodels; i++) {
		if ((w.m[i].leases = malloc((o->keep + 1) * sizeof(*w.m[i].leases))) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
		for (unsigned j = 0; j < o->keep + 1; j++)
			w.m[i].leases[j] = -1;
	}
	s_remove_leftovers(o);
	/* The seq last applied is the one the output holds: it outlives the watcher. */
	for (int i = 0; o->nverify > 0 && i < o->nmodels; i++)
		wsync_applied_read(o->paths[i], &w.m[i].in_place);
	if (o->nendpoints > 0 ? s_next_endpoint(&w, err) == 0 :
	    wsync_endpoint_resolve(o->endpoint, w.hub.endpoint, sizeof(w.hub.endpoint), err) == 0)
		rc = s_run(&w, err);
	if (w.hub.client != NULL) {
		wsync_err_t ignored;
		wsync_client_bye(w.hub.client, o->worker, 500, &ignored);
	}
out:
	wsync_follow_disconnect(&w.hub);
	if (w.m != NULL)
		s_drop_temps(&w);
	for (int i = 0; w.m != NULL && i < o->nmodels; i++) {
		wsync_round_model_t *m = &w.m[i];
		for (unsigned j = 0; m->leases != NULL && j < o->keep + 1; j++)
			if (m->leases[j] >= 0)
				close(m->leases[j]);
		free(m->leases);
		wsync_recycle_clear(&m->spare);
	}
	free(w.m);
	return rc;
}
