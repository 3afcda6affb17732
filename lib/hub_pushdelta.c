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
#include <sys/file.h>
#include <unistd.h>

#include "hub_int.h"

/*
 * The retained version of m whose content id is content, the newest first: a
 * trainer's base is the file it pushed before, which the hub stamped with a
 * number the trainer never saw. Compares the content ids the store holds.
 */
static const wsync_version_t *
s_by_content(const wsync_model_t *m, uint64_t content)
{
	for (size_t i = m->nversions; i > 0; i--)
		if (m->versions[i - 1].content == content)
			return &m->versions[i - 1];
	return NULL;
}

int
hub_pushdelta_begin(wsync_hub_t *h, const msgpack_object *f, const char *model,
    struct hub_ufile *uf, wsync_err_t *err)
{
	const msgpack_object *b = wsync_obj_get(f, "base");
	const wsync_model_t *m;
	const wsync_version_t *v;
	uint64_t base = 0, content, size;

	uf->base_fd = -1;
	uf->delta.fd = -1;
	if (wsync_obj_get(f, "delta") == NULL)
		return 0;
	if ((b != NULL && (wsync_obj_u64(b, &base) < 0 || base == 0)) ||
	    wsync_obj_u64(wsync_obj_get(f, "base_content"), &content) < 0 ||
	    wsync_obj_u64(wsync_obj_get(f, "delta"), &size) < 0 || size == 0)
		return wsync_err_set(err, EX_PROTOCOL, "model %s: a file sent as a delta needs "
		    "base_content, delta (its size in bytes) and, when it names one, base (a "
		    "version)", model);
	/* wsync sends a delta only when it is under half of the version (DELTAS). */
	if (size > uf->size)
		return wsync_err_set(err, EX_USAGE, "model %s: a delta of %" PRIu64 " bytes for a "
		    "version of %" PRIu64 ": a delta is smaller than its version (send the version "
		    "whole)", model, size, uf->size);
	if ((m = wsync_store_find(h->store, model)) == NULL)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", model);
	/* Refused as a fetch of the base is: the pusher sends the version whole then. */
	if (b == NULL && (v = s_by_content(m, content)) == NULL &&
	    (v = wsync_model_version(m, hub_group_base(h, model, content))) == NULL)
		return wsync_err_set(err, EX_NOINPUT, "model %s holds no version of content "
		    "%016" PRIx64 " (never pushed here, or retired)", model, content);
	if (b != NULL && (v = wsync_model_version(m, base)) == NULL)
		return hub_no_version(m, base, h->keep, err);
	if (b != NULL && v->content != content)
		return wsync_err_set(err, EX_DATAERR, "model %s version %" PRIu64 " is content "
		    "%016" PRIx64 " here, not %016" PRIx64 ": send the version whole", model, base,
		    v->content, content);
	/* Its own descriptor: the version may be retired before the commit, not changed. */
	if ((uf->base_fd = hub_open_version(h, model, v->version)) < 0)
		return wsync_err_set(err, EX_IOERR, "model %s version %" PRIu64 ": cannot open "
		    "it as a base", model, v->version);
	/*
	 * Shared-locked: retired meanwhile, its file may become a spare, which a
	 * rebuild takes only when it can lock it alone, never while it is read.
	 */
	(void)flock(uf->base_fd, LOCK_SH | LOCK_NB);
	if (wsync_store_temp_open(h->store, model, &uf->delta, err) < 0)
		return -1;
	uf->base = v->version;
	uf->head_size = uf->size;
	uf->size = size;
	return 0;
}

/*
 * Replaces uf's delta, made against the pusher's copy of the base, by the
 * same delta against the hub's (base_off where the hub's version holds each
 * tensor), numbered as the hub numbers the base. -1 with err (65).
 */
