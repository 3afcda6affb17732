/*
 * hub_delta.c - deltas between versions (wsync(7), DELTAS): asked for with the
 * delta op, made once per (base, head) pair in a thread of their own (the
 * loop never waits for one), kept in STORE/.deltas/MODEL/BASE-HEAD.delta
 * while both versions are retained, and read by get with a base.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "hub_int.h"
#include "store_impl_int.h"

/* STORE/.deltas, or one model's directory in it (model may be NULL). */
static int
s_dir(const wsync_hub_t *h, const char *model, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/.deltas%s%s", wsync_store_dir(h->store),
	    model != NULL ? "/" : "", model != NULL ? model : "");

	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Where delta d lives once made. */
static int
s_path(const wsync_hub_t *h, const struct hub_delta *d, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/.deltas/%s/%" PRIu64 "-%" PRIu64 ".delta",
	    wsync_store_dir(h->store), d->model, d->base, d->head);

	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Removes what dir holds, one level of directories deep (STORE/.deltas/MODEL/FILE). */
static void
s_empty(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
			continue;
		if (depth > 0 && e->d_type == DT_DIR) {
			s_empty(path, depth - 1);
			rmdir(path);
		} else
			unlink(path);
	}
	closedir(d);
}

int
hub_deltas_open(wsync_hub_t *h, wsync_err_t *err)
{
	char dir[PATH_MAX];

	/* Deltas are cheap to make again; one left by another run is not trusted. */
	if (s_dir(h, NULL, dir, sizeof(dir)) < 0)
		return wsync_err_set(err, EX_USAGE, "%s: path too long", wsync_store_dir(h->store));
	s_empty(dir, 1);
	/* Made again with the first delta: a store that never serves one does not show it. */
	rmdir(dir);
	if (pipe2(h->delta_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return wsync_err_set(err, EX_OSERR, "pipe: %s", strerror(errno));
	return 0;
}

/* Forgets delta d and removes its file. */
static void
s_drop(wsync_hub_t *h, struct hub_delta *d)
{
	char path[PATH_MAX];

	if (d->state == HUB_DELTA_READY) {
		wsync_version_unmap(&d->file);
		close(d->file.fd);
		if (s_path(h, d, path, sizeof(path)) == 0)
			unlink(path);
	}
	memset(d, 0, sizeof(*d));
}

static void *
s_make(void *arg)
{
	struct hub_delta_job *j = arg;

	j->rc = wsync_delta_make(j->base_fd, j->head_fd, j->out_fd, "delta", WSYNC_DELTA_WORTH,
	    &j->stats, &j->err);
	while (write(j->done_fd, "", 1) < 0 && errno == EINTR)
		;
	return NULL;
}

int
hub_open_version(const wsync_hub_t *h, const char *model, uint64_t version)
{
	char path[PATH_MAX];

	if (wsync_store_version_path(path, sizeof(path), wsync_store_dir(h->store), model,
	    version, 0) < 0)
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

/*
 * Opens d's file to write, as PATH.tmp in STORE/.deltas/MODEL (made when
 * missing), its name in tmp; -1 with errno.
 */
static int
s_open_out(const wsync_hub_t *h, const struct hub_delta *d, char *tmp, size_t size)
{
	char top[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];

	if (s_dir(h, NULL, top, sizeof(top)) < 0 || s_dir(h, d->model, dir, sizeof(dir)) < 0 ||
	    s_path(h, d, path, sizeof(path)) < 0 ||
	    snprintf(tmp, size, "%s.tmp", path) >= (int)size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((mkdir(top, 0700) < 0 && errno != EEXIST) || (mkdir(dir, 0700) < 0 && errno != EEXIST))
		return -1;
	return open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

/* Starts making the delta waiting longest, unless one is being made. */
static void
s_start(wsync_hub_t *h)
{
	struct hub_delta_job *j = &h->job;
	struct hub_delta *d = NULL;

	if (j->running)
		return;
	for (size_t i = 0; i < HUB_DELTAS; i++)
		if (h->deltas[i].state == HUB_DELTA_QUEUED && (d == NULL || h->deltas[i].used <
		    d->used))
			d = &h->deltas[i];
	if (d == NULL)
		return;
	memset(j, 0, sizeof(*j));
	j->slot = (size_t)(d - h->deltas);
	j->done_fd = h->delta_pipe[1];
	j->base_fd = hub_open_version(h, d->model, d->base);
	j->head_fd = hub_open_version(h, d->model, d->head);
	j->out_fd = -1;
	/* Share-locked while read: retired meanwhile, neither is recycled into a slot. */
	if (j->base_fd >= 0)
		(void)flock(j->base_fd, LOCK_SH | LOCK_NB);
	if (j->head_fd >= 0)
		(void)flock(j->head_fd, LOCK_SH | LOCK_NB);
	if (j->base_fd < 0 || j->head_fd < 0 ||
	    (j->out_fd = s_open_out(h, d, j->tmp, sizeof(j->tmp))) < 0) {
		snprintf(d->why, sizeof(d->why), "cannot make it: %s", strerror(errno));
		goto fail;
	}
	j->start = wsync_now_ms();
	if ((errno = pthread_create(&j->thread, NULL, s_make, j)) != 0) {
		snprintf(d->why, sizeof(d->why), "cannot start a thread: %s", strerror(errno));
		unlink(j->tmp);
		goto fail;
	}
	j->running = 1;
	d->state = HUB_DELTA_MAKING;
	return;
fail:
	hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=whole "
	    "reason=\"%s\"", d->model, d->base, d->head, d->why);
	d->state = HUB_DELTA_WHOLE;
	if (j->base_fd >= 0)
		close(j->base_fd);
	if (j->head_fd >= 0)
		close(j->head_fd);
	if (j->out_fd >= 0)
		close(j->out_fd);
}

/* The job's thread is done: its delta is ready, or the head travels whole. */
static void
s_finish(wsync_hub_t *h)
{
	struct hub_delta_job *j = &h->job;
	struct hub_delta *d = &h->deltas[j->slot];
	const wsync_delta_stats_t *st = &j->stats;
	char path[PATH_MAX], quoted[2200];

	pthread_join(j->thread, NULL);
	j->running = 0;
	close(j->base_fd);
	close(j->head_fd);
	if (j->rc == 0 && st->bytes < st->head_bytes && s_path(h, d, path, sizeof(path)) == 0 &&
	    rename(j->tmp, path) == 0) {
		d->state = HUB_DELTA_READY;
		d->file = (wsync_version_t){ .version = d->head, .size = st->bytes, .fd = j->out_fd };
		hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=ready "
		    "made=1 bytes=%" PRIu64 " whole=%" PRIu64 " same=%" PRIu64 " xor=%" PRIu64 " sparse=%"
		    PRIu64 " compressed=%" PRIu64 " raw=%" PRIu64 " ms=%" PRId64, d->model, d->base,
		    d->head, st->bytes, st->head_bytes, st->count[WSYNC_DELTA_SAME],
		    st->count[WSYNC_DELTA_XOR], st->count[WSYNC_DELTA_SPARSE],
		    st->count[WSYNC_DELTA_WHOLE], st->count[WSYNC_DELTA_RAW],
		    wsync_now_ms() - j->start);
		return;
	}
	if (j->rc < 0)
		snprintf(d->why, sizeof(d->why), "cannot make it: %.120s", j->err.msg);
	else if (j->rc > 0 && st->bytes == 0)
		snprintf(d->why, sizeof(d->why), "not worth it (estimated %" PRIu64 " bytes, more "
		    "than half the version's %" PRIu64 ")", st->estimate, st->head_bytes);
	else if (j->rc > 0 || st->bytes >= st->head_bytes)
		snprintf(d->why, sizeof(d->why), "not worth it (past %" PRIu64 " bytes while "
		    "made, more than half the version's %" PRIu64 ")", st->bytes, st->head_bytes);
	else
		snprintf(d->why, sizeof(d->why), "cannot keep it: %s", strerror(errno));
	close(j->out_fd);
	unlink(j->tmp);
	d->state = HUB_DELTA_WHOLE;
	hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=whole "
	    "reason=\"%s\"", d->model, d->base, d->head, wsync_log_quote(d->why, quoted,
	    sizeof(quoted)));
}

/* 1 when both ends of d are still retained. */
static int
s_retained(const wsync_hub_t *h, const struct hub_delta *d)
{
	const wsync_model_t *m = wsync_store_find(h->store, d->model);

	return m != NULL && wsync_model_version(m, d->base) != NULL &&
	    wsync_model_version(m, d->head) != NULL;
}

void
hub_deltas_tick(wsync_hub_t *h)
{
	char byte;

	if (h->job.running && read(h->delta_pipe[0], &byte, 1) == 1)
		s_finish(h);
	for (size_t i = 0; i < HUB_DELTAS; i++) {
		struct hub_delta *d = &h->deltas[i];
		/* What a delta keeps is bounded by --keep: it goes when B or H retires. */
		if (d->state != HUB_DELTA_FREE && d->state != HUB_DELTA_MAKING && !s_retained(h, d))
			s_drop(h, d);
	}
	s_start(h);
}

void
hub_deltas_close(wsync_hub_t *h)
{
	if (h->job.running) {
		pthread_join(h->job.thread, NULL);
		h->job.running = 0;
		close(h->job.base_fd);
		close(h->job.head_fd);
		close(h->job.out_fd);
		unlink(h->job.tmp);
	}
	for (size_t i = 0; h->store != NULL && i < HUB_DELTAS; i++)
		s_drop(h, &h->deltas[i]);
	for (int i = 0; i < 2; i++)
		if (h->delta_pipe[i] >= 0)
			close(h->delta_pipe[i]);
	h->delta_pipe[0] = h->delta_pipe[1] = -1;
}

static struct hub_delta *
s_find(wsync_hub_t *h, const char *model, uint64_t base, uint64_t head)
{
	for (size_t i = 0; i < HUB_DELTAS; i++) {
		struct hub_delta *d = &h->deltas[i];
		if (d->state != HUB_DELTA_FREE && d->base == base && d->head == head &&
		    strcmp(d->model, model) == 0)
			return d;
	}
	return NULL;
}

/* A free entry, made by dropping the one least recently asked for; NULL when all are busy. */
static struct hub_delta *
s_entry(wsync_hub_t *h)
{
	struct hub_delta *lru = NULL;

	for (size_t i = 0; i < HUB_DELTAS; i++) {
		struct hub_delta *d = &h->deltas[i];
		if (d->state == HUB_DELTA_FREE)
			return d;
		if ((d->state == HUB_DELTA_READY || d->state == HUB_DELTA_WHOLE) &&
		    (lru == NULL || d->used < lru->used))
			lru = d;
	}
	if (lru != NULL)
		s_drop(h, lru);
	return lru;
}

void
hub_delta_adopt(wsync_hub_t *h, const char *model, uint64_t base, uint64_t head,
    const int *delta_fds, size_t n)
{
	struct hub_delta *d = s_find(h, model, base, head);
	const wsync_model_t *m = wsync_store_find(h->store, model);
	char tmp[PATH_MAX + 8], path[PATH_MAX], quoted[2200];
	int base_fd, head_fd, out_fd = -1;
	int64_t start = wsync_now_ms();
	uint64_t bytes = 0;
	wsync_err_t err = { .code = 0 };

	/* A base this commit retired (--keep) is served no delta from. */
	if (d != NULL || m == NULL || wsync_model_version(m, base) == NULL ||
	    (d = s_entry(h)) == NULL)
		return;
	snprintf(d->model, sizeof(d->model), "%s", model);
	d->base = base;
	d->head = head;
	d->used = start;
	base_fd = hub_open_version(h, model, base);
	head_fd = hub_open_version(h, model, head);
	if (base_fd < 0 || head_fd < 0 || (out_fd = s_open_out(h, d, tmp, sizeof(tmp))) < 0 ||
	    s_path(h, d, path, sizeof(path)) < 0)
		wsync_err_set(&err, EX_IOERR, "cannot keep it: %s", strerror(errno));
	else if (wsync_delta_rebase(delta_fds, n, base_fd, base, head_fd, out_fd,
	    n > 1 ? "the parts' deltas" : "the pushed delta", &bytes, &err) < 0 ||
	    rename(tmp, path) < 0) {
		if (err.code == 0)
			wsync_err_set(&err, EX_IOERR, "cannot keep it: %s", strerror(errno));
		unlink(tmp);
	}
	if (base_fd >= 0)
		close(base_fd);
	if (head_fd >= 0)
		close(head_fd);
	if (err.code != 0) {
		/* A watcher on that base gets one made the usual way. */
		if (out_fd >= 0)
			close(out_fd);
		hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=none "
		    "made=0 reason=\"%s\"", model, base, head, wsync_log_quote(err.msg, quoted,
		    sizeof(quoted)));
		memset(d, 0, sizeof(*d));
		return;
	}
	d->state = HUB_DELTA_READY;
	d->file = (wsync_version_t){ .version = head, .size = bytes, .fd = out_fd };
	hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=ready made=0 "
	    "pushed=%zu bytes=%" PRIu64 " ms=%" PRId64, model, base, head, n, bytes,
	    wsync_now_ms() - start);
}

