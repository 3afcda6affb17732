/* proto.c - decoding and encoding protocol messages (see proto_int.h, wsync(7)). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "mpcheck_int.h"
#include "proto_int.h"

/* A message is shallow: a map of lists of maps at most. */
#define S_MSG_DEPTH 6
#define S_MSG_OBJECTS 200000

int
wsync_msg_decode(wsync_msg_t *m, const void *buf, size_t len, wsync_err_t *err)
{
	char why[200];
	size_t end = 0, off = 0;

	msgpack_unpacked_init(&m->doc);
	m->root = NULL;
	if (len > WSYNC_MAX_MESSAGE)
		return wsync_err_set(err, EX_PROTOCOL, "message of %zu bytes is over the limit "
		    "of %u", len, WSYNC_MAX_MESSAGE);
	if (wsync_msgpack_check(buf, len, &end, S_MSG_DEPTH, S_MSG_OBJECTS, why,
	    sizeof(why)) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "bad message: %s", why);
	if (end != len)
		return wsync_err_set(err, EX_PROTOCOL, "bad message: trailing bytes");
	if (msgpack_unpack_next(&m->doc, buf, len, &off) != MSGPACK_UNPACK_SUCCESS)
		return wsync_err_set(err, EX_PROTOCOL, "bad message: not msgpack");
	if (m->doc.data.type != MSGPACK_OBJECT_MAP)
		return wsync_err_set(err, EX_PROTOCOL, "bad message: not a map");
	m->root = &m->doc.data;
	return 0;
}

void
wsync_msg_free(wsync_msg_t *m)
{
	msgpack_unpacked_destroy(&m->doc);
	m->root = NULL;
}

const msgpack_object *
wsync_obj_get(const msgpack_object *o, const char *key)
{
	size_t n = strlen(key);

	if (o == NULL || o->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &o->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
		    (n == 0 || memcmp(k->via.str.ptr, key, n) == 0))
			return &o->via.map.ptr[i].val;
	}
	return NULL;
}

int
wsync_obj_str(const msgpack_object *o, char *buf, size_t size)
{
	/* msgpack-c gives an empty string a NULL pointer, which mem*() may not take. */
	if (o == NULL || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= size ||
	    (o->via.str.size > 0 && memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL))
		return -1;
	if (o->via.str.size > 0)
		memcpy(buf, o->via.str.ptr, o->via.str.size);
	buf[o->via.str.size] = '\0';
	return 0;
}

int
wsync_obj_u64(const msgpack_object *o, uint64_t *v)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return -1;
	*v = o->via.u64;
	return 0;
}

int
wsync_obj_double(const msgpack_object *o, double *v)
{
	if (o == NULL)
		return -1;
	switch (o->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER: *v = (double)o->via.u64; return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = (double)o->via.i64; return 0;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: *v = o->via.f64; return 0;
	default: return -1;
	}
}

int
wsync_obj_true(const msgpack_object *o)
{
	return o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

const msgpack_object *
wsync_msg_get(const wsync_msg_t *m, const char *key)
{
	return wsync_obj_get(m->root, key);
}

int
wsync_msg_str(const wsync_msg_t *m, const char *key, char *buf, size_t size)
{
	return wsync_obj_str(wsync_msg_get(m, key), buf, size);
}

int
wsync_msg_u64(const wsync_msg_t *m, const char *key, uint64_t *v)
{
	return wsync_obj_u64(wsync_msg_get(m, key), v);
}

void
wsync_enc_init(wsync_enc_t *e)
{
	msgpack_sbuffer_init(&e->sb);
	msgpack_packer_init(&e->pk, &e->sb, msgpack_sbuffer_write);
}

void
wsync_enc_free(wsync_enc_t *e)
{
	msgpack_sbuffer_destroy(&e->sb);
}

void
wsync_enc_str(wsync_enc_t *e, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(&e->pk, n);
	msgpack_pack_str_body(&e->pk, s, n);
}

void
wsync_enc_kv_str(wsync_enc_t *e, const char *key, const char *value)
{
	wsync_enc_str(e, key);
	wsync_enc_str(e, value);
}

void
wsync_enc_kv_u64(wsync_enc_t *e, const char *key, uint64_t value)
{
	wsync_enc_str(e, key);
	msgpack_pack_uint64(&e->pk, value);
}

void
wsync_enc_kv_bool(wsync_enc_t *e, const char *key, int value)
{
	wsync_enc_str(e, key);
	if (value)
		msgpack_pack_true(&e->pk);
	else
		msgpack_pack_false(&e->pk);
}

void
wsync_enc_kv_double(wsync_enc_t *e, const char *key, double value)
{
	wsync_enc_str(e, key);
	msgpack_pack_double(&e->pk, value);
}

int
wsync_id_check(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > WSYNC_MAX_ID)
		return -1;
	for (; *s != '\0'; s++)
		if (*s <= ' ' || *s >= 0x7f)
			return -1;
	return 0;
}

int
wsync_reply_decode(const wsync_msg_t *m, uint64_t *id, wsync_err_t *err)
{
	uint64_t code = EX_PROTOCOL;
	char text[600] = "the hub refused the request";

	*id = 0;
	if (wsync_msg_u64(m, "id", id) < 0) {
		*id = 0;
		return wsync_err_set(err, EX_PROTOCOL, "a reply without an id");
	}
	if (wsync_obj_true(wsync_msg_get(m, "ok")))
		return 0;
	wsync_msg_u64(m, "code", &code);
	wsync_msg_str(m, "error", text, sizeof(text));
	return wsync_err_set(err, code > 0 && code < 128 ? (int)code : EX_PROTOCOL, "%s", text);
}

