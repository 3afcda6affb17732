/* proto.c - decoding and encoding protocol messages (see proto_int.h, wsync(7)). */
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
		    memcmp(k->via.str.ptr, key, n) == 0)
			return &o->via.map.ptr[i].val;
	}
	return NULL;
}

int
wsync_obj_str(const msgpack_object *o, char *buf, size_t size)
{
	if (o == NULL || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= size ||
	    memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL)
		return -1;
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
