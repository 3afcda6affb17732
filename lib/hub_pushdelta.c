/*
 * hub_pushdelta.c - a pushed file sent as a delta from a version the hub
 * retains (wsync(7), DELTAS): the base held open from the begin, the delta
 * received into a file of its own, the version rebuilt and verified from both
 * at the commit.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"

int
hub_pushdelta_begin(wsync_hub_t *h, const msgpack_object *f, const char *model,
    struct hub_ufile *uf, wsync_err_t *err)
{
	const msgpack_object *b = wsync_obj_get(f, "base");
	const wsync_model_t *m;
	const wsync_version_t *v;
	uint64_t base, content, size;

	uf->base_fd = -1;
	uf->delta.fd = -1;
	if (b == NULL)
		return 0;
	if (wsync_obj_u64(b, &base) < 0 || base == 0 ||
	    wsync_obj_u64(wsync_obj_get(f, "base_content"), &content) < 0 ||
	    wsync_obj_u64(wsync_obj_get(f, "delta"), &size) < 0 || size == 0)
		return wsync_err_set(err, EX_PROTOCOL, "model %s: a file sent as a delta needs "
		    "base (a version), base_content and delta (its size in bytes)", model);
	/* Refused as a fetch of the base is: the pusher sends the version whole then. */
	if ((m = wsync_store_find(h->store, model)) == NULL ||
	    (v = wsync_model_version(m, base)) == NULL)
		return m == NULL ? wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version",
		    model) : hub_no_version(m, base, h->keep, err);
	if (v->content != content)
		return wsync_err_set(err, EX_DATAERR, "model %s version %" PRIu64 " is content "
		    "%016" PRIx64 " here, not %016" PRIx64 ": send the version whole", model, base,
		    v->content, content);
	/* Its own descriptor: the version may be retired before the commit, not changed. */
	if ((uf->base_fd = hub_open_version(h, model, base)) < 0)
		return wsync_err_set(err, EX_IOERR, "model %s version %" PRIu64 ": cannot open "
		    "it as a base", model, base);
	if (wsync_store_temp_open(h->store, model, &uf->delta, err) < 0)
		return -1;
	uf->base = base;
	uf->head_size = uf->size;
	uf->size = size;
	return 0;
}

int
hub_pushdelta_apply(wsync_hub_t *h, struct hub_upload *u, size_t i, wsync_err_t *err)
{
	struct hub_ufile *uf = &u->files[i];
	wsync_store_temp_t *t = &u->temps[i];
	char name[WSYNC_MAX_MODEL + 64];
	uint64_t version, content;

	snprintf(name, sizeof(name), "model %s: delta from version %" PRIu64, t->model,
	    uf->base);
	/* Built into the upload's file, each tensor and the content id checked (65). */
	if (ftruncate(t->fd, 0) < 0 || lseek(t->fd, 0, SEEK_SET) < 0 ||
	    lseek(uf->delta.fd, 0, SEEK_SET) < 0 ||
	    wsync_delta_apply(uf->base_fd, uf->delta.fd, t->fd, name, &version, &content,
	    err) < 0) {
		hub_log(h, "event=abort upload=%" PRIu64 " model=%s reason=\"the delta did not "
		    "apply\"", u->id, t->model);
		return -1;
	}
	t->verified = 1;
	uf->filled = uf->size = uf->head_size;
	hub_pushdelta_end(uf);
	return 0;
}

void
hub_pushdelta_end(struct hub_ufile *uf)
{
	if (uf->base_fd >= 0)
		close(uf->base_fd);
	uf->base_fd = -1;
	if (uf->base != 0)
		wsync_store_temp_remove(&uf->delta);
	uf->base = 0;
}
