/* source.c - a push's input converted while it is written: laid out first, each tensor copied and hashed once. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "hash_int.h"
#include "io_int.h"
#include "source_int.h"
#include "tree_int.h"

/*
 * Bytes copied between two lets-go of pages: at least wsync_copy_hash's
 * threshold for its second thread, small beside the 64 MiB a push may hold.
 */
#define S_WINDOW (16u << 20)
/* Bytes read from a pipe at a time, hashed while they are in the cache. */
#define S_PIPE_READ (1u << 20)
/* The longest safetensors header read from a pipe (the parser's limit too). */
#define S_MAX_HEAD (100u << 20)

struct wsync_source {
	char *name;                     /* the input, for errors */
	wsync_file_t *in;               /* a mapped or buffered input, or a pipe's header */
	unsigned char *head;            /* a pipe's header bytes, or all of a piped .wsync */
	int pipe;                       /* the tensors' data is still to read from stdin */
	uint64_t pipe_at;               /* bytes of stdin read so far */
	int verbatim;                   /* the input is the document, as it is */
	int shared;                     /* the input's data is in shared file mappings */
	wsync_tree_t *tree;             /* otherwise, the document's tree */
	uint64_t size;                  /* the document's, once laid out */
	unsigned char *doc;             /* for reads: the skeleton with hashes, or all */
	int spooled;                    /* doc holds the whole document */
	size_t cursor;                  /* for reads: the tensor read last */
	XXH3_state_t state;             /* for reads of a .wsync: the hash of that tensor */
};