const wsync_version_t *
hub_delta_file(wsync_hub_t *h, const char *model, uint64_t base, uint64_t head,
    wsync_err_t *err)
{
	struct hub_delta *d = s_find(h, model, base, head);

	if (d == NULL || d->state != HUB_DELTA_READY) {
		wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no delta from version %" PRIu64
		    " to %" PRIu64 " (ask for it with the delta op)", model, base, head);
		return NULL;
	}
	d->used = wsync_now_ms();
	return &d->file;
}

/*
 * delta: model, version (the head), base, base_content, [worker], [failed].
 * Replies state "ready" with the delta's size, "pending" while it is made,
 * or "whole" with a reason; 66 when the base is not retained or is another
 * content than the worker's. With failed, a worker says the delta it got did
 * not apply: the hub logs why and drops it.
 */
int
hub_op_delta(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1], worker[WSYNC_MAX_ID + 1];
	char failed[WSYNC_MAX_REASON + 1], quoted[4 * WSYNC_MAX_REASON + 8];
	uint64_t version, base, base_content;
	const wsync_model_t *m;
	const wsync_version_t *hv, *bv;
	struct hub_delta *d;
	wsync_enc_t e;

	if (hub_model_field(r, model, err) < 0 || hub_u64(r, "version", 1, &version, err) < 0 ||
	    hub_u64(r, "base", 1, &base, err) < 0 ||
	    hub_u64(r, "base_content", 1, &base_content, err) < 0 ||
	    hub_worker_field(r, 0, worker, err) < 0 ||
	    hub_str(r, "failed", 0, NULL, failed, sizeof(failed), err) < 0)
		return -1;
	if (worker[0] != '\0' && hub_worker_touch(h, worker, r->conn, err) == NULL)
		return -1;
	if (base == 0 || base >= version)
		return wsync_err_set(err, EX_USAGE, "a delta goes from an older version to a newer "
		    "one (base %" PRIu64 ", version %" PRIu64 ")", base, version);
	if ((m = wsync_store_find(h->store, model)) == NULL)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", model);
	if ((hv = wsync_model_version(m, version)) == NULL)
		return hub_no_version(m, version, h->keep, err);
	if ((bv = wsync_model_version(m, base)) == NULL)
		return hub_no_version(m, base, h->keep, err);
	if (bv->content != base_content)
		return wsync_err_set(err, EX_NOINPUT, "model \"%s\" version %" PRIu64 " has content "
		    "%016" PRIx64 " here, not %016" PRIx64 ": no delta from that base", model, base,
		    bv->content, base_content);
	d = s_find(h, model, base, version);
	if (failed[0] != '\0') {
		hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=failed "
		    "worker=%s reason=\"%s\"", model, base, version, worker[0] ? worker : "-",
		    wsync_log_quote(failed, quoted, sizeof(quoted)));
		/* A damaged delta must not reach anyone else: the next one is made again. */
		if (d != NULL && d->state == HUB_DELTA_READY)
			s_drop(h, d);
		hub_ok(&e, r->id, 1);
		wsync_enc_kv_str(&e, "state", "whole");
		hub_reply(h, r, &e);
		return 0;
	}
	if (d == NULL) {
		if ((d = s_entry(h)) == NULL) {
			hub_ok(&e, r->id, 2);
			wsync_enc_kv_str(&e, "state", "whole");
			wsync_enc_kv_str(&e, "reason", "too many deltas in the making");
			hub_log(h, "event=delta model=%s base=%" PRIu64 " version=%" PRIu64 " state=whole "
			    "reason=\"too many deltas in the making\"", model, base, version);
			hub_reply(h, r, &e);
			return 0;
		}
		snprintf(d->model, sizeof(d->model), "%s", model);
		d->base = base;
		d->head = version;
		d->state = HUB_DELTA_QUEUED;
		d->used = wsync_now_ms();
		s_start(h);
	}
	d->used = wsync_now_ms();
	switch (d->state) {
	case HUB_DELTA_READY:
		hub_ok(&e, r->id, 5);
		wsync_enc_kv_str(&e, "state", "ready");
		wsync_enc_kv_u64(&e, "size", d->file.size);
		wsync_enc_kv_u64(&e, "version", version);
		wsync_enc_kv_u64(&e, "head_size", hv->size);
		wsync_enc_kv_u64(&e, "content", hv->content);
		break;
	case HUB_DELTA_WHOLE:
		hub_ok(&e, r->id, 2);
		wsync_enc_kv_str(&e, "state", "whole");
		wsync_enc_kv_str(&e, "reason", d->why);
		break;
	default:
		hub_ok(&e, r->id, 1);
		wsync_enc_kv_str(&e, "state", "pending");
		break;
	}
	hub_reply(h, r, &e);
	return 0;
}
