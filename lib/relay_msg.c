/* relay_msg.c - the messages between a relay's thread and the hub's loop (see relay_int.h). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "relay_int.h"

/* Each kind's name: the first frame of its messages. */
static const char *const s_kinds[] = {
	[RELAY_MSG_NONE] = "",
	[RELAY_MSG_ARRIVING] = "arriving",
	[RELAY_MSG_DROPPED] = "dropped",
	[RELAY_MSG_HAND_OVER] = "hand-over",
	[RELAY_MSG_REPLY] = "reply",
	[RELAY_MSG_REPORT] = "report",
	[RELAY_MSG_ADMIT] = "admit",
};

#define S_NKINDS ((int)(sizeof(s_kinds) / sizeof(s_kinds[0])))

/* One field of a message's body: its key, and where it lies in the message's struct. */
struct s_field {
	const char *key;
	int str;                        /* a string of size bytes; else a uint64_t */
	size_t off, size;
	int required;                   /* unpacking fails without it */
};

#define S_STR(type, f, req) { #f, 1, offsetof(type, f), sizeof(((type *)0)->f), req }
#define S_U64(type, key, f, req) { key, 0, offsetof(type, f), sizeof(uint64_t), req }

static const struct s_field s_arriving[] = {
	S_STR(relay_arriving_t, model, 1), S_U64(relay_arriving_t, "version", v.version, 1),
	S_U64(relay_arriving_t, "size", v.size, 1),
	S_U64(relay_arriving_t, "content", v.content, 1), S_STR(relay_arriving_t, path, 1),
	S_U64(relay_arriving_t, "upto", upto, 1),
};
static const struct s_field s_dropped[] = {
	S_STR(relay_dropped_t, model, 1), S_U64(relay_dropped_t, "version", version, 1),
	S_U64(relay_dropped_t, "code", code, 0), S_STR(relay_dropped_t, error, 0),
};
static const struct s_field s_hand_over[] = {
	S_STR(relay_hand_over_t, model, 1), S_U64(relay_hand_over_t, "version", version, 1),
	S_U64(relay_hand_over_t, "content", content, 0), S_STR(relay_hand_over_t, path, 1),
	S_STR(relay_hand_over_t, origin, 0), S_STR(relay_hand_over_t, upstream, 0),
	S_U64(relay_hand_over_t, "index", index, 0), S_U64(relay_hand_over_t, "count", count, 0),
	S_STR(relay_hand_over_t, delta, 0), S_U64(relay_hand_over_t, "base", base, 0),
};

/* Each kind's fields, by kind: those with a body of fields. */
static const struct {
	const struct s_field *fields;
	size_t n, size;
} s_bodies[] = {
	[RELAY_MSG_ARRIVING] = { s_arriving, sizeof(s_arriving) / sizeof(s_arriving[0]),
	    sizeof(relay_arriving_t) },
	[RELAY_MSG_DROPPED] = { s_dropped, sizeof(s_dropped) / sizeof(s_dropped[0]),
	    sizeof(relay_dropped_t) },
	[RELAY_MSG_HAND_OVER] = { s_hand_over, sizeof(s_hand_over) / sizeof(s_hand_over[0]),
	    sizeof(relay_hand_over_t) },
};

void
relay_pack(wsync_enc_t *e, enum relay_msg_kind kind, const void *msg)
{
	const struct s_field *fields = s_bodies[kind].fields;

	msgpack_pack_map(&e->pk, s_bodies[kind].n);
	for (size_t i = 0; i < s_bodies[kind].n; i++) {
		const char *at = (const char *)msg + fields[i].off;
		if (fields[i].str)
			wsync_enc_kv_str(e, fields[i].key, at);
		else
			wsync_enc_kv_u64(e, fields[i].key, *(const uint64_t *)(const void *)at);
	}
}

int
relay_unpack(const wsync_msg_t *m, enum relay_msg_kind kind, void *msg)
{
	const struct s_field *fields = s_bodies[kind].fields;

	memset(msg, 0, s_bodies[kind].size);
	for (size_t i = 0; i < s_bodies[kind].n; i++) {
		char *at = (char *)msg + fields[i].off;
		int rc = fields[i].str ? wsync_msg_str(m, fields[i].key, at, fields[i].size) :
		    wsync_msg_u64(m, fields[i].key, (uint64_t *)(void *)at);
		if (rc < 0 && fields[i].required)
			return -1;
		if (rc < 0 && fields[i].str)
			at[0] = '\0';
	}
	return 0;
}

void
relay_reply_pack(wsync_enc_t *e, const relay_reply_t *r)
{
	msgpack_pack_map(&e->pk, r->ok ? 1 : 2);
	wsync_enc_kv_bool(e, "ok", r->ok);
	if (!r->ok)
		wsync_enc_kv_str(e, "error", r->error);
}

int
relay_reply_unpack(const wsync_msg_t *m, relay_reply_t *r)
{
	const msgpack_object *o = wsync_msg_get(m, "ok");

	memset(r, 0, sizeof(*r));
	if (o == NULL || o->type != MSGPACK_OBJECT_BOOLEAN)
		return -1;
	r->ok = o->via.boolean;
	if (!r->ok && wsync_msg_str(m, "error", r->error, sizeof(r->error)) < 0)
		return -1;
	return 0;
}

int
relay_send(void *pair, enum relay_msg_kind kind, wsync_enc_t *e, int flags)
{
	int rc = -1;

	if (zmq_send(pair, s_kinds[kind], strlen(s_kinds[kind]), flags | ZMQ_SNDMORE) >= 0 &&
	    zmq_send(pair, e->sb.data, e->sb.size, flags) >= 0)
		rc = 0;
	wsync_enc_free(e);
	return rc;
}

/* The kind whose name is frame 0 of p; RELAY_MSG_NONE when none is. */
static enum relay_msg_kind
s_kind(wsync_parts_t *p)
{
	for (int k = RELAY_MSG_NONE + 1; p->n == 2 && k < S_NKINDS; k++)
		if (wsync_part_size(p, 0) == strlen(s_kinds[k]) &&
		    memcmp(wsync_part_data(p, 0), s_kinds[k], strlen(s_kinds[k])) == 0)
			return (enum relay_msg_kind)k;
	return RELAY_MSG_NONE;
}

enum relay_msg_kind
relay_recv(void *pair, wsync_parts_t *p, wsync_msg_t *m)
{
	enum relay_msg_kind k;
	wsync_err_t ignored;

	while (wsync_recv(pair, p, ZMQ_DONTWAIT) == 0) {
		if ((k = s_kind(p)) != RELAY_MSG_NONE) {
			/* A body that does not decode leaves m empty: its unpack says so. */
			wsync_msg_decode(m, wsync_part_data(p, 1), wsync_part_size(p, 1), &ignored);
			return k;
		}
		wsync_parts_close(p);
	}
	return RELAY_MSG_NONE;
}
