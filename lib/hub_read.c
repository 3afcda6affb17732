/* hub_read.c - reads of versions: stat and get. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>

#include "hub_int.h"

int
hub_no_version(const wsync_model_t *m, uint64_t version, unsigned keep, wsync_err_t *err)
{
	const wsync_version_t *newest = wsync_model_newest(m);

	if (newest == NULL)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", m->id);
	if (version > newest->version)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version %" PRIu64,
		    m->id, version);
	return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version %" PRIu64 " any more "
	    "(retired: the hub keeps the last %u)", m->id, version, keep);
}

/*
 * 1 when id a is b in another case, or, for ids of 4 characters or more, two
 * edits or fewer away (Levenshtein distance, case-blind).
 */
static int
s_close(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	size_t row[WSYNC_MAX_MODEL + 2];

	if (strcasecmp(a, b) == 0)
		return 1;
	if (na < 4 || nb < 4 || (na > nb ? na - nb : nb - na) > 2)
		return 0;
	for (size_t j = 0; j <= nb; j++)
		row[j] = j;
	for (size_t i = 1; i <= na; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= nb; j++) {
			size_t up = row[j], best = diag + (tolower((unsigned char)a[i - 1]) !=
			    tolower((unsigned char)b[j - 1]));
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[nb] <= 2;
}

int
hub_models_close(const wsync_hub_t *h, const char *model, char *buf, size_t size)
{
	size_t len = 0;
	int n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < wsync_store_count(h->store) && n < 3; i++) {
		const char *id = wsync_store_model(h->store, i)->id;
		int w;
		if (!s_close(model, id) || (w = snprintf(buf + len, size - len, "%s%s",
		    n > 0 ? ", " : "", id)) < 0 || (size_t)w >= size - len)
			continue;
		len += (size_t)w;
		n++;
	}
	return n;
}

int
hub_no_model(const wsync_hub_t *h, const char *model, wsync_err_t *err)
{
	char close[3 * (WSYNC_MAX_MODEL + 2)];

	if (hub_models_close(h, model, close, sizeof(close)) > 0)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version (the hub has "
		    "%s)", model, close);
	return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", model);
}

/* Looks up model (66 when unknown) and version (0: the head worker sees). */
static const wsync_version_t *
s_lookup(wsync_hub_t *h, const char *model, uint64_t version, const char *worker,
    wsync_err_t *err)
{
	const wsync_model_t *m = wsync_store_find(h->store, model);
	const wsync_version_t *v;

	if (m == NULL) {
		hub_no_model(h, model, err);
		return NULL;
	}
	v = version == 0 ? wsync_model_head(m, worker) : wsync_model_version(m, version);
	if (v != NULL)
		return v;
	if (version == 0 && wsync_model_newest(m) != NULL)
		wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version for %s%s", m->id,
		    worker ? "worker " : "everyone (only versions pushed to named workers)",
		    worker ? worker : "");
	else
		hub_no_version(m, version, h->keep, err);
	return NULL;
}

const wsync_version_t *
hub_read_version(wsync_hub_t *h, struct hub_req *r, char *model, wsync_err_t *err)
{
	char worker[WSYNC_MAX_ID + 1];
	uint64_t version;

	if (hub_model_field(r, model, err) < 0 || hub_u64(r, "version", 1, &version, err) < 0 ||
	    hub_worker_field(r, 0, worker, err) < 0)
		return NULL;
	if (worker[0] != '\0' && hub_worker_touch(h, worker, r->conn, err) == NULL)
		return NULL;
	return s_lookup(h, model, version, worker[0] ? worker : NULL, err);
}

int
hub_op_stat(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	const wsync_version_t *v;
	wsync_enc_t e;

	if ((v = hub_read_version(h, r, model, err)) == NULL)
		return -1;
	hub_ok(&e, r->id, 6);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", v->version);
	wsync_enc_kv_u64(&e, "size", v->size);
	wsync_enc_kv_u64(&e, "content", v->content);
	wsync_enc_kv_double(&e, "time", v->time);
	wsync_enc_kv_u64(&e, "mtime", v->mtime_ns);
	hub_reply(h, r, &e);
	return 0;
}

#ifdef WSYNC_TEST_HOOKS
/*
 * The test-only fault of wsync-serve(1) (WSYNC_TEST_FLIP_GET): the chunk is
 * copied with its last bit flipped, as a link that corrupts data would.
 */
static int
s_flip_last(zmq_msg_t *data, wsync_err_t *err)
{
	zmq_msg_t copy;
	size_t len = zmq_msg_size(data);

	if (len == 0)
		return 0;
	if (zmq_msg_init_size(&copy, len) < 0) {
		zmq_msg_close(data);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	memcpy(zmq_msg_data(&copy), zmq_msg_data(data), len);
	((unsigned char *)zmq_msg_data(&copy))[len - 1] ^= 1;
	zmq_msg_close(data);
	*data = copy;
	return 0;
}
#endif

int
hub_op_get(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version, off, len, base = 0;
	const wsync_version_t *v;
	char worker[WSYNC_MAX_ID + 1];
	int arriving = 0;
	zmq_msg_t data;
	wsync_enc_t e;

	if (hub_model_field(r, model, err) < 0 || hub_u64(r, "version", 1, &version, err) < 0 ||
	    hub_u64(r, "off", 1, &off, err) < 0 || hub_u64(r, "len", 1, &len, err) < 0 ||
	    hub_worker_field(r, 0, worker, err) < 0 || hub_u64(r, "base", 0, &base, err) < 0 ||
	    hub_bool(r, "arriving", &arriving, err) < 0 ||
	    (arriving && hub_arrive_reader_check(h, r, err) < 0))
		return -1;
	/* A worker busy fetching a large version is alive. */
	if (worker[0] != '\0' && hub_worker_touch(h, worker, r->conn, err) == NULL)
		return -1;
	if (version == 0)
		return wsync_err_set(err, EX_USAGE, "get needs a version number (stat finds the "
		    "head)");
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "get of %" PRIu64 " bytes is over the chunk "
		    "size of %u", len, WSYNC_CHUNK);
	/* A downstream relay may read a version still arriving here (hub_arrive.c). */
	if (arriving && base == 0 && hub_arrive_has(h, model, version))
		return hub_arrive_get(h, r, off, len, err);
	if (arriving && base == 0 && hub_arrive_failed(h, model, version, err))
		return -1;
	/* With a base: the bytes of the delta from it to version (hub_delta.c). */
	if ((v = base != 0 ? hub_delta_file(h, model, base, version, err) :
	    s_lookup(h, model, version, NULL, err)) == NULL)
		return -1;
	if (off > v->size)
		return wsync_err_set(err, EX_USAGE, "offset %" PRIu64 " is beyond the end of "
		    "model \"%s\" version %" PRIu64 " (%" PRIu64 " bytes)", off, model, version,
		    v->size);
	if (len > v->size - off)
		len = v->size - off;
	/* Sent straight from the mapped file: no copy, and no fresh pages per chunk. */
	if (wsync_version_msg((wsync_version_t *)v, off, len, &data, err) < 0)
		return -1;
#ifdef WSYNC_TEST_HOOKS
	if (h->flip_get && s_flip_last(&data, err) < 0)
		return -1;
#endif
	hub_ok(&e, r->id, 2);
	wsync_enc_kv_u64(&e, "off", off);
	wsync_enc_kv_u64(&e, "len", len);
	hub_reply_data(h, r, &e, &data);
	h->counts.bytes_served += len;
	return 0;
}
