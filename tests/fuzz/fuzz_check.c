/* fuzz_check.c - invariants of parsed files and writer round trips, for the fuzz targets. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sysexits.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "fuzz_check.h"

void
fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: invariant broken: %s: ", file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

int
fuzz_scratch_fd(int which)
{
	static int fds[4] = { -1, -1, -1, -1 };

	FUZZ_ASSERT(which >= 0 && which < 4, "scratch fd %d", which);
	if (fds[which] < 0) {
		fds[which] = memfd_create("wsync-fuzz", MFD_CLOEXEC);
		FUZZ_ASSERT(fds[which] >= 0, "memfd_create: %s", strerror(errno));
	}
	FUZZ_ASSERT(ftruncate(fds[which], 0) == 0, "ftruncate: %s", strerror(errno));
	FUZZ_ASSERT(lseek(fds[which], 0, SEEK_SET) == 0, "lseek: %s", strerror(errno));
	return fds[which];
}

int
fuzz_same_fds(int a, int b)
{
	struct stat sa, sb;
	char x[4096], y[4096];

	if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0 || sa.st_size != sb.st_size)
		return 0;
	for (off_t at = 0; at < sa.st_size; ) {
		ssize_t n = pread(a, x, sizeof(x), at);
		if (n <= 0 || pread(b, y, (size_t)n, at) != n || memcmp(x, y, (size_t)n) != 0)
			return 0;
		at += n;
	}
	return 1;
}

static int
s_cmp_path(const void *a, const void *b)
{
	return strcmp((*(const wsync_tensor_t *const *)a)->path,
	    (*(const wsync_tensor_t *const *)b)->path);
}

/* The file's tensors sorted by path, bytewise; caller frees. */
static const wsync_tensor_t **
s_sorted(const wsync_file_t *f)
{
	size_t n = wsync_file_count(f);
	const wsync_tensor_t **v = malloc((n + 1) * sizeof(*v));

	FUZZ_ASSERT(v != NULL, "out of memory for %zu tensors", n);
	for (size_t i = 0; i < n; i++)
		v[i] = wsync_file_tensor(f, i);
	qsort(v, n, sizeof(*v), s_cmp_path);
	return v;
}

/* The content id as wsync-format(5) defines it, computed apart from the library. */
static uint64_t
s_content_id(const wsync_tensor_t *const *sorted, size_t n)
{
	XXH3_state_t st;
	unsigned char le[8];

	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = sorted[i];
		const char *dtype = wsync_dtype_name(t->dtype);
		unsigned char ndim = (unsigned char)t->ndim;

		XXH3_64bits_update(&st, t->path, strlen(t->path) + 1);
		XXH3_64bits_update(&st, dtype, strlen(dtype) + 1);
		XXH3_64bits_update(&st, &ndim, 1);
		for (int d = 0; d <= t->ndim; d++) {
			uint64_t v = d < t->ndim ? t->shape[d] : t->hash;
			for (int b = 0; b < 8; b++)
				le[b] = (unsigned char)(v >> (8 * b));
			XXH3_64bits_update(&st, le, 8);
		}
	}
	return XXH3_64bits_digest(&st);
}

static void
s_count_bad(const wsync_tensor_t *t, uint64_t computed, void *arg)
{
	FUZZ_ASSERT(computed != t->hash, "tensor %s reported bad with a matching hash",
	    t->path);
	++*(size_t *)arg;
}

