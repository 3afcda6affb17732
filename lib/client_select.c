/* client_select.c - a version's layout from the hub, and fetching some of its tensors: its headers and their data. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"

/* The selection's ranges of a version: its headers, then the selected data. */
int
wsync_client_selects(const wsync_ckpt_out_t *sel, const char *path)
{
	return strncmp(path, WSYNC_CKPT_FILES ".", sizeof(WSYNC_CKPT_FILES)) == 0 ||
	    wsync_ckpt_selected(sel, path);
}

void
wsync_layout_free(wsync_layout_t *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->paths[i]);
	free(l->paths);
	free(l->data);
	memset(l, 0, sizeof(*l));
}

/*
 * Entry i of the layout, [path, off, len], into l: data in file order, inside
 * the version, each after the one before (an empty tensor says nothing of
 * where it lies); else 76.
 */
static int
s_layout_entry(wsync_layout_t *l, const msgpack_object *o, const char *model,
    const wsync_head_t *h, uint64_t *at, wsync_err_t *err)
{
	char path[WSYNC_MAX_PATH + 1];
	uint64_t off, len;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
	    wsync_obj_str(&o->via.array.ptr[0], path, sizeof(path)) < 0 ||
	    wsync_obj_u64(&o->via.array.ptr[1], &off) < 0 ||
	    wsync_obj_u64(&o->via.array.ptr[2], &len) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s version %" PRIu64 ": a layout entry "
		    "that is not [path, off, len]", model, h->version);
	if (len > 0 && (off < *at || off > h->size || len > h->size - off))
		return wsync_err_set(err, EX_PROTOCOL, "%s version %" PRIu64 ": tensor %s: "
		    "data at [%" PRIu64 ", +%" PRIu64 ") is out of order or beyond the %" PRIu64
		    " bytes of the version", model, h->version, path, off, len, h->size);
	if ((l->paths[l->n] = strdup(path)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	l->data[l->n++] = (wsync_range_t){ len > 0 ? off : 0, len };
	if (len > 0)
		*at = off + len;
	return 0;
}

int
wsync_client_layout(wsync_client_t *c, const char *model, const wsync_head_t *h,
    const char *worker, int64_t deadline, wsync_layout_t *l, wsync_err_t *err)
{
	const msgpack_object *t;
	wsync_parts_t p = { .n = 0 };
	wsync_msg_t m;
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, "layout", 2 + (worker != NULL)), at = 0;
	int rc = -1;

	memset(l, 0, sizeof(*l));
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", h->version);
	if (worker != NULL)
		wsync_enc_kv_str(&e, "worker", worker);
	if (wsync_client_call(c, &e, id, NULL, 0, wsync_ms_left(deadline), "layout", &m, &p,
	    err) < 0)
		return -1;
	if ((t = wsync_msg_get(&m, "tensors")) == NULL || t->type != MSGPACK_OBJECT_ARRAY) {
		wsync_err_set(err, EX_PROTOCOL, "%s: a layout reply without its tensors",
		    c->endpoint);
		goto out;
	}
	if ((l->paths = calloc((size_t)t->via.array.size + 1, sizeof(*l->paths))) == NULL ||
	    (l->data = calloc((size_t)t->via.array.size + 1, sizeof(*l->data))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < t->via.array.size; i++)
		if (s_layout_entry(l, &t->via.array.ptr[i], model, h, &at, err) < 0)
			goto out;
	rc = 0;
out:
	if (rc < 0)
		wsync_layout_free(l);
	wsync_client_release(&m, &p);
	return rc;
}

/* Adds [off, off + len) to want (*n ranges), joined to the range before it when they touch. */
static void
s_add(wsync_range_t *want, size_t *n, uint64_t off, uint64_t len)
{
	wsync_range_t *last = *n > 0 ? &want[*n - 1] : NULL;

	if (len == 0)
		return;
	if (last != NULL && last->off + last->len == off)
		last->len += len;
	else
		want[(*n)++] = (wsync_range_t){ off, len };
}

int
wsync_client_get_selected(wsync_client_t *c, const char *model, wsync_fetched_t *out,
    const char *worker, const wsync_ckpt_out_t *sel, int fd, int64_t deadline,
    wsync_err_t *err)
{
	const wsync_head_t *h = &out->head;
	wsync_range_t *want = NULL;
	wsync_layout_t l;
	uint64_t at = 0;
	size_t n = 0;
	int rc = -1;

	if (wsync_client_layout(c, model, h, worker, deadline, &l, err) < 0)
		return -1;
	/* Each tensor adds at most two ranges (headers, data); one more for the tail. */
	if ((want = calloc(2 * l.n + 1, sizeof(*want))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	/* Every byte outside the data (the headers), and the data selected. */
	for (size_t i = 0; i < l.n; i++) {
		if (l.data[i].len == 0)
			continue;
		s_add(want, &n, at, l.data[i].off - at);
		if (wsync_client_selects(sel, l.paths[i]))
			s_add(want, &n, l.data[i].off, l.data[i].len);
		at = l.data[i].off + l.data[i].len;
	}
	s_add(want, &n, at, h->size - at);
	rc = wsync_client_get_ranges(c, model, out, worker, fd, want, n, deadline, err);
out:
	free(want);
	wsync_layout_free(&l);
	return rc;
}

int
wsync_client_verify_selected(int fd, const char *model, const wsync_head_t *h,
    const wsync_ckpt_out_t *sel, wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open_fd(fd, model, err);
	int rc = -1;

	if (f == NULL)
		return -1;
	if (wsync_file_content_id(f) != h->content || wsync_file_version(f) != h->version) {
		wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": received content "
		    "%016" PRIx64 " version %" PRIu64 ", the hub announced %016" PRIx64, model,
		    h->version, wsync_file_content_id(f), wsync_file_version(f), h->content);
		goto out;
	}
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		uint64_t got;
		if (!wsync_client_selects(sel, t->path))
			continue;
		if ((got = wsync_hash(t->data, (size_t)t->nbytes)) != t->hash) {
			wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": tensor %s: hash "
			    "%016" PRIx64 ", its header says %016" PRIx64, model, h->version, t->path,
			    got, t->hash);
			goto out;
		}
	}
	rc = 0;
out:
	wsync_file_close(&f);
	return rc;
}
