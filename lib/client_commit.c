/* client_commit.c - an upload's commit, and waits for workers to apply a version. */
#include <string.h>
#include <sysexits.h>

#include "push_session_int.h"

/* Fields of a wait (mode, timeout_ms, count or ids) to pack after a request's own. */
static size_t
s_wait_fields(const wsync_wait_t *w)
{
	return 2 + (w->mode == WSYNC_WAIT_COUNT || w->mode == WSYNC_WAIT_IDS);
}

static void
s_pack_wait(wsync_enc_t *e, const wsync_wait_t *w, int timeout_ms)
{
	wsync_enc_kv_str(e, "mode", wsync_wait_name(w->mode));
	wsync_enc_kv_u64(e, "timeout_ms", (uint64_t)timeout_ms);
	if (w->mode == WSYNC_WAIT_COUNT)
		wsync_enc_kv_u64(e, "count", w->count);
	else if (w->mode == WSYNC_WAIT_IDS) {
		wsync_enc_str(e, "ids");
		msgpack_pack_array(&e->pk, (size_t)w->nids);
		for (int i = 0; i < w->nids; i++)
			wsync_enc_str(e, w->ids[i]);
	}
}

/*
 * The reply to a waiting request id (the hub answers by timeout_ms, plus 2 s
 * of grace here): 0 with it in m and p; -1 with err; 2 with err, the refusal
 * in m and p (the caller frees both, as after 0) and *missing (caller frees)
 * the workers a timed-out wait misses. commit: the request committed as well
 * (no answer does not say it did not).
 */
static int
s_await_wait(wsync_client_t *c, uint64_t id, int commit, int timeout_ms, wsync_msg_t *m,
    wsync_parts_t *p, char **missing, wsync_err_t *err)
{
	int rc = wsync_client_await(c, id, wsync_now_ms() + timeout_ms + 2000, m, p, 1, err);

	if (rc == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "wait: no answer from %s%s", c->endpoint,
		    commit ? " within the timeout" WSYNC_MAYBE_COMMITTED : "");
	if (rc == 2)
		*missing = wsync_missing_text(wsync_msg_get(m, "missing"));
	return rc;
}

void
wsync_client_stopped_commit(const wsync_client_t *c, wsync_err_t *err)
{
	if (c->stop != NULL && *c->stop)
		wsync_err_set(err, EX_TEMPFAIL, "interrupted after the commit was sent to %s"
		    WSYNC_MAYBE_COMMITTED, c->endpoint);
}

int
wsync_client_versions(wsync_client_t *c, const wsync_msg_t *m, wsync_push_item_t *items,
    int n, wsync_err_t *err)
{
	if (wsync_versions_decode(m, items, n) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s: commit reply without versions",
		    c->endpoint);
	return 0;
}

int
wsync_client_commit(wsync_client_t *c, const wsync_commit_t *cm, int timeout_ms,
    char **missing, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	const wsync_wait_t *wait = cm->wait;
	wsync_push_item_t *items = cm->items;
	int n = cm->n, both = wait != NULL && n == 1, rc;
	char *none;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "commit", (cm->trust ? 2 : 1) +
	    (both ? s_wait_fields(wait) : 0));

	if (missing == NULL)
		missing = &none;
	*missing = NULL;
	wsync_enc_kv_u64(&e, "upload", cm->upload);
	if (cm->trust)
		wsync_enc_kv_bool(&e, "trust", 1);
	if (both)
		s_pack_wait(&e, wait, timeout_ms);
	rc = wsync_client_send(c, &e, NULL, 0, err);
	wsync_enc_free(&e);
	if (rc < 0)
		return -1;
	/* Asked for now, the slot is ready by the time the workers have this version. */
	if (cm->next != NULL && (wsync_push_find(c) == NULL ||
	    wsync_push_find(c)->next_slot.id == 0))
		wsync_client_next_ask(c, cm->next);
	if (both)
		rc = s_await_wait(c, id, 1, timeout_ms, &m, &p, missing, err);
	else if ((rc = wsync_client_await(c, id, deadline, &m, &p, 0, err)) == 1)
		rc = wsync_err_set(err, EX_TEMPFAIL, "commit: no answer from %s within the "
		    "timeout" WSYNC_MAYBE_COMMITTED, c->endpoint);
	if (rc < 0) {
		wsync_client_stopped_commit(c, err);
		return -1;
	}
	if (rc == 2) {
		/* The wait timed out (or was refused): the version is committed all the same. */
		wsync_err_t ignored;
		wsync_client_versions(c, &m, items, n, &ignored);
		wsync_client_release(&m, &p);
		return -1;
	}
	rc = wsync_client_versions(c, &m, items, n, err);
	wsync_client_release(&m, &p);
	for (int i = 0; rc == 0 && wait != NULL && !both && i < n; i++)
		rc = wsync_client_wait(c, items[i].model, items[i].version, wait,
		    wsync_ms_left(deadline), missing, err);
	return rc;
}

int
wsync_client_wait(wsync_client_t *c, const char *model, uint64_t version,
    const wsync_wait_t *w, int timeout_ms, char **missing, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "wait", 2 + s_wait_fields(w));
	int rc;

	*missing = NULL;
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", version);
	s_pack_wait(&e, w, timeout_ms);
	rc = wsync_client_send(c, &e, NULL, 0, err);
	wsync_enc_free(&e);
	if (rc < 0 || (rc = s_await_wait(c, id, 0, timeout_ms, &m, &p, missing, err)) < 0)
		return -1;
	wsync_client_release(&m, &p);
	return rc == 0 ? 0 : -1;
}
