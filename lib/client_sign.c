/* client_sign.c - a push's signature: the key a client signs with, its sequence number. */
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

#include "push_session_int.h"

int
wsync_client_sign_with(wsync_client_t *c, const char *path, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_session(c, err);
	wsync_signkey_t *key = ps != NULL ? wsync_signkey_load(path, err) : NULL;

	if (key == NULL)
		return -1;
	if (snprintf(ps->sign_path, sizeof(ps->sign_path), "%s", path) >=
	    (int)sizeof(ps->sign_path)) {
		wsync_signkey_destroy(&key);
		return wsync_err_set(err, EX_USAGE, "%s: path too long", path);
	}
	wsync_signkey_destroy(&ps->sign);
	ps->sign = key;
	ps->sign_seq = 0;
	return 0;
}

int
wsync_client_sign_seq(wsync_client_t *c, uint64_t seq, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_find(c);

	if (seq != 0 && (ps == NULL || ps->sign == NULL))
		return wsync_err_set(err, EX_USAGE, "an unsigned push has no sequence number");
	if (ps != NULL)
		ps->sign_seq = seq;
	return 0;
}

int
wsync_client_sign_trees(wsync_client_t *c, wsync_tree_t *const *trees, int n,
    wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_find(c);
	wsync_manifest_t m;
	uint64_t seq;
	int rc;

	if (ps == NULL || ps->sign == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "no signing key");
	/* A part is signed for its group: the key's counter is the whole pushes'. */
	if (ps->parts != 0)
		return n != 1 ? wsync_err_set(err, EX_USAGE, "a part is one model") :
		    wsync_sign_part(trees[0], ps->sign, ps->group, ps->part, ps->parts, NULL, err);
	if (wsync_signseq_next(ps->sign_path, ps->sign_seq, &seq, err) < 0)
		return -1;
	/* A --seq is for one push; the next one takes the counter's next. */
	ps->sign_seq = 0;
	rc = wsync_sign_trees(trees, n, ps->sign, seq, &m, err);
	if (rc == 0)
		wsync_manifest_free(&m);
	return rc;
}
