/* hub_relay.c - a relay's hub side: starting its thread (relay_follow.c), committing what it hands over. */
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

#include "hub_int.h"
#include "relay_int.h"
#include "tempfile_int.h"

#define S_INPROC "inproc://wsync-relay-%p"

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

/*
 * Keeps origin as the tree's root, in memory and in STORE/.origin (so a
 * restart keeps it); a file that cannot be written is logged.
 */
static void
s_origin_set(wsync_hub_t *h, const char *origin)
{
	char path[PATH_MAX], quoted[2200];
	wsync_err_t err;

	if (origin[0] == '\0' || strcmp(origin, h->origin) == 0)
		return;
	snprintf(h->origin, sizeof(h->origin), "%s", origin);
	snprintf(path, sizeof(path), "%s/.origin", wsync_store_dir(h->store));
	if (wsync_temp_write_text(path, origin, 0600, &err) < 0)
		hub_log(h, "event=relay-origin error=\"%s\"", wsync_log_quote(err.msg, quoted,
		    sizeof(quoted)));
}

/*
 * Where downstream relays reach this hub (wsync_hub_opts_t's advertise):
 * as given, else the first endpoint naming a host, else the first ipc one.
 */
static void
s_advertise(struct hub_relay *rl, const wsync_hub_opts_t *o)
{
	const char *ipc = NULL;

	if (o->advertise != NULL) {
		snprintf(rl->advertise, sizeof(rl->advertise), "%s", o->advertise);
		return;
	}
	for (int i = 0; i < o->nendpoints; i++) {
		const char *e = o->endpoints[i];
		if (strncmp(e, "tcp://", 6) == 0 && strncmp(e + 6, "*:", 2) != 0 &&
		    strncmp(e + 6, "0.0.0.0:", 8) != 0 && strncmp(e + 6, "[::]:", 5) != 0 &&
		    strchr(e + 6, '*') == NULL) {
			snprintf(rl->advertise, sizeof(rl->advertise), "%s", e);
			return;
		}
		if (ipc == NULL && strncmp(e, "ipc://", 6) == 0)
			ipc = e;
	}
	snprintf(rl->advertise, sizeof(rl->advertise), "%s", ipc != NULL ? ipc : "");
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
	s_advertise(rl, o);
	snprintf(rl->advertise_key, sizeof(rl->advertise_key), "%s", wsync_auth_public(h->auth));
	snprintf(rl->name, sizeof(rl->name), "%s", h->name);
	snprintf(rl->store, sizeof(rl->store), "%s", wsync_store_dir(h->store));
	snprintf(rl->beside, sizeof(rl->beside), "%s/.uploads/relay", wsync_store_dir(h->store));
	/* What the store has: the thread mirrors only what is newer. */
	for (size_t i = 0; i < wsync_store_count(h->store); i++) {
		const wsync_model_t *m = wsync_store_model(h->store, i);
		struct relay_have *have = relay_have(rl, m->id);
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
	if ((errno = pthread_create(&rl->thread, NULL, relay_follow, rl)) != 0)
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
	rl->stop = rl->halt = 1;
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
		relay_fetched_drop(rl, rl->nfetched - 1);
	free(rl->group);
	free(rl->report);
	free(rl->admitted);
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
	/* What holds, and what would change it: the relay's list of models. */
	if (rl->models == NULL)
		wsync_err_set(err, EX_NOPERM, "model %s: this relay mirrors every model of the "
		    "upstream %s, ones it has no version of too: push it there, or start the "
		    "relay naming the models it mirrors, and push the others here", model,
		    rl->upstreams[0]);
	else
		wsync_err_set(err, EX_NOPERM, "model %s: this relay mirrors it from the upstream "
		    "%s, as it was told to: push it there", model, rl->upstreams[0]);
	return 1;
}

/*
 * The deltas the versions of group came as, served on as they came to the
 * watchers and relays below on their base (wsync(7) RELAYS). Their files
 * are the thread's: it removes them once the commit is answered.
 */
static void
s_adopt(wsync_hub_t *h, const relay_hand_over_t *group, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int fd;
		if (group[i].delta[0] == '\0')
			continue;
		if ((fd = open(group[i].delta, O_RDONLY | O_CLOEXEC)) >= 0) {
			hub_delta_adopt(h, group[i].model, group[i].base, group[i].version, &fd, 1);
			close(fd);
		}
	}
}

/*
 * Commits the n versions of group the thread fetched together, as its
 * upstream committed them, with the upstream's numbers, and announces them
 * as one group.
 */
