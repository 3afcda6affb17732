/* client_upload.c - pushing: sources, chunks, the hand-over on the hub's host, put, abort. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "file_int.h"
#include "io_int.h"
#include "tree_int.h"

/* What a push sends for one item: the bytes of a .wsync file, mapped. */
struct s_source {
	wsync_file_t *file;             /* the input, when sent as it is */
	wsync_file_t *input;            /* or the input a tree to sign borrows from */
	void *map;                      /* or a re-written copy in a memfd */
	size_t maplen;
	const unsigned char *base;
	size_t size;
	int shared;                     /* base is a shared file mapping: pages may be let go */
	int fd;                         /* the same bytes, for a kernel copy; -1: none */
};

static void
s_source_free(struct s_source *src)
{
	wsync_file_close(&src->file);
	wsync_file_close(&src->input);
	if (src->map != NULL)
		munmap(src->map, src->maplen);
	if (src->fd >= 0)
		close(src->fd);
	memset(src, 0, sizeof(*src));
	src->fd = -1;
}

/*
 * Builds item's tree from its input in (its tensors split at '.'), which it
 * borrows from: in stays open until the tree is written.
 */
static int
s_tree_make(const wsync_push_item_t *item, wsync_file_t *in, wsync_tree_t **tree,
    wsync_err_t *err)
{
	/* Re-written, its hashes are computed afresh: the old ones must hold first. */
	if (wsync_file_kind(in) == WSYNC_KIND_WSYNC && wsync_file_verify(in, NULL, NULL, err) < 0)
		return -1;
	if ((*tree = wsync_tree_new(item->model, err)) == NULL)
		return -1;
	for (size_t i = 0; i < wsync_file_meta_count(in); i++) {
		const wsync_meta_t *m = wsync_file_meta(in, i);
		if (wsync_tree_set_meta(*tree, m->key, m->value, err) < 0)
			return -1;
	}
	for (size_t i = 0; i < wsync_file_count(in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(in, i);
		if (wsync_tree_add_split(*tree, t->path, ".", t->dtype, t->ndim, t->shape,
		    t->data, t->nbytes, err) < 0 &&
		    wsync_tree_add_keys(*tree, &t->path, 1, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, err) < 0)
			return -1;
	}
	return 0;
}

/* Writes tree into memory as the source's bytes, mapped and open as src->fd. */
static int
s_source_write(wsync_tree_t *tree, const char *name, struct s_source *src, wsync_err_t *err)
{
	struct stat st;
	int fd;

	if ((fd = memfd_create("wsync-push", MFD_CLOEXEC)) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "memfd_create: %s", strerror(errno));
	if (wsync_tree_write_fd(tree, fd, name, err) < 0)
		goto fail;
	if (fstat(fd, &st) < 0 || (src->map = mmap(NULL, (size_t)st.st_size, PROT_READ,
	    MAP_SHARED, fd, 0)) == MAP_FAILED) {
		src->map = NULL;
		wsync_err_set(err, EX_SOFTWARE, "%s: cannot map the re-written file: %s", name,
		    strerror(errno));
		goto fail;
	}
	src->maplen = src->size = (size_t)st.st_size;
	src->base = src->map;
	src->shared = 1;
	src->fd = fd;
	return 0;
fail:
	close(fd);
	return -1;
}

/*
 * Makes the bytes to upload for item: a .wsync input of the same model as it
 * is (its hashes still to be verified); anything else re-written as .wsync of
 * item->model into memory. Both mapped, and open as src->fd when they are
 * files, for a hand-over the kernel copies. With tree (a signed push), every
 * input becomes a tree, left in *tree and src->input for the caller to sign
 * and write.
 */
static int
s_source_make(const wsync_push_item_t *item, struct s_source *src, wsync_tree_t **tree,
    wsync_err_t *err)
{
	wsync_file_t *in = wsync_input_open(item->path, err);
	wsync_tree_t *t = NULL;
	struct stat st;
	int rc = -1;

	memset(src, 0, sizeof(*src));
	src->fd = -1;
	if (in == NULL)
		return -1;
	if (tree == NULL && wsync_file_kind(in) == WSYNC_KIND_WSYNC &&
	    strcmp(wsync_file_model(in), item->model) == 0) {
		src->file = in;
		src->base = wsync_file_bytes(in);
		src->size = wsync_file_size(in);
		src->shared = in->mem == WSYNC_MEM_MMAP;
		/* The very file mapped (same size), or none: the hub verifies either way. */
		if (src->shared && (src->fd = open(item->path, O_RDONLY | O_CLOEXEC)) >= 0 &&
		    (fstat(src->fd, &st) < 0 || (uint64_t)st.st_size != src->size)) {
			close(src->fd);
			src->fd = -1;
		}
		return 0;
	}
	if (s_tree_make(item, in, &t, err) < 0)
		goto out;
	if (tree != NULL) {
		*tree = t;
		src->input = in;
		return 0;
	}
	rc = s_source_write(t, item->path, src, err);
out:
	wsync_tree_destroy(&t);
	wsync_file_close(&in);
	return rc;
}

/*
 * A signed push: every item's tree signed together (one manifest), then
 * written as its source; the inputs the trees borrowed from are let go.
 */
static int
s_sources_sign(wsync_client_t *c, const wsync_push_item_t *items, struct s_source *src,
    wsync_tree_t **trees, int n, wsync_err_t *err)
{
	int rc = wsync_client_sign_trees(c, trees, n, err);

	for (int i = 0; i < n && rc == 0; i++)
		rc = s_source_write(trees[i], items[i].path, &src[i], err);
	for (int i = 0; i < n; i++) {
		wsync_tree_destroy(&trees[i]);
		wsync_file_close(&src[i].input);
	}
	return rc;
}

void
wsync_client_abort_quietly(wsync_client_t *c, uint64_t upload)
{
	wsync_err_t ignored;

	wsync_client_abort(c, upload, 1000, &ignored);
}

/* Sends every chunk of every source (none is empty) with up to window in flight. */
static int
s_upload(wsync_client_t *c, uint64_t upload, const struct s_source *src, int n,
    int64_t deadline, wsync_err_t *err)
{
	uint64_t ids[64], lens[64], done = 0, total = 0;
	unsigned inflight = 0;
	int file = 0;
	size_t off = 0;

	for (int i = 0; i < n; i++)
		total += src[i].size;

	for (;;) {
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };
		uint64_t id;
		unsigned at;
		int rc;

		while (inflight < c->window && file < n) {
			wsync_enc_t e;
			size_t len = src[file].size - off < c->chunk ? src[file].size - off : c->chunk;
			lens[inflight] = len;
			ids[inflight++] = wsync_client_request(c, &e, "chunk", 3);
			wsync_enc_kv_u64(&e, "upload", upload);
			wsync_enc_kv_u64(&e, "file", (uint64_t)file);
			wsync_enc_kv_u64(&e, "off", off);
			rc = wsync_client_send(c, &e, src[file].base + off, len, err);
			wsync_enc_free(&e);
			if (rc < 0)
				return -1;
			/* ZeroMQ copied the chunk: its pages can go. */
			if (src[file].shared)
				wsync_pages_release(src[file].base + off, len);
			off += len;
			if (off >= src[file].size) {
				file++;
				off = 0;
			}
		}
		if (inflight == 0)
			return 0;
		rc = wsync_client_recv(c, deadline, &id, &m, &p, 0, err);
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "upload: no answer from %s within "
			    "the timeout", c->endpoint);
		for (at = 0; at < inflight && ids[at] != id; at++)
			;
		if (rc < 0) {
			if (at < inflight || id == 0)
				return -1;
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
}

/*
 * Writes a mapped source to fd a window at a time, letting each window's
 * pages go once written: a push of any size holds a window of it.
 */
static int
s_write_window(const wsync_client_t *c, int fd, const struct s_source *src,
    int64_t deadline, wsync_err_t *err)
{
	for (size_t off = 0; off < src->size; off += WSYNC_CLIENT_STRIDE) {
		size_t n = src->size - off < WSYNC_CLIENT_STRIDE ? src->size - off :
		    WSYNC_CLIENT_STRIDE;
		if (c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		if (wsync_ms_left(deadline) == 0)
			return wsync_err_set(err, EX_TEMPFAIL, "upload: not written within the "
			    "timeout");
		if (wsync_write_all(fd, src->base + off, n) < 0)
			return wsync_err_set(err, EX_IOERR, "cannot write an upload file: %s",
			    strerror(errno));
		if (src->shared)
			wsync_pages_release(src->base + off, n);
		if (c->progress != NULL)
			c->progress(c->progress_arg, off + n, src->size);
	}
	return 0;
}

/*
 * Hands the files over to a hub on this host: writes them straight into the
 * slot files its begin reply names. 1 when they cannot be written here.
 */
static int
s_hand_over(wsync_client_t *c, const wsync_msg_t *m, const struct s_source *src,
    const wsync_slot_ask_t *files, int64_t deadline, wsync_err_t *err)
{
	int n = files->n, *fds = calloc((size_t)n + 1, sizeof(*fds)), rc = -1;

	if (fds == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((rc = wsync_client_slot_files(c, m, files->sizes, n, fds, NULL, err)) != 0)
		goto out;
	rc = -1;
	for (int i = 0; i < n; i++) {
		/* Fresh pages cost less allocated at once than faulted in by each write. */
		if (fallocate(fds[i], 0, 0, (off_t)src[i].size) < 0 && errno != EOPNOTSUPP) {
			wsync_err_set(err, EX_IOERR, "%s/.uploads: cannot allocate %zu bytes: %s",
			    c->store, src[i].size, strerror(errno));
			goto out;
		}
		if ((src[i].fd >= 0 ? wsync_client_copy_fd(c, src[i].fd, fds[i], src[i].size,
		    deadline, err) : s_write_window(c, fds[i], &src[i], deadline, err)) < 0)
			goto out;
	}
	rc = 0;
out:
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0 && close(fds[i]) < 0 && rc == 0)
			rc = wsync_err_set(err, EX_IOERR, "%s/.uploads: %s", c->store,
			    strerror(errno));
	free(fds);
	return rc;
}

void
wsync_client_pack_files(wsync_enc_t *e, const wsync_slot_ask_t *files)
{
	char host[200] = "unknown", pusher[256];

	gethostname(host, sizeof(host) - 1);
	snprintf(pusher, sizeof(pusher), "%s:%ld", host, (long)getpid());
	wsync_enc_str(e, "files");
	msgpack_pack_array(&e->pk, (size_t)files->n);
	for (int i = 0; i < files->n; i++) {
		msgpack_pack_map(&e->pk, 2);
		wsync_enc_kv_str(e, "model", files->models[i]);
		wsync_enc_kv_u64(e, "size", files->sizes[i]);
	}
	wsync_enc_kv_str(e, "pusher", pusher);
	if (files->workers != NULL) {
		wsync_enc_str(e, "workers");
		msgpack_pack_array(&e->pk, (size_t)files->nworkers);
		for (int i = 0; i < files->nworkers; i++)
			wsync_enc_str(e, files->workers[i]);
	}
}

/* A push that fits in one chunk: one put request carries the files and commits them. */
static int
s_put(wsync_client_t *c, wsync_push_item_t *items, const struct s_source *src,
    const wsync_slot_ask_t *files, size_t total, int timeout_ms, wsync_err_t *err)
{
	int n = files->n;
	unsigned char *joined = NULL;
	const void *data = src[0].base;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id;
	int rc;

	if (n > 1) {
		size_t at = 0;
		if ((joined = malloc(total)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		for (int i = 0; i < n; i++) {
			memcpy(joined + at, src[i].base, src[i].size);
			at += src[i].size;
		}
		data = joined;
	}
	id = wsync_client_request(c, &e, "put", files->workers != NULL ? 3 : 2);
	wsync_client_pack_files(&e, files);
	rc = wsync_client_call(c, &e, id, data, total, timeout_ms, "put", &m, &p, err);
	free(joined);
	if (rc < 0 && err->code == EX_TEMPFAIL)
		wsync_err_set(err, EX_TEMPFAIL, "put: no answer from %s within the timeout"
		    WSYNC_MAYBE_COMMITTED, c->endpoint);
	if (rc < 0)
		return -1;
	rc = wsync_client_versions(c, &m, items, n, err);
	wsync_client_release(&m, &p);
	return rc;
}

int
wsync_client_push(wsync_client_t *c, wsync_push_item_t *items, int n,
    const char *const *workers, int nworkers, int timeout_ms, wsync_err_t *err)
{
	struct s_source *src = calloc((size_t)n + 1, sizeof(*src));
	const char **models = calloc((size_t)n + 1, sizeof(*models));
	uint64_t *sizes = calloc((size_t)n + 1, sizeof(*sizes));
	wsync_tree_t **trees = calloc((size_t)n + 1, sizeof(*trees));
	const wsync_slot_ask_t files = { .models = models, .sizes = sizes, .n = n,
	    .workers = workers, .nworkers = nworkers };
	int64_t deadline = wsync_now_ms() + timeout_ms;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id, upload = 0;
	size_t total = 0;
	int rc = -1, i, hand_over;

	if (src == NULL || models == NULL || sizes == NULL || trees == NULL) {
		free(src);
		free(models);
		free(sizes);
		free(trees);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	for (i = 0; i < n; i++)
		src[i].fd = -1;
	for (i = 0; i < n; i++) {
		if (s_source_make(&items[i], &src[i], c->sign != NULL ? &trees[i] : NULL, err) < 0)
			goto out;
		models[i] = items[i].model;
	}
	/* A signed push always goes through trees: the signature goes into their meta. */
	if (c->sign != NULL && s_sources_sign(c, items, src, trees, n, err) < 0)
		goto out;
	for (i = 0; i < n; i++) {
		sizes[i] = src[i].size;
		total += src[i].size;
	}
	if (!c->store_here && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY)) {
		rc = wsync_client_not_visible(c, err);
		goto out;
	}
	/* One message is as cheap as handing files over; auto only hands over larger pushes. */
	hand_over = c->store_here && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY ||
	    (c->transfer == WSYNC_TRANSFER_AUTO && total > c->chunk));
	/*
	 * Nothing bad is sent: an input that travels as it is gets verified here.
	 * Handed over, it is the hub's own verification, before the commit, that
	 * keeps it out, and the input is read once instead of twice.
	 */
	for (i = 0; i < n && !hand_over; i++)
		if (src[i].file != NULL && wsync_file_verify(src[i].file, NULL, NULL, err) < 0)
			goto out;
	if (total <= c->chunk && !hand_over) {
		rc = s_put(c, items, src, &files, total, wsync_ms_left(deadline), err);
		goto out;
	}
	id = wsync_client_request(c, &e, "begin", (workers != NULL ? 3 : 2) + hand_over);
	wsync_client_pack_files(&e, &files);
	/* A hand-over fills a slot: a begin with local (wsync(7)). */
	if (hand_over)
		wsync_enc_kv_bool(&e, "local", 1);
	if (wsync_client_call(c, &e, id, NULL, 0, wsync_ms_left(deadline), "begin", &m, &p,
	    err) < 0)
		goto out;
	if ((rc = wsync_msg_u64(&m, "upload", &upload)) < 0)
		wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without upload", c->endpoint);
	else if (hand_over && (rc = s_hand_over(c, &m, src, &files, deadline, err)) == 1) {
		/* The files cannot be written here: send them, verified first. */
		hand_over = rc = 0;
		for (i = 0; i < n && rc == 0; i++)
			if (src[i].file != NULL)
				rc = wsync_file_verify(src[i].file, NULL, NULL, err);
	}
	wsync_client_release(&m, &p);
	if (rc < 0) {
		if (upload != 0)
			wsync_client_abort_quietly(c, upload);
		goto out;
	}
	if (!hand_over && (rc = s_upload(c, upload, src, n, deadline, err)) < 0) {
		wsync_client_abort_quietly(c, upload);
		goto out;
	}
	rc = wsync_client_commit(c, &(wsync_commit_t){ .upload = upload, .items = items, .n = n },
	    wsync_ms_left(deadline), NULL, err);
out:
	for (i = 0; i < n; i++) {
		s_source_free(&src[i]);
		wsync_tree_destroy(&trees[i]);
	}
	free(src);
	free(models);
	free(sizes);
	free(trees);
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