static void
s_check_tensor(const wsync_file_t *f, const wsync_tensor_t *t)
{
	const unsigned char *base = wsync_file_bytes(f);
	const wsync_tensor_t *u;
	char slashed[WSYNC_MAX_PATH + 1];
	uint64_t size = wsync_file_size(f), want, n;
	size_t plen;
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;

	FUZZ_ASSERT(t->path != NULL, "tensor without a path");
	plen = strlen(t->path);
	FUZZ_ASSERT(plen >= 1 && plen <= WSYNC_MAX_PATH, "path of %zu bytes", plen);
	FUZZ_ASSERT(wsync_dtype_name(t->dtype) != NULL, "%s: dtype %d", t->path, t->dtype);
	FUZZ_ASSERT(t->ndim >= 0 && t->ndim <= WSYNC_MAX_DIMS, "%s: ndim %d", t->path,
	    t->ndim);
	FUZZ_ASSERT(wsync_tensor_nbytes(t->dtype, t->ndim, t->shape, &want) == 0 &&
	    want == t->nbytes, "%s: nbytes %llu does not match its shape", t->path,
	    (unsigned long long)t->nbytes);
	FUZZ_ASSERT(t->data != NULL, "%s: NULL data", t->path);
	FUZZ_ASSERT((const unsigned char *)t->data >= base &&
	    (uint64_t)((const unsigned char *)t->data - base) <= size &&
	    t->nbytes <= size - (uint64_t)((const unsigned char *)t->data - base),
	    "%s: data [%p, +%llu) outside the file [%p, +%llu)", t->path, t->data,
	    (unsigned long long)t->nbytes, (const void *)base, (unsigned long long)size);
	if (wsync && t->nbytes == 0) {
		FUZZ_ASSERT(t->offset == 0 && t->data == (const void *)base,
		    "%s: zero-size tensor at offset %llu", t->path,
		    (unsigned long long)t->offset);
	} else {
		FUZZ_ASSERT(t->offset == (uint64_t)((const unsigned char *)t->data - base),
		    "%s: offset %llu does not match the data pointer", t->path,
		    (unsigned long long)t->offset);
	}
	if (wsync)
		FUZZ_ASSERT(t->offset % WSYNC_ALIGN == 0, "%s: data at unaligned offset %llu",
		    t->path, (unsigned long long)t->offset);
	else
		FUZZ_ASSERT(t->hash == 0, "%s: a safetensors tensor has hash %llx", t->path,
		    (unsigned long long)t->hash);
	if (t->nbytes > 0) {
		n = t->nbytes / wsync_dtype_size(t->dtype);
		(void)wsync_dtype_get(t->dtype, t->data, 0);
		(void)wsync_dtype_get(t->dtype, t->data, n - 1);
	}
	FUZZ_ASSERT(wsync_file_find(f, t->path) == t, "%s: find returns %p, not %p",
	    t->path, (const void *)wsync_file_find(f, t->path), (const void *)t);
	/*
	 * find also takes '/' for '.': "actor/0/weight" names actor.0.weight,
	 * unless a tensor's path is literally "actor/0/weight".
	 */
	strcpy(slashed, t->path);
	for (char *p = slashed; (p = strchr(p, '.')) != NULL; p++)
		*p = '/';
	u = wsync_file_find(f, slashed);
	if (strchr(t->path, '/') == NULL)
		FUZZ_ASSERT(u == t || (u != NULL && strcmp(u->path, slashed) == 0),
		    "%s: find(\"%s\") gives %s", t->path, slashed, u ? u->path : "nothing");
}

