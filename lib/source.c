/* source.c - a push's input converted while it is written, each tensor read and hashed once. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "file_int.h"
#include "hash_int.h"
#include "io_int.h"
#include "pushed_int.h"
#include "source_int.h"
#include "tree_int.h"

/*
 * Bytes moved at a time: read from the input into one buffer, hashed there
 * while they are in the cache, written to the output. Through a buffer and
 * descriptors, neither file is mapped: mapping 1 GiB in 4 KiB pages and
 * unmapping it costs about as much as copying it.
 */
#define S_PIECE (256u << 10)
/* The pipe buffer asked for stdin. */
#define S_PIPE_SIZE (1u << 20)
/* The longest safetensors header read from a pipe (the parser's limit too). */
#define S_MAX_HEAD (100u << 20)

/* Data of the tree in [base, base + size), read from fd at its offset there. */
struct s_region {
	const unsigned char *base;
	uint64_t size;
	int fd;
};

struct wsync_source {
	char *name;                     /* the input, for errors */
	wsync_file_t *in;               /* a mapped or buffered input, or a pipe's header */
	unsigned char *head;            /* a pipe's header bytes, or all of a piped .wsync */
	int pipe;                       /* the tensors' data is still to read from stdin */
	uint64_t pipe_at;               /* bytes of stdin read so far */
	int verbatim;                   /* the input is the document, as it is */
	wsync_tree_t *tree;             /* otherwise, the document's tree */
	int shared;                     /* the input's data is in shared file mappings */
	int fd;                         /* the input file, read at offsets; -1: memory */
	struct s_region *regions;       /* else where the tree's data is read at offsets */
	size_t nregions;
	unsigned char *buf;             /* S_PIECE bytes */
	uint64_t size;                  /* the document's, once laid out */
	int doc;                        /* for reads: a file of the skeleton with hashes, or all */
	int spooled;                    /* doc holds the whole document */
	size_t cursor;                  /* for reads: the tensor read last */
	XXH3_state_t state;             /* for reads of a .wsync: the hash of that tensor */
	void (*release)(void *arg);     /* what the data is borrowed from, let go at the end */
	void *release_arg;
	struct stat st;                 /* fd's, before any of it was read */
	int settled;                    /* st can key what is remembered of it (pushed_int.h) */
	uint64_t *hashes;               /* the tree's tensors', as each was read whole */
	unsigned char *hashed;
};

