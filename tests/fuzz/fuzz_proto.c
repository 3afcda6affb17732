/*
 * fuzz_proto.c - libFuzzer target: the input as one protocol message (a
 * reply, an announcement or a request frame). What decodes is read the way
 * every client reads a reply: the envelope, hello's fields, heads, a get's
 * range, a commit's versions, a wait's missing list and status as JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "fuzz_check.h"
#include "proto_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The string fields clients and watchers read, and the unsigned ones. */
static const char *const s_strs[] = { "pub", "hub", "store", "model", "error", "op",
    "worker", "reason", "mode" };
static const char *const s_u64s[] = { "id", "code", "chunk", "window", "heartbeat_ms",
    "off", "len", "version", "size", "content", "upload", "proto" };

static void
s_read_heads(const wsync_msg_t *m)
{
	const msgpack_object *all = wsync_msg_get(m, "heads");
	wsync_head_t h;

	if (all == NULL || all->type != MSGPACK_OBJECT_MAP)
		return;
	for (uint32_t i = 0; i < all->via.map.size; i++) {
		char model[WSYNC_MAX_MODEL + 1];
		if (wsync_obj_str(&all->via.map.ptr[i].key, model, sizeof(model)) < 0)
			continue;
		FUZZ_ASSERT(wsync_obj_get(all, model) != NULL, "heads: %s found, then lost", model);
		if (wsync_head_decode(&all->via.map.ptr[i].val, &h) == 0)
			FUZZ_ASSERT(wsync_obj_get(&all->via.map.ptr[i].val, "version")->via.u64 ==
			    h.version, "head version %llu", (unsigned long long)h.version);
	}
}

static void
s_read_versions(const wsync_msg_t *m)
{
	const msgpack_object *v = wsync_msg_get(m, "versions");
	wsync_push_item_t items[64];
	int n;

	if (v == NULL || v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > 64)
		return;
	n = (int)v->via.array.size;
	FUZZ_ASSERT(wsync_versions_decode(m, items, n + 1) < 0, "versions: took %d of %d",
	    n + 1, n);
	(void)wsync_versions_decode(m, items, n);
}

static void
s_read_missing(const wsync_msg_t *m)
{
	char *text = wsync_missing_text(wsync_msg_get(m, "missing"));

	if (text == NULL)
		return;
	for (const char *p = text; *p != '\0'; p++)
		FUZZ_ASSERT((unsigned char)*p >= 0x20 || *p == '\n',
		    "missing text has control byte %02x", (unsigned char)*p);
	free(text);
}

static void
s_read_json(const wsync_msg_t *m)
{
	json_t *j = wsync_obj_json(m->root);
	char *text;

	FUZZ_ASSERT(j != NULL && json_is_object(j), "status of a map is not a JSON object");
	text = json_dumps(j, JSON_COMPACT);
	free(text);
	json_decref(j);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wsync_err_t err = { 0 };
	wsync_msg_t m;
	uint64_t id, u;
	double d;
	char buf[600];

	if (wsync_msg_decode(&m, data, size, &err) < 0) {
		FUZZ_ASSERT(err.code == EX_PROTOCOL && err.msg[0] != '\0',
		    "decode failed with code %d, message \"%s\"", err.code, err.msg);
		FUZZ_ASSERT(m.root == NULL, "a failed decode left a root");
		wsync_msg_free(&m);
		return 0;
	}
	FUZZ_ASSERT(m.root != NULL && m.root->type == MSGPACK_OBJECT_MAP, "root is not a map");
	memset(&err, 0, sizeof(err));
	if (wsync_reply_decode(&m, &id, &err) < 0)
		FUZZ_ASSERT(err.code > 0 && err.code < 128, "refusal with code %d", err.code);
	for (size_t i = 0; i < sizeof(s_strs) / sizeof(s_strs[0]); i++)
		if (wsync_msg_str(&m, s_strs[i], buf, sizeof(buf)) == 0)
			FUZZ_ASSERT(strlen(buf) < sizeof(buf), "%s overflows", s_strs[i]);
	for (size_t i = 0; i < sizeof(s_u64s) / sizeof(s_u64s[0]); i++)
		(void)wsync_msg_u64(&m, s_u64s[i], &u);
	(void)wsync_obj_double(wsync_msg_get(&m, "time"), &d);
	(void)wsync_obj_true(wsync_msg_get(&m, "ok"));
	s_read_heads(&m);
	s_read_versions(&m);
	s_read_missing(&m);
	s_read_json(&m);
	wsync_msg_free(&m);
	return 0;
}