void
fuzz_check_file(const wsync_file_t *f)
{
	const unsigned char *base = wsync_file_bytes(f);
	const wsync_tensor_t **sorted;
	uint64_t size = wsync_file_size(f), bytes = 0, params = 0, off;
	size_t count = wsync_file_count(f), nbad = 0, mbad = 0;
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;
	wsync_err_t err = { 0 };
	int rc;

	FUZZ_ASSERT(wsync_file_name(f) != NULL, "no name");
	FUZZ_ASSERT(wsync || wsync_file_kind(f) == WSYNC_KIND_SAFETENSORS, "kind %d",
	    (int)wsync_file_kind(f));
	FUZZ_ASSERT(count <= WSYNC_MAX_TENSORS, "%zu tensors", count);
	for (size_t i = 0; i < count; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		FUZZ_ASSERT(t != NULL, "tensor %zu of %zu is NULL", i, count);
		s_check_tensor(f, t);
		bytes += t->nbytes;
		params += t->nbytes / wsync_dtype_size(t->dtype);
		if (wsync_hash(t->data, (size_t)t->nbytes) != t->hash)
			mbad++;
	}
	FUZZ_ASSERT(wsync_file_tensor(f, count) == NULL, "tensor %zu of %zu", count, count);
	FUZZ_ASSERT(wsync_file_data_bytes(f) == bytes, "data bytes %llu, tensors sum %llu",
	    (unsigned long long)wsync_file_data_bytes(f), (unsigned long long)bytes);
	FUZZ_ASSERT(wsync_file_params(f) == params, "params %llu, tensors sum %llu",
	    (unsigned long long)wsync_file_params(f), (unsigned long long)params);

	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		FUZZ_ASSERT(m != NULL && m->key != NULL && m->value != NULL, "meta %zu", i);
		if (wsync)
			FUZZ_ASSERT(strlen(m->key) >= 1 && strlen(m->key) <= WSYNC_MAX_KEY &&
			    strlen(m->value) <= WSYNC_MAX_META_VALUE, "meta %zu out of limits", i);
	}
	FUZZ_ASSERT(wsync_file_meta(f, wsync_file_meta_count(f)) == NULL, "meta past the end");
	FUZZ_ASSERT(wsync_file_meta_count(f) <= WSYNC_MAX_META, "%zu meta entries",
	    wsync_file_meta_count(f));

	sorted = s_sorted(f);
	for (size_t i = 1; i < count; i++)
		FUZZ_ASSERT(strcmp(sorted[i - 1]->path, sorted[i]->path) != 0,
		    "two tensors have the path %s", sorted[i]->path);
	if (wsync) {
		FUZZ_ASSERT(wsync_file_format(f) == WSYNC_FORMAT_VERSION, "format %u",
		    wsync_file_format(f));
		FUZZ_ASSERT(wsync_file_model(f) != NULL &&
		    wsync_model_id_check(wsync_file_model(f)) == 0, "bad model id accepted");
		FUZZ_ASSERT(wsync_file_content_id(f) == s_content_id(sorted, count),
		    "content id %016llx, the spec gives %016llx",
		    (unsigned long long)wsync_file_content_id(f),
		    (unsigned long long)s_content_id(sorted, count));
		off = wsync_file_version_offset(f);
		if (off != 0) {
			uint64_t v = 0;
			FUZZ_ASSERT(off >= 1 && off <= size && size - off >= 8 &&
			    base[off - 1] == 0xcf, "version offset %llu",
			    (unsigned long long)off);
			for (int b = 0; b < 8; b++)
				v = v << 8 | base[off + (uint64_t)b];
			FUZZ_ASSERT(v == wsync_file_version(f), "stamp reads %llu, version %llu",
			    (unsigned long long)v, (unsigned long long)wsync_file_version(f));
		}
	} else {
		FUZZ_ASSERT(wsync_file_content_id(f) == 0, "safetensors content id %016llx",
		    (unsigned long long)wsync_file_content_id(f));
	}
	free(sorted);

	rc = wsync_file_verify(f, s_count_bad, &nbad, &err);
	FUZZ_ASSERT(nbad == mbad, "verify reports %zu bad tensors, %zu are", nbad, mbad);
	FUZZ_ASSERT((rc == 0) == (mbad == 0), "verify returns %d with %zu bad", rc, mbad);
	if (rc < 0)
		FUZZ_ASSERT(err.code == EX_DATAERR && err.msg[0] != '\0',
		    "verify failed with code %d, message \"%s\"", err.code, err.msg);
}

/* Splits path at every '.' into keys (buf holds the copy); 0 when none is empty. */
static int
s_split(const char *path, char *buf, const char **keys, int *nkeys)
{
	char *p, *next;

	strcpy(buf, path);
	*nkeys = 0;
	for (p = buf; p != NULL; p = next) {
		if ((next = strchr(p, '.')) != NULL)
			*next++ = '\0';
		if (*p == '\0' || *nkeys == WSYNC_MAX_DEPTH || strlen(p) > WSYNC_MAX_KEY)
			return -1;
		keys[(*nkeys)++] = p;
	}
	return 0;
}

