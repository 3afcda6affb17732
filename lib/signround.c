/* signround.c - a round of several models fetched by a verifying worker: each signed and newer, one push's models together. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signcheck_int.h"
#include "signround_int.h"

/*
 * Model i's manifest ms lists another watched model j at a content that is
 * not the one j has once the round is done: the reason into m[i].why; 1 when so.
 */
static int
s_mixed(const wsync_round_t *o, int i, const wsync_manifest_t *ms, wsync_round_model_t *m)
{
	for (int j = 0; j < o->n; j++) {
		const wsync_signed_model_t *entry = wsync_manifest_find(ms, o->models[j]);
		int coming = m[j].tmp != NULL && m[j].why[0] == '\0';
		uint64_t have = coming ? m[j].head.content : m[j].in_place.content;
		if (j == i || entry == NULL || entry->content == have)
			continue;
		snprintf(m[i].why, WSYNC_MAX_REASON, "refused (%s): %s version %" PRIu64 ": its "
		    "signed push (seq %" PRIu64 ") has %s at content %016" PRIx64 ", but %s %s "
		    "%016" PRIx64 ": the models of one push are applied together or not at all",
		    wsync_verify_reason(WSYNC_VERIFY_MIXED), o->models[i], m[i].head.version,
		    ms->seq, o->models[j], entry->content, o->models[j],
		    coming ? "comes at" : "in place is", have);
		return 1;
	}
	return 0;
}

int
wsync_check_round(const wsync_round_t *o, wsync_round_model_t *m)
{
	wsync_manifest_t *ms = calloc((size_t)o->n, sizeof(*ms));
	int changed = 1;

	if (ms == NULL)
		return -1;
	for (int i = 0; i < o->n; i++) {
		wsync_round_model_t *r = &m[i];
		wsync_err_t err;
		r->why[0] = '\0';
		if (r->tmp == NULL)
			continue;
		if (wsync_verify_fetched(r->tmp, o->models[i], r->head.version, o->keys,
		    o->nkeys, &r->in_place, &ms[i], &err) != 0) {
			snprintf(r->why, WSYNC_MAX_REASON, "%.*s", WSYNC_MAX_REASON - 1, err.msg);
			continue;
		}
		r->next = (wsync_applied_t){ .content = r->head.content, .is_signed = 1,
		    .seq = ms[i].seq, .time = ms[i].time };
		memcpy(r->next.key, ms[i].key, WSYNC_KEYID);
	}
	/* A refusal can leave another model's push without its partner: until none does. */
	while (changed) {
		changed = 0;
		for (int i = 0; i < o->n; i++)
			if (m[i].tmp != NULL && m[i].why[0] == '\0' && s_mixed(o, i, &ms[i], m))
				changed = 1;
	}
	for (int i = 0; i < o->n; i++)
		wsync_manifest_free(&ms[i]);
	free(ms);
	return 0;
}
