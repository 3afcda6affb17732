/* hub_upload.c - uploads and slots: begin, chunk, commit, put, abort; announcing a commit. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"

void
hub_pack_versions(wsync_enc_t *e, const wsync_committed_t *c, size_t n)
{
	wsync_enc_str(e, "versions");
	msgpack_pack_array(&e->pk, n);
	for (size_t i = 0; i < n; i++) {
		msgpack_pack_map(&e->pk, 4);
		wsync_enc_kv_str(e, "model", c[i].model);
		wsync_enc_kv_u64(e, "version", c[i].version);
		wsync_enc_kv_u64(e, "size", c[i].size);
		wsync_enc_kv_u64(e, "content", c[i].content);
	}
}

/* Upload id of the client r comes from; another client's is refused (77). */
static struct hub_upload *
s_upload_find(wsync_hub_t *h, const struct hub_req *r, uint64_t id, wsync_err_t *err)
{
	struct hub_upload *u;

	for (int i = 0; i < HUB_UPLOADS; i++) {
		if (id == 0 || h->uploads[i].id != id)
			continue;
		if (strcmp(h->uploads[i].peer, r->peer) != 0) {
			wsync_err_set(err, EX_NOPERM, "upload %" PRIu64 " is another client's", id);
			return NULL;
		}
		return &h->uploads[i];
	}
	if ((u = hub_group_upload(h, id)) != NULL) {
		if (strcmp(u->peer, r->peer) == 0)
			return u;
		wsync_err_set(err, EX_NOPERM, "upload %" PRIu64 " is another client's", id);
		return NULL;
	}
	wsync_err_set(err, EX_NOINPUT, "upload %" PRIu64 " does not exist (it expired, was "
	    "aborted or committed)", id);
	return NULL;
}

/* A slot whose files were written since last seen is touched. */
static void
s_upload_progress(struct hub_upload *u, int64_t now)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < u->nfiles; i++) {
		struct stat st;
		if (u->temps[i].fd >= 0 && fstat(u->temps[i].fd, &st) == 0)
			sum += (uint64_t)st.st_mtim.tv_sec * 1000000000u +
			    (uint64_t)st.st_mtim.tv_nsec;
	}
	if (sum != u->written) {
		u->written = sum;
		u->touched = now;
	}
}

void
hub_upload_end(struct hub_upload *u)
{
	for (size_t i = 0; i < u->nfiles; i++) {
		wsync_store_temp_remove(&u->temps[i]);
		hub_pushdelta_end(&u->files[i]);
	}
	free(u->temps);
	free(u->files);
	hub_strv_free(u->targets, u->ntargets);
	memset(u, 0, sizeof(*u));
}

void
hub_uploads_expire(wsync_hub_t *h, int64_t now)
{
	for (int i = 0; i < HUB_UPLOADS; i++) {
		if (h->uploads[i].id == 0)
			continue;
		/* A writer filling a slot sends nothing, but the files change. */
		if (h->uploads[i].slot)
			s_upload_progress(&h->uploads[i], now);
		if (now - h->uploads[i].touched >= HUB_UPLOAD_IDLE_MS) {
			hub_log(h, "event=expire upload=%" PRIu64 " idle_ms=%d", h->uploads[i].id,
			    HUB_UPLOAD_IDLE_MS);
			hub_upload_end(&h->uploads[i]);
		}
	}
	hub_groups_expire(h, now);
}

void
hub_uploads_stop(wsync_hub_t *h)
{
	for (int i = 0; i < HUB_UPLOADS; i++)
		if (h->uploads[i].id != 0) {
			hub_log(h, "event=abort upload=%" PRIu64 " reason=\"stopping\"",
			    h->uploads[i].id);
			hub_upload_end(&h->uploads[i]);
		}
	hub_groups_stop(h);
}