static wsync_source_t *
s_alloc(const char *name, wsync_err_t *err)
{
	wsync_source_t *src = calloc(1, sizeof(*src));

	if (src == NULL || (src->name = strdup(name)) == NULL) {
		free(src);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	return src;
}

wsync_source_t *
wsync_source_new(const char *model, int shared, wsync_err_t *err)
{
	wsync_source_t *src = s_alloc(model, err);

	if (src != NULL && (src->tree = wsync_tree_new(model, err)) == NULL)
		wsync_source_destroy(&src);
	if (src != NULL)
		src->shared = shared;
	return src;
}

int
wsync_source_meta(wsync_source_t *src, const char *key, const char *value,
    wsync_err_t *err)
{
	return wsync_tree_set_meta(src->tree, key, value, err);
}

/* Declares a tensor whose data is found by tag: its address, or its offset in a pipe. */
static int
s_add(wsync_source_t *src, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, const void *data, uint64_t nbytes, uint64_t tag, wsync_err_t *err)
{
	/* PyTorch names split at '.'; a name that cannot be split stays one key. */
	if (wsync_tree_add_split(src->tree, path, ".", dtype, ndim, shape, data, nbytes,
	    err) < 0 && wsync_tree_add_keys(src->tree, &path, 1, dtype, ndim, shape, data,
	    nbytes, err) < 0)
		return -1;
	src->tree->t[src->tree->n - 1].tag = tag;
	src->size = 0;
	return 0;
}

int
wsync_source_add(wsync_source_t *src, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, const void *data, uint64_t nbytes, wsync_err_t *err)
{
	return s_add(src, path, dtype, ndim, shape, data, nbytes, (uint64_t)(uintptr_t)data,
	    err);
}

/*
 * Reads exactly len bytes of stdin into buf: 0, or -1 with err (a short
 * stream is 65); *got (may be NULL) says how many came.
 */
static int
s_pipe_read(wsync_source_t *src, void *buf, size_t len, size_t *gotp, wsync_err_t *err)
{
	size_t got = 0, ignored;

	if (gotp == NULL)
		gotp = &ignored;
	*gotp = 0;
	while (got < len) {
		ssize_t n = read(STDIN_FILENO, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wsync_err_set(err, EX_IOERR, "%s: read failed: %s", src->name,
			    strerror(errno));
		if (n == 0)
			return wsync_err_set(err, EX_DATAERR, "%s: truncated: ended after %llu bytes",
			    src->name, (unsigned long long)(src->pipe_at + got));
		got += (size_t)n;
		*gotp = got;
	}
	src->pipe_at += len;
	return 0;
}

/* Reads the rest of a piped .wsync after its first have bytes, into src->head. */
static int
s_pipe_slurp(wsync_source_t *src, size_t have, size_t *len, wsync_err_t *err)
{
	size_t cap = have;

	*len = have;
	for (;;) {
		ssize_t n;
		if (*len == cap) {
			unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(src->head, cap * 2);
			if (nb == NULL)
				return wsync_err_set(err, EX_SOFTWARE, "%s: out of memory after %zu "
				    "bytes", src->name, *len);
			src->head = nb;
			cap *= 2;
		}
		n = read(STDIN_FILENO, src->head + *len, cap - *len);
		if (n == 0)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wsync_err_set(err, EX_IOERR, "%s: read failed: %s", src->name,
			    strerror(errno));
		*len += (size_t)n;
	}
}

/*
 * Stdin: a safetensors stream has its header read now and its data as it is
 * written; a .wsync stream is read whole (it is sent as it is).
 */
static int
s_open_pipe(wsync_source_t *src, const char *model, wsync_err_t *err)
{
	unsigned char first[9];
	uint64_t hlen;
	size_t len, got;

	if (s_pipe_read(src, first, sizeof(first), &got, err) < 0 && err->code != EX_DATAERR)
		return -1;
	if (got < sizeof(first) || !wsync_safetensors_sniff(first, sizeof(first))) {
		/* Not safetensors, or too short to tell: the parser says what it is. */
		if ((src->head = malloc(1 << 16)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		memcpy(src->head, first, got);
		if ((got == sizeof(first) && s_pipe_slurp(src, got, &len, err) < 0) ||
		    (src->in = wsync_input_open_buffer(src->head, got == sizeof(first) ? len : got,
		    src->name, err)) == NULL)
			return -1;
		return 1;
	}
	hlen = 0;
	for (int b = 7; b >= 0; b--)
		hlen = hlen << 8 | first[b];
	if (hlen > S_MAX_HEAD)
		return wsync_err_set(err, EX_DATAERR, "%s: header of %llu bytes is over the limit "
		    "of %u", src->name, (unsigned long long)hlen, S_MAX_HEAD);
	if ((src->head = malloc(8 + hlen)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	memcpy(src->head, first, sizeof(first));
	if (s_pipe_read(src, src->head + sizeof(first), 8 + hlen - sizeof(first), NULL,
	    err) < 0 ||
	    (src->in = wsync_safetensors_open_head(src->head, 8 + hlen, src->name, err)) == NULL)
		return -1;
	src->pipe = 1;
	if ((src->tree = wsync_tree_new(model, err)) == NULL)
		return -1;
	for (size_t i = 0; i < wsync_file_count(src->in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, i);
		if (s_add(src, t->path, t->dtype, t->ndim, t->shape, NULL, t->nbytes, t->offset,
		    err) < 0)
			return -1;
	}
	return 0;
}

wsync_source_t *
wsync_source_open(const char *path, const char *model, wsync_err_t *err)
{
	int piped = strcmp(path, "-") == 0;
	wsync_source_t *src = s_alloc(piped ? "stdin" : path, err);
	struct stat st;
	int rc;

	if (src == NULL)
		return NULL;
	if (piped && fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode))
		piped = 0;
	if (piped) {
		if ((rc = s_open_pipe(src, model, err)) < 0)
			goto fail;
		if (rc == 0)
			return src;
	} else if ((src->in = wsync_input_open(path, err)) == NULL)
		goto fail;
	src->shared = src->in->mem == WSYNC_MEM_MMAP;
	if (wsync_file_kind(src->in) == WSYNC_KIND_WSYNC &&
	    strcmp(wsync_file_model(src->in), model) == 0) {
		src->verbatim = 1;
		src->size = wsync_file_size(src->in);
		return src;
	}
	/* Re-written, its hashes are computed afresh: the old ones must hold first. */
	if (wsync_file_kind(src->in) == WSYNC_KIND_WSYNC &&
	    wsync_file_verify(src->in, NULL, NULL, err) < 0)
		goto fail;
	if ((src->tree = wsync_tree_new(model, err)) == NULL)
		goto fail;
	for (size_t i = 0; i < wsync_file_meta_count(src->in); i++) {
		const wsync_meta_t *m = wsync_file_meta(src->in, i);
		if (wsync_tree_set_meta(src->tree, m->key, m->value, err) < 0)
			goto fail;
	}
	for (size_t i = 0; i < wsync_file_count(src->in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, i);
		if (wsync_source_add(src, t->path, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, err) < 0)
			goto fail;
	}
	return src;
fail:
	wsync_source_destroy(&src);
	return NULL;
}

uint64_t
wsync_source_size(wsync_source_t *src, wsync_err_t *err)
{
	if (src->size == 0 && wsync_tree_size(src->tree, &src->size, err) < 0)
		src->size = 0;
	return src->size;
}

void
wsync_source_destroy(wsync_source_t **srcp)
{
	wsync_source_t *src = *srcp;

	if (src == NULL)
		return;
	if (src->doc != NULL)
		munmap(src->doc, src->size);
	wsync_tree_destroy(&src->tree);
	wsync_file_close(&src->in);
	free(src->head);
	free(src->name);
	free(src);
	*srcp = NULL;
}

static int
s_cmp_tag(const void *a, const void *b)
{
	const struct wsync_tree_tensor *x = *(struct wsync_tree_tensor *const *)a;
	const struct wsync_tree_tensor *y = *(struct wsync_tree_tensor *const *)b;

	return x->tag < y->tag ? -1 : x->tag > y->tag;
}

static void
s_put_be64(unsigned char *p, uint64_t v)
{
	for (int b = 0; b < 8; b++)
		p[b] = (unsigned char)(v >> (56 - 8 * b));
}

/* The tensors in the order their input holds them (caller frees): a pipe's is the only one. */
static struct wsync_tree_tensor **
s_input_order(const wsync_tree_t *tree, wsync_err_t *err)
{
	struct wsync_tree_tensor **order = malloc((tree->n + 1) * sizeof(*order));

	if (order == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < tree->n; i++)
		order[i] = &tree->t[i];
	if (tree->n > 1)
		qsort(order, tree->n, sizeof(*order), s_cmp_tag);
	return order;
}

/* Copies and hashes a pipe's tensor t into dst, a read at a time; *h its hash. */
static int
s_pipe_tensor(wsync_source_t *src, const struct wsync_tree_tensor *t, unsigned char *dst,
    XXH3_state_t *state, wsync_err_t *err)
{
	unsigned char skip[4096];

	if (t->tag < src->pipe_at)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: its data overlaps another's "
		    "(a stream is read once)", src->name, t->path);
	while (src->pipe_at < t->tag) {
		size_t n = t->tag - src->pipe_at < sizeof(skip) ? (size_t)(t->tag - src->pipe_at) :
		    sizeof(skip);
		if (s_pipe_read(src, skip, n, NULL, err) < 0)
			return -1;
	}
	for (uint64_t off = 0; off < t->nbytes; off += S_PIPE_READ) {
		size_t n = t->nbytes - off < S_PIPE_READ ? (size_t)(t->nbytes - off) : S_PIPE_READ;
		wsync_pages_populate_write(dst + off, n);
		if (s_pipe_read(src, dst + off, n, NULL, err) < 0)
			return -1;
		wsync_hash_update(state, dst + off, n);
		wsync_pages_release(dst + off, n);
	}
	return 0;
}

/* Lets go of the pages of [p, p + n) of the input, when they are a file's. */
static void
s_input_release(const wsync_source_t *src, const void *p, size_t n)
{
	if (src->shared)
		wsync_pages_release(p, n);
}

/* Copies and hashes a tensor t in memory into dst, a window at a time. */
static void
s_map_tensor(const wsync_source_t *src, const struct wsync_tree_tensor *t,
    unsigned char *dst, XXH3_state_t *state)
{
	const unsigned char *p = t->data;

	for (uint64_t off = 0; off < t->nbytes; off += S_WINDOW) {
		size_t n = t->nbytes - off < S_WINDOW ? (size_t)(t->nbytes - off) : S_WINDOW;
		/* A fault a page costs more than mapping a window at once. */
		if (src->shared)
			wsync_pages_populate(p + off, n);
		wsync_pages_populate_write(dst + off, n);
		wsync_copy_hash_update(state, dst + off, p + off, n);
		s_input_release(src, p + off, n);
		wsync_pages_release(dst + off, n);
	}
}

/* A .wsync input as it is: bytes between tensors copied, tensors copied and checked. */
static int
s_write_verbatim(wsync_source_t *src, unsigned char *dst, wsync_source_progress_fn progress,
    void *arg, volatile sig_atomic_t *stop, wsync_err_t *err)
{
	const unsigned char *base = wsync_file_bytes(src->in);
	uint64_t at = 0;
	XXH3_state_t state;

	for (size_t i = 0; i <= wsync_file_count(src->in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, i);
		uint64_t to = t != NULL ? t->offset : src->size;
		struct wsync_tree_tensor piece;

		if (stop != NULL && *stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		memcpy(dst + at, base + at, to - at);
		if (t == NULL)
			break;
		if (t->offset < at)
			return wsync_err_set(err, EX_SOFTWARE, "%s: tensor %s: out of order",
			    src->name, t->path);
		piece = (struct wsync_tree_tensor){ .data = t->data, .nbytes = t->nbytes };
		XXH3_64bits_reset(&state);
		s_map_tensor(src, &piece, dst + t->offset, &state);
		if (XXH3_64bits_digest(&state) != t->hash)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data does not match its "
			    "hash", src->name, t->path);
		at = t->offset + t->nbytes;
		if (progress != NULL)
			progress(arg, at, src->size);
	}
	wsync_pages_release(dst, src->size);
	return 0;
}

int
wsync_source_write_into(wsync_source_t *src, unsigned char *dst, uint64_t size,
    wsync_source_progress_fn progress, void *arg, volatile sig_atomic_t *stop,
    wsync_err_t *err)
{
	struct wsync_tree_tensor **order;
	uint64_t done = 0;
	XXH3_state_t state;
	int rc = -1;

	if (size != wsync_source_size(src, err))
		return wsync_err_set(err, EX_SOFTWARE, "%s: the document is %llu bytes, the file "
		    "for it %llu", src->name, (unsigned long long)src->size,
		    (unsigned long long)size);
	if (src->verbatim)
		return s_write_verbatim(src, dst, progress, arg, stop, err);
	if (wsync_tree_write_skeleton(src->tree, dst, size, err) < 0 ||
	    (order = s_input_order(src->tree, err)) == NULL)
		return -1;
	for (size_t i = 0; i < src->tree->n; i++) {
		struct wsync_tree_tensor *t = order[i];
		if (stop != NULL && *stop) {
			wsync_err_set(err, EX_TEMPFAIL, "interrupted");
			goto out;
		}
		XXH3_64bits_reset(&state);
		if (src->pipe) {
			if (s_pipe_tensor(src, t, dst + t->at, &state, err) < 0)
				goto out;
		} else
			s_map_tensor(src, t, dst + t->at, &state);
		s_put_be64(dst + t->hash_at, XXH3_64bits_digest(&state));
		done += t->nbytes;
		if (progress != NULL)
			progress(arg, done, size);
	}
	/* A writer that stops before the end would get SIGPIPE: the stream is read whole. */
	for (unsigned char rest[4096]; src->pipe; ) {
		ssize_t n = read(STDIN_FILENO, rest, sizeof(rest));
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	src->pipe = 0;
	wsync_pages_release(dst, size);
	rc = 0;
out:
	free(order);
	return rc;
}

/*
 * Before the first read of a re-written document: its skeleton with every
 * hash, in a file of its size whose data pages stay holes; a pipe's input
 * is written there whole, the only way to hash it before sending it.
 */
static int
s_prepare_reads(wsync_source_t *src, wsync_err_t *err)
{
	int fd = memfd_create("wsync-push", MFD_CLOEXEC);
	XXH3_state_t state;

	if (fd < 0)
		return wsync_err_set(err, EX_SOFTWARE, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)src->size) < 0 || (src->doc = mmap(NULL, src->size,
	    PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		src->doc = NULL;
		close(fd);
		return wsync_err_set(err, EX_SOFTWARE, "%s: cannot make room for the document: %s",
		    src->name, strerror(errno));
	}
	close(fd);
	if (src->pipe) {
		src->spooled = 1;
		return wsync_source_write_into(src, src->doc, src->size, NULL, NULL, NULL, err);
	}
	if (wsync_tree_write_skeleton(src->tree, src->doc, src->size, err) < 0)
		return -1;
	for (size_t i = 0; i < src->tree->n; i++) {
		const struct wsync_tree_tensor *t = &src->tree->t[i];
		const unsigned char *p = t->data;
		XXH3_64bits_reset(&state);
		for (uint64_t off = 0; off < t->nbytes; off += S_WINDOW) {
			size_t n = t->nbytes - off < S_WINDOW ? (size_t)(t->nbytes - off) : S_WINDOW;
			wsync_hash_update(&state, p + off, n);
			s_input_release(src, p + off, n);
		}
		s_put_be64(src->doc + t->hash_at, XXH3_64bits_digest(&state));
	}
	return 0;
}

/*
 * A read of a .wsync input as it is: each tensor hashed as its bytes pass,
 * so a bad one is refused (65, naming the file) by the read of its last
 * byte, the same pass, before the commit.
 */
static int
s_read_verbatim(wsync_source_t *src, uint64_t off, unsigned char *out, size_t len,
    wsync_err_t *err)
{
	const unsigned char *base = wsync_file_bytes(src->in);
	uint64_t end = off + len;

	while (off < end) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, src->cursor);
		uint64_t to;
		if (t != NULL && off >= t->offset + t->nbytes) {
			src->cursor++;
			continue;
		}
		if (t == NULL || off < t->offset) {
			to = t == NULL || t->offset > end ? end : t->offset;
			memcpy(out, base + off, (size_t)(to - off));
		} else {
			if (off == t->offset)
				XXH3_64bits_reset(&src->state);
			to = t->offset + t->nbytes > end ? end : t->offset + t->nbytes;
			wsync_copy_hash_update(&src->state, out, base + off, (size_t)(to - off));
			if (to == t->offset + t->nbytes && XXH3_64bits_digest(&src->state) != t->hash)
				return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data does not match "
				    "its hash", src->name, t->path);
		}
		s_input_release(src, base + off, (size_t)(to - off));
		out += to - off;
		off = to;
	}
	return 0;
}

int
wsync_source_read(wsync_source_t *src, uint64_t off, void *buf, size_t len,
    wsync_err_t *err)
{
	unsigned char *out = buf;
	uint64_t end = off + len;

	if (wsync_source_size(src, err) == 0)
		return -1;
	if (end > src->size)
		return wsync_err_set(err, EX_SOFTWARE, "%s: a read past the document's end",
		    src->name);
	if (src->verbatim)
		return s_read_verbatim(src, off, buf, len, err);
	if (src->doc == NULL && s_prepare_reads(src, err) < 0)
		return -1;
	if (src->spooled) {
		memcpy(buf, src->doc + off, len);
		wsync_pages_release(src->doc + off, len);
		return 0;
	}
	/* Tensors are in document order: a cursor follows reads front to back. */
	while (off < end) {
		const struct wsync_tree_tensor *t = src->cursor < src->tree->n ?
		    &src->tree->t[src->cursor] : NULL;
		uint64_t to;
		if (t != NULL && off >= t->at + t->nbytes) {
			src->cursor++;
			continue;
		}
		if (t == NULL || off < t->at) {
			to = t == NULL || t->at > end ? end : t->at;
			memcpy(out, src->doc + off, (size_t)(to - off));
			wsync_pages_release(src->doc + off, (size_t)(to - off));
		} else {
			to = t->at + t->nbytes > end ? end : t->at + t->nbytes;
			memcpy(out, (const unsigned char *)t->data + (off - t->at), (size_t)(to - off));
			s_input_release(src, (const unsigned char *)t->data + (off - t->at),
			    (size_t)(to - off));
		}
		out += to - off;
		off = to;
	}
	return 0;
}