/*
 * A tree holding f's tensors under the same joined paths: nested at each '.'
 * where every key fits, else flat; NULL when the writer cannot express them.
 */
static wsync_tree_t *
s_tree(const wsync_file_t *f, int flat)
{
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;
	wsync_err_t err = { 0 };
	wsync_tree_t *tree = wsync_tree_new(wsync ? wsync_file_model(f) : "fuzz", &err);

	FUZZ_ASSERT(tree != NULL, "the writer refuses a model id the reader took: %s",
	    err.msg);
	wsync_tree_set_version(tree, wsync_file_version(f));
	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		if (wsync_tree_set_meta(tree, m->key, m->value, &err) < 0) {
			FUZZ_ASSERT(!wsync, "the writer refuses meta the reader took: %s", err.msg);
			goto skip;
		}
	}
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		char buf[WSYNC_MAX_PATH + 1];
		const char *keys[WSYNC_MAX_DEPTH];
		int nkeys = 1;

		keys[0] = t->path;
		if (!flat && s_split(t->path, buf, keys, &nkeys) < 0) {
			keys[0] = t->path;
			nkeys = 1;
		}
		if (wsync_tree_add_keys(tree, keys, nkeys, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, &err) < 0) {
			FUZZ_ASSERT(err.code == EX_DATAERR, "tree_add failed with %d: %s", err.code,
			    err.msg);
			goto skip;
		}
	}
	return tree;
skip:
	wsync_tree_destroy(&tree);
	FUZZ_ASSERT(tree == NULL, "destroy leaves the handle set");
	return NULL;
}

/* Checks that g holds f's tensors and meta; hashes too when same_hashes. */
static void
s_same(const wsync_file_t *f, const wsync_file_t *g, int same_hashes)
{
	size_t n = wsync_file_count(f);
	const wsync_tensor_t **a, **b;

	FUZZ_ASSERT(wsync_file_count(g) == n, "%zu tensors written, %zu read back", n,
	    wsync_file_count(g));
	FUZZ_ASSERT(wsync_file_meta_count(g) == wsync_file_meta_count(f),
	    "%zu meta entries written, %zu read back", wsync_file_meta_count(f),
	    wsync_file_meta_count(g));
	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *x = wsync_file_meta(f, i), *y = wsync_file_meta(g, i);
		FUZZ_ASSERT(strcmp(x->key, y->key) == 0 && strcmp(x->value, y->value) == 0,
		    "meta %zu: %s written, %s read back", i, x->key, y->key);
	}
	a = s_sorted(f);
	b = s_sorted(g);
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *x = a[i], *y = b[i];
		FUZZ_ASSERT(strcmp(x->path, y->path) == 0, "%s written, %s read back", x->path,
		    y->path);
		FUZZ_ASSERT(x->dtype == y->dtype && x->ndim == y->ndim &&
		    memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof(x->shape[0])) == 0 &&
		    x->nbytes == y->nbytes, "%s: dtype or shape changed", x->path);
		FUZZ_ASSERT(x->nbytes == 0 || memcmp(x->data, y->data, (size_t)x->nbytes) == 0,
		    "%s: data changed", x->path);
		if (same_hashes)
			FUZZ_ASSERT(x->hash == y->hash, "%s: hash changed", x->path);
	}
	free(a);
	free(b);
	if (same_hashes)
		FUZZ_ASSERT(wsync_file_content_id(f) == wsync_file_content_id(g),
		    "content id changed from %016llx to %016llx",
		    (unsigned long long)wsync_file_content_id(f),
		    (unsigned long long)wsync_file_content_id(g));
}

/* The most a pipe holds here (the default pipe-max-size). */
#define S_PIPE_BYTES (1 << 20)

/*
 * Opens the file fd holds as a reader of stdin would, through a pipe, when it
 * fits in one (the reader then copies rather than maps); otherwise fd itself.
 */
