/*
 * hub_place.c - a root places the relays that report to it: one chain, in the
 * order they came, each taking every version from the one before it (wsync(7),
 * RELAYS, for why a chain and what it costs).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "hub_int.h"

/* A relay's place in the chain: from the relays' reports (op subtree). */
struct hub_place {
	char relay[WSYNC_MAX_ID + 1];   /* its name, as it reports */
	char endpoint[512];             /* where it is reached (its advertise) */
	char key[64];                   /* its hub's public key (Z85), as it says; "": none */
	char client[64];                /* the key it connects with (Z85), as CURVE says; "": none */
	int64_t seen;                   /* monotonic ms of its last report */
	uint64_t rate;                  /* bytes/s of its last large fetch; 0: not said */
	char rate_from[512];            /* the endpoint that fetch came from; "": not said */
	int rate_here;                  /* that fetch came from this hub, as the relay says */
	int64_t rate_ms;                /* monotonic ms when it was measured, as the relay says */
	int slow;                       /* a third of its parent's rate or less: last in line */
	int proven;                     /* its rate from this hub was set beside another's (s_probe) */
	uint64_t probe_from;            /* this hub's commits when its probe began */
	int64_t probe_ms;               /* monotonic ms when its probe began; 0: none under way */
	int bad;                        /* one below lost it or got bad bytes: parent of none */
	int shared;                     /* another place says its endpoint: parent of none */
	char told[512];                 /* the parent it was told last; "": this hub */
	char told_relay[WSYNC_MAX_ID + 1]; /* that parent's name: a relay since at its endpoint is not it */
};

/* Takes place i out of the chain, the others keeping their order (s_chain's). */
static struct hub_place
s_take(wsync_hub_t *h, size_t i)
{
	struct hub_place p = h->places[i];

	memmove(&h->places[i], &h->places[i + 1], (h->nplaces - 1 - i) * sizeof(h->places[0]));
	h->nplaces--;
	return p;
}

/*
 * Marks the places whose endpoint another place says too (after any place
 * came, went or moved). One that says it alone now (the relay that was
 * there before it went: a relay restarted on its endpoint) goes to the end
 * of the chain, where a relay that comes goes: put back where it first came,
 * it would take its place above relays that are further on in the version
 * flowing, and starve them.
 */
static void
s_mark_shared(wsync_hub_t *h)
{
	for (size_t i = 0; i < h->nplaces; i++) {
		int was = h->places[i].shared;
		h->places[i].shared = 0;
		for (size_t j = 0; j < h->nplaces && !h->places[i].shared; j++)
			h->places[i].shared = j != i &&
			    strcmp(h->places[j].endpoint, h->places[i].endpoint) == 0;
		if (was && !h->places[i].shared && i + 1 < h->nplaces) {
			struct hub_place p = s_take(h, i);
			h->places[h->nplaces++] = p;
			i--;
		}
	}
}

/*
 * Forgets the places that one below lost (or got bad bytes from) and whose
 * endpoint a relay heard from since says: a relay restarted there, where the
 * lost one was. Without this the new one would feed none until the dead
 * one's silence ran out (HUB_PLACE_ALIVE_MS), and be placed meanwhile behind
 * every other, a slow relay included. A lost relay that lives after all (an
 * ipc path or a loopback address on two hosts) comes back with its next
 * report, as a new place, and the two then feed none (s_mark_shared); never
 * the relay reporting (reporting). 1 when one was forgotten.
 */
static int
s_forget_replaced(wsync_hub_t *h, const char *reporting)
{
	int forgot = 0;

	for (size_t i = 0; i < h->nplaces; i++) {
		size_t j = 0;
		/* Not the relay that reports now: it is alive, whatever it shares. */
		if (!h->places[i].bad || strcmp(h->places[i].relay, reporting) == 0)
			continue;
		while (j < h->nplaces && (j == i || h->places[j].bad ||
		    h->places[j].seen < h->places[i].seen ||
		    strcmp(h->places[j].endpoint, h->places[i].endpoint) != 0))
			j++;
		if (j == h->nplaces)
			continue;
		hub_log(h, "event=relay-gone relay=%s endpoint=%s reason=\"lost, and %s says its "
		    "endpoint since\"", h->places[i].relay, h->places[i].endpoint,
		    h->places[j].relay);
		(void)s_take(h, i);
		forgot = 1;
		i--;
	}
	return forgot;
}

