/* client_upload.c - pushing: sources, chunks, the hand-over on the hub's host, put, abort. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "push_session_int.h"
#include "io_int.h"
#include "pushed_int.h"
#include "source_int.h"

void
wsync_client_abort_quietly(wsync_client_t *c, uint64_t upload)
{
	wsync_err_t ignored;

	wsync_client_abort(c, upload, 1000, &ignored);
}

/* Reads bytes [off, off + len) of file i of a push: its source, or what send says. */
static int
s_read(wsync_source_t *src, const struct wsync_push_send *send, uint64_t off, void *buf,
    size_t len, wsync_err_t *err)
{
	if (send == NULL || send->fd < 0)
		return wsync_source_read(src, off, buf, len, err);
	if (wsync_read_at(send->fd, buf, len, off) < 0)
		return wsync_err_set(err, EX_IOERR, "scratch file: %s", strerror(errno));
	return 0;
}

/*
 * Sends every chunk of every file (sizes[i] bytes, none empty; send may be
 * NULL) with up to window in flight, each read into one buffer: ZeroMQ copies
 * what it sends.
 */
static int
s_upload(wsync_client_t *c, uint64_t upload, unsigned window, wsync_source_t **src,
    const struct wsync_push_send *send, const uint64_t *sizes, int n, int64_t deadline,
    wsync_err_t *err)
{
	uint64_t ids[64], lens[64], done = 0, total = 0;
	unsigned inflight = 0;
	int file = 0, rc = -1;
	size_t off = 0;
	unsigned char *buf = malloc(c->chunk);

	if (buf == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < n; i++)
		total += sizes[i];

	for (;;) {
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };
		uint64_t id;
		unsigned at;

		rc = -1;
		while (inflight < window && file < n) {
			wsync_enc_t e;
			size_t len = sizes[file] - off < c->chunk ? (size_t)(sizes[file] - off) :
			    c->chunk;
			if (s_read(src[file], send != NULL ? &send[file] : NULL, off, buf, len, err) < 0)
				goto out;
			lens[inflight] = len;
			ids[inflight++] = wsync_client_request(c, &e, "chunk", 3);
			wsync_enc_kv_u64(&e, "upload", upload);
			wsync_enc_kv_u64(&e, "file", (uint64_t)file);
			wsync_enc_kv_u64(&e, "off", off);
			rc = wsync_client_send(c, &e, buf, len, err);
			wsync_enc_free(&e);
			if (rc < 0)
				goto out;
			off += len;
			if (off >= sizes[file]) {
				file++;
				off = 0;
			}
		}
		if (inflight == 0) {
			rc = 0;
			goto out;
		}
		rc = wsync_client_recv(c, deadline, &id, &m, &p, 0, err);
		if (rc == 1) {
			rc = wsync_err_set(err, EX_TEMPFAIL, "upload: no answer from %s within "
			    "the timeout", c->endpoint);
			goto out;
		}
		for (at = 0; at < inflight && ids[at] != id; at++)
			;
		if (rc < 0) {
			if (at < inflight || id == 0)
				goto out;
			continue;
		}
		wsync_client_release(&m, &p);
		if (at == inflight)
			continue;
		done += lens[at];
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, total);
		ids[at] = ids[--inflight];
		lens[at] = lens[inflight];
	}
out:
	free(buf);
	return rc;
}

/* Writes the document of src into a slot file of size bytes. */
static int
s_write_slot(wsync_client_t *c, int fd, wsync_source_t *src, uint64_t size, wsync_err_t *err)
{
	struct stat st;

	/* Fresh pages cost less allocated at once; a recycled file has them already. */
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 < size &&
	    fallocate(fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP)
		return wsync_err_set(err, EX_IOERR, "%s/.uploads: cannot allocate %" PRIu64
		    " bytes: %s", c->store, size, strerror(errno));
	return wsync_source_write_fd(src, fd, size, c->progress, c->progress_arg, c->stop, err);
}

