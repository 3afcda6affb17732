/*
 * delta_rebase.c - a delta made against one copy of a base, written again for
 * the copy a hub holds (wsync-format(5), DELTA, "A delta passed on"): every
 * encoded tensor byte as it came, each base_off where the hub's copy of B
 * holds that tensor, and, once the head is stamped, the head's skeleton and
 * numbers. No tensor is diffed, decoded or hashed again.
 */
#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>
#include <zstd.h>

#include "delta_impl_int.h"
#include "io_int.h"

static int
s_pk_bin(msgpack_packer *pk, const char *key, const void *p, size_t len)
{
	return delta_pk_str(pk, key) < 0 || msgpack_pack_bin(pk, len) < 0 ||
	    msgpack_pack_bin_body(pk, p, len) < 0 ? -1 : 0;
}

/* 1 when the zstd frame z of zlen bytes holds exactly the n bytes of raw. */
static int
s_same_frame(const void *z, size_t zlen, const unsigned char *raw, size_t n)
{
	unsigned char *got = malloc(n + 1);
	size_t len = got == NULL ? 0 : ZSTD_decompress(got, n + 1, z, zlen);
	int same = got != NULL && !ZSTD_isError(len) && len == n && memcmp(got, raw, n) == 0;

	free(got);
	return same;
}

/*
 * head's skeleton, its bytes outside every tensor's data in file order, as
 * one zstd frame the applier accepts, in *out (caller frees): the delta's
 * own frame (had, hadlen) when it holds the same bytes, so that a delta
 * whose head is laid out as the hub's (a relay's) is passed on byte for
 * byte; -1 with err.
 */
static int
s_skeleton(const wsync_file_t *head, int head_fd, const void *had, size_t hadlen,
    const char *name, void **out, size_t *outlen, wsync_err_t *err)
{
	size_t n = 0, cap = 0;
	uint64_t at = 0;
	unsigned char *raw = NULL;
	ZSTD_CCtx *z = NULL;
	int rc = -1;

	*out = NULL;
	for (size_t i = 0; i <= wsync_file_count(head); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(head, i);
		uint64_t end = t == NULL ? wsync_file_size(head) : t->offset;
		if (t != NULL && t->nbytes == 0)
			continue;
		if (end - at > cap - n) {
			cap = n + (size_t)(end - at) + 4096;
			unsigned char *p = realloc(raw, cap);
			if (p == NULL)
				goto oom;
			raw = p;
		}
		if (wsync_read_at(head_fd, raw + n, (size_t)(end - at), at) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: cannot read the head: %s", name,
			    strerror(errno));
			goto out;
		}
		n += (size_t)(end - at);
		if (t != NULL)
			at = t->offset + t->nbytes;
	}
	if (s_same_frame(had, hadlen, raw, n)) {
		if ((*out = malloc(hadlen ? hadlen : 1)) == NULL)
			goto oom;
		memcpy(*out, had, hadlen);
		*outlen = hadlen;
		rc = 0;
		goto out;
	}
	if ((z = ZSTD_createCCtx()) == NULL || (*out = malloc(ZSTD_compressBound(n))) == NULL)
		goto oom;
	ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, LEVEL);
	ZSTD_CCtx_setParameter(z, ZSTD_c_windowLog, WINDOW_LOG);
	*outlen = ZSTD_compress2(z, *out, ZSTD_compressBound(n), raw, n);
	if (ZSTD_isError(*outlen)) {
		wsync_err_set(err, EX_SOFTWARE, "%s: skeleton: %s", name,
		    ZSTD_getErrorName(*outlen));
		goto out;
	}
	rc = 0;
	goto out;
oom:
	wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
out:
	if (rc < 0) {
		free(*out);
		*out = NULL;
	}
	ZSTD_freeCCtx(z);
	free(raw);
	return rc;
}

/* The offset of t's base in b: where b holds a tensor of t's path and length; -1 with err. */
static int
s_base_off(const wsync_file_t *b, const wsync_delta_tensor_t *t, const char *name,
    uint64_t *off, wsync_err_t *err)
{
	const wsync_tensor_t *bt = wsync_file_find(b, t->path);

	if (bt == NULL || bt->nbytes != t->len)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the base holds no tensor "
		    "of that name and %" PRIu64 " bytes", name, t->path, t->len);
	*off = bt->offset;
	return 0;
}