/* Forgets the relays not heard from within HUB_PLACE_ALIVE_MS of now. */
static void
s_expire(wsync_hub_t *h, int64_t now)
{
	size_t kept = 0;

	for (size_t i = 0; i < h->nplaces; i++) {
		if (now - h->places[i].seen <= HUB_PLACE_ALIVE_MS)
			h->places[kept++] = h->places[i];
		else
			hub_log(h, "event=relay-gone relay=%s endpoint=%s", h->places[i].relay,
			    h->places[i].endpoint);
	}
	if (kept < h->nplaces) {
		h->nplaces = kept;
		s_mark_shared(h);
	}
}

/*
 * Whether place i may feed no relay: one below lost it or got bad bytes from
 * it, or another relay says the same endpoint (an ipc path or a loopback
 * address on two hosts), where each relay would reach only itself.
 */
static int
s_no_parent(const wsync_hub_t *h, size_t i)
{
	return h->places[i].bad || h->places[i].shared;
}

/*
 * The chain: the indexes of the places, in the order the versions flow,
 * into order (h->nplaces of them); how many of them may be parents. The
 * relays that came first lead, slow ones follow them, those that may feed
 * none (s_no_parent) are last.
 */
static size_t
s_chain(const wsync_hub_t *h, size_t *order)
{
	size_t n = 0, parents;

	for (size_t i = 0; i < h->nplaces; i++)
		if (!h->places[i].slow && !s_no_parent(h, i))
			order[n++] = i;
	for (size_t i = 0; i < h->nplaces; i++)
		if (h->places[i].slow && !s_no_parent(h, i))
			order[n++] = i;
	parents = n;
	for (size_t i = 0; i < h->nplaces; i++)
		if (s_no_parent(h, i))
			order[n++] = i;
	return parents;
}

/*
 * Whether the chain's head is probed: not proven (s_probe) nor slow (every
 * relay is), with a second that may feed relays, fed by this hub meanwhile.
 */
static int
s_probing(const wsync_hub_t *h, const size_t *order, size_t parents)
{
	return parents >= 2 && !h->places[order[0]].proven && !h->places[order[0]].slow;
}

/*
 * The parent of the place at position at of a chain: its index in
 * h->places, or -1 for this hub. The second place takes versions from this
 * hub too while the first is probed: a relay fed by a slow one takes in no
 * faster than it, and only one fed beside it shows it slow.
 */
static long
s_parent_at(const wsync_hub_t *h, const size_t *order, size_t parents, size_t at)
{
	/* A bad relay takes what it can from the last good one; it passes nothing on. */
	if (at >= parents)
		return parents > 0 ? (long)order[parents - 1] : -1;
	if (at == 1 && s_probing(h, order, parents))
		return -1;
	return at > 0 ? (long)order[at - 1] : -1;
}

/*
 * Whether place i lets in the relay at position at: it feeds it, or it heads
 * a probed chain and at is the second, which goes under it once it is
 * proven and must not then be refused (and wait a heartbeat to try again).
 */
static int
s_lets_in(const wsync_hub_t *h, const size_t *order, size_t parents, size_t at, size_t i)
{
	return s_parent_at(h, order, parents, at) == (long)i ||
	    (at == 1 && order[0] == i && s_probing(h, order, parents));
}

/* The parent of place i: its index in h->places, or -1 for this hub. */
static long
s_parent_of(const wsync_hub_t *h, size_t i)
{
	size_t order[HUB_PLACES], parents = s_chain(h, order), at = 0;

	while (order[at] != i)
		at++;
	return s_parent_at(h, order, parents, at);
}

