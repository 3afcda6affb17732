/*
 * manifest.c - the signed statement of a push, as canonical msgpack
 * (wsync-format(5), SIGNATURES): a map of five fields in this order, every
 * value in its shortest msgpack form, as msgpack-c and msgpack-python write:
 *
 *   {"manifest": 1, "seq": uint, "time": uint, "key": bin 8,
 *    "models": [{"model": str, "content": uint, "digest": bin 32,
 *                "meta": bin 32}, ...]}      sorted by model id, bytewise
 *
 * A part's manifest (format 2) has one model and four more fields:
 *
 *   ..., "part": uint, "parts": uint, "tensors": [str, ...],
 *   "metakeys": [str, ...]}                   each array sorted, bytewise
 *
 * The decoder reads it, encodes what it read, and refuses unless the bytes
 * are the same: one manifest has one encoding.
 */
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "mpcheck_int.h"
#include "wsync.h"

#define S_FORMAT 1                      /* the "manifest" field */
#define S_FORMAT_PART 2                 /* the same of a part's manifest */
/* Bounds on a manifest's msgpack: map, models array, model maps; their objects. */
#define S_DEPTH 3
#define S_OBJECTS (16 + 9 * WSYNC_MAX_SIGNED)

static void
s_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void
s_bin(msgpack_packer *pk, const uint8_t *b, size_t n)
{
	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, b, n);
}

/* 0 when the models are valid ids in strictly increasing order, and not too many. */
static int
s_check_models(const wsync_manifest_t *m, wsync_err_t *err)
{
	if (m->nmodels == 0 || m->nmodels > WSYNC_MAX_SIGNED)
		return wsync_err_set(err, EX_DATAERR, "manifest: %zu models (1 to %d)",
		    m->nmodels, WSYNC_MAX_SIGNED);
	for (size_t i = 0; i < m->nmodels; i++) {
		if (wsync_model_id_check(m->models[i].model) < 0)
			return wsync_err_set(err, EX_DATAERR, "manifest: bad model id \"%.80s\"",
			    m->models[i].model);
		if (i > 0 && strcmp(m->models[i - 1].model, m->models[i].model) >= 0)
			return wsync_err_set(err, EX_DATAERR, "manifest: model %s %s", m->models[i].model,
			    strcmp(m->models[i - 1].model, m->models[i].model) == 0 ? "twice" :
			    "out of order (models are sorted by id)");
	}
	if (m->parts == 0)
		return 0;
	if (m->nmodels != 1 || m->part >= m->parts || m->parts > WSYNC_MAX_GROUP)
		return wsync_err_set(err, EX_DATAERR, "manifest: part %" PRIu32 " of %" PRIu32
		    " with %zu models (one model, a part from 0 to N-1 of 1 to %d)", m->part,
		    m->parts, m->nmodels, WSYNC_MAX_GROUP);
	for (size_t i = 1; i < m->ntensors; i++)
		if (strcmp(m->tensors[i - 1], m->tensors[i]) >= 0)
			return wsync_err_set(err, EX_DATAERR, "manifest: tensor \"%.80s\" twice or "
			    "out of order (sorted bytewise)", m->tensors[i]);
	for (size_t i = 1; i < m->nmetakeys; i++)
		if (strcmp(m->metakeys[i - 1], m->metakeys[i]) >= 0)
			return wsync_err_set(err, EX_DATAERR, "manifest: meta key \"%.80s\" twice or "
			    "out of order (sorted bytewise)", m->metakeys[i]);
	return 0;
}

static void
s_strs(msgpack_packer *pk, char *const *v, size_t n)
{
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		s_str(pk, v[i]);
}

int
wsync_manifest_encode(const wsync_manifest_t *m, unsigned char **buf, size_t *len,
    wsync_err_t *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	if (s_check_models(m, err) < 0)
		return -1;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, m->parts != 0 ? 9 : 5);
	s_str(&pk, "manifest");
	msgpack_pack_uint64(&pk, m->parts != 0 ? S_FORMAT_PART : S_FORMAT);
	s_str(&pk, "seq");
	msgpack_pack_uint64(&pk, m->seq);
	s_str(&pk, "time");
	msgpack_pack_uint64(&pk, m->time);
	s_str(&pk, "key");
	s_bin(&pk, m->key, WSYNC_KEYID);
	s_str(&pk, "models");
	msgpack_pack_array(&pk, m->nmodels);
	for (size_t i = 0; i < m->nmodels; i++) {
		const wsync_signed_model_t *s = &m->models[i];
		msgpack_pack_map(&pk, 4);
		s_str(&pk, "model");
		s_str(&pk, s->model);
		s_str(&pk, "content");
		msgpack_pack_uint64(&pk, s->content);
		s_str(&pk, "digest");
		s_bin(&pk, s->digest, WSYNC_DIGEST);
		s_str(&pk, "meta");
		s_bin(&pk, s->meta, WSYNC_DIGEST);
	}
	if (m->parts != 0) {
		s_str(&pk, "part");
		msgpack_pack_uint64(&pk, m->part);
		s_str(&pk, "parts");
		msgpack_pack_uint64(&pk, m->parts);
		s_str(&pk, "tensors");
		s_strs(&pk, m->tensors, m->ntensors);
		s_str(&pk, "metakeys");
		s_strs(&pk, m->metakeys, m->nmetakeys);
	}
	/* msgpack-c's sbuffer has no error path: its writes abort only on no memory. */
	if (sb.data == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	*buf = (unsigned char *)sb.data;
	*len = sb.size;
	return 0;
}