/* Reads begin's files: [{model, size}] into u. */
static int
s_begin_files(wsync_hub_t *h, const msgpack_object *o, struct hub_upload *u, wsync_err_t *err)
{
	if (o == NULL)
		return hub_missing("files", err);
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
	    o->via.array.size > HUB_UPLOAD_FILES)
		return wsync_err_set(err, EX_PROTOCOL, "field \"files\" is not a list of 1 to %d "
		    "files", HUB_UPLOAD_FILES);
	if ((u->temps = calloc(o->via.array.size, sizeof(*u->temps))) == NULL ||
	    (u->files = calloc(o->via.array.size, sizeof(*u->files))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	/* No descriptors yet: a file refused before its delta's fields closes none. */
	for (uint32_t i = 0; i < o->via.array.size; i++)
		u->files[i].base_fd = u->files[i].delta.fd = -1;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *f = &o->via.array.ptr[i];
		char model[WSYNC_MAX_MODEL + 1];
		uint64_t size;
		if (wsync_obj_str(wsync_obj_get(f, "model"), model, sizeof(model)) < 0 ||
		    wsync_model_id_check(model) < 0 ||
		    wsync_obj_u64(wsync_obj_get(f, "size"), &size) < 0)
			return wsync_err_set(err, EX_PROTOCOL, "files[%u] is not {model: a model id, "
			    "size: an unsigned integer}", i);
		if (hub_relay_mirrors(h, model, err))
			return -1;
		if (size == 0 || size > HUB_MAX_FILE)
			return wsync_err_set(err, EX_USAGE, "file %u (model %s) has %" PRIu64 " bytes:"
			    " a file has 1 byte to 64 GiB", i, model, size);
		u->files[i].size = size;
		if (u->slot) {
			/* Written in place: sized now, and of a spare's existing pages if free. */
			int rc = wsync_store_slot_open(h->store, model, size, &u->temps[i], err);
			if (rc < 0)
				return -1;
			/* Its writer may cut it short: never read through a mapping of it. */
			wsync_kept_forget(h->kept, u->temps[i].fd);
			u->recycled += (size_t)rc;
		} else if (wsync_store_temp_open(h->store, model, &u->temps[i], err) < 0)
			return -1;
		u->nfiles = i + 1;
		if (u->slot && wsync_obj_get(f, "delta") != NULL)
			return wsync_err_set(err, EX_USAGE, "file %u (model %s): a slot is written in "
			    "place, not sent as a delta", i, model);
		if (hub_pushdelta_begin(h, f, model, &u->files[i], err) < 0)
			return -1;
	}
	return 0;
}

static int
s_upload_open(wsync_hub_t *h, struct hub_req *r, struct hub_upload **up, wsync_err_t *err)
{
	struct hub_upload *u = NULL;
	char list[512] = "", deltas[512] = "";
	size_t n = 0, m = 0, mine = 0, busy = hub_groups_open(h);
	int part;
	uint64_t pending = 0, room = 0;

	/* A part of a group has its entry in the group, which counts as one upload. */
	if (hub_group_begin(h, r, &u, err) < 0)
		return -1;
	part = u != NULL;
	for (int i = 0; i < HUB_UPLOADS; i++) {
		const struct hub_upload *o = &h->uploads[i];
		if (o->id == 0 && u == NULL)
			u = &h->uploads[i];
		if (o->id != 0 && strcmp(o->peer, r->peer) == 0)
			mine++;
		busy += o->id != 0;
		for (size_t j = 0; o->id != 0 && j < o->nfiles; j++)
			pending += o->files[j].size - o->files[j].filled;
	}
	if (u == NULL || (!part && busy >= HUB_UPLOADS))
		return wsync_err_set(err, EX_UNAVAILABLE, "the hub has %d uploads in flight "
		    "already; try again later", HUB_UPLOADS);
	/* One peer cannot take every upload: others still get to push. */
	if (mine >= WSYNC_PEER_UPLOADS && !part)
		return wsync_err_set(err, EX_UNAVAILABLE, "this client has %d uploads in flight "
		    "already (the most one may have); try again later", WSYNC_PEER_UPLOADS);
	/* A begin with "local": true asks for a slot. */
	if (hub_str(r, "pusher", 0, wsync_id_check, u->pusher, sizeof(u->pusher), err) < 0 ||
	    hub_bool(r, "local", &u->slot, err) < 0 ||
	    hub_list(wsync_msg_get(&r->msg, "workers"), "workers", 0, wsync_id_check,
	    &u->targets, &u->ntargets, err) < 0 ||
	    s_begin_files(h, wsync_msg_get(&r->msg, "files"), u, err) < 0)
		goto fail;
	for (size_t i = 0; i < u->nfiles; i++) {
		u->total += u->files[i].size;
		room += u->files[i].size + u->files[i].head_size;
	}
	if (wsync_space_check(wsync_store_dir(h->store), room, pending, err) < 0)
		goto fail;
	if (u->targets != NULL && u->ntargets == 0) {
		wsync_err_set(err, EX_USAGE, "field \"workers\" is empty: the version would reach "
		    "nobody");
		goto fail;
	}
	u->id = ++h->last_upload;
	h->counts.uploads++;
	u->touched = wsync_now_ms();
	snprintf(u->peer, sizeof(u->peer), "%s", r->peer);
	for (size_t i = 0; i < u->nfiles; i++)
		n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0, "%s%s",
		    i ? "," : "", u->temps[i].model);
	/* Files sent as deltas: deltas=MODEL@BASE:BYTES,... */
	for (size_t i = 0, k = 0; i < u->nfiles; i++)
		if (u->files[i].base != 0)
			m += (size_t)snprintf(deltas + m, m < sizeof(deltas) ? sizeof(deltas) - m : 0,
			    "%s%s@%" PRIu64 ":%" PRIu64, k++ ? "," : " deltas=", u->temps[i].model,
			    u->files[i].base, u->files[i].size);
	/* The log calls a slot transfer=copy: its bytes are copied in place, not sent. */
	hub_log(h, "event=begin upload=%" PRIu64 " models=%s pusher=%s recycled=%zu transfer=%s%s",
	    u->id, list, u->pusher[0] ? u->pusher : "-", u->recycled,
	    u->slot ? "copy" : "socket", deltas);
	*up = u;
	return 0;
