/*
 * manifest.c - the signed statement of a push, as canonical msgpack
 * (wsync-format(5), SIGNATURES): a map of five fields in this order, every
 * value in its shortest msgpack form, as msgpack-c and msgpack-python write:
 *
 *   {"manifest": 1, "seq": uint, "time": uint, "key": bin 8,
 *    "models": [{"model": str, "content": uint, "digest": bin 32,
 *                "meta": bin 32}, ...]}      sorted by model id, bytewise
 *
 * The decoder reads it, encodes what it read, and refuses unless the bytes
 * are the same: one manifest has one encoding.
 */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "mpcheck_int.h"
#include "wsync.h"

#define S_FORMAT 1                      /* the "manifest" field */
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
	return 0;
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
	msgpack_pack_map(&pk, 5);
	s_str(&pk, "manifest");
	msgpack_pack_uint64(&pk, S_FORMAT);
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

/* Fills m from the decoded object; -1 (m partly filled) when a field is missing or mistyped. */
static int
s_fields(const msgpack_object *o, wsync_manifest_t *m)
{
	const msgpack_object *models = s_get(o, "models");
	uint64_t format;

	if (s_get_uint(s_get(o, "manifest"), &format) < 0 || format != S_FORMAT ||
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
	if (wsync_msgpack_check(buf, len, &n, S_DEPTH, S_OBJECTS, why, sizeof(why)) < 0) {
		wsync_err_set(err, EX_DATAERR, "manifest: not a wsync manifest (%s)", why);
		goto out;
	}
	n = 0;
	if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len ||
	    s_fields(&u.data, m) < 0) {
		wsync_err_set(err, EX_DATAERR, "manifest: not a wsync manifest (msgpack map of "
		    "manifest 1, seq, time, key and models)");
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

void
wsync_manifest_free(wsync_manifest_t *m)
{
	free(m->models);
	memset(m, 0, sizeof(*m));
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