/* One entry of the deltas given, where it goes in the head, and the document holding its bytes. */
typedef struct s_entry {
	const wsync_delta_tensor_t *t;
	const char *doc;
	uint64_t off;
} s_entry_t;

/* The document's top level: what it says of the head, and its skeleton. */
typedef struct s_top {
	const char *model;
	uint64_t base, base_content, version, content, size;
	const void *skel;
	size_t skel_len;
} s_top_t;

/* Packs the document: top, then the entries in order, each base_off where b holds it. */
static int
s_pack(msgpack_packer *pk, const s_top_t *top, const s_entry_t *e, size_t n,
    const wsync_file_t *b, const char *name, wsync_err_t *err)
{
	if (msgpack_pack_map(pk, 9) < 0 || delta_pk_kv(pk, "wsync-delta", WSYNC_DELTA_FORMAT) < 0 ||
	    delta_pk_str(pk, "model") < 0 || delta_pk_str(pk, top->model) < 0 ||
	    delta_pk_kv(pk, "base", top->base) < 0 ||
	    delta_pk_kv(pk, "base_content", top->base_content) < 0 ||
	    delta_pk_kv(pk, "version", top->version) < 0 ||
	    delta_pk_kv(pk, "content", top->content) < 0 || delta_pk_kv(pk, "size", top->size) < 0 ||
	    s_pk_bin(pk, "skeleton", top->skel, top->skel_len) < 0 ||
	    delta_pk_str(pk, "tensors") < 0 || msgpack_pack_array(pk, n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const wsync_delta_tensor_t *t = e[i].t;
		int has_base = t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR ||
		    t->enc == WSYNC_DELTA_SPARSE;
		uint64_t off = 0;
		if (has_base && s_base_off(b, t, name, &off, err) < 0)
			return -1;
		if (msgpack_pack_map(pk, 5 + has_base + (t->enc != WSYNC_DELTA_SAME)) < 0 ||
		    delta_pk_str(pk, "path") < 0 || delta_pk_str(pk, t->path) < 0 ||
		    delta_pk_kv(pk, "off", e[i].off) < 0 || delta_pk_kv(pk, "len", t->len) < 0 ||
		    delta_pk_kv(pk, "hash", t->hash) < 0 || delta_pk_str(pk, "enc") < 0 ||
		    delta_pk_str(pk, wsync_delta_enc_name(t->enc)) < 0 ||
		    (has_base && delta_pk_kv(pk, "base_off", off) < 0) ||
		    (t->enc != WSYNC_DELTA_SAME &&
		    s_pk_bin(pk, "data", e[i].doc + t->data_off, (size_t)t->data_len) < 0))
			return -1;
		/* Copied: its pages go, so a delta of any size holds a buffer's worth. */
		if (t->enc != WSYNC_DELTA_SAME)
			wsync_pages_release_around(e[i].doc + t->data_off, (size_t)t->data_len);
	}
	return 0;
}

static int
s_by_path(const void *a, const void *b)
{
	return strcmp(((const s_entry_t *)a)->t->path, ((const s_entry_t *)b)->t->path);
}

/*
 * Puts the n entries of e in head's file order, each at head's offset: every
 * tensor of head has one entry of its length and hash. -1 with err (65).
 */
static int
s_head_order(const wsync_file_t *head, s_entry_t *e, size_t n, const char *name,
    wsync_err_t *err)
{
	s_entry_t *sorted = malloc((n ? n : 1) * sizeof(*sorted));
	int rc = -1;

	if (sorted == NULL)
		return wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
	memcpy(sorted, e, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), s_by_path);
	if (wsync_file_count(head) != n) {
		wsync_err_set(err, EX_DATAERR, "%s: the head has %zu tensors, the deltas %zu",
		    name, wsync_file_count(head), n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(head, i);
		wsync_delta_tensor_t key = { .path = t->path };
		s_entry_t k = { .t = &key }, *f = bsearch(&k, sorted, n, sizeof(*sorted), s_by_path);
		if (f == NULL || f->t->len != t->nbytes || f->t->hash != t->hash) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the head's is not the "
			    "delta's", name, t->path);
			goto out;
		}
		e[i] = *f;
		e[i].off = t->nbytes ? t->offset : 0;
	}
	rc = 0;
