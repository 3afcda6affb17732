/* tree.c - building a tensor tree in memory and writing it as a .wsync file: to a
 * descriptor (streamed) or into memory of its exact size. */
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "hash_int.h"
#include "io_int.h"
#include "tree_int.h"

wsync_tree_t *
wsync_tree_new(const char *model, wsync_err_t *err)
{
	wsync_tree_t *tree;

	if (wsync_model_id_check(model) < 0) {
		wsync_err_set(err, EX_USAGE, "bad model id \"%.80s\": use 1 to %d of "
		    "A-Z a-z 0-9 . _ - (not starting with '.')", model, WSYNC_MAX_MODEL);
		return NULL;
	}
	if ((tree = calloc(1, sizeof(*tree))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	strcpy(tree->model, model);
	return tree;
}

static void
s_tensor_free(struct wsync_tree_tensor *t)
{
	for (int i = 0; i < t->nkeys; i++)
		free(t->keys[i]);
	free(t->keys);
	free(t->path);
}

void
wsync_tree_destroy(wsync_tree_t **treep)
{
	wsync_tree_t *tree = *treep;

	if (tree == NULL)
		return;
	for (size_t i = 0; i < tree->n; i++)
		s_tensor_free(&tree->t[i]);
	for (size_t i = 0; i < tree->nmeta; i++) {
		free(tree->meta[i].key);
		free(tree->meta[i].value);
	}
	free(tree->t);
	free(tree->meta);
	free(tree);
	*treep = NULL;
}

void
wsync_tree_set_version(wsync_tree_t *tree, uint64_t version)
{
	tree->version = version;
}

size_t
wsync_tree_count(const wsync_tree_t *tree)
{
	return tree->n;
}

int
wsync_tree_set_meta(wsync_tree_t *tree, const char *key, const char *value,
    wsync_err_t *err)
{
	size_t klen = strlen(key), vlen = strlen(value);
	char *v;

	if (klen == 0 || klen > WSYNC_MAX_KEY)
		return wsync_err_set(err, EX_DATAERR, "meta key \"%.40s\": must be 1 to %d bytes",
		    key, WSYNC_MAX_KEY);
	if (vlen > WSYNC_MAX_META_VALUE)
		return wsync_err_set(err, EX_DATAERR, "meta %s: value of %zu bytes is over %d",
		    key, vlen, WSYNC_MAX_META_VALUE);
	if ((v = strdup(value)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; i < tree->nmeta; i++) {
		if (strcmp(tree->meta[i].key, key) == 0) {
			free(tree->meta[i].value);
			tree->meta[i].value = v;
			return 0;
		}
	}
	if (tree->nmeta == WSYNC_MAX_META) {
		free(v);
		return wsync_err_set(err, EX_DATAERR, "meta: more than %d entries",
		    WSYNC_MAX_META);
	}
	if (tree->nmeta == tree->meta_cap) {
		size_t cap = tree->meta_cap ? tree->meta_cap * 2 : 8;
		struct wsync_tree_meta *m = realloc(tree->meta, cap * sizeof(*m));
		if (m == NULL) {
			free(v);
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		}
		tree->meta = m;
		tree->meta_cap = cap;
	}
	if ((tree->meta[tree->nmeta].key = strdup(key)) == NULL) {
		free(v);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	tree->meta[tree->nmeta++].value = v;
	return 0;
}

int
wsync_tree_add_keys(wsync_tree_t *tree, const char *const *keys, int nkeys,
    wsync_dtype_t dtype, int ndim, const uint64_t *shape, const void *data,
    uint64_t nbytes, wsync_err_t *err)
{
	struct wsync_tree_tensor t = { .dtype = dtype, .ndim = ndim, .data = data,
	    .nbytes = nbytes };
	size_t plen = 0;
	uint64_t want;

	if (nkeys < 1 || nkeys > WSYNC_MAX_DEPTH)
		return wsync_err_set(err, EX_DATAERR, "tensor path must have 1 to %d keys",
		    WSYNC_MAX_DEPTH);
	for (int i = 0; i < nkeys; i++) {
		size_t klen = strlen(keys[i]);
		if (klen == 0 || klen > WSYNC_MAX_KEY)
			return wsync_err_set(err, EX_DATAERR, "tensor %s%s: key %d is %s",
			    keys[0], nkeys > 1 ? "..." : "", i + 1,
			    klen ? "longer than 255 bytes" : "empty");
		plen += klen + 1;
	}
	if (plen - 1 > WSYNC_MAX_PATH)
		return wsync_err_set(err, EX_DATAERR, "tensor %.60s...: path longer than %d bytes",
		    keys[0], WSYNC_MAX_PATH);
	if ((unsigned)dtype >= WSYNC_DTYPE_COUNT)
		return wsync_err_set(err, EX_DATAERR, "tensor %s: unknown dtype %d", keys[0], dtype);
	if (ndim < 0 || ndim > WSYNC_MAX_DIMS)
		return wsync_err_set(err, EX_DATAERR, "tensor %s: %d dims (at most %d)", keys[0],
		    ndim, WSYNC_MAX_DIMS);
	if (tree->n == WSYNC_MAX_TENSORS)
		return wsync_err_set(err, EX_DATAERR, "more than %d tensors", WSYNC_MAX_TENSORS);
	if (ndim > 0)
		memcpy(t.shape, shape, (size_t)ndim * sizeof(*shape));
	if (wsync_tensor_nbytes(dtype, ndim, shape, &want) < 0 || want != nbytes)
		return wsync_err_set(err, EX_DATAERR, "tensor %s: shape needs %llu bytes of %s, "
		    "data has %llu", keys[nkeys - 1], (unsigned long long)want,
		    wsync_dtype_name(dtype), (unsigned long long)nbytes);
	if (nbytes > UINT32_MAX)
		return wsync_err_set(err, EX_DATAERR, "tensor %s: %llu bytes: a .wsync tensor "
		    "holds at most 4294967295 (one msgpack bin, see wsync-format(5))",
		    keys[nkeys - 1], (unsigned long long)nbytes);

	if (tree->n == tree->cap) {
		size_t cap = tree->cap ? tree->cap * 2 : 16;
		struct wsync_tree_tensor *nt = realloc(tree->t, cap * sizeof(*nt));
		if (nt == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		tree->t = nt;
		tree->cap = cap;
	}
	if ((t.keys = calloc((size_t)nkeys, sizeof(*t.keys))) == NULL ||
	    (t.path = malloc(plen)) == NULL)
		goto nomem;
	t.path[0] = '\0';
	for (t.nkeys = 0; t.nkeys < nkeys; t.nkeys++) {
		if ((t.keys[t.nkeys] = strdup(keys[t.nkeys])) == NULL)
			goto nomem;
		if (t.nkeys > 0)
			strcat(t.path, ".");
		strcat(t.path, keys[t.nkeys]);
	}
	tree->t[tree->n++] = t;
	return 0;
nomem:
	s_tensor_free(&t);
	return wsync_err_set(err, EX_SOFTWARE, "out of memory");
}

int
wsync_tree_add(wsync_tree_t *tree, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, const void *data, uint64_t nbytes, wsync_err_t *err)
{
	return wsync_tree_add_split(tree, path, "./", dtype, ndim, shape, data, nbytes, err);
}

void
wsync_tree_known_hash(wsync_tree_t *tree, uint64_t hash)
{
	tree->t[tree->n - 1].hash = hash;
	tree->t[tree->n - 1].hash_known = 1;
}

int
wsync_tree_add_split(wsync_tree_t *tree, const char *path, const char *seps,
    wsync_dtype_t dtype, int ndim, const uint64_t *shape, const void *data,
    uint64_t nbytes, wsync_err_t *err)
{
	const char *keys[WSYNC_MAX_DEPTH];
	char buf[WSYNC_MAX_PATH + 1], *p, *next;
	int nkeys = 0;

	if (strlen(path) > WSYNC_MAX_PATH)
		return wsync_err_set(err, EX_DATAERR, "tensor %.60s...: path longer than %d bytes",
		    path, WSYNC_MAX_PATH);
	strcpy(buf, path);
	for (p = buf; p != NULL; p = next) {
		next = strpbrk(p, seps);
		if (next != NULL)
			*next++ = '\0';
		if (*p == '\0')
			return wsync_err_set(err, EX_DATAERR, "tensor %s: empty key in path", path);
		if (nkeys == WSYNC_MAX_DEPTH)
			return wsync_err_set(err, EX_DATAERR, "tensor %s: nested deeper than %d levels",
			    path, WSYNC_MAX_DEPTH);
		keys[nkeys++] = p;
	}
	return wsync_tree_add_keys(tree, keys, nkeys, dtype, ndim, shape, data, nbytes, err);
}

static int
s_cmp_keys(const void *a, const void *b)
{
	const struct wsync_tree_tensor *x = a, *y = b;

	for (int i = 0; i < x->nkeys && i < y->nkeys; i++) {
		int c = strcmp(x->keys[i], y->keys[i]);
		if (c != 0)
			return c;
	}
	return x->nkeys - y->nkeys;
}

static int
s_cmp_paths(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
wsync_tree_sort(wsync_tree_t *tree, wsync_err_t *err)
{
	char **paths;
	int rc = 0;

	if (tree->n > 1)
		qsort(tree->t, tree->n, sizeof(*tree->t), s_cmp_keys);
	for (size_t i = 1; i < tree->n; i++) {
		const struct wsync_tree_tensor *a = &tree->t[i - 1], *b = &tree->t[i];
		int k = 0;
		while (k < a->nkeys && k < b->nkeys && strcmp(a->keys[k], b->keys[k]) == 0)
			k++;
		if (k == a->nkeys)
			return wsync_err_set(err, EX_DATAERR, k == b->nkeys ?
			    "tensor %s: added twice" : "tensor %s: is also a subtree (of %s)",
			    a->path, b->path);
	}
	/* Paths joined with '.' must be unique too: ["a.b"] and ["a","b"] collide. */
	if ((paths = malloc((tree->n + 1) * sizeof(*paths))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; i < tree->n; i++)
		paths[i] = tree->t[i].path;
	if (tree->n > 1)
		qsort(paths, tree->n, sizeof(*paths), s_cmp_paths);
	for (size_t i = 1; i < tree->n && rc == 0; i++)
		if (strcmp(paths[i - 1], paths[i]) == 0)
			rc = wsync_err_set(err, EX_DATAERR, "tensor %s: two tensors have this path",
			    paths[i]);
	free(paths);
	return rc;
}

/*
 * The writer's output, one of three: a descriptor (fd >= 0), through buf;
 * memory of size bytes at dst, written in place; or neither, only counting.
 * msgpack-c packs the small pieces; tensor data bypasses it (s_out_data).
 * off counts every byte emitted, for the alignment arithmetic.
 */
#define S_OUT_BUF 65536
/* Bytes written between two lets-go of a releasing tree's source pages. */
#define S_RELEASE_STRIDE (8u << 20)

struct s_out {
	int fd;
	int release;                 /* the tree's release_sources */
	unsigned char *dst;
	uint64_t size;
	uint64_t off;
	size_t len;
	int error;                   /* errno of the first failed write */
	int skeleton;                /* to fd at offsets, tensor data and hashes left out */
	char *buf;                   /* S_OUT_BUF bytes, for a descriptor */
};

/* Writes all len bytes at off of fd; -1 with errno. */
static int
s_pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* A skeleton written to a descriptor: the buffered bytes end at o->off. */
static int
s_flush(struct s_out *o)
{
	if (o->len > 0 && !o->error && (o->skeleton ?
	    s_pwrite_all(o->fd, o->buf, o->len, o->off - o->len) :
	    wsync_write_all(o->fd, o->buf, o->len)) < 0)
		o->error = errno ? errno : EIO;
	o->len = 0;
	return o->error ? -1 : 0;
}

static int
s_out_write(void *data, const char *buf, size_t len)
{
	struct s_out *o = data;

	if (o->fd < 0) {
		if (o->dst != NULL) {
			if (len > o->size - o->off)
				return o->error = ENOSPC, -1;
			memcpy(o->dst + o->off, buf, len);
		}
		o->off += len;
		return 0;
	}
	if (len > S_OUT_BUF - o->len) {
		if (s_flush(o) < 0)
			return -1;
		if (len >= S_OUT_BUF) {
			if ((o->skeleton ? s_pwrite_all(o->fd, buf, len, o->off) :
			    wsync_write_all(o->fd, buf, len)) < 0)
				o->error = errno ? errno : EIO;
			o->off += len;
			return o->error ? -1 : 0;
		}
	}
	memcpy(o->buf + o->len, buf, len);
	o->len += len;
	o->off += len;
	return 0;
}

/*
 * A tensor's data bytes, after the header of their bin. In memory they are
 * copied and hashed in one pass, and the hash is patched into the 8 bytes at
 * hash_at (a msgpack uint64: big-endian), written as 0 before.
 */
static void
s_out_data(struct s_out *o, struct wsync_tree_tensor *t, uint64_t hash_at)
{
	uint64_t h;

	t->at = o->off;
	t->hash_at = hash_at;
	if (o->fd >= 0 && o->skeleton) {
		s_flush(o);
		o->off += t->nbytes;
		return;
	}
	if (o->fd >= 0 && o->release) {
		/* A stride at a time, each let go once written: memory stays one stride. */
		for (uint64_t at = 0; at < t->nbytes; at += S_RELEASE_STRIDE) {
			size_t len = t->nbytes - at < S_RELEASE_STRIDE ? (size_t)(t->nbytes - at) :
			    S_RELEASE_STRIDE;
			s_out_write(o, (const char *)t->data + at, len);
			wsync_pages_release((const char *)t->data + at, len);
		}
		return;
	}
	if (o->fd >= 0) {
		s_out_write(o, t->data, t->nbytes);
		return;
	}
	if (o->dst != NULL) {
		if (t->nbytes > o->size - o->off) {
			o->error = ENOSPC;
			return;
		}
		h = wsync_copy_hash(o->dst + o->off, t->data, t->nbytes);
		for (int b = 0; b < 8; b++)
			o->dst[hash_at + b] = (unsigned char)(h >> (56 - 8 * b));
	}
	o->off += t->nbytes;
}

static void
s_pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* Bytes msgpack-c uses for the header of a bin of len bytes. */
static unsigned
s_bin_header(uint64_t len)
{
	return len < 256 ? 2 : len < 65536 ? 3 : 5;
}

/* The tensor's hash, a stride at a time, each stride's pages let go once hashed. */
static uint64_t
s_hash_releasing(const struct wsync_tree_tensor *t)
{
	XXH3_state_t state;

	XXH3_64bits_reset(&state);
	for (uint64_t at = 0; at < t->nbytes; at += S_RELEASE_STRIDE) {
		size_t len = t->nbytes - at < S_RELEASE_STRIDE ? (size_t)(t->nbytes - at) :
		    S_RELEASE_STRIDE;
		wsync_hash_update(&state, (const char *)t->data + at, len);
		wsync_pages_release((const char *)t->data + at, len);
	}
	return XXH3_64bits_digest(&state);
}

static void
s_pack_tensor(msgpack_packer *pk, struct s_out *o, struct wsync_tree_tensor *t)
{
	static const char zeros[WSYNC_ALIGN];
	uint64_t hash_at;
	unsigned pad;

	msgpack_pack_map(pk, 5);
	s_pack_str(pk, "dtype");
	s_pack_str(pk, wsync_dtype_name(t->dtype));
	s_pack_str(pk, "shape");
	msgpack_pack_array(pk, (size_t)t->ndim);
	for (int i = 0; i < t->ndim; i++)
		msgpack_pack_uint64(pk, t->shape[i]);
	s_pack_str(pk, "hash");
	/* A stream cannot go back: it hashes first (unless known). Memory patches it in later. */
	msgpack_pack_fix_uint64(pk, o->fd < 0 || o->skeleton ? 0 : t->hash_known ? t->hash :
	    o->release ? s_hash_releasing(t) : wsync_hash(t->data, t->nbytes));
	hash_at = o->off - 8;
	s_pack_str(pk, "pad");
	/* The pad bin's header (2), the "data" key (5) and the data bin's header. */
	pad = (unsigned)((WSYNC_ALIGN - (o->off + 2 + 5 + s_bin_header(t->nbytes)) %
	    WSYNC_ALIGN) % WSYNC_ALIGN);
	msgpack_pack_bin(pk, pad);
	msgpack_pack_bin_body(pk, zeros, pad);
	s_pack_str(pk, "data");
	msgpack_pack_bin(pk, t->nbytes);
	s_out_data(o, t, hash_at);
}

/* Packs tensors [lo, hi), which share their first depth keys, as one map. */
static void
s_pack_level(msgpack_packer *pk, struct s_out *o, struct wsync_tree_tensor *t,
    size_t lo, size_t hi, int depth)
{
	size_t groups = 0;

	for (size_t i = lo; i < hi; i++)
		if (i == lo || strcmp(t[i].keys[depth], t[i - 1].keys[depth]) != 0)
			groups++;
	msgpack_pack_map(pk, groups);
	for (size_t i = lo, end; i < hi; i = end) {
		for (end = i + 1; end < hi; end++)
			if (strcmp(t[end].keys[depth], t[i].keys[depth]) != 0)
				break;
		s_pack_str(pk, t[i].keys[depth]);
		if (t[i].nkeys == depth + 1)
			s_pack_tensor(pk, o, &t[i]);
		else
			s_pack_level(pk, o, t, i, end, depth + 1);
	}
}

/* Emits the whole document to o; -1 with o->error set when a write failed. */
static int
s_write(wsync_tree_t *tree, struct s_out *o, wsync_err_t *err)
{
	msgpack_packer pk;

	if (wsync_tree_sort(tree, err) < 0)
		return -1;
	msgpack_packer_init(&pk, o, s_out_write);
	msgpack_pack_map(&pk, 5);
	s_pack_str(&pk, "wsync");
	msgpack_pack_uint32(&pk, WSYNC_FORMAT_VERSION);
	s_pack_str(&pk, "model");
	s_pack_str(&pk, tree->model);
	s_pack_str(&pk, "version");
	msgpack_pack_fix_uint64(&pk, tree->version);
	s_pack_str(&pk, "meta");
	msgpack_pack_map(&pk, tree->nmeta);
	for (size_t i = 0; i < tree->nmeta; i++) {
		s_pack_str(&pk, tree->meta[i].key);
		s_pack_str(&pk, tree->meta[i].value);
	}
	s_pack_str(&pk, "tree");
	if (tree->n == 0)
		msgpack_pack_map(&pk, 0);
	else
		s_pack_level(&pk, o, tree->t, 0, tree->n, 0);
	if (o->fd >= 0)
		return s_flush(o);
	/* Only a bug can make the document outgrow the size it was measured at. */
	return o->error ? wsync_err_set(err, EX_SOFTWARE, "model %s: the document "
	    "outgrew its %llu bytes", tree->model, (unsigned long long)o->size) : 0;
}

int
wsync_tree_write_fd(wsync_tree_t *tree, int fd, const char *name, wsync_err_t *err)
{
	struct s_out o = { .fd = fd, .release = tree->release_sources };
	int rc;

	if ((o.buf = malloc(S_OUT_BUF)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((rc = s_write(tree, &o, err)) < 0 && o.error)
		wsync_err_set(err, EX_IOERR, "%s: write failed: %s", name, strerror(o.error));
	free(o.buf);
	return rc;
}

int
wsync_tree_size(wsync_tree_t *tree, uint64_t *size, wsync_err_t *err)
{
	struct s_out o = { .fd = -1 };

	if (s_write(tree, &o, err) < 0)
		return -1;
	*size = o.off;
	return 0;
}

int
wsync_tree_write_into(wsync_tree_t *tree, void *dst, uint64_t size, wsync_err_t *err)
{
	struct s_out o = { .fd = -1, .dst = dst, .size = size };
	uint64_t need;

	if (wsync_tree_size(tree, &need, err) < 0)
		return -1;
	if (need != size)
		return wsync_err_set(err, EX_USAGE, "model %s: the document is %llu bytes, "
		    "the memory for it %llu", tree->model, (unsigned long long)need,
		    (unsigned long long)size);
	return s_write(tree, &o, err);
}

int
wsync_tree_write_skeleton(wsync_tree_t *tree, int fd, wsync_err_t *err)
{
	struct s_out o = { .fd = fd, .skeleton = 1 };
	int rc;

	if ((o.buf = malloc(S_OUT_BUF)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((rc = s_write(tree, &o, err)) < 0 && o.error)
		wsync_err_set(err, EX_IOERR, "model %s: write failed: %s", tree->model,
		    strerror(o.error));
	free(o.buf);
	return rc;
}

int
wsync_tree_write_map(wsync_tree_t *tree, int fd, wsync_err_t *err)
{
	struct stat st;
	uint64_t need;
	void *p;
	int rc;

	if (wsync_tree_size(tree, &need, err) < 0)
		return -1;
	if (fstat(fd, &st) < 0)
		return wsync_err_set(err, EX_IOERR, "model %s: cannot stat the file to write "
		    "into: %s", tree->model, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wsync_err_set(err, EX_USAGE, "model %s: the file to write into is not "
		    "a regular file", tree->model);
	if ((uint64_t)st.st_size != need)
		return wsync_err_set(err, EX_USAGE, "model %s: the document is %llu bytes, "
		    "the file to write it into has %llu", tree->model,
		    (unsigned long long)need, (unsigned long long)st.st_size);
	p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED)
		return wsync_err_set(err, EX_IOERR, "model %s: cannot map the file to write "
		    "into: %s%s", tree->model, strerror(errno), errno == EACCES ?
		    " (is it open for reading and writing?)" : "");
	rc = wsync_tree_write_into(tree, p, need, err);
	munmap(p, need);
	return rc;
}

int
wsync_tree_write_file(wsync_tree_t *tree, const char *path, wsync_err_t *err)
{
	return wsync_write_atomic(path, wsync_tree_write_fd, tree, err);
}