static int
s_rebase(wsync_hub_t *h, struct hub_ufile *uf, const char *model, const char *name,
    wsync_err_t *err)
{
	wsync_store_temp_t t;

	if (wsync_store_temp_open(h->store, model, &t, err) < 0)
		return -1;
	/* The delta is read where it lies (mapped): its file's position does not matter. */
	if (wsync_delta_rebase(&uf->delta.fd, 1, uf->base_fd, uf->base, -1, t.fd, name, NULL,
	    err) < 0) {
		wsync_store_temp_remove(&t);
		return -1;
	}
	wsync_store_temp_remove(&uf->delta);
	uf->delta = t;
	return 0;
}

/* The name of file i's delta in errors, into name (size bytes). */
static void
s_name(const struct hub_upload *u, size_t i, char *name, size_t size)
{
	snprintf(name, size, "model %s: delta from version %" PRIu64, u->temps[i].model,
	    u->files[i].base);
}

int
hub_pushdelta_rebase(wsync_hub_t *h, struct hub_upload *u, size_t i, wsync_err_t *err)
{
	struct hub_ufile *uf = &u->files[i];
	char name[WSYNC_MAX_MODEL + 64];
	uint64_t size;

	if (uf->rebased)
		return 0;
	s_name(u, i, name, sizeof(name));
	/* The size the begin declared is the one its room was checked for: no more is written. */
	if (s_rebase(h, uf, u->temps[i].model, name, err) < 0 ||
	    wsync_delta_head_size(uf->delta.fd, name, &size, err) < 0 ||
	    wsync_delta_size_check(size, uf->head_size, name, "its begin said", err) < 0)
		return -1;
	uf->rebased = 1;
	return 0;
}

/* Which files a rebuild went through kept mappings of, for the log (wsync-serve(1) LOG). */
static const char *
s_mapped(const wsync_delta_dest_t *d)
{
	if (d->base_kept && d->head_kept)
		return "base,version";
	return d->head_kept ? "version" : d->base_kept ? "base" : "none";
}

int
hub_pushdelta_apply(wsync_hub_t *h, struct hub_upload *u, size_t i, wsync_err_t *err)
{
	struct hub_ufile *uf = &u->files[i];
	wsync_store_temp_t *t = &u->temps[i], spare;
	wsync_delta_dest_t dest;
	char name[WSYNC_MAX_MODEL + 64];
	uint64_t version, content;
	int recycled;

	s_name(u, i, name, sizeof(name));
	if (hub_pushdelta_rebase(h, u, i, err) < 0)
		return -1;
	/*
	 * Rebuilt into a spare's existing pages when one is free (--recycle):
	 * writing the version costs a copy, not fresh pages. Else a new file.
	 */
	if ((recycled = wsync_store_slot_open(h->store, t->model, uf->head_size, &spare,
	    err)) < 0)
		return -1;
	wsync_store_temp_remove(t);
	*t = spare;
	u->recycled += (size_t)recycled;
	/*
	 * Built into the upload's file, each tensor and the content id checked
	 * (65): from mapping to mapping where the store keeps them (h->kept).
	 */
	dest = (wsync_delta_dest_t){ .fd = t->fd, .path = t->path, .kept = h->kept };
	if (wsync_delta_apply_into(uf->base_fd, uf->delta.fd, &dest, name, &version, &content,
	    err) < 0) {
		hub_log(h, "event=abort upload=%" PRIu64 " model=%s reason=\"the delta did not "
		    "apply\"", u->id, t->model);
		return -1;
	}
	t->verified = 1;
	hub_log(h, "event=rebuild upload=%" PRIu64 " model=%s base=%" PRIu64 " size=%" PRIu64
	    " recycled=%d mapped=%s", u->id, t->model, uf->base, uf->head_size, recycled,
	    s_mapped(&dest));
	uf->filled = uf->size = uf->head_size;
	close(uf->base_fd);
	uf->base_fd = -1;
	return 0;
}

void
hub_pushdelta_keep(wsync_hub_t *h, const struct hub_ufile *uf, const char *model,
    uint64_t version)
{
	if (uf->base != 0 && uf->delta.fd >= 0)
		hub_delta_adopt(h, model, uf->base, version, &uf->delta.fd, 1);
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
	uf->rebased = 0;
}