static wsync_source_t *
s_alloc(const char *name, wsync_err_t *err)
{
	wsync_source_t *src = calloc(1, sizeof(*src));

	if (src == NULL || (src->name = strdup(name)) == NULL ||
	    (src->buf = wsync_io_buffer(S_PIECE)) == NULL) {
		if (src != NULL)
			free(src->name);
		free(src);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	src->fd = src->doc = -1;
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

wsync_source_t *
wsync_source_of_tree(wsync_tree_t *tree, int shared, wsync_err_t *err)
{
	wsync_source_t *src = s_alloc(tree->model, err);

	if (src == NULL) {
		wsync_tree_destroy(&tree);
		return NULL;
	}
	src->tree = tree;
	src->shared = shared;
	/* Each tensor's data is where the tree points: read in the order of addresses. */
	for (size_t i = 0; i < tree->n; i++)
		tree->t[i].tag = (uint64_t)(uintptr_t)tree->t[i].data;
	return src;
}

/* Where [data, data + nbytes) of src's tree is read at offsets (the tree's locate). */
static int
s_locate(void *arg, const void *data, uint64_t nbytes, int *fd, uint64_t *off)
{
	const wsync_source_t *src = arg;
	const unsigned char *p = data;

	for (size_t i = 0; i < src->nregions; i++)
		if (p >= src->regions[i].base && p + nbytes <= src->regions[i].base +
		    src->regions[i].size) {
			*fd = src->regions[i].fd;
			*off = (uint64_t)(p - src->regions[i].base);
			return 0;
		}
	return -1;
}

int
wsync_source_read_at(wsync_source_t *src, const void *base, uint64_t size, int fd,
    wsync_err_t *err)
{
	struct s_region *r = realloc(src->regions, (src->nregions + 1) * sizeof(*r));

	if (r == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	src->regions = r;
	r[src->nregions++] = (struct s_region){ base, size, fd };
	src->tree->locate = s_locate;
	src->tree->locate_arg = src;
	return 0;
}

void
wsync_source_hold(wsync_source_t *src, void (*release)(void *arg), void *arg)
{
	src->release = release;
	src->release_arg = arg;
}

/* The input's meta, kept in the document. */
static int
s_copy_meta(wsync_source_t *src, wsync_err_t *err)
{
	for (size_t i = 0; i < wsync_file_meta_count(src->in); i++) {
		const wsync_meta_t *m = wsync_file_meta(src->in, i);
		if (wsync_source_meta(src, m->key, m->value, err) < 0)
			return -1;
	}
	return 0;
}

/*
 * Reads exactly len bytes into buf: of stdin, in order, when off is -1, else
 * of fd at off. 0, or -1 with err (a short input is 65); *got (may be NULL)
 * says how many came.
 */
static int
s_read(wsync_source_t *src, int fd, void *buf, size_t len, int64_t off, size_t *gotp,
    wsync_err_t *err)
{
	size_t got = 0, ignored;

	if (gotp == NULL)
		gotp = &ignored;
	*gotp = 0;
	while (got < len) {
		ssize_t n = off < 0 ? read(STDIN_FILENO, (char *)buf + got, len - got) :
		    pread(fd, (char *)buf + got, len - got, (off_t)(off + (int64_t)got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wsync_err_set(err, EX_IOERR, "%s: read failed: %s", src->name,
			    strerror(errno));
		if (n == 0)
			return wsync_err_set(err, EX_DATAERR, "%s: truncated: ended after %llu bytes",
			    src->name, (unsigned long long)((off < 0 ? (int64_t)src->pipe_at : off) +
			    (int64_t)got));
		got += (size_t)n;
		*gotp = got;
	}
	if (off < 0)
		src->pipe_at += len;
	return 0;
}

/* Reads the next len bytes of stdin into buf (see s_read). */
static int
s_pipe_read(wsync_source_t *src, void *buf, size_t len, size_t *gotp, wsync_err_t *err)
{
	return s_read(src, -1, buf, len, -1, gotp, err);
}

/* Reads len bytes at off of fd into buf (see s_read). */
static int
s_pread(wsync_source_t *src, int fd, void *buf, size_t len, uint64_t off, wsync_err_t *err)
{
	return s_read(src, fd, buf, len, (int64_t)off, NULL, err);
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

	/* A larger pipe lets the writer run ahead: fewer wake-ups each way (may be refused). */
	fcntl(STDIN_FILENO, F_SETPIPE_SZ, (int)S_PIPE_SIZE);
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
	if ((src->tree = wsync_tree_new(model, err)) == NULL || s_copy_meta(src, err) < 0)
		return -1;
	for (size_t i = 0; i < wsync_file_count(src->in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, i);
		if (s_add(src, t->path, t->dtype, t->ndim, t->shape, NULL, t->nbytes, t->offset,
		    err) < 0)
			return -1;
	}
	return 0;
}

/*
 * Opens path as the document for model (a checkpoint directory read as ckpt
 * says); as_tree: never sent as it is, never a pipe.
 */
static wsync_source_t *
s_open(const char *path, const char *model, const wsync_ckpt_in_t *ckpt, int as_tree,
    wsync_err_t *err)
{
	int piped = strcmp(path, "-") == 0;
	wsync_source_t *src = s_alloc(piped ? "stdin" : path, err);
	struct timespec when;
	struct stat st;
	int rc;

	if (src == NULL)
		return NULL;
	if (piped && fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode))
		piped = 0;
	if (!piped && wsync_is_dir(path)) {
		wsync_source_destroy(&src);
		return wsync_ckpt_source(path, model, ckpt, err);
	}
	if (piped && as_tree) {
		wsync_err_set(err, EX_USAGE, "stdin: a signed push reads a file, not a pipe (its "
		    "tensors are signed before they are sent)");
		goto fail;
	}
	if (piped) {
		if ((rc = s_open_pipe(src, model, err)) < 0)
			goto fail;
		if (rc == 0)
			return src;
	} else if ((src->in = wsync_input_open(path, err)) == NULL)
		goto fail;
	/*
	 * The same file, read at offsets; a file of another size since is read
	 * as mapped. The clock is read first: a change of the file after its
	 * stat gets a ctime past when, so one before when keys what a push of
	 * it remembers (pushed_int.h).
	 */
	if (clock_gettime(CLOCK_REALTIME_COARSE, &when) < 0)
		when = (struct timespec){ 0 };
	if ((src->shared = src->in->mem == WSYNC_MEM_MMAP) &&
	    (src->fd = strcmp(path, "-") == 0 ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) :
	    open(path, O_RDONLY | O_CLOEXEC)) >= 0 &&
	    (fstat(src->fd, &st) < 0 || (uint64_t)st.st_size != wsync_file_size(src->in))) {
		close(src->fd);
		src->fd = -1;
	}
	if (src->fd >= 0) {
		src->st = st;
		src->settled = S_ISREG(st.st_mode) && wsync_pushed_settled(&st, &when);
	}
	if (!as_tree && wsync_file_kind(src->in) == WSYNC_KIND_WSYNC &&
	    strcmp(wsync_file_model(src->in), model) == 0) {
		src->verbatim = 1;
		src->size = wsync_file_size(src->in);
		return src;
	}
	/* Re-written, its hashes are computed afresh: the old ones must hold first. */
	if (wsync_file_kind(src->in) == WSYNC_KIND_WSYNC &&
	    wsync_file_verify(src->in, NULL, NULL, err) < 0)
		goto fail;
	if ((src->tree = wsync_tree_new(model, err)) == NULL || s_copy_meta(src, err) < 0)
		goto fail;
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

wsync_source_t *
wsync_source_open(const char *path, const char *model, const wsync_ckpt_in_t *ckpt,
    wsync_err_t *err)
{
	return s_open(path, model, ckpt, 0, err);
}

wsync_source_t *
wsync_source_open_tree(const char *path, const char *model, const wsync_ckpt_in_t *ckpt,
    wsync_err_t *err)
{
	return s_open(path, model, ckpt, 1, err);
}

wsync_tree_t *
wsync_source_tree(wsync_source_t *src)
{
	return src->tree;
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
	if (src->doc >= 0)
		close(src->doc);
	if (src->fd >= 0)
		close(src->fd);
	free(src->buf);
	free(src->regions);
	free(src->hashes);
	free(src->hashed);
	wsync_tree_destroy(&src->tree);
	wsync_file_close(&src->in);
	free(src->head);
	free(src->name);
	if (src->release != NULL)
		src->release(src->release_arg);
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

/* Writes len bytes of buf at off of the output file fd. */
static int
s_pwrite(const wsync_source_t *src, int fd, const void *buf, size_t len, uint64_t off,
    wsync_err_t *err)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot write the document: %s",
			    src->name, n < 0 ? strerror(errno) : "no progress");
		done += (size_t)n;
	}
	return 0;
}

/* Lets go of the pages of [p, p + n) of the input, when they are a file's. */
static void
s_input_release(const wsync_source_t *src, const void *p, size_t n)
{
	if (src->shared)
		wsync_pages_release_around(p, n);
}

/*
 * Bytes [off, off + n) of tensor t's data into buf: read from the pipe (in
 * order), from the input file at its offset, or copied from memory.
 */
static int
s_piece(wsync_source_t *src, const struct wsync_tree_tensor *t, uint64_t off, void *buf,
    size_t n, wsync_err_t *err)
{
	const unsigned char *p = (const unsigned char *)t->data + off;
	uint64_t at;
	int fd;

	if (src->pipe)
		return s_pipe_read(src, buf, n, NULL, err);
	if (src->fd >= 0)
		return s_pread(src, src->fd, buf, n, (uint64_t)(p -
		    (const unsigned char *)wsync_file_bytes(src->in)), err);
	/* Read, not touched through the mapping: a hole read there is filled (tmpfs). */
	if (s_locate(src, p, n, &fd, &at) == 0)
		return s_pread(src, fd, buf, n, at, err);
	memcpy(buf, p, n);
	s_input_release(src, p, n);
	return 0;
}

/* Skips a pipe to tensor t's data, which must not be behind. */
static int
s_pipe_skip(wsync_source_t *src, const struct wsync_tree_tensor *t, wsync_err_t *err)
{
	if (t->tag < src->pipe_at)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: its data overlaps another's "
		    "(a stream is read once)", src->name, t->path);
	while (src->pipe_at < t->tag) {
		size_t n = t->tag - src->pipe_at < S_PIECE ? (size_t)(t->tag - src->pipe_at) :
		    S_PIECE;
		if (s_pipe_read(src, src->buf, n, NULL, err) < 0)
			return -1;
	}
	return 0;
}

/* Tensor i's hash, its data read whole: what wsync_source_remember remembers. */
static void
s_note_hash(wsync_source_t *src, size_t i, uint64_t hash)
{
	if (src->tree == NULL || i >= src->tree->n)
		return;
	if (src->hashes == NULL) {
		src->hashes = calloc(src->tree->n + 1, sizeof(*src->hashes));
		src->hashed = calloc(src->tree->n + 1, 1);
		if (src->hashes == NULL || src->hashed == NULL) {
			free(src->hashes);
			free(src->hashed);
			src->hashes = NULL;
			src->hashed = NULL;
			return;
		}
	}
	src->hashes[i] = hash;
	src->hashed[i] = 1;
}

/*
 * Writes tensor t's data at its place in fd (only when data), hashed on
 * the way, then its hash.
 */
static int
s_tensor_out(wsync_source_t *src, const struct wsync_tree_tensor *t, int fd, int data,
    wsync_err_t *err)
{
	unsigned char be[8];
	XXH3_state_t state;
	uint64_t hash;

	XXH3_64bits_reset(&state);
	for (uint64_t off = 0; off < t->nbytes; off += S_PIECE) {
		size_t n = t->nbytes - off < S_PIECE ? (size_t)(t->nbytes - off) : S_PIECE;
		if (s_piece(src, t, off, src->buf, n, err) < 0)
			return -1;
		wsync_hash_update(&state, src->buf, n);
		if (data && s_pwrite(src, fd, src->buf, n, t->at + off, err) < 0)
			return -1;
	}
	hash = XXH3_64bits_digest(&state);
	s_put_be64(be, hash);
	s_note_hash(src, (size_t)(t - src->tree->t), hash);
	return s_pwrite(src, fd, be, sizeof(be), t->hash_at, err);
}

/*
 * Where the span of [off, end) that starts at off ends, in *to: 1 when it
 * is data of the tensor at [at, at + nbytes) (have: there is one), 0 when it
 * is bytes before it.
 */
static int
s_span(int have, uint64_t at, uint64_t nbytes, uint64_t off, uint64_t end, uint64_t *to)
{
	if (!have || off < at) {
		*to = !have || at > end ? end : at;
		return 0;
	}
	*to = at + nbytes > end ? end : at + nbytes;
	return 1;
}

/*
 * Bytes [off, off + len) of a .wsync input as it is into out, each tensor
 * hashed as its bytes pass, so a bad one is refused (65, naming the file) by
 * the read of its last byte, in the same pass. Reads go front to back.
 */
static int
s_fill_verbatim(wsync_source_t *src, uint64_t off, unsigned char *out, size_t len,
    wsync_err_t *err)
{
	const unsigned char *base = wsync_file_bytes(src->in);
	uint64_t end = off + len;

	if (src->fd >= 0) {
		if (s_pread(src, src->fd, out, len, off, err) < 0)
			return -1;
	} else {
		memcpy(out, base + off, len);
		s_input_release(src, base + off, len);
	}
	while (off < end) {
		const wsync_tensor_t *t = wsync_file_tensor(src->in, src->cursor);
		uint64_t to;
		if (t != NULL && off >= t->offset + t->nbytes) {
			src->cursor++;
			continue;
		}
		if (s_span(t != NULL, t != NULL ? t->offset : 0, t != NULL ? t->nbytes : 0, off,
		    end, &to)) {
			if (off == t->offset)
				XXH3_64bits_reset(&src->state);
			wsync_hash_update(&src->state, out, (size_t)(to - off));
			if (to == t->offset + t->nbytes && XXH3_64bits_digest(&src->state) != t->hash)
				return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data does not match "
				    "its hash", src->name, t->path);
		}
		out += to - off;
		off = to;
	}
	return 0;
}