/* The value of key in map o, when o is a map and has it; NULL otherwise. */
static const msgpack_object *
s_get(const msgpack_object *o, const char *key)
{
	size_t n = strlen(key);

	if (o->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == n &&
		    memcmp(kv->key.via.str.ptr, key, n) == 0)
			return &kv->val;
	}
	return NULL;
}

/* Copies bin o of exactly n bytes to out; -1 when it is not one. */
static int
s_get_bin(const msgpack_object *o, uint8_t *out, size_t n)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != n)
		return -1;
	memcpy(out, o->via.bin.ptr, n);
	return 0;
}

static int
s_get_uint(const msgpack_object *o, uint64_t *v)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return -1;
	*v = o->via.u64;
	return 0;
}

/* Copies the strings of array o into a new *v of *n; -1 when o is not an array of strings. */
static int
s_get_strs(const msgpack_object *o, char ***v, size_t *n)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY ||
	    (*v = calloc(o->via.array.size + 1, sizeof(**v))) == NULL)
		return -1;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *e = &o->via.array.ptr[i];
		if (e->type != MSGPACK_OBJECT_STR || memchr(e->via.str.ptr, '\0', e->via.str.size) ||
		    ((*v)[i] = strndup(e->via.str.ptr, e->via.str.size)) == NULL)
			return -1;
		*n = i + 1;
	}
	return 0;
}

/* A part's four fields into m; -1 when one is missing or mistyped. */
static int
s_part_fields(const msgpack_object *o, wsync_manifest_t *m)
{
	uint64_t part, parts;

	if (s_get_uint(s_get(o, "part"), &part) < 0 || s_get_uint(s_get(o, "parts"), &parts) < 0 ||
	    parts == 0 || parts > WSYNC_MAX_GROUP || part >= parts)
		return -1;
	m->part = (uint32_t)part;
	m->parts = (uint32_t)parts;
	return s_get_strs(s_get(o, "tensors"), &m->tensors, &m->ntensors) < 0 ||
	    s_get_strs(s_get(o, "metakeys"), &m->metakeys, &m->nmetakeys) < 0 ? -1 : 0;
}

/* Fills m from the decoded object; -1 (m partly filled) when a field is missing or mistyped. */
static int
s_fields(const msgpack_object *o, wsync_manifest_t *m)
{
	const msgpack_object *models = s_get(o, "models");
	uint64_t format;

	if (s_get_uint(s_get(o, "manifest"), &format) < 0 ||
	    (format != S_FORMAT && format != S_FORMAT_PART) ||
	    (format == S_FORMAT_PART && s_part_fields(o, m) < 0) ||
	    s_get_uint(s_get(o, "seq"), &m->seq) < 0 ||
	    s_get_uint(s_get(o, "time"), &m->time) < 0 ||
	    s_get_bin(s_get(o, "key"), m->key, WSYNC_KEYID) < 0 ||
	    models == NULL || models->type != MSGPACK_OBJECT_ARRAY ||
	    models->via.array.size == 0 || models->via.array.size > WSYNC_MAX_SIGNED)
		return -1;
	if ((m->models = calloc(models->via.array.size, sizeof(*m->models))) == NULL)
		return -1;
	m->nmodels = models->via.array.size;
	for (size_t i = 0; i < m->nmodels; i++) {
		const msgpack_object *e = &models->via.array.ptr[i], *id = s_get(e, "model");
		wsync_signed_model_t *s = &m->models[i];
		if (id == NULL || id->type != MSGPACK_OBJECT_STR ||
		    id->via.str.size > WSYNC_MAX_MODEL ||
		    s_get_uint(s_get(e, "content"), &s->content) < 0 ||
		    s_get_bin(s_get(e, "digest"), s->digest, WSYNC_DIGEST) < 0 ||
		    s_get_bin(s_get(e, "meta"), s->meta, WSYNC_DIGEST) < 0)
			return -1;
		memcpy(s->model, id->via.str.ptr, id->via.str.size);
		s->model[id->via.str.size] = '\0';
	}
	return 0;
}