fail:
	hub_upload_end(u);
	return -1;
}

/*
 * The chunks an upload sent over the socket may keep in flight: its share of
 * HUB_UPLOAD_WINDOW among the socket uploads open as it begins (itself too).
 */
static uint64_t
s_upload_window(const wsync_hub_t *h)
{
	size_t n = hub_groups_sending(h);

	for (int i = 0; i < HUB_UPLOADS; i++)
		n += h->uploads[i].id != 0 && !h->uploads[i].slot;
	if (n <= 1)
		return HUB_UPLOAD_WINDOW;
	return HUB_UPLOAD_WINDOW / n > 0 ? HUB_UPLOAD_WINDOW / n : 1;
}

int
hub_op_begin(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	struct hub_upload *u;
	wsync_enc_t e;

	if (s_upload_open(h, r, &u, err) < 0)
		return -1;
	hub_ok(&e, r->id, 2);
	wsync_enc_kv_u64(&e, "upload", u->id);
	if (!u->slot)
		wsync_enc_kv_u64(&e, "window", s_upload_window(h));
	if (u->slot) {
		/* The writer shares this host and store: it fills the slot's files in place. */
		wsync_enc_str(&e, "paths");
		msgpack_pack_array(&e.pk, u->nfiles);
		for (size_t i = 0; i < u->nfiles; i++)
			wsync_enc_str(&e, u->temps[i].path);
	}
	hub_reply(h, r, &e);
	return 0;
}

/* Writes len bytes at off of file into upload u, refusing gaps and overruns. */
static int
s_upload_write(struct hub_upload *u, uint64_t file, uint64_t off, const char *data,
    uint64_t len, wsync_err_t *err)
{
	struct hub_ufile *f;
	uint64_t done = 0;

	if (file >= u->nfiles)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " has no file %" PRIu64,
		    u->id, file);
	/* A slot is filled in the store: bytes sent here could ride on a trusted commit. */
	if (u->slot)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " is written in place in the "
		    "store, not sent", u->id);
	f = &u->files[file];
	if (off > f->filled)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %" PRIu64 ": a chunk "
		    "at offset %" PRIu64 " leaves a gap (%" PRIu64 " bytes received)", u->id, file,
		    off, f->filled);
	if (len > f->size - off)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %" PRIu64 ": a chunk "
		    "of %" PRIu64 " bytes at offset %" PRIu64 " goes past its size of %" PRIu64,
		    u->id, file, len, off, f->size);
	while (done < len) {
		ssize_t n = pwrite(f->base != 0 ? f->delta.fd : u->temps[file].fd, data + done,
		    len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wsync_err_set(err, EX_IOERR, "upload %" PRIu64 " file %" PRIu64 ": "
			    "cannot write: %s", u->id, file, n < 0 ? strerror(errno) : "no progress");
		done += (uint64_t)n;
	}
	if (off + len > f->filled)
		f->filled = off + len;
	u->touched = wsync_now_ms();
	return 0;
}

