/* signcheck.c - a worker's checks of signed versions: the signature, rollback, what is in place. */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "sign_int.h"
#include "signcheck_int.h"

int
wsync_manifest_of(const wsync_file_t *file, wsync_manifest_t *m)
{
	const char *b64 = wsync_meta_value(file, WSYNC_META_MANIFEST);
	unsigned char *bytes;
	wsync_err_t ignored;
	size_t cap, len;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	/* A version in parts: part 0's manifest says its group (seq) and time. */
	if (b64 == NULL)
		b64 = wsync_meta_value(file, WSYNC_META_MANIFEST ".0");
	if (b64 == NULL)
		return -1;
	cap = strlen(b64) / 4 * 3 + 3;
	if ((bytes = malloc(cap)) == NULL)
		return -1;
	if (sodium_base642bin(bytes, cap, b64, strlen(b64), NULL, &len, NULL,
	    sodium_base64_VARIANT_ORIGINAL) == 0)
		rc = wsync_manifest_decode(bytes, len, m, &ignored);
	free(bytes);
	return rc;
}

void
wsync_applied_read(const char *path, wsync_applied_t *a)
{
	wsync_err_t ignored;
	wsync_file_t *f = wsync_file_open(path, &ignored);
	wsync_manifest_t m;

	memset(a, 0, sizeof(*a));
	if (f == NULL)
		return;
	if (wsync_file_kind(f) == WSYNC_KIND_WSYNC)
		a->content = wsync_file_content_id(f);
	if (wsync_manifest_of(f, &m) == 0) {
		a->is_signed = 1;
		a->seq = m.seq;
		a->time = m.time;
		memcpy(a->key, m.key, WSYNC_KEYID);
		wsync_manifest_free(&m);
	}
	wsync_file_close(&f);
}

uint64_t
wsync_applied_age_over(const wsync_applied_t *a, int max_age_s)
{
	uint64_t now = (uint64_t)time(NULL);

	if (max_age_s <= 0 || !a->is_signed || a->time + (uint64_t)max_age_s >= now)
		return 0;
	return now - a->time;
}

int
wsync_verify_update(const wsync_file_t *file, const wsync_verifykey_t *keys, int nkeys,
    const wsync_applied_t *last, wsync_manifest_t *manifest, wsync_err_t *err)
{
	wsync_manifest_t m;
	int rc = wsync_verify_file(file, keys, nkeys, &m, err);

	if (rc != WSYNC_VERIFY_OK)
		return rc;
	/*
	 * The seq in place served again (a restarted watcher, a pull of what it
	 * has) is no rollback; any other version at or below it is one.
	 */
	if (last != NULL && last->is_signed && (m.seq < last->seq || (m.seq == last->seq &&
	    wsync_file_content_id(file) != last->content))) {
		wsync_err_set(err, EX_NOPERM, "%s: signed with seq %" PRIu64 ", not above seq %"
		    PRIu64 " of the version in place: an old signed version served again",
		    wsync_file_name(file), m.seq, last->seq);
		wsync_manifest_free(&m);
		return WSYNC_VERIFY_ROLLBACK;
	}
	if (manifest != NULL)
		*manifest = m;
	else
		wsync_manifest_free(&m);
	return WSYNC_VERIFY_OK;
}

int
wsync_verify_fetched(const char *tmp, const char *model, uint64_t version,
    const wsync_verifykey_t *keys, int nkeys, const wsync_applied_t *last,
    wsync_manifest_t *manifest, wsync_err_t *err)
{
	char name[WSYNC_MAX_MODEL + 40];
	wsync_file_t *f;
	wsync_err_t why;
	int rc;

	if (manifest != NULL)
		memset(manifest, 0, sizeof(*manifest));
	snprintf(name, sizeof(name), "%s version %" PRIu64, model, version);
	if ((f = wsync_file_open(tmp, err)) == NULL)
		return -1;
	/*
	 * A signature vouches for a file as a version of the model it names; the
	 * manifest's entry that counts is the one of the model fetched.
	 */
	if (strcmp(wsync_file_model(f), model) != 0) {
		wsync_err_set(err, EX_NOPERM, "refused (%s): %s: the file is a version of model "
		    "%s, not of %s", wsync_verify_reason(WSYNC_VERIFY_NOT_LISTED), name,
		    wsync_file_model(f), model);
		wsync_file_close(&f);
		return WSYNC_VERIFY_NOT_LISTED;
	}
	rc = wsync_verify_update(f, keys, nkeys, last, manifest, &why);
	wsync_file_close(&f);
	if (rc > 0) {
		/* The message names the version, not the temporary file it came into. */
		const char *detail = strncmp(why.msg, tmp, strlen(tmp)) == 0 &&
		    why.msg[strlen(tmp)] == ':' ? why.msg + strlen(tmp) + 2 : why.msg;
		wsync_err_set(err, EX_NOPERM, "refused (%s): %s: %s", wsync_verify_reason(rc),
		    name, detail);
	} else if (rc < 0)
		*err = why;
	return rc;
}