int
wsync_source_write_fd(wsync_source_t *src, int fd, uint64_t size,
    wsync_source_progress_fn progress, void *arg, volatile sig_atomic_t *stop,
    wsync_err_t *err)
{
	struct wsync_tree_tensor **order = NULL;
	uint64_t done = 0;
	int rc = -1;

	if (size != wsync_source_size(src, err))
		return wsync_err_set(err, EX_SOFTWARE, "%s: the document is %llu bytes, the file "
		    "for it %llu", src->name, (unsigned long long)src->size,
		    (unsigned long long)size);
	if (src->verbatim) {
		src->cursor = 0;
		for (uint64_t off = 0; off < size; off += S_PIECE) {
			size_t n = size - off < S_PIECE ? (size_t)(size - off) : S_PIECE;
			if (stop != NULL && *stop)
				return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
			if (s_fill_verbatim(src, off, src->buf, n, err) < 0 ||
			    s_pwrite(src, fd, src->buf, n, off, err) < 0)
				return -1;
			if (progress != NULL)
				progress(arg, off + n, size);
		}
		return 0;
	}
	if (wsync_tree_write_skeleton(src->tree, fd, err) < 0 ||
	    (order = s_input_order(src->tree, err)) == NULL)
		return -1;
	for (size_t i = 0; i < src->tree->n; i++) {
		if (stop != NULL && *stop) {
			wsync_err_set(err, EX_TEMPFAIL, "interrupted");
			goto out;
		}
		if ((src->pipe && s_pipe_skip(src, order[i], err) < 0) ||
		    s_tensor_out(src, order[i], fd, 1, err) < 0)
			goto out;
		done += order[i]->nbytes;
		if (progress != NULL)
			progress(arg, done, size);
	}
	/* A writer that stops before the end would get SIGPIPE: the stream is read whole. */
	while (src->pipe) {
		ssize_t n = read(STDIN_FILENO, src->buf, S_PIECE);
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	src->pipe = 0;
	/* The bytes between tensors are written too: the whole is done. */
	if (progress != NULL)
		progress(arg, size, size);
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
	if ((src->doc = memfd_create("wsync-push", MFD_CLOEXEC)) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "memfd_create: %s", strerror(errno));
	if (ftruncate(src->doc, (off_t)src->size) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "%s: cannot make room for the document: %s",
		    src->name, strerror(errno));
	if (src->pipe) {
		src->spooled = 1;
		return wsync_source_write_fd(src, src->doc, src->size, NULL, NULL, NULL, err);
	}
	if (wsync_tree_write_skeleton(src->tree, src->doc, err) < 0)
		return -1;
	for (size_t i = 0; i < src->tree->n; i++)
		if (s_tensor_out(src, &src->tree->t[i], src->doc, 0, err) < 0)
			return -1;
	return 0;
}

int
wsync_source_read_data(wsync_source_t *src, size_t i, uint64_t off, void *buf, size_t n,
    wsync_err_t *err)
{
	const struct wsync_tree_tensor *t;

	if (src->tree == NULL || src->pipe || i >= src->tree->n ||
	    off + n > src->tree->t[i].nbytes)
		return wsync_err_set(err, EX_SOFTWARE, "%s: a read outside tensor %zu's data",
		    src->name, i);
	t = &src->tree->t[i];
	return s_piece(src, t, off, buf, n, err);
}

/* Reads tensor i's data of the source in arg; a wsync_delta_read_fn. */
static int
s_read_data(void *arg, size_t i, uint64_t off, void *buf, size_t n, wsync_err_t *err)
{
	return wsync_source_read_data(arg, i, off, buf, n, err);
}

/*
 * The delta to src's document from base_fd (a .wsync file), or, base set,
 * from base's document, whose skeleton with hashes is base_fd: its data read
 * from base as src's is from src.
 */
static int
s_delta_over(wsync_source_t *src, uint64_t size, int base_fd, int patch,
    unsigned char *base_map, wsync_source_t *base, const uint64_t *base_hashes, int out_fd,
    const char *name, uint64_t limit, wsync_delta_stats_t *stats, wsync_err_t *err)
{
	wsync_tree_t *tree = src->tree;
	const char **paths = NULL, **base_paths = NULL;
	uint64_t *hash_at = NULL, *base_hash_at = NULL;
	wsync_file_t *head = NULL;
	wsync_err_t ignored;
	int hfd = -1, rc = -1;

	if (tree == NULL || src->pipe)
		return 2;
	paths = calloc(tree->n + 1, sizeof(*paths));
	hash_at = calloc(tree->n + 1, sizeof(*hash_at));
	base_paths = base != NULL ? calloc(base->tree->n + 1, sizeof(*base_paths)) : NULL;
	base_hash_at = base != NULL ? calloc(base->tree->n + 1, sizeof(*base_hash_at)) : NULL;
	if (paths == NULL || hash_at == NULL ||
	    (base != NULL && (base_paths == NULL || base_hash_at == NULL))) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	/* The document's skeleton: its hashes are written in as its tensors are read. */
	if ((hfd = memfd_create("wsync-head", MFD_CLOEXEC)) < 0) {
		wsync_err_set(err, EX_OSERR, "memfd_create: %s", strerror(errno));
		goto out;
	}
	if (ftruncate(hfd, (off_t)size) < 0) {
		wsync_err_set(err, EX_OSERR, "%s: the document's skeleton: %s", src->name,
		    strerror(errno));
		goto out;
	}
	if (wsync_tree_write_skeleton(tree, hfd, err) < 0)
		goto out;
	for (size_t i = 0; i < tree->n; i++) {
		paths[i] = tree->t[i].path;
		hash_at[i] = tree->t[i].hash_at;
	}
	for (size_t i = 0; base != NULL && i < base->tree->n; i++) {
		base_paths[i] = base->tree->t[i].path;
		base_hash_at[i] = base->tree->t[i].hash_at;
	}
	rc = wsync_delta_make_over(base_fd, &(wsync_delta_over_t){ .fd = hfd, .n = tree->n,
	    .paths = paths, .hash_at = hash_at, .read = s_read_data, .arg = src,
	    .patch = patch, .base_map = base_map, .base_read = base != NULL ? s_read_data : NULL,
	    .base_arg = base,
	    .base_n = base != NULL ? base->tree->n : 0, .base_paths = base_paths,
	    .base_hash_at = base_hash_at, .base_hashes = base_hashes }, out_fd, name, limit,
	    stats, err);
	/* The hashes of src's tensors are in the skeleton now: noted, to be remembered. */
	if (rc == 0 && (head = wsync_file_open_fd(hfd, src->name, &ignored)) != NULL)
		for (size_t i = 0; i < tree->n; i++)
			s_note_hash(src, i, wsync_file_tensor(head, i)->hash);
	wsync_file_close(&head);
out:
	if (hfd >= 0)
		close(hfd);
	free(paths);
	free(base_paths);
	free(base_hash_at);
	free(hash_at);
	return rc;
}

int
wsync_source_delta_over(wsync_source_t *src, uint64_t size, int base_fd, int patch,
    unsigned char *base_map, int out_fd, const char *name, uint64_t limit,
    wsync_delta_stats_t *stats, wsync_err_t *err)
{
	return s_delta_over(src, size, base_fd, patch, base_map, NULL, NULL, out_fd, name, limit,
	    stats, err);
}

/* Whether src is read from one file, as it was when opened: st is its key (pushed_int.h). */
static int
s_unchanged(const wsync_source_t *src)
{
	struct stat now;

	return src->fd >= 0 && src->tree != NULL && !src->verbatim && !src->pipe &&
	    fstat(src->fd, &now) == 0 && wsync_pushed_same(&now, &src->st);
}

/*
 * The content id of src's document with hashes (its tensors', in its
 * order) into *content, through skel, its skeleton (written into, its data
 * left as it is), or, skel -1, one made for it. -1 when it cannot be had.
 */
static int
s_content_with(wsync_source_t *src, int skel, const uint64_t *hashes, uint64_t *content)
{
	wsync_file_t *f = NULL;
	wsync_err_t ignored;
	int fd = skel, rc = -1;

	if (fd < 0 && ((fd = memfd_create("wsync-skeleton", MFD_CLOEXEC)) < 0 ||
	    wsync_source_size(src, &ignored) == 0 || ftruncate(fd, (off_t)src->size) < 0 ||
	    wsync_tree_write_skeleton(src->tree, fd, &ignored) < 0))
		goto out;
	for (size_t i = 0; i < src->tree->n; i++)
		if (wsync_write_be64_at(fd, hashes[i], src->tree->t[i].hash_at) < 0)
			goto out;
	if ((f = wsync_file_open_fd(fd, src->name, &ignored)) == NULL)
		goto out;
	*content = wsync_file_content_id(f);
	rc = 0;
out:
	wsync_file_close(&f);
	if (skel < 0 && fd >= 0)
		close(fd);
	return rc;
}

/*
 * The hashes of base's tensors remembered from its push (caller frees),
 * written into its skeleton skel, whose content id must then be the one
 * remembered with them; NULL when none are, or they do not fit.
 */
static uint64_t *
s_recall(wsync_source_t *base, int skel)
{
	uint64_t *hashes, content, made;

	if (!s_unchanged(base) || (hashes = calloc(base->tree->n + 1, sizeof(*hashes))) == NULL)
		return NULL;
	if (!wsync_pushed_recall(&base->st, base->tree->n, hashes, &content) ||
	    s_content_with(base, skel, hashes, &made) < 0 || made != content) {
		free(hashes);
		return NULL;
	}
	return hashes;
}

void
wsync_source_remember(wsync_source_t *src)
{
	uint64_t content;

	if (!src->settled || src->hashes == NULL || !s_unchanged(src))
		return;
	for (size_t i = 0; i < src->tree->n; i++)
		if (!src->hashed[i])
			return;
	/* The document's own, not the version's: a part's is not its group's. */
	if (s_content_with(src, -1, src->hashes, &content) == 0)
		wsync_pushed_remember(&src->st, src->tree->n, src->hashes, content);
}

int
wsync_source_delta_from(wsync_source_t *src, uint64_t size, wsync_source_t *base,
    int out_fd, const char *name, uint64_t limit, wsync_delta_stats_t *stats,
    uint64_t *base_content, int *recalled, wsync_err_t *err)
{
	wsync_file_t *skeleton = NULL;
	uint64_t bsize, *known = NULL;
	int bfd = -1, rc = -1;

	if (src->tree == NULL || src->pipe || base->tree == NULL || base->pipe)
		return 2;
	/*
	 * The base's skeleton, its data pages holes: the delta maker hashes its
	 * tensors as it reads them and writes the hashes in, for the content id
	 * the hub matches.
	 */
	if ((bsize = wsync_source_size(base, err)) == 0)
		return -1;
	if ((bfd = memfd_create("wsync-base", MFD_CLOEXEC)) < 0 ||
	    ftruncate(bfd, (off_t)bsize) < 0) {
		wsync_err_set(err, EX_OSERR, "%s: the base's skeleton: %s", base->name,
		    strerror(errno));
		goto out;
	}
	if (wsync_tree_write_skeleton(base->tree, bfd, err) < 0)
		goto out;
	known = s_recall(base, bfd);
	if (recalled != NULL)
		*recalled = known != NULL;
	rc = s_delta_over(src, size, bfd, 0, NULL, base, known, out_fd, name, limit, stats, err);
	if (rc == 0 && (skeleton = wsync_file_open_fd(bfd, base->name, err)) == NULL)
		rc = -1;
	if (rc == 0)
		*base_content = wsync_file_content_id(skeleton);
out:
	free(known);
	wsync_file_close(&skeleton);
	if (bfd >= 0)
		close(bfd);
	return rc;
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
		return s_fill_verbatim(src, off, buf, len, err);
	if (src->doc < 0 && s_prepare_reads(src, err) < 0)
		return -1;
	if (src->spooled)
		return s_pread(src, src->doc, buf, len, off, err);
	/* Tensors are in document order: a cursor follows reads front to back. */
	while (off < end) {
		const struct wsync_tree_tensor *t = src->cursor < src->tree->n ?
		    &src->tree->t[src->cursor] : NULL;
		uint64_t to;
		if (t != NULL && off >= t->at + t->nbytes) {
			src->cursor++;
			continue;
		}
		if (!s_span(t != NULL, t != NULL ? t->at : 0, t != NULL ? t->nbytes : 0, off, end,
		    &to)) {
			if (s_pread(src, src->doc, out, (size_t)(to - off), off, err) < 0)
				return -1;
		} else if (s_piece(src, t, off - t->at, out, (size_t)(to - off), err) < 0)
			return -1;
		out += to - off;
		off = to;
	}
	return 0;
}