static wsync_file_t *
s_reopen(int fd, const char *name, wsync_err_t *err)
{
	off_t size = lseek(fd, 0, SEEK_END), off = 0;
	wsync_file_t *f;
	int p[2];

	FUZZ_ASSERT(size >= 0, "lseek: %s", strerror(errno));
	if (size > S_PIPE_BYTES || pipe2(p, O_CLOEXEC) < 0)
		return wsync_file_open_fd(fd, name, err);
	if (fcntl(p[1], F_SETPIPE_SZ, S_PIPE_BYTES) < size) {
		close(p[0]);
		close(p[1]);
		return wsync_file_open_fd(fd, name, err);
	}
	while (off < size)
		FUZZ_ASSERT(sendfile(p[1], fd, &off, (size_t)(size - off)) > 0, "sendfile: %s",
		    strerror(errno));
	close(p[1]);
	f = wsync_file_open_fd(p[0], name, err);
	close(p[0]);
	return f;
}

/* Writes tree as .wsync, reads it back, compares with f; -1 when the writer refuses it. */
static int
s_roundtrip_wsync(const wsync_file_t *f, wsync_tree_t *tree)
{
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;
	int fd = fuzz_scratch_fd(1);
	wsync_err_t err = { 0 };
	wsync_file_t *g;

	if (wsync_tree_write_fd(tree, fd, "roundtrip.wsync", &err) < 0) {
		FUZZ_ASSERT(err.code == EX_DATAERR, "writing failed with %d: %s", err.code,
		    err.msg);
		return -1;
	}
	g = s_reopen(fd, "roundtrip.wsync", &err);
	FUZZ_ASSERT(g != NULL, "the writer's output does not read back: %s", err.msg);
	fuzz_check_file(g);
	FUZZ_ASSERT(wsync_file_kind(g) == WSYNC_KIND_WSYNC, "written .wsync reads as kind %d",
	    (int)wsync_file_kind(g));
	FUZZ_ASSERT(wsync_file_verify(g, NULL, NULL, &err) == 0, "written file: %s", err.msg);
	FUZZ_ASSERT(wsync_file_version_offset(g) != 0 &&
	    wsync_file_version(g) == wsync_file_version(f), "version stamp lost");
	FUZZ_ASSERT(strcmp(wsync_file_model(g), wsync ? wsync_file_model(f) : "fuzz") == 0,
	    "model changed");
	s_same(f, g, wsync && wsync_file_verify(f, NULL, NULL, &err) == 0);
	wsync_file_close(&g);
	return 0;
}

/* Writes tree as safetensors, reads it back, compares with f. */
static void
s_roundtrip_safetensors(const wsync_file_t *f, wsync_tree_t *tree)
{
	int fd = fuzz_scratch_fd(2);
	char path[64];
	wsync_err_t err = { 0 };
	wsync_file_t *g;

	if (wsync_tree_write_safetensors_fd(tree, fd, "roundtrip.safetensors", &err) < 0) {
		FUZZ_ASSERT(err.code == EX_DATAERR, "writing failed with %d: %s", err.code,
		    err.msg);
		return;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	g = wsync_input_open(path, &err);
	FUZZ_ASSERT(g != NULL, "the safetensors writer's output does not read back: %s",
	    err.msg);
	fuzz_check_file(g);
	FUZZ_ASSERT(wsync_file_kind(g) == WSYNC_KIND_SAFETENSORS,
	    "written safetensors reads as kind %d", (int)wsync_file_kind(g));
	s_same(f, g, 0);
	wsync_file_close(&g);
}

void
fuzz_roundtrip(const wsync_file_t *f, int also_safetensors)
{
	/* Nested first; flat when nesting makes a tensor also a subtree ("a", "a.b"). */
	for (int flat = 0; flat <= 1; flat++) {
		wsync_tree_t *tree = s_tree(f, flat);
		int rc;

		if (tree == NULL)
			continue;
		rc = s_roundtrip_wsync(f, tree);
		if (rc == 0 && also_safetensors)
			s_roundtrip_safetensors(f, tree);
		wsync_tree_destroy(&tree);
		if (rc == 0)
			return;
	}
}