int
wsync_head_decode(const msgpack_object *o, wsync_head_t *h)
{
	memset(h, 0, sizeof(*h));
	if (wsync_obj_u64(wsync_obj_get(o, "version"), &h->version) < 0 ||
	    wsync_obj_u64(wsync_obj_get(o, "size"), &h->size) < 0 ||
	    wsync_obj_u64(wsync_obj_get(o, "content"), &h->content) < 0)
		return -1;
	wsync_obj_double(wsync_obj_get(o, "time"), &h->time);
	wsync_obj_u64(wsync_obj_get(o, "mtime"), &h->mtime);
	return 0;
}

int
wsync_versions_decode(const wsync_msg_t *m, wsync_push_item_t *items, int n)
{
	const msgpack_object *versions = wsync_msg_get(m, "versions");

	if (n < 0 || versions == NULL || versions->type != MSGPACK_OBJECT_ARRAY ||
	    versions->via.array.size != (uint32_t)n)
		return -1;
	for (int i = 0; i < n; i++) {
		const msgpack_object *v = &versions->via.array.ptr[i];
		if (wsync_obj_u64(wsync_obj_get(v, "version"), &items[i].version) < 0 ||
		    wsync_obj_u64(wsync_obj_get(v, "content"), &items[i].content) < 0)
			return -1;
	}
	return 0;
}

/* Appends text to a growing malloc'd string; control bytes become '?'. */
static void
s_append(char **buf, size_t *len, const char *text)
{
	size_t n = strlen(text);
	char *nb = realloc(*buf, *len + n + 1);

	if (nb == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		nb[*len + i] = (unsigned char)text[i] < 0x20 && text[i] != '\n' ? '?' : text[i];
	*len += n;
	nb[*len] = '\0';
	*buf = nb;
}

char *
wsync_missing_text(const msgpack_object *list)
{
	char *buf = NULL, line[1024], worker[WSYNC_MAX_ID + 1], reason[WSYNC_MAX_REASON + 1];
	char via[512];
	size_t len = 0;

	if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY)
		return NULL;
	for (uint32_t i = 0; i < list->via.array.size; i++) {
		const msgpack_object *w = &list->via.array.ptr[i];
		uint64_t v = 0;
		double seen = -1;
		if (wsync_obj_str(wsync_obj_get(w, "worker"), worker, sizeof(worker)) < 0)
			continue;
		wsync_obj_u64(wsync_obj_get(w, "version"), &v);
		wsync_obj_double(wsync_obj_get(w, "seen"), &seen);
		if (seen < 0)
			snprintf(line, sizeof(line), "%s: %s%.0" PRIu64 ", never seen", worker,
			    v ? "has version " : "has no version", v);
		else
			snprintf(line, sizeof(line), "%s: %s%.0" PRIu64 ", last seen %.1f s ago",
			    worker, v ? "has version " : "has no version", v, seen);
		s_append(&buf, &len, line);
		if (wsync_obj_str(wsync_obj_get(w, "via"), via, sizeof(via)) == 0) {
			s_append(&buf, &len, ", behind relay ");
			s_append(&buf, &len, via);
		}
		if (wsync_obj_str(wsync_obj_get(w, "failure"), reason, sizeof(reason)) == 0) {
			s_append(&buf, &len, ", last failure: ");
			s_append(&buf, &len, reason);
		}
		s_append(&buf, &len, "\n");
	}
	return buf;
}

json_t *
wsync_obj_json(const msgpack_object *o)
{
	json_t *j;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return json_null();
	case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
	case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_integer((json_int_t)o->via.u64);
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer((json_int_t)o->via.i64);
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return json_real(o->via.f64);
	case MSGPACK_OBJECT_STR: return json_stringn(o->via.str.ptr, o->via.str.size);
	case MSGPACK_OBJECT_ARRAY:
		j = json_array();
		for (uint32_t i = 0; i < o->via.array.size; i++)
			json_array_append_new(j, wsync_obj_json(&o->via.array.ptr[i]));
		return j;
	case MSGPACK_OBJECT_MAP:
		j = json_object();
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object *v = &o->via.map.ptr[i].val;
			char key[256], hex[17];
			if (wsync_obj_str(&o->via.map.ptr[i].key, key, sizeof(key)) < 0)
				continue;
			/* Content ids use all 64 bits: JSON integers would lose them. */
			if (strcmp(key, "content") == 0 && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
				snprintf(hex, sizeof(hex), "%016" PRIx64, v->via.u64);
				json_object_set_new(j, key, json_string(hex));
			} else
				json_object_set_new(j, key, wsync_obj_json(v));
		}
		return j;
	default:
		return json_null();
	}
}

static const char *const s_wait_modes[] = { "all", "count", "ids" };

int
wsync_wait_parse(const char *name)
{
	return wsync_name_index(s_wait_modes, 3, name);
}

const char *
wsync_wait_name(int mode)
{
	return wsync_name_of(s_wait_modes, 3, mode);
}