out:
	free(sorted);
	return rc;
}

/* A delta read: its mapping and header. */
typedef struct s_in {
	void *doc;
	size_t len;
	wsync_delta_header_t h;
} s_in_t;

/* Maps and reads the delta in fd into in; -1 with err. */
static int
s_in_open(s_in_t *in, int fd, const char *name, wsync_err_t *err)
{
	struct stat st = { .st_size = 1 };      /* a failed fstat says why in errno */

	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (in->doc = mmap(NULL, (size_t)st.st_size,
	    PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		in->doc = NULL;
		return wsync_err_set(err, EX_IOERR, "%s: cannot map the delta: %s", name,
		    st.st_size <= 0 ? "empty" : strerror(errno));
	}
	in->len = (size_t)st.st_size;
	return wsync_delta_read_header(in->doc, in->len, name, &in->h, err);
}

static void
s_in_close(s_in_t *in)
{
	wsync_delta_header_free(&in->h);
	if (in->doc != NULL)
		munmap(in->doc, in->len);
	in->doc = NULL;
}

/* The entries of the n deltas in, in their order (malloc'ed); NULL with err. */
static s_entry_t *
s_entries(const s_in_t *in, size_t n, size_t *count, const char *name, wsync_err_t *err)
{
	s_entry_t *e;
	size_t k = 0;

	*count = 0;
	for (size_t i = 0; i < n; i++)
		*count += in[i].h.ntensors;
	if ((e = malloc((*count ? *count : 1) * sizeof(*e))) == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < in[i].h.ntensors; j++, k++)
			e[k] = (s_entry_t){ .t = &in[i].h.tensors[j], .doc = in[i].doc,
			    .off = in[i].h.tensors[j].off };
	return e;
}

int
wsync_delta_rebase(const int *delta_fds, size_t n, int base_fd, uint64_t base, int head_fd,
    int out_fd, const char *name, uint64_t *bytes, wsync_err_t *err)
{
	s_in_t *in = calloc(n ? n : 1, sizeof(*in));
	wsync_file_t *b = NULL, *head = NULL;
	delta_out_t o = { .fd = out_fd, .name = name, .err = err };
	s_entry_t *e = NULL;
	msgpack_packer pk;
	void *skel = NULL;
	s_top_t top;
	size_t count;
	int rc = -1;

	if (in == NULL)
		return wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
	if (n == 0 || (n > 1 && head_fd < 0)) {
		wsync_err_set(err, EX_SOFTWARE, "%s: %zu deltas, a head %s", name, n,
		    head_fd < 0 ? "not given" : "given");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (s_in_open(&in[i], delta_fds[i], name, err) < 0)
			goto out;
	if ((b = wsync_file_open_fd(base_fd, name, err)) == NULL ||
	    (e = s_entries(in, n, &count, name, err)) == NULL)
		goto out;
	top = (s_top_t){ .model = in[0].h.model, .base = base,
	    .base_content = wsync_file_content_id(b), .version = in[0].h.version,
	    .content = in[0].h.content, .size = in[0].h.size,
	    .skel = (const char *)in[0].doc + in[0].h.skeleton_off,
	    .skel_len = (size_t)in[0].h.skeleton_len };
	if (head_fd >= 0) {
		if ((head = wsync_file_open_fd(head_fd, name, err)) == NULL ||
		    s_head_order(head, e, count, name, err) < 0 ||
		    s_skeleton(head, head_fd, top.skel, top.skel_len, name, &skel, &top.skel_len,
		    err) < 0)
			goto out;
		top.skel = skel;
		top.version = wsync_file_version(head);
		top.content = wsync_file_content_id(head);
		top.size = wsync_file_size(head);
	}
	if ((o.buf = wsync_io_buffer(OUT_BUF)) == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	msgpack_packer_init(&pk, &o, delta_pk_write);
	if (s_pack(&pk, &top, e, count, b, name, err) < 0 || delta_out_flush(&o, err) < 0)
		goto out;
	if (bytes != NULL)
		*bytes = o.pos;
	rc = 0;
out:
	free(o.buf);
	free(skel);
	free(e);
	wsync_file_close(&head);
	wsync_file_close(&b);
	for (size_t i = 0; i < n; i++)
		s_in_close(&in[i]);
	free(in);
	return rc;
}