/*
 * Hands the files over to a hub on this host: writes each document straight
 * into the slot file its begin reply names, copied and hashed in one pass.
 * 1 when they cannot be written here.
 */
static int
s_hand_over(wsync_client_t *c, const wsync_msg_t *m, wsync_source_t **src,
    const wsync_slot_ask_t *files, wsync_err_t *err)
{
	int n = files->n, *fds = calloc((size_t)n + 1, sizeof(*fds)), rc = -1;

	if (fds == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((rc = wsync_client_slot_files(c, m, files->sizes, n, fds, NULL, err)) != 0)
		goto out;
	for (int i = 0; i < n && rc == 0; i++)
		rc = s_write_slot(c, fds[i], src[i], files->sizes[i], err);
out:
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0 && close(fds[i]) < 0 && rc == 0)
			rc = wsync_err_set(err, EX_IOERR, "%s/.uploads: %s", c->store,
			    strerror(errno));
	free(fds);
	return rc;
}

void
wsync_client_pack_files(wsync_enc_t *e, const wsync_slot_ask_t *files,
    const struct wsync_push_send *send)
{
	char host[200] = "unknown", pusher[256];

	gethostname(host, sizeof(host) - 1);
	snprintf(pusher, sizeof(pusher), "%s:%ld", host, (long)getpid());
	wsync_enc_str(e, "files");
	msgpack_pack_array(&e->pk, (size_t)files->n);
	for (int i = 0; i < files->n; i++) {
		int delta = send != NULL && send[i].delta, base = delta && send[i].base != 0;
		msgpack_pack_map(&e->pk, delta ? 4 + base : 2);
		wsync_enc_kv_str(e, "model", files->models[i]);
		wsync_enc_kv_u64(e, "size", files->sizes[i]);
		if (delta) {
			if (base)
				wsync_enc_kv_u64(e, "base", send[i].base);
			wsync_enc_kv_u64(e, "base_content", send[i].base_content);
			wsync_enc_kv_u64(e, "delta", send[i].bytes);
		}
	}
	wsync_enc_kv_str(e, "pusher", pusher);
	if (files->workers != NULL) {
		wsync_enc_str(e, "workers");
		msgpack_pack_array(&e->pk, (size_t)files->nworkers);
		for (int i = 0; i < files->nworkers; i++)
			wsync_enc_str(e, files->workers[i]);
	}
}

int
wsync_client_push_part(wsync_client_t *c, unsigned part, unsigned parts, uint64_t group,
    wsync_err_t *err)
{
	struct wsync_push_session *ps;

	if (parts > 256 || (parts != 0 && part >= parts))
		return wsync_err_set(err, EX_USAGE, "part %u of %u: a version has 1 to 256 parts, "
		    "numbered from 0", part, parts);
	if ((ps = wsync_push_session(c, err)) == NULL)
		return -1;
	ps->part = part;
	ps->parts = parts;
	ps->group = group;
	return 0;
}

/* The fields a part's begin or put carries (wsync(7)); how many, packed when e. */
static size_t
s_pack_part(const wsync_client_t *c, wsync_enc_t *e, int timeout_ms)
{
	const struct wsync_push_session *ps = wsync_push_find(c);

	if (ps == NULL || ps->parts == 0)
		return 0;
	if (e != NULL) {
		wsync_enc_kv_u64(e, "group", ps->group);
		wsync_enc_kv_u64(e, "part", ps->part);
		wsync_enc_kv_u64(e, "parts", ps->parts);
		wsync_enc_kv_u64(e, "timeout_ms", (uint64_t)timeout_ms);
	}
	return 4;
}

/* A part's commit is answered once the whole group is in, or when the hub's bound on it ran out. */
static int
s_part_grace(const wsync_client_t *c)
{
	return s_pack_part(c, NULL, 0) != 0 ? 2000 : 0;
}

#ifdef WSYNC_TEST_HOOKS
/*
 * The test-only pause of wsync-push(1) (WSYNC_TEST_PUSH_GATE=PATH): after its
 * begin, a push waits until PATH exists (at most 60 s) before it sends a byte,
 * so that a test holds a part mid-upload.
 */
