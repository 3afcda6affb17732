/* client_select.c - fetching some tensors of a version: its layout from the hub, then its headers and their data. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"

/* The selection's ranges of a version: its headers, then the selected data. */
struct s_plan {
	const char *model;
	const wsync_head_t *h;
	const wsync_ckpt_out_t *sel;
	wsync_range_t *want;
	size_t nwant;
	uint64_t at;                 /* every byte before it is planned or left out */
	wsync_err_t *err;
};

int
wsync_client_selects(const wsync_ckpt_out_t *sel, const char *path)
{
	return strncmp(path, WSYNC_CKPT_FILES ".", sizeof(WSYNC_CKPT_FILES)) == 0 ||
	    wsync_ckpt_selected(sel, path);
}

/* Adds [off, off + len) to the plan, joined to the range before it when they touch. */
static void
s_add(struct s_plan *pl, uint64_t off, uint64_t len)
{
	wsync_range_t *last = pl->nwant > 0 ? &pl->want[pl->nwant - 1] : NULL;

	if (len == 0)
		return;
	if (last != NULL && last->off + last->len == off)
		last->len += len;
	else
		pl->want[pl->nwant++] = (wsync_range_t){ off, len };
}

/*
 * One entry of the layout, [path, off, len]: the bytes since the last data
 * (headers) are fetched, and the data when selected. Data lies in file order,
 * inside the version, each after the one before; else 76.
 */
static int
s_plan_tensor(struct s_plan *pl, const msgpack_object *o)
{
	char path[WSYNC_MAX_PATH + 1];
	uint64_t off, len;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
	    wsync_obj_str(&o->via.array.ptr[0], path, sizeof(path)) < 0 ||
	    wsync_obj_u64(&o->via.array.ptr[1], &off) < 0 ||
	    wsync_obj_u64(&o->via.array.ptr[2], &len) < 0)
		return wsync_err_set(pl->err, EX_PROTOCOL, "%s version %" PRIu64 ": a layout entry "
		    "that is not [path, off, len]", pl->model, pl->h->version);
	if (len == 0)
		return 0;
	if (off < pl->at || off > pl->h->size || len > pl->h->size - off)
		return wsync_err_set(pl->err, EX_PROTOCOL, "%s version %" PRIu64 ": tensor %s: "
		    "data at [%" PRIu64 ", +%" PRIu64 ") is out of order or beyond the %" PRIu64
		    " bytes of the version", pl->model, pl->h->version, path, off, len,
		    pl->h->size);
	s_add(pl, pl->at, off - pl->at);
	if (wsync_client_selects(pl->sel, path))
		s_add(pl, off, len);
	pl->at = off + len;
	return 0;
}

int
wsync_client_get_selected(wsync_client_t *c, const char *model, const wsync_head_t *h,
    const char *worker, const wsync_ckpt_out_t *sel, int fd, int64_t deadline,
    wsync_err_t *err)
{
	struct s_plan pl = { .model = model, .h = h, .sel = sel, .err = err };
	const msgpack_object *t;
	wsync_parts_t p = { .n = 0 };
	wsync_msg_t m;
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, "layout", 2 + (worker != NULL));
	int rc = -1;

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
	/* Each tensor adds at most two ranges (headers, data); one more for the tail. */
	if ((pl.want = calloc(2 * (size_t)t->via.array.size + 1, sizeof(*pl.want))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < t->via.array.size; i++)
		if (s_plan_tensor(&pl, &t->via.array.ptr[i]) < 0)
			goto out;
	s_add(&pl, pl.at, h->size - pl.at);
	rc = wsync_client_get_ranges(c, model, h, worker, fd, pl.want, pl.nwant, deadline, err);
out:
	free(pl.want);
	wsync_client_release(&m, &p);
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