/* The place of relay (made when new, at the end); NULL when there are HUB_PLACES already. */
static struct hub_place *
s_place(wsync_hub_t *h, const char *relay, const char *endpoint)
{
	struct hub_place *p;

	for (size_t i = 0; i < h->nplaces; i++)
		if (strcmp(h->places[i].relay, relay) == 0)
			return &h->places[i];
	if (h->nplaces == HUB_PLACES)
		return NULL;
	p = &h->places[h->nplaces++];
	memset(p, 0, sizeof(*p));
	snprintf(p->relay, sizeof(p->relay), "%s", relay);
	hub_log(h, "event=relay-join relay=%s endpoint=%s", relay, endpoint);
	return p;
}

/*
 * Marks relay, reached at endpoint, as a parent of none: one below it lost
 * it. Not another relay at that endpoint since (one restarted there).
 */
static void
s_lost(wsync_hub_t *h, const char *endpoint, const char *relay, const char *by)
{
	for (size_t i = 0; i < h->nplaces; i++)
		if (strcmp(h->places[i].endpoint, endpoint) == 0 &&
		    strcmp(h->places[i].relay, relay) == 0 && !h->places[i].bad) {
			h->places[i].bad = 1;
			hub_log(h, "event=relay-drop relay=%s endpoint=%s by=%s", h->places[i].relay,
			    endpoint, by);
		}
}

/*
 * Whether place p, at rate, is slow: under a third of what the relay it
 * fetched from took in (or its parent's, or under the root the fastest
 * one's). A relay fed by a slow one took in no faster than that one: it is
 * measured against what fed it, not against the parent it has since.
 */
static int
s_slow(const wsync_hub_t *h, const struct hub_place *p, long parent)
{
	const struct hub_place *from = NULL;
	uint64_t best = 0;

	if (p->rate == 0)
		return 0;
	/* Of two places saying that endpoint, the one heard from last is the relay there now. */
	for (size_t i = 0; i < h->nplaces && p->rate_from[0] != '\0'; i++)
		if (&h->places[i] != p && strcmp(h->places[i].endpoint, p->rate_from) == 0 &&
		    (from == NULL || h->places[i].seen > from->seen))
			from = &h->places[i];
	if (from != NULL)
		return p->rate < from->rate / 3;
	if (parent >= 0)
		best = h->places[parent].rate;
	else
		for (size_t i = 0; i < h->nplaces; i++)
			if (&h->places[i] != p && h->places[i].rate > best)
				best = h->places[i].rate;
	return p->rate < best / 3;
}

/* Whether place p said the rate of a fetch from this hub (the relay says so). */
static int
s_rate_here(const struct hub_place *p)
{
	return p->rate != 0 && p->rate_here;
}

/*
 * The probe (wsync(7), Placement): the head of the chain, once it said a
 * rate of a fetch from this hub, is set beside the fastest other relay that
 * said one measured within HUB_PROBE_SAME_MS of it (the second, fed by this
 * hub meanwhile, as a rule: the same version). Under a third of that rate,
 * it is slow and goes to the end; else it is proven, and the second goes
 * back under it. The other is proven too unless it is the slower by that
 * much, so that it may head the chain in its turn without a probe of its
 * own. A head that no such pair of rates judged while HUB_PROBE_VERSIONS
 * versions were committed (small ones, deltas: neither measures a link) and
 * 3 seconds passed is proven as it is, and this hub feeds the second no more.
 */