int
wsync_manifest_decode(const void *buf, size_t len, wsync_manifest_t *m, wsync_err_t *err)
{
	msgpack_unpacked u;
	unsigned char *again = NULL;
	char why[160];
	size_t off = 0, n = 0;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	msgpack_unpacked_init(&u);
	/*
	 * Bounded first, as every decoder of untrusted msgpack here: a manifest is
	 * read unchecked too (wsync-inspect, the output in place), and msgpack-c
	 * allocates a container's declared entries before it reads them.
	 */
	/* A part's names are objects of a byte or more each: len bounds them. */
	if (wsync_msgpack_check(buf, len, &n, S_DEPTH, S_OBJECTS + len, why, sizeof(why)) < 0) {
		wsync_err_set(err, EX_DATAERR, "manifest: not a wsync manifest (%s)", why);
		goto out;
	}
	n = 0;
	if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len ||
	    s_fields(&u.data, m) < 0) {
		wsync_err_set(err, EX_DATAERR, "manifest: not a wsync manifest (msgpack map of "
		    "manifest 1, seq, time, key and models, or a part's manifest 2)");
		goto out;
	}
	if (wsync_manifest_encode(m, &again, &n, err) < 0)
		goto out;
	if (n != len || memcmp(again, buf, len) != 0) {
		wsync_err_set(err, EX_DATAERR, "manifest: not in its canonical encoding (fields "
		    "in order, shortest forms)");
		goto out;
	}
	rc = 0;
out:
	free(again);
	msgpack_unpacked_destroy(&u);
	if (rc < 0)
		wsync_manifest_free(m);
	return rc;
}

static void
s_strs_free(char **v, size_t n)
{
	for (size_t i = 0; v != NULL && i < n; i++)
		free(v[i]);
	free(v);
}

void
wsync_manifest_free(wsync_manifest_t *m)
{
	free(m->models);
	s_strs_free(m->tensors, m->ntensors);
	s_strs_free(m->metakeys, m->nmetakeys);
	memset(m, 0, sizeof(*m));
}

static int
s_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted copies of the n strings of from into a new *to; -1 when out of memory. */
static int
s_copy_sorted(const char *const *from, size_t n, char ***to, size_t *nto)
{
	if ((*to = calloc(n + 1, sizeof(**to))) == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (((*to)[i] = strdup(from[i])) == NULL)
			return -1;
		*nto = i + 1;
	}
	qsort(*to, n, sizeof(**to), s_cmp_str);
	return 0;
}

int
wsync_manifest_set_names(wsync_manifest_t *m, const char *const *paths, size_t n,
    const char *const *keys, size_t nkeys, wsync_err_t *err)
{
	s_strs_free(m->tensors, m->ntensors);
	s_strs_free(m->metakeys, m->nmetakeys);
	m->tensors = m->metakeys = NULL;
	m->ntensors = m->nmetakeys = 0;
	if (s_copy_sorted(paths, n, &m->tensors, &m->ntensors) < 0 ||
	    s_copy_sorted(keys, nkeys, &m->metakeys, &m->nmetakeys) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	return 0;
}

int
wsync_meta_is_signature(const char *key)
{
	size_t n = strlen(WSYNC_META_MANIFEST), k = strlen(WSYNC_META_SIGNATURE);
	const char *r = NULL;

	if (strncmp(key, WSYNC_META_MANIFEST, n) == 0)
		r = key + n;
	else if (strncmp(key, WSYNC_META_SIGNATURE, k) == 0)
		r = key + k;
	if (r == NULL)
		return 0;
	if (*r == '\0')
		return 1;
	/* ".R": R a part's number in decimal, without leading zeros. */
	if (r[0] != '.' || r[1] < '0' || r[1] > '9' || (r[1] == '0' && r[2] != '\0'))
		return 0;
	return strspn(r + 1, "0123456789") == strlen(r + 1) && strlen(r + 1) <= 3;
}

static int
s_cmp_model(const void *key, const void *entry)
{
	return strcmp(key, ((const wsync_signed_model_t *)entry)->model);
}

const wsync_signed_model_t *
wsync_manifest_find(const wsync_manifest_t *m, const char *model)
{
	if (m->nmodels == 0)
		return NULL;
	return bsearch(model, m->models, m->nmodels, sizeof(*m->models), s_cmp_model);
}