int
hub_op_chunk(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	uint64_t id, file, off, len;
	struct hub_upload *u;
	wsync_enc_t e;

	if (hub_u64(r, "upload", 1, &id, err) < 0 || hub_u64(r, "file", 1, &file, err) < 0 ||
	    hub_u64(r, "off", 1, &off, err) < 0)
		return -1;
	if (r->parts->n != 4)
		return wsync_err_set(err, EX_PROTOCOL, "a chunk without its data frame");
	if ((u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	len = wsync_part_size(r->parts, 3);
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "a chunk of %" PRIu64 " bytes is over the "
		    "chunk size of %u", len, WSYNC_CHUNK);
	/* Resending is fine; rewriting the same bytes for ever to keep an upload open is not. */
	if ((u->received += len) > 2 * u->total + (uint64_t)WSYNC_WINDOW * WSYNC_CHUNK) {
		hub_log(h, "event=abort upload=%" PRIu64 " peer=%s reason=\"sent more than twice "
		    "its size\"", id, u->peer);
		hub_upload_end(u);
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " was sent more than twice "
		    "its %" PRIu64 " bytes: dropped", id, u->total);
	}
	if (s_upload_write(u, file, off, wsync_part_data(r->parts, 3), len, err) < 0)
		return -1;
	h->counts.bytes_received += len;
	hub_ok(&e, r->id, 0);
	hub_reply(h, r, &e);
	return 0;
}

/*
 * Announces a committed version on PUB: topic model, then {model, version, size,
 * content, workers, group}; group names every model of the same commit, so a
 * watcher of several knows when it must take them together.
 */
void
hub_announce(wsync_hub_t *h, const wsync_committed_t *c, const wsync_store_temp_t *group,
    size_t n, char *const *targets, size_t ntargets)
{
	wsync_enc_t e;

	wsync_enc_init(&e);
	msgpack_pack_map(&e.pk, 7);
	wsync_enc_str(&e, "group");
	msgpack_pack_array(&e.pk, n);
	for (size_t i = 0; i < n; i++)
		wsync_enc_str(&e, group[i].model);
	wsync_enc_kv_str(&e, "model", c->model);
	wsync_enc_kv_u64(&e, "version", c->version);
	wsync_enc_kv_u64(&e, "size", c->size);
	wsync_enc_kv_u64(&e, "content", c->content);
	wsync_enc_kv_u64(&e, "mtime", c->mtime_ns);
	wsync_enc_str(&e, "workers");
	if (targets == NULL)
		msgpack_pack_nil(&e.pk);
	else {
		msgpack_pack_array(&e.pk, ntargets);
		for (size_t i = 0; i < ntargets; i++)
			wsync_enc_str(&e, targets[i]);
	}
	hub_publish(h, c->model, e.sb.data, e.sb.size);
	wsync_enc_free(&e);
}

/*
 * Commits every file of u together, announces the versions and answers r with
 * them: at once, or, when r asks for a wait (its mode, for one file), once
 * that wait is over.
 */