static void
s_gate(void)
{
	const char *gate = getenv("WSYNC_TEST_PUSH_GATE");
	int64_t until = wsync_now_ms() + 60000;

	while (gate != NULL && access(gate, F_OK) < 0 && wsync_now_ms() < until)
		zmq_poll(NULL, 0, 20);
}
#endif

/* A push that fits in one chunk: one put request carries the files and commits them. */
static int
s_put(wsync_client_t *c, wsync_push_item_t *items, wsync_source_t **src,
    const wsync_slot_ask_t *files, size_t total, int timeout_ms, wsync_err_t *err)
{
	int n = files->n;
	unsigned char *joined = malloc(total), *data = joined;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id;
	int rc;

	if (joined == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < n; i++) {
		if (wsync_source_read(src[i], 0, data, files->sizes[i], err) < 0) {
			free(joined);
			return -1;
		}
		data += files->sizes[i];
	}
	id = wsync_client_request(c, &e, "put", (files->workers != NULL ? 3 : 2) +
	    s_pack_part(c, NULL, 0));
	wsync_client_pack_files(&e, files, NULL);
	s_pack_part(c, &e, timeout_ms);
	rc = wsync_client_call(c, &e, id, joined, total, timeout_ms + s_part_grace(c), "put", &m,
	    &p, err);
	free(joined);
	/* A part's 75 is the hub's word on the parts missing, kept as it is. */
	if (rc < 0 && err->code == EX_TEMPFAIL && s_part_grace(c) == 0)
		wsync_err_set(err, EX_TEMPFAIL, "put: no answer from %s within the timeout"
		    WSYNC_MAYBE_COMMITTED, c->endpoint);
	if (rc < 0) {
		wsync_client_stopped_commit(c, err);
		return -1;
	}
	rc = wsync_client_versions(c, &m, items, n, err);
	wsync_client_release(&m, &p);
	return rc;
}

/*
 * A signed push: every item's tree signed together (one manifest), before
 * the documents are laid out, so the signature is in their meta.
 */
static int
s_sources_sign(wsync_client_t *c, wsync_source_t **src, int n, wsync_err_t *err)
{
	wsync_tree_t **trees = calloc((size_t)n + 1, sizeof(*trees));
	int rc;

	if (trees == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < n; i++)
		trees[i] = wsync_source_tree(src[i]);
	rc = wsync_client_sign_trees(c, trees, n, err);
	free(trees);
	return rc;
}

/* 1 when a file of the push is sent as a delta. */
static int
s_any_delta(const struct wsync_push_send *send, int n)
{
	for (int i = 0; i < n; i++)
		if (send[i].delta)
			return 1;
	return 0;
}

/*
 * After a delta the hub could not rebuild: 1 when a base's hashes were
 * remembered, not read. They are forgotten, and the deltas freed, to be made
 * again with every base read whole: a file can change without its times
 * moving (a write through a shared mapping of a tmpfs file moves neither).
 * A base the hub does not hold (66) is not retried: read again, it has the
 * content id it was remembered with.
 */
static int
s_forget_recalled(const wsync_push_item_t *items, struct wsync_push_send **send, int n)
{
	struct stat st;
	int any = 0;

	for (int i = 0; i < n; i++)
		if ((*send)[i].delta && (*send)[i].recalled) {
			any = 1;
			if (stat(items[i].base, &st) == 0)
				wsync_pushed_forget(&st);
		}
	if (!any)
		return 0;
	for (int i = 0; i < n; i++)
		wsync_client_pushdelta_end(&(*send)[i]);
	free(*send);
	*send = NULL;
	return 1;
}

/*
 * Items with a base (theirs, or the version kept from the last push) go as
 * deltas when smaller: *send (caller frees) says what each file sends; NULL
 * when no item has a base and the client keeps nothing.
 */