static void
s_probe(wsync_hub_t *h)
{
	size_t order[HUB_PLACES], parents = s_chain(h, order);
	struct hub_place *head, *beside = NULL;
	uint64_t commits = h->counts.commits;
	int64_t now = wsync_now_ms();
	int probing = s_probing(h, order, parents);

	/* A probe begins anew for a head probed again (a second came back, a place moved). */
	for (size_t i = 0; i < h->nplaces; i++)
		if (!probing || i != order[0])
			h->places[i].probe_ms = 0;
	if (!probing)
		return;
	head = &h->places[order[0]];
	if (head->probe_ms == 0) {
		head->probe_from = commits;
		head->probe_ms = now;
	}
	for (size_t i = 0; i < h->nplaces && s_rate_here(head); i++) {
		const struct hub_place *p = &h->places[i];
		if (p != head && !p->bad && s_rate_here(p) &&
		    llabs(p->rate_ms - head->rate_ms) <= HUB_PROBE_SAME_MS &&
		    (beside == NULL || p->rate > beside->rate))
			beside = &h->places[i];
	}
	/*
	 * Not before its rates could have come: commits count each model of a
	 * push, and the head tells its rate a fifth of a second into a version.
	 */
	if (beside == NULL) {
		if (commits - head->probe_from < HUB_PROBE_VERSIONS ||
		    now - head->probe_ms < HUB_PROBE_SAME_MS + WSYNC_HEARTBEAT_MS)
			return;
		head->proven = 1;
		hub_log(h, "event=relay-probe relay=%s reason=\"no rate beside it over %d versions: "
		    "it keeps its place\"", head->relay, HUB_PROBE_VERSIONS);
		return;
	}
	hub_log(h, "event=relay-probe relay=%s rate=%" PRIu64 " beside=%s beside_rate=%" PRIu64,
	    head->relay, head->rate, beside->relay, beside->rate);
	if (head->rate < beside->rate / 3) {
		head->slow = 1;
		hub_log(h, "event=relay-slow relay=%s rate=%" PRIu64, head->relay, head->rate);
	} else {
		head->proven = 1;
	}
	if (beside->rate >= head->rate / 3)
		beside->proven = 1;
}

/* Packs "admit": the client keys of the relays placed under place i (none: nothing); 1 or 0. */
static size_t
s_pack_admit(const wsync_hub_t *h, size_t i, wsync_enc_t *e, int pack)
{
	size_t order[HUB_PLACES], parents = s_chain(h, order), n = 0;

	for (size_t at = 0; at < h->nplaces; at++)
		n += h->places[order[at]].client[0] != '\0' && s_lets_in(h, order, parents, at, i);
	if (!pack || n == 0)
		return n > 0;
	wsync_enc_str(e, "admit");
	msgpack_pack_array(&e->pk, n);
	for (size_t at = 0; at < h->nplaces; at++)
		if (h->places[order[at]].client[0] != '\0' && s_lets_in(h, order, parents, at, i))
			wsync_enc_str(e, h->places[order[at]].client);
	return 1;
}

/* Forgets relay, which said it stops (its last report, with leaving). */
static void
s_leave(wsync_hub_t *h, const char *relay)
{
	for (size_t i = 0; i < h->nplaces; i++)
		if (strcmp(h->places[i].relay, relay) == 0) {
			hub_log(h, "event=relay-leave relay=%s endpoint=%s", relay,
			    h->places[i].endpoint);
			(void)s_take(h, i);
			s_mark_shared(h);
			return;
		}
}

