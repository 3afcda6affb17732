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

/*
 * head's skeleton, its bytes outside every tensor's data in file order, as
 * one zstd frame the applier accepts, in *out (caller frees); -1 with err.
 */
static int
s_skeleton(const wsync_file_t *head, int head_fd, const char *name, void **out,
    size_t *outlen, wsync_err_t *err)
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

/* Packs the document: h's fields with the numbers given, skeleton, the tensors rebased. */
static int
s_pack(msgpack_packer *pk, const wsync_delta_header_t *h, const char *doc,
    const wsync_file_t *b, uint64_t base, uint64_t version, const void *skel,
    size_t skel_len, const char *name, wsync_err_t *err)
{
	if (msgpack_pack_map(pk, 9) < 0 || delta_pk_kv(pk, "wsync-delta", WSYNC_DELTA_FORMAT) < 0 ||
	    delta_pk_str(pk, "model") < 0 || delta_pk_str(pk, h->model) < 0 ||
	    delta_pk_kv(pk, "base", base) < 0 ||
	    delta_pk_kv(pk, "base_content", wsync_file_content_id(b)) < 0 ||
	    delta_pk_kv(pk, "version", version) < 0 || delta_pk_kv(pk, "content", h->content) < 0 ||
	    delta_pk_kv(pk, "size", h->size) < 0 || s_pk_bin(pk, "skeleton", skel, skel_len) < 0 ||
	    delta_pk_str(pk, "tensors") < 0 || msgpack_pack_array(pk, h->ntensors) < 0)
		return -1;
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_delta_tensor_t *t = &h->tensors[i];
		int has_base = t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR ||
		    t->enc == WSYNC_DELTA_SPARSE;
		uint64_t off = 0;
		if (has_base && s_base_off(b, t, name, &off, err) < 0)
			return -1;
		if (msgpack_pack_map(pk, 5 + has_base + (t->enc != WSYNC_DELTA_SAME)) < 0 ||
		    delta_pk_str(pk, "path") < 0 || delta_pk_str(pk, t->path) < 0 ||
		    delta_pk_kv(pk, "off", t->off) < 0 || delta_pk_kv(pk, "len", t->len) < 0 ||
		    delta_pk_kv(pk, "hash", t->hash) < 0 || delta_pk_str(pk, "enc") < 0 ||
		    delta_pk_str(pk, wsync_delta_enc_name(t->enc)) < 0 ||
		    (has_base && delta_pk_kv(pk, "base_off", off) < 0) ||
		    (t->enc != WSYNC_DELTA_SAME &&
		    s_pk_bin(pk, "data", doc + t->data_off, (size_t)t->data_len) < 0))
			return -1;
	}
	return 0;
}

/* Checks that head is the delta's head, laid out as the delta says; -1 with err. */
static int
s_check_head(const wsync_file_t *head, const wsync_delta_header_t *h, const char *name,
    wsync_err_t *err)
{
	if (wsync_file_content_id(head) != h->content || wsync_file_size(head) != h->size ||
	    wsync_file_count(head) != h->ntensors)
		return wsync_err_set(err, EX_DATAERR, "%s: the head is not the delta's (content "
		    "id %016" PRIx64 ", the delta's %016" PRIx64 ")", name,
		    wsync_file_content_id(head), h->content);
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_tensor_t *t = wsync_file_find(head, h->tensors[i].path);
		if (t == NULL || (t->nbytes != 0 && t->offset != h->tensors[i].off))
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the head holds it "
			    "elsewhere than the delta says", name, h->tensors[i].path);
	}
	return 0;
}

int
wsync_delta_rebase(int delta_fd, int base_fd, uint64_t base, int head_fd, int out_fd,
    const char *name, uint64_t *bytes, wsync_err_t *err)
{
	wsync_delta_header_t h = { .ntensors = 0 };
	wsync_file_t *b = NULL, *head = NULL;
	delta_out_t o = { .fd = out_fd, .name = name, .err = err };
	msgpack_packer pk;
	void *doc = MAP_FAILED, *skel = NULL;
	const void *skel_in;
	size_t skel_len;
	uint64_t version;
	struct stat st;
	int rc = -1;

	if (fstat(delta_fd, &st) < 0 || st.st_size <= 0 ||
	    (doc = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, delta_fd, 0)) ==
	    MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "%s: cannot map the delta: %s", name,
		    st.st_size <= 0 ? "empty" : strerror(errno));
		return -1;
	}
	if (wsync_delta_read_header(doc, (size_t)st.st_size, name, &h, err) < 0 ||
	    (b = wsync_file_open_fd(base_fd, name, err)) == NULL)
		goto out;
	skel_in = (const char *)doc + h.skeleton_off;
	skel_len = (size_t)h.skeleton_len;
	version = h.version;
	if (head_fd >= 0) {
		if ((head = wsync_file_open_fd(head_fd, name, err)) == NULL ||
		    s_check_head(head, &h, name, err) < 0 ||
		    s_skeleton(head, head_fd, name, &skel, &skel_len, err) < 0)
			goto out;
		skel_in = skel;
		version = wsync_file_version(head);
	}
	if ((o.buf = malloc(OUT_BUF)) == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	msgpack_packer_init(&pk, &o, delta_pk_write);
	if (s_pack(&pk, &h, doc, b, base, version, skel_in, skel_len, name, err) < 0 ||
	    delta_out_flush(&o, err) < 0)
		goto out;
	if (bytes != NULL)
		*bytes = o.pos;
	rc = 0;
out:
	free(o.buf);
	free(skel);
	wsync_file_close(&head);
	wsync_file_close(&b);
	wsync_delta_header_free(&h);
	munmap(doc, (size_t)st.st_size);
	return rc;
}