static int
s_commit(wsync_hub_t *h, const relay_hand_over_t *group, size_t n, wsync_err_t *err)
{
	wsync_store_temp_t *t = calloc(n, sizeof(*t));
	wsync_committed_t *out = calloc(n, sizeof(*out));
	uint64_t *versions = calloc(n, sizeof(*versions));
	wsync_commit_info_t info = { .pusher = "", .time = wsync_wall_time(), .trust = 1 };
	const char *upstream = group[0].upstream[0] != '\0' ? group[0].upstream :
	    h->relay->upstreams[0];
	size_t opened = 0;
	int rc = -1;

	if (t == NULL || out == NULL || versions == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (; opened < n; opened++) {
		snprintf(t[opened].model, sizeof(t[opened].model), "%s", group[opened].model);
		snprintf(t[opened].path, sizeof(t[opened].path), "%s", group[opened].path);
		versions[opened] = group[opened].version;
		if ((t[opened].fd = open(t[opened].path, O_RDWR | O_CLOEXEC)) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: %s", t[opened].path, strerror(errno));
			goto out;
		}
	}
	/* Verified by the fetch already: hashing it again would double the relay's work. */
	info.versions = versions;
	if (wsync_store_commit(h->store, t, n, &info, out, err) < 0)
		goto out;
	rc = 0;
	opened = 0;
	s_origin_set(h, group[0].origin);
	for (size_t i = 0; i < n; i++)
		hub_log(h, "event=commit model=%s version=%" PRIu64 " size=%" PRIu64 " content=%016"
		    PRIx64 " pusher=- relay=%s", out[i].model, out[i].version, out[i].size,
		    out[i].content, upstream);
	for (size_t i = 0; i < n; i++)
		hub_announce(h, &out[i], t, n, NULL, 0);
	for (size_t i = 0; i < n; i++)
		hub_waits_check(h, out[i].model);
	s_adopt(h, group, n);
out:
	for (size_t i = 0; i < opened; i++)
		close(t[i].fd);
	free(t);
	free(out);
	free(versions);
	return rc;
}

/* The thread's word that a version it fetches will not arrive. */
static void
s_dropped(wsync_hub_t *h, const wsync_msg_t *m)
{
	relay_dropped_t d;

	if (relay_unpack(m, RELAY_MSG_DROPPED, &d) == 0 && hub_arrive_has(h, d.model, d.version))
		hub_arrive_end(h, (int)d.code, d.error);
}

/* The thread's word on how much of the version it fetches is in. */
static void
s_arriving(wsync_hub_t *h, const wsync_msg_t *m)
{
	relay_arriving_t a;

	if (relay_unpack(m, RELAY_MSG_ARRIVING, &a) < 0)
		return;
	if (!hub_arrive_has(h, a.model, a.v.version))
		hub_arrive_begin(h, a.model, &a.v, a.path);
	hub_arrive_progress(h, a.upto);
}

/*
 * Keeps a version the thread handed over (m); once the last of its group
 * came, commits them together and answers the thread.
 */
static void
s_hand_over(wsync_hub_t *h, const wsync_msg_t *m)
{
	struct hub_relay *rl = h->relay;
	relay_hand_over_t o;
	relay_reply_t r = { .ok = 0 };
	wsync_err_t err = { 0 };
	char quoted[2200];
	wsync_enc_t e;
	int decoded = relay_unpack(m, RELAY_MSG_HAND_OVER, &o) == 0;

	if (rl->group == NULL && (rl->group = calloc(RELAY_GROUP_MAX, sizeof(*rl->group))) == NULL)
		decoded = 0;
	if (decoded && o.index != rl->ngroup)
		rl->ngroup = 0;
	if (decoded && o.index == rl->ngroup && rl->ngroup < RELAY_GROUP_MAX)
		rl->group[rl->ngroup++] = o;
	if (decoded && o.index + 1 < o.count)
		return;
	if (!decoded || rl->ngroup == 0)
		wsync_err_set(&err, EX_SOFTWARE, "relay: a hand-over that does not decode");
	r.ok = decoded && rl->ngroup > 0 && s_commit(h, rl->group, rl->ngroup, &err) == 0;
	if (!r.ok)
		hub_log(h, "event=relay-refuse error=\"%s\"", wsync_log_quote(err.msg,
		    quoted, sizeof(quoted)));
	/* Committed, the version is served from the store; refused, nowhere. */
	for (size_t i = 0; decoded && i < rl->ngroup; i++)
		if (hub_arrive_has(h, rl->group[i].model, rl->group[i].version))
			hub_arrive_end(h, r.ok ? 0 : EX_DATAERR, err.msg);
	rl->ngroup = 0;
	snprintf(r.error, sizeof(r.error), "%s", err.msg);
	wsync_enc_init(&e);
	relay_reply_pack(&e, &r);
	relay_send(h->relay_pair, RELAY_MSG_REPLY, &e, ZMQ_DONTWAIT);
}

/* The thread's word on the relays the root placed under this one: their keys get in. */
static void
s_admit(wsync_hub_t *h, const wsync_msg_t *m)
{
	char **keys = NULL;
	size_t n = 0;
	wsync_err_t err;

	if (h->auth == NULL || hub_list(wsync_msg_get(m, "keys"), "keys", 1, wsync_id_check, &keys,
	    &n, &err) < 0)
		return;
	if (wsync_auth_admit(h->auth, keys, n) == 0)
		hub_log(h, "event=relay-admit keys=%zu", n);
	hub_strv_free(keys, n);
}

void
hub_relay_serve(wsync_hub_t *h)
{
	enum relay_msg_kind k;
	wsync_parts_t p;
	wsync_msg_t m;

	while ((k = relay_recv(h->relay_pair, &p, &m)) != RELAY_MSG_NONE) {
		if (k == RELAY_MSG_ARRIVING)
			s_arriving(h, &m);
		else if (k == RELAY_MSG_DROPPED)
			s_dropped(h, &m);
		else if (k == RELAY_MSG_HAND_OVER)
			s_hand_over(h, &m);
		else if (k == RELAY_MSG_ADMIT)
			s_admit(h, &m);
		wsync_msg_free(&m);
		wsync_parts_close(&p);
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
	relay_send(h->relay_pair, RELAY_MSG_REPORT, &e, ZMQ_DONTWAIT);
}