int
hub_place_reply(wsync_hub_t *h, const struct hub_req *r, const char *relay, wsync_enc_t *e,
    wsync_err_t *err)
{
	char endpoint[512], lost[512], key[64], rate_from[512];
	size_t order[HUB_PLACES], parents;
	int64_t now = wsync_now_ms();
	uint64_t rate = 0, rate_age = 0;
	int leaving = 0, rate_root = 0, probed;
	struct hub_place *p;
	long at;
	size_t i;

	if (hub_str(r, "advertise", 1, NULL, endpoint, sizeof(endpoint), err) < 0 ||
	    hub_str(r, "advertise_key", 0, NULL, key, sizeof(key), err) < 0 ||
	    hub_str(r, "lost", 0, NULL, lost, sizeof(lost), err) < 0 ||
	    hub_u64(r, "rate", 0, &rate, err) < 0 ||
	    hub_str(r, "rate_from", 0, NULL, rate_from, sizeof(rate_from), err) < 0 ||
	    hub_bool(r, "rate_root", &rate_root, err) < 0 ||
	    hub_u64(r, "rate_age", 0, &rate_age, err) < 0 ||
	    hub_bool(r, "leaving", &leaving, err) < 0)
		return -1;
	if (h->places == NULL && (h->places = calloc(HUB_PLACES, sizeof(*h->places))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	s_expire(h, now);
	if (leaving) {
		s_leave(h, relay);
		hub_ok(e, r->id, 0);
		return 0;
	}
	if ((p = s_place(h, relay, endpoint)) == NULL)
		return wsync_err_set(err, EX_UNAVAILABLE, "this hub places %d relays at most: %s "
		    "takes versions from it directly", HUB_PLACES, relay);
	if (strcmp(p->endpoint, endpoint) != 0) {
		snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
		p->seen = now;
		(void)s_forget_replaced(h, relay);
		s_mark_shared(h);
		/* Marking may have moved places to the chain's end: this one is found again. */
		p = s_place(h, relay, endpoint);
		if (p->shared)
			hub_log(h, "event=relay-shared relay=%s endpoint=%s reason=\"another relay "
			    "says this endpoint: it feeds none\"", relay, endpoint);
	}
	snprintf(p->key, sizeof(p->key), "%s", key);
	wsync_auth_key_of(h->auth, &r->parts->part[2], p->client, sizeof(p->client));
	p->seen = now;
	if (rate != 0) {
		p->rate = rate;
		snprintf(p->rate_from, sizeof(p->rate_from), "%s", rate_from);
		/* Measured before this hub's clock began (its host restarted): not set beside any. */
		p->rate_here = rate_root && rate_age < (uint64_t)now;
		p->rate_ms = p->rate_here ? now - (int64_t)rate_age : 0;
	}
	/* Only the parent this hub told the relay last is one it can say it lost. */
	if (lost[0] != '\0' && strcmp(p->told, lost) == 0) {
		s_lost(h, lost, p->told_relay, relay);
		if (s_forget_replaced(h, relay)) {
			s_mark_shared(h);
			p = s_place(h, relay, endpoint);
		}
	}
	i = (size_t)(p - h->places);
	at = s_parent_of(h, i);
	if (!p->slow && !p->bad && s_slow(h, p, at)) {
		p->slow = 1;
		hub_log(h, "event=relay-slow relay=%s rate=%" PRIu64, relay, rate);
	}
	s_probe(h);
	at = s_parent_of(h, i);
	/* Probed: the head, or the second fed beside it (each tells its rate soon, then reports often). */
	parents = s_chain(h, order);
	probed = s_probing(h, order, parents) && (order[0] == i || order[1] == i);
	/* With keys: the parent's key for this relay, and the keys this one lets in. */
	hub_ok(e, r->id, 1 + (at >= 0 && h->places[at].key[0] != '\0') +
	    s_pack_admit(h, i, e, 0) + probed);
	wsync_enc_kv_str(e, "parent", at >= 0 ? h->places[at].endpoint : "");
	if (probed)
		wsync_enc_kv_bool(e, "probe", 1);
	snprintf(p->told, sizeof(p->told), "%s", at >= 0 ? h->places[at].endpoint : "");
	snprintf(p->told_relay, sizeof(p->told_relay), "%s", at >= 0 ? h->places[at].relay : "");
	if (at >= 0 && h->places[at].key[0] != '\0')
		wsync_enc_kv_str(e, "parent_key", h->places[at].key);
	s_pack_admit(h, i, e, 1);
	return 0;
}

size_t
hub_place_expire(wsync_hub_t *h)
{
	s_expire(h, wsync_now_ms());
	return h->nplaces;
}

void
hub_place_pack(const wsync_hub_t *h, wsync_enc_t *e)
{
	size_t order[HUB_PLACES], n = h->nplaces, parents = s_chain(h, order);

	wsync_enc_str(e, "relays");
	msgpack_pack_array(&e->pk, n);
	for (size_t i = 0; i < n; i++) {
		const struct hub_place *p = &h->places[order[i]];
		long at = s_parent_at(h, order, parents, i);
		msgpack_pack_map(&e->pk, 6);
		wsync_enc_kv_str(e, "relay", p->relay);
		wsync_enc_kv_str(e, "endpoint", p->endpoint);
		wsync_enc_kv_str(e, "parent", at >= 0 ? h->places[at].endpoint : "");
		wsync_enc_kv_u64(e, "rate", p->rate);
		wsync_enc_kv_bool(e, "slow", p->slow);
		wsync_enc_kv_bool(e, "bad", p->bad);
	}
}

void
hub_place_free(wsync_hub_t *h)
{
	free(h->places);
	h->places = NULL;
	h->nplaces = 0;
}