static int
s_deltas(wsync_client_t *c, const wsync_push_item_t *items, wsync_source_t **src,
    uint64_t *sizes, int n, struct wsync_push_send **send, wsync_err_t *err)
{
	int i;

	for (i = 0; i < n && items[i].base == NULL && !wsync_push_find(c)->keep_pushed; i++)
		;
	if (i == n)
		return 0;
	if ((*send = calloc((size_t)n, sizeof(**send))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (i = 0; i < n; i++)
		(*send)[i] = (struct wsync_push_send){ .fd = -1, .head_fd = -1, .bytes = sizes[i] };
	for (i = 0; i < n; i++)
		if (wsync_client_pushdelta(c, &items[i], src[i], sizes[i], &(*send)[i], err) < 0)
			return -1;
	return 0;
}

/*
 * Begins an upload of files, fills it (handed over in the store, or sent:
 * each file's source or what send says) and commits it; the items get their
 * versions.
 */
static int
s_send(wsync_client_t *c, wsync_push_item_t *items, wsync_source_t **src,
    const struct wsync_push_send *send, const wsync_slot_ask_t *files, int hand_over,
    int64_t deadline, wsync_err_t *err)
{
	uint64_t *sizes = calloc((size_t)files->n + 1, sizeof(*sizes)), id, upload = 0, window;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	int rc;

	if (sizes == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < files->n; i++)
		sizes[i] = send != NULL && send[i].delta ? send[i].bytes : files->sizes[i];
	id = wsync_client_request(c, &e, "begin", (files->workers != NULL ? 3 : 2) + hand_over +
	    s_pack_part(c, NULL, 0));
	wsync_client_pack_files(&e, files, send);
	s_pack_part(c, &e, wsync_ms_left(deadline));
	/* A hand-over fills a slot: a begin with local (wsync(7)). */
	if (hand_over)
		wsync_enc_kv_bool(&e, "local", 1);
	if ((rc = wsync_client_call(c, &e, id, NULL, 0, wsync_ms_left(deadline), "begin", &m, &p,
	    err)) < 0)
		goto out;
	/* The hub's share of its window for this upload, when it gives one. */
	if (wsync_msg_u64(&m, "window", &window) < 0 || window == 0 || window > c->window)
		window = c->window;
	if ((rc = wsync_msg_u64(&m, "upload", &upload)) < 0)
		wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without upload", c->endpoint);
	else if (hand_over && (rc = s_hand_over(c, &m, src, files, err)) == 1)
		hand_over = rc = 0;     /* the files cannot be written here: sent */
	wsync_client_release(&m, &p);
	if (rc < 0) {
		if (upload != 0)
			wsync_client_abort_quietly(c, upload);
		goto out;
	}
#ifdef WSYNC_TEST_HOOKS
	s_gate();
#endif
	if (!hand_over && (rc = s_upload(c, upload, (unsigned)window, src, send, sizes, files->n,
	    deadline, err)) < 0) {
		wsync_client_abort_quietly(c, upload);
		goto out;
	}
	/* Handed over, every hash was computed from the very bytes written: the hub trusts them. */
	rc = wsync_client_commit(c, &(wsync_commit_t){ .upload = upload, .items = items,
	    .n = files->n, .trust = hand_over }, wsync_ms_left(deadline) + s_part_grace(c), NULL,
	    err);
out:
	free(sizes);
	return rc;
}

int
wsync_client_push(wsync_client_t *c, wsync_push_item_t *items, int n,
    const char *const *workers, int nworkers, int timeout_ms, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_session(c, err);
	wsync_source_t **src = calloc((size_t)n + 1, sizeof(*src));
	const char **models = calloc((size_t)n + 1, sizeof(*models));
	uint64_t *sizes = calloc((size_t)n + 1, sizeof(*sizes));
	const wsync_slot_ask_t files = { .models = models, .sizes = sizes, .n = n,
	    .workers = workers, .nworkers = nworkers };
	int64_t deadline = wsync_now_ms() + timeout_ms;
	struct wsync_push_send *send = NULL;
	size_t total = 0;
	int rc = -1, i, hand_over;

	if (ps == NULL || src == NULL || models == NULL || sizes == NULL) {
		free(src);
		free(models);
		free(sizes);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	ps->delta_note[0] = '\0';
	for (i = 0; i < n; i++) {
		if ((src[i] = ps->sign != NULL ? wsync_source_open_tree(items[i].path,
		    items[i].model, items[i].ckpt, err) : wsync_source_open(items[i].path,
		    items[i].model, items[i].ckpt, err)) == NULL)
			goto out;
		models[i] = items[i].model;
	}
	/* A signed push always goes through trees: the signature goes into their meta. */
	if (ps->sign != NULL && s_sources_sign(c, src, n, err) < 0)
		goto out;
	for (i = 0; i < n; i++) {
		if ((sizes[i] = wsync_source_size(src[i], err)) == 0)
			goto out;
		total += sizes[i];
	}
	if (!c->store_here && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY)) {
		rc = wsync_client_not_visible(c, err);
		goto out;
	}
	/* One message is as cheap as handing files over; auto only hands over larger pushes. */
	hand_over = s_pack_part(c, NULL, 0) == 0 && c->store_here && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY ||
	    (c->transfer == WSYNC_TRANSFER_AUTO && total > c->chunk));
	if (total <= c->chunk && !hand_over) {
		rc = s_put(c, items, src, &files, total, wsync_ms_left(deadline), err);
		goto out;
	}
	if (!hand_over && (rc = s_deltas(c, items, src, sizes, n, &send, err)) < 0)
		goto out;
	rc = s_send(c, items, src, send, &files, hand_over, deadline, err);
	if (rc < 0 && send != NULL && err->code == EX_DATAERR &&
	    s_forget_recalled(items, &send, n)) {
		if ((rc = s_deltas(c, items, src, sizes, n, &send, err)) < 0)
			goto out;
		rc = s_send(c, items, src, send, &files, hand_over, deadline, err);
	}
	/* A base the hub no longer has as it was, or a delta it could not apply: whole. */
	if (rc < 0 && send != NULL && s_any_delta(send, n) && (err->code == EX_NOINPUT ||
	    err->code == EX_DATAERR)) {
		for (i = 0; i < n - 1 && items[i].base == NULL; i++)
			;
		/* The base named as the trainer gave it: the hub knows only its content. */
		snprintf(ps->delta_note, sizeof(ps->delta_note), "%s%s%.*s", items[i].base != NULL ?
		    items[i].base : "", items[i].base != NULL ? ": " : "",
		    WSYNC_MAX_REASON - 100, err->msg);
		for (i = 0; i < n; i++)
			wsync_client_pushdelta_whole(&send[i], sizes[i]);
		rc = s_send(c, items, src, send, &files, hand_over, deadline, err);
	}
	for (i = 0; rc == 0 && send != NULL && ps->keep_pushed && i < n; i++)
		wsync_client_pushdelta_keep(c, &items[i], &send[i]);
	/* What each file hashed to, for a push that names it its base. */
	for (i = 0; rc == 0 && i < n; i++)
		wsync_source_remember(src[i]);
out:
	for (i = 0; i < n; i++) {
		wsync_source_destroy(&src[i]);
		if (send != NULL)
			wsync_client_pushdelta_end(&send[i]);
	}
	free(send);
	free(src);
	free(models);
	free(sizes);
	return rc;
}

int
wsync_client_abort(wsync_client_t *c, uint64_t upload, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "abort", 1);

	wsync_enc_kv_u64(&e, "upload", upload);
	if (wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "abort", &m, &p, err) < 0)
		return -1;
	wsync_client_release(&m, &p);
	return 0;
}

const char *
wsync_client_delta_note(const wsync_client_t *c)
{
	const struct wsync_push_session *ps = wsync_push_find(c);

	return ps != NULL ? ps->delta_note : "";
}
