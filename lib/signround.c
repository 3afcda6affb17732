/* signround.c - a round of several models fetched by a verifying worker: each signed and newer, one push's models together. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signcheck_int.h"
#include "signround_int.h"

/*
 * Model i's manifest lists another watched model j at a content that is not
 * the one j has once the round is done: the reason into why[i]; 1 when so.
 */
static int
s_mixed(const wsync_round_t *o, int i, const wsync_manifest_t *m,
    const wsync_applied_t *in_place, char *const *tmp, const wsync_head_t *heads,
    char (*why)[WSYNC_MAX_REASON])
{
	for (int j = 0; j < o->n; j++) {
		const wsync_signed_model_t *entry = wsync_manifest_find(m, o->models[j]);
		int coming = tmp[j] != NULL && why[j][0] == '\0';
		uint64_t have = coming ? heads[j].content : in_place[j].content;
		if (j == i || entry == NULL || entry->content == have)
			continue;
		snprintf(why[i], WSYNC_MAX_REASON, "refused (%s): %s version %" PRIu64 ": its "
		    "signed push (seq %" PRIu64 ") has %s at content %016" PRIx64 ", but %s %s "
		    "%016" PRIx64 ": the models of one push are applied together or not at all",
		    wsync_verify_reason(WSYNC_VERIFY_MIXED), o->models[i], heads[i].version,
		    m->seq, o->models[j], entry->content, o->models[j],
		    coming ? "comes at" : "in place is", have);
		return 1;
	}
	return 0;
}

int
wsync_check_round(const wsync_round_t *o, const wsync_applied_t *in_place,
    char *const *tmp, const wsync_head_t *heads, char (*why)[WSYNC_MAX_REASON],
    wsync_applied_t *next)
{
	wsync_manifest_t *ms = calloc((size_t)o->n, sizeof(*ms));
	int changed = 1;

	if (ms == NULL)
		return -1;
	for (int i = 0; i < o->n; i++) {
		wsync_err_t err;
		why[i][0] = '\0';
		if (tmp[i] == NULL)
			continue;
		if (wsync_verify_fetched(tmp[i], o->models[i], heads[i].version, o->keys,
		    o->nkeys, &in_place[i], &ms[i], &err) != 0) {
			snprintf(why[i], WSYNC_MAX_REASON, "%.*s", WSYNC_MAX_REASON - 1, err.msg);
			continue;
		}
		next[i] = (wsync_applied_t){ .content = heads[i].content, .is_signed = 1,
		    .seq = ms[i].seq, .time = ms[i].time };
		memcpy(next[i].key, ms[i].key, WSYNC_KEYID);
	}
	/* A refusal can leave another model's push without its partner: until none does. */
	while (changed) {
		changed = 0;
		for (int i = 0; i < o->n; i++)
			if (tmp[i] != NULL && why[i][0] == '\0' &&
			    s_mixed(o, i, &ms[i], in_place, tmp, heads, why))
				changed = 1;
	}
	for (int i = 0; i < o->n; i++)
		wsync_manifest_free(&ms[i]);
	free(ms);
	return 0;
}