static int
s_upload_commit(wsync_hub_t *h, struct hub_req *r, struct hub_upload *u, wsync_err_t *err)
{
	wsync_committed_t out[HUB_UPLOAD_FILES];
	char targets[512] = "";
	wsync_commit_info_t info = { .versions = NULL };
	wsync_enc_t e;
	struct hub_wait wt = { .mode = WSYNC_WAIT_ALL, .commit = 1 };
	int waits = wsync_msg_get(&r->msg, "mode") != NULL, rc = 0;
	int64_t asked = wsync_now_ms();         /* the wait's timeout runs from here */
	uint64_t id = u->id, timeout = 0;
	size_t n = 0;

	for (size_t i = 0; i < u->nfiles; i++) {
		struct stat st;
		if (u->slot && fstat(u->temps[i].fd, &st) == 0 && (uint64_t)st.st_size ==
		    u->files[i].size)
			u->files[i].filled = u->files[i].size;
		if (u->files[i].filled != u->files[i].size)
			return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " file %zu (model %s) "
			    "has %" PRIu64 " of its %" PRIu64 " bytes", id, i, u->temps[i].model,
			    u->files[i].filled, u->files[i].size);
	}
	/*
	 * A delta that does not apply ends the upload: the pusher sends the
	 * version whole. A part's is rebuilt with its group's union. One rebuilt
	 * already (a commit refused after it, then sent again) is not rebuilt twice.
	 */
	for (size_t i = 0; i < u->nfiles; i++)
		if (u->files[i].base != 0 && !u->temps[i].verified && !hub_group_defers(h, u) &&
		    hub_pushdelta_apply(h, u, i, err) < 0) {
			hub_upload_end(u);
			return -1;
		}
	/* A part waits for the rest of its group, committed with the last one. */
	if ((rc = hub_group_commit(h, r, u, err)) != 1)
		return rc;
	rc = 0;
	info.pusher = u->pusher;
	info.time = wsync_wall_time();
	info.targets = (const char *const *)u->targets;
	info.ntargets = u->ntargets;
	if (hub_bool(r, "trust", &info.trust, err) < 0)
		return -1;
	if (info.trust && !u->slot)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " came through the socket: "
		    "the hub verifies it (trust is for files written in its store)", id);
	if (waits && u->nfiles != 1)
		return wsync_err_set(err, EX_USAGE, "upload %" PRIu64 " has %zu files: a commit "
		    "waits for one model's version (wait for each after the commit)", id,
		    u->nfiles);
	if (waits && hub_wait_parse(h, r, &wt, &timeout, err) < 0) {
		hub_wait_free(&wt);
		return -1;
	}
	/* On success the store consumed the temporary files: hub_upload_end leaves them. */
	if (wsync_store_commit(h->store, u->temps, u->nfiles, &info, out, err) < 0) {
		hub_wait_free(&wt);
		hub_upload_end(u);
		return -1;
	}
	h->counts.commits += u->nfiles;
	/* A delta pushed is the one a watcher on its base receives: none is made again. */
	for (size_t i = 0; i < u->nfiles; i++)
		hub_pushdelta_keep(h, &u->files[i], out[i].model, out[i].version);
	if (!waits) {
		hub_ok(&e, r->id, 1);
		hub_pack_versions(&e, out, u->nfiles);
		hub_reply(h, r, &e);
	}
	for (size_t i = 0; i < u->ntargets; i++)
		n += (size_t)snprintf(targets + n, n < sizeof(targets) ? sizeof(targets) - n : 0,
		    "%s%s", i ? "," : " workers=", u->targets[i]);
	for (size_t i = 0; i < u->nfiles; i++) {
		hub_log(h, "event=commit model=%s version=%" PRIu64 " size=%" PRIu64 " content=%016"
		    PRIx64 " pusher=%s upload=%" PRIu64 "%s%s", out[i].model, out[i].version,
		    out[i].size, out[i].content, u->pusher[0] ? u->pusher : "-", id, targets,
		    info.trust ? " verified=no" : "");
		hub_announce(h, &out[i], u->temps, u->nfiles, u->targets, u->ntargets);
	}
	for (size_t i = 0; i < u->nfiles; i++)
		hub_waits_check(h, out[i].model);
	hub_upload_end(u);
	if (waits) {
		memcpy(wt.model, out[0].model, sizeof(wt.model));
		wt.version = out[0].version;
		wt.size = out[0].size;
		wt.content = out[0].content;
		if ((rc = hub_wait_start(h, r, wsync_store_find(h->store, wt.model), &wt, asked,
		    timeout, err)) < 0)
			hub_wait_free(&wt);
	}
	return rc;
}

int
hub_op_commit(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	struct hub_upload *u;
	uint64_t id;

	if (hub_u64(r, "upload", 1, &id, err) < 0 || (u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	return s_upload_commit(h, r, u, err);
}

/*
 * A whole small push in one request: begin's fields, then one data frame with
 * every file's bytes one after the other; committed at once.
 */
int
hub_op_put(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	struct hub_upload *u;
	const char *data;
	uint64_t len, at = 0;

	if (r->parts->n != 4)
		return wsync_err_set(err, EX_PROTOCOL, "a put without its data frame");
	data = wsync_part_data(r->parts, 3);
	len = wsync_part_size(r->parts, 3);
	if (len > WSYNC_CHUNK)
		return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is over the chunk "
		    "size of %u: use begin, chunk and commit", len, WSYNC_CHUNK);
	if (s_upload_open(h, r, &u, err) < 0)
		return -1;
	h->counts.bytes_received += len;
	for (size_t i = 0; i < u->nfiles; i++) {
		if (u->files[i].size > len - at) {
			hub_upload_end(u);
			return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is shorter than "
			    "its files", len);
		}
		if (s_upload_write(u, i, 0, data + at, u->files[i].size, err) < 0) {
			hub_upload_end(u);
			return -1;
		}
		at += u->files[i].size;
	}
	if (at != len) {
		hub_upload_end(u);
		return wsync_err_set(err, EX_USAGE, "a put of %" PRIu64 " bytes is longer than its "
		    "files (%" PRIu64 ")", len, at);
	}
	return s_upload_commit(h, r, u, err);
}

int
hub_op_abort(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	struct hub_upload *u;
	wsync_enc_t e;
	uint64_t id;

	if (hub_u64(r, "upload", 1, &id, err) < 0 || (u = s_upload_find(h, r, id, err)) == NULL)
		return -1;
	hub_upload_end(u);
	hub_log(h, "event=abort upload=%" PRIu64, id);
	hub_ok(&e, r->id, 0);
	hub_reply(h, r, &e);
	return 0;
}
