/* proto_int.h - wsync protocol messages: bounded decoding and small encoders (wsync(7)). */
#ifndef WSYNC_PROTO_INT_H
#define WSYNC_PROTO_INT_H

#include <jansson.h>
#include <msgpack.h>
#include <stdint.h>
#include <string.h>

#include "wsync.h"

#define WSYNC_PROTO 1
#define WSYNC_CHUNK (4u << 20)          /* most data bytes in one get or chunk */
#define WSYNC_WINDOW 8                  /* requests a client keeps in flight */
#define WSYNC_HEARTBEAT_MS 1000
#define WSYNC_ALIVE_MS 5000             /* a worker not seen for this long is not alive */
#define WSYNC_MAX_MESSAGE (1u << 20)    /* bytes in one msgpack message frame */
/* Uploads a hub lets one connection have open: its slots and one plain push. */
#define WSYNC_PEER_UPLOADS (WSYNC_SLOTS_OPEN_MAX + 1)

/* A decoded message: a view over one msgpack map. */
typedef struct wsync_msg {
	msgpack_unpacked doc;
	const msgpack_object *root;     /* a map */
} wsync_msg_t;

/*
 * Decodes one message: one msgpack map, bounded in size, depth and object count.
 * On failure err has code 76 (EX_PROTOCOL). Free with wsync_msg_free either way.
 */
int wsync_msg_decode(wsync_msg_t *m, const void *buf, size_t len, wsync_err_t *err);
/* Releases what wsync_msg_decode allocated. */
void wsync_msg_free(wsync_msg_t *m);

/* The value of key in map o; NULL when o is not a map or has no such key. */
const msgpack_object *wsync_obj_get(const msgpack_object *o, const char *key);
/* Copies a string object into buf (NUL-terminated); -1 when not a string, too long, or with NUL. */
int wsync_obj_str(const msgpack_object *o, char *buf, size_t size);
/* An unsigned integer object; -1 when it is not one. */
int wsync_obj_u64(const msgpack_object *o, uint64_t *v);
/* A number (integer or float) as a double; -1 when it is not one. */
int wsync_obj_double(const msgpack_object *o, double *v);
/* 1 when o is the boolean true. */
int wsync_obj_true(const msgpack_object *o);
/* A string field of the message; -1 when absent or not a fitting string. */
int wsync_msg_str(const wsync_msg_t *m, const char *key, char *buf, size_t size);
/* An unsigned integer field of the message; -1 when absent or not one. */
int wsync_msg_u64(const wsync_msg_t *m, const char *key, uint64_t *v);
/* A field of the message; NULL when absent. */
const msgpack_object *wsync_msg_get(const wsync_msg_t *m, const char *key);

/* An encoder: msgpack-c's packer over a growing buffer. */
typedef struct wsync_enc {
	msgpack_sbuffer sb;
	msgpack_packer pk;
} wsync_enc_t;

/* Starts an empty encoding. */
void wsync_enc_init(wsync_enc_t *e);
/* Frees the buffer. */
void wsync_enc_free(wsync_enc_t *e);
/* Packs a string. */
void wsync_enc_str(wsync_enc_t *e, const char *s);
/* Packs key then a string value. */
void wsync_enc_kv_str(wsync_enc_t *e, const char *key, const char *value);
/* Packs key then an unsigned value. */
void wsync_enc_kv_u64(wsync_enc_t *e, const char *key, uint64_t value);
/* Packs key then a boolean. */
void wsync_enc_kv_bool(wsync_enc_t *e, const char *key, int value);
/* Packs key then a double. */
void wsync_enc_kv_double(wsync_enc_t *e, const char *key, double value);

/* ---- what clients read from replies: pure, so that they can be fuzzed ---- */

/*
 * Reads a reply's envelope: 0 when it says ok; -1 with *id 0 and code 76 when
 * it has no unsigned id; -1 with *id set and err holding the hub's code and
 * text when it is a refusal.
 */
int wsync_reply_decode(const wsync_msg_t *m, uint64_t *id, wsync_err_t *err);
/* Reads {version, size, content[, time, mtime]} from a map into h; -1 without the first three. */
int wsync_head_decode(const msgpack_object *o, wsync_head_t *h);
/* Reads the version and content each of n pushed items got from a commit or put reply. */
int wsync_versions_decode(const wsync_msg_t *m, wsync_push_item_t *items, int n);
/*
 * One line per entry of a timed-out wait's "missing" list ("w1: has version 3,
 * last seen 0.5 s ago"); caller frees; NULL when there is none.
 */
char *wsync_missing_text(const msgpack_object *list);
/*
 * A msgpack object as JSON (caller decrefs): map keys that are not strings
 * are skipped, content ids become hex strings. NULL only when out of memory.
 */
json_t *wsync_obj_json(const msgpack_object *o);


/* The index of name in the n names (the enum value it stands for); -1 when absent. */
static inline int
wsync_name_index(const char *const *names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

/* The name of enum value i of the n names; "?" out of range. */
static inline const char *
wsync_name_of(const char *const *names, int n, int i)
{
	return i >= 0 && i < n ? names[i] : "?";
}

#endif
