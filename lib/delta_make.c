/* delta_make.c - making a delta from a base and a head, streamed (see delta.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>
#include <zstd.h>

#include "delta_impl_int.h"
#include "hash_int.h"
#include "io_int.h"

/* ---- msgpack, written ---- */

static int
s_mp_uint(delta_out_t *o, uint64_t v, wsync_err_t *err)
{
	unsigned char b[9];

	if (v < 128)
		return delta_out_put(o, (unsigned char[]){ (unsigned char)v }, 1, err);
	b[0] = 0xcf;
	for (int i = 0; i < 8; i++)
		b[1 + i] = (unsigned char)(v >> (56 - 8 * i));
	return delta_out_put(o, b, 9, err);
}

static int
s_mp_str(delta_out_t *o, const char *s, wsync_err_t *err)
{
	size_t n = strlen(s);
	unsigned char b[3] = { 0xda, (unsigned char)(n >> 8), (unsigned char)n };

	if (n < 32)
		b[0] = (unsigned char)(0xa0 | n);
	return delta_out_put(o, b, n < 32 ? 1 : 3, err) < 0 ? -1 : delta_out_put(o, s, n, err);
}

/* A map (0xde) or array (0xdc) header: 16-bit count when it fits, else 32. */
static int
s_mp_count(delta_out_t *o, unsigned char kind16, uint64_t n, wsync_err_t *err)
{
	unsigned char b[5] = { kind16, (unsigned char)(n >> 8), (unsigned char)n };

	if (n < 65536)
		return delta_out_put(o, b, 3, err);
	b[0] = kind16 + 1;
	for (int i = 0; i < 4; i++)
		b[1 + i] = (unsigned char)(n >> (24 - 8 * i));
	return delta_out_put(o, b, 5, err);
}

/* Starts a bin32 whose length is filled in later; *at is where the length goes. */
static int
s_mp_bin_open(delta_out_t *o, uint64_t *at, wsync_err_t *err)
{
	*at = o->pos + 1;
	return delta_out_put(o, (unsigned char[]){ 0xc6, 0, 0, 0, 0 }, 5, err);
}

/* Ends the bin opened at at: its length, or 65 when it reached 4 GiB. */
static int
s_mp_bin_close(delta_out_t *o, uint64_t at, const char *what, wsync_err_t *err)
{
	uint64_t len = o->pos - (at + 4);

	if (len > UINT32_MAX)
		return wsync_err_set(err, EX_DATAERR, "%s: %s: encoded form reaches 4 GiB, "
		    "more than a msgpack bin holds", o->name, what);
	return delta_out_patch32(o, at, (uint32_t)len, err);
}

/* ---- zstd, written ---- */

static ZSTD_CCtx *
s_cctx_new(const char *name, wsync_err_t *err)
{
	ZSTD_CCtx *z = ZSTD_createCCtx();

	if (z == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory for zstd", name);
		return NULL;
	}
	ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, LEVEL);
	ZSTD_CCtx_setParameter(z, ZSTD_c_windowLog, WINDOW_LOG);
	ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 0);
	return z;
}

/* Feeds len bytes to the frame being written; end finishes the frame. */
static int
s_zput(delta_out_t *o, ZSTD_CCtx *z, const void *p, size_t len, int end, wsync_err_t *err)
{
	ZSTD_inBuffer in = { p, len, 0 };
	ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;
	size_t left;

	do {
		ZSTD_outBuffer out;
		if (OUT_BUF - o->n < ZSTD_CStreamOutSize() && delta_out_flush(o, err) < 0)
			return -1;
		out = (ZSTD_outBuffer){ o->buf + o->n, OUT_BUF - o->n, 0 };
		left = ZSTD_compressStream2(z, &out, &in, mode);
		if (ZSTD_isError(left))
			return wsync_err_set(err, EX_SOFTWARE, "%s: zstd: %s", o->name,
			    ZSTD_getErrorName(left));
		o->n += out.pos;
		o->pos += out.pos;
	} while (end ? left != 0 : in.pos < in.size);
	return 0;
}

/* ---- making a delta ---- */

typedef struct s_make {
	delta_out_t out;
	ZSTD_CCtx *z;
	const wsync_file_t *base, *head;
	unsigned char *tmp;             /* CHUNK bytes */
	unsigned char *group;           /* a sparse group: 4 gap planes, 8 value planes */
	wsync_delta_stats_t *stats;
} s_make_t;

static uint64_t
s_load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Elements of width w that differ between a and b (n bytes, a multiple of w). */
static uint64_t
s_count_changed(const unsigned char *a, const unsigned char *b, size_t n, unsigned w)
{
	uint64_t k = 0, lane = w == 8 ? ~0ULL : (1ULL << (8 * w)) - 1;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t x = s_load64(a + i) ^ s_load64(b + i);
		if (w == 8)
			k += x != 0;
		else
			for (; x != 0; x >>= 8 * w)
				k += (x & lane) != 0;
	}
	for (; i < n; i += w)
		k += memcmp(a + i, b + i, w) != 0;
	return k;
}

/* Encodes H's tensor t against B's tensor bt as zstd of their xor. */
static int
s_encode_xor(s_make_t *m, const wsync_tensor_t *t, const wsync_tensor_t *bt,
    wsync_err_t *err)
{
	const unsigned char *h = t->data, *b = bt->data;

	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		for (size_t i = 0; i < n; i++)
			m->tmp[i] = h[at + i] ^ b[at + i];
		if (s_zput(&m->out, m->z, m->tmp, n, 0, err) < 0)
			return -1;
		delta_release(m->head, h + at, n);
		delta_release(m->base, b + at, n);
	}
	return s_zput(&m->out, m->z, NULL, 0, 1, err);
}

/* Writes one sparse group of c changes: count, 4 gap planes, w value planes. */
static int
s_sparse_group(s_make_t *m, uint32_t c, unsigned w, wsync_err_t *err)
{
	unsigned char cb[4] = { c, c >> 8, c >> 16, c >> 24 };

	if (s_zput(&m->out, m->z, cb, 4, 0, err) < 0)
		return -1;
	for (unsigned plane = 0; plane < 4 + w; plane++)
		if (s_zput(&m->out, m->z, m->group + (size_t)plane * GROUP_MAX, c, 0, err) < 0)
			return -1;
	return 0;
}

/*
 * Encodes t against bt as zstd of: the element width (1 byte), then groups
 * of changed elements, each a count (u32 little-endian), the gaps since the
 * previous change as four byte planes of u32, and the elements' xors as w
 * byte planes. Byte planes put the high bytes, nearly all zero, together.
 */
static int
s_encode_sparse(s_make_t *m, const wsync_tensor_t *t, const wsync_tensor_t *bt,
    unsigned w, wsync_err_t *err)
{
	const unsigned char *h = t->data, *b = bt->data;
	unsigned char width = (unsigned char)w;
	uint64_t prev = UINT64_MAX;     /* the previous change's element, -1 before any */
	uint32_t c = 0;

	if (s_zput(&m->out, m->z, &width, 1, 0, err) < 0)
		return -1;
	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		for (size_t i = 0; i < n; i += w) {
			uint64_t x = 0, e, gap;
			if (i % 8 == 0 && i + 8 <= n && s_load64(h + at + i) == s_load64(b + at + i)) {
				i += 8 - w;
				continue;
			}
			if (memcmp(h + at + i, b + at + i, w) == 0)
				continue;
			e = (at + i) / w;
			gap = e - prev - 1;
			for (unsigned j = 0; j < 4; j++)
				m->group[(size_t)j * GROUP_MAX + c] = (unsigned char)(gap >> (8 * j));
			for (unsigned j = 0; j < w; j++) {
				x = h[at + i + j] ^ b[at + i + j];
				m->group[(size_t)(4 + j) * GROUP_MAX + c] = (unsigned char)x;
			}
			prev = e;
			if (++c == GROUP_MAX) {
				if (s_sparse_group(m, c, w, err) < 0)
					return -1;
				c = 0;
			}
		}
		delta_release(m->head, h + at, n);
		delta_release(m->base, b + at, n);
	}
	if (c > 0 && s_sparse_group(m, c, w, err) < 0)
		return -1;
	return s_zput(&m->out, m->z, NULL, 0, 1, err);
}

/* Encodes t alone, compressed (whole) or as it is (raw). */
static int
s_encode_self(s_make_t *m, const wsync_tensor_t *t, int compress, wsync_err_t *err)
{
	const unsigned char *h = t->data;

	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		int rc = compress ? s_zput(&m->out, m->z, h + at, n, 0, err) :
		    delta_out_put(&m->out, h + at, n, err);
		if (rc < 0)
			return -1;
		delta_release(m->head, h + at, n);
	}
	return compress ? s_zput(&m->out, m->z, NULL, 0, 1, err) : 0;
}

/* B's tensor that H's t can be encoded against: same path, dtype and shape. */
static const wsync_tensor_t *
s_base_of(const wsync_file_t *base, const wsync_tensor_t *t)
{
	const wsync_tensor_t *bt = wsync_file_find(base, t->path);

	if (bt == NULL || strcmp(bt->path, t->path) != 0 || bt->dtype != t->dtype ||
	    bt->ndim != t->ndim || bt->nbytes != t->nbytes || t->nbytes == 0)
		return NULL;
	for (int d = 0; d < t->ndim; d++)
		if (bt->shape[d] != t->shape[d])
			return NULL;
	return bt;
}

/* The encoding to try first for t: the smallest, judged by a count of changed elements. */
static wsync_delta_enc_t
s_choose(const s_make_t *m, const wsync_tensor_t *t, const wsync_tensor_t *bt)
{
	unsigned w = (unsigned)wsync_dtype_size(t->dtype);
	uint64_t changed = 0;

	if (t->nbytes == 0)
		return WSYNC_DELTA_RAW;
	if (bt == NULL)
		return WSYNC_DELTA_WHOLE;
	if (bt->hash == t->hash)
		return WSYNC_DELTA_SAME;
	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		changed += s_count_changed((const unsigned char *)t->data + at,
		    (const unsigned char *)bt->data + at, n, w);
		delta_release(m->head, (const unsigned char *)t->data + at, n);
		delta_release(m->base, (const unsigned char *)bt->data + at, n);
	}
	if (changed == 0)
		return WSYNC_DELTA_SAME;
	/*
	 * Sparse stores an element's xor as byte planes, which compress better than
	 * xor's interleaved bytes at any density for elements of 2 bytes or more
	 * (wsync-format(5), DELTA, has the numbers). For 1-byte elements the planes
	 * are the xor itself, and the gaps cost more than they save past about 40%.
	 */
	return w > 1 || changed * 5 <= t->nbytes * 2 ? WSYNC_DELTA_SPARSE : WSYNC_DELTA_XOR;
}

/* Writes one tensor entry; the encoded form falls back to raw when not smaller. */
static int
s_make_tensor(s_make_t *m, const wsync_tensor_t *t, wsync_err_t *err)
{
	const wsync_tensor_t *bt = s_base_of(m->base, t);
	wsync_delta_enc_t enc = s_choose(m, t, bt);
	unsigned w = (unsigned)wsync_dtype_size(t->dtype);
	uint64_t entry = m->out.pos, data_at, len;
	char what[WSYNC_MAX_PATH + 16];
	int rc;

	snprintf(what, sizeof(what), "tensor %s", t->path);
	for (;;) {
		int has_base = enc == WSYNC_DELTA_SAME || enc == WSYNC_DELTA_XOR ||
		    enc == WSYNC_DELTA_SPARSE;
		if (s_mp_count(&m->out, 0xde, 5 + has_base + (enc != WSYNC_DELTA_SAME), err) < 0 ||
		    s_mp_str(&m->out, "path", err) < 0 || s_mp_str(&m->out, t->path, err) < 0 ||
		    s_mp_str(&m->out, "off", err) < 0 ||
		    s_mp_uint(&m->out, t->nbytes ? t->offset : 0, err) < 0 ||
		    s_mp_str(&m->out, "len", err) < 0 || s_mp_uint(&m->out, t->nbytes, err) < 0 ||
		    s_mp_str(&m->out, "hash", err) < 0 || s_mp_uint(&m->out, t->hash, err) < 0 ||
		    s_mp_str(&m->out, "enc", err) < 0 ||
		    s_mp_str(&m->out, wsync_delta_enc_name(enc), err) < 0)
			return -1;
		if (has_base && (s_mp_str(&m->out, "base_off", err) < 0 ||
		    s_mp_uint(&m->out, bt->offset, err) < 0))
			return -1;
		if (enc == WSYNC_DELTA_SAME)
			break;
		if (s_mp_str(&m->out, "data", err) < 0 || s_mp_bin_open(&m->out, &data_at, err) < 0)
			return -1;
		ZSTD_CCtx_reset(m->z, ZSTD_reset_session_only);
		ZSTD_CCtx_setParameter(m->z, ZSTD_c_compressionLevel,
		    enc == WSYNC_DELTA_XOR ? XOR_LEVEL : LEVEL);
		switch (enc) {
		case WSYNC_DELTA_XOR:
			ZSTD_CCtx_setPledgedSrcSize(m->z, t->nbytes);
			rc = s_encode_xor(m, t, bt, err);
			break;
		case WSYNC_DELTA_SPARSE:
			rc = s_encode_sparse(m, t, bt, w, err);
			break;
		case WSYNC_DELTA_WHOLE:
			ZSTD_CCtx_setPledgedSrcSize(m->z, t->nbytes);
			rc = s_encode_self(m, t, 1, err);
			break;
		default:
			rc = s_encode_self(m, t, 0, err);
			break;
		}
		if (rc < 0)
			return -1;
		len = m->out.pos - (data_at + 4);
		/* Incompressible: the bytes as they are cost less, and always fit a bin. */
		if (enc != WSYNC_DELTA_RAW && len >= t->nbytes) {
			if (delta_out_rewind(&m->out, entry, err) < 0)
				return -1;
			enc = WSYNC_DELTA_RAW;
			continue;
		}
		if (s_mp_bin_close(&m->out, data_at, what, err) < 0)
			return -1;
		break;
	}
	if (m->stats != NULL) {
		m->stats->count[enc]++;
		m->stats->data[enc] += t->nbytes;
		m->stats->encoded[enc] += m->out.pos - entry;
	}
	return 0;
}

/* The skeleton: H's bytes outside every tensor's data, in order, as one zstd frame. */
static int
s_make_skeleton(s_make_t *m, wsync_err_t *err)
{
	const unsigned char *h = wsync_file_bytes(m->head);
	uint64_t at = 0, data_at, before = m->out.pos;

	if (s_mp_bin_open(&m->out, &data_at, err) < 0)
		return -1;
	ZSTD_CCtx_reset(m->z, ZSTD_reset_session_only);
	ZSTD_CCtx_setParameter(m->z, ZSTD_c_compressionLevel, LEVEL);
	for (size_t i = 0; i <= wsync_file_count(m->head); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(m->head, i);
		uint64_t end = t == NULL ? wsync_file_size(m->head) : t->offset;
		if (t != NULL && t->nbytes == 0)
			continue;
		if (s_zput(&m->out, m->z, h + at, end - at, 0, err) < 0)
			return -1;
		delta_release(m->head, h + at, end - at);
		if (t != NULL)
			at = t->offset + t->nbytes;
	}
	if (s_zput(&m->out, m->z, NULL, 0, 1, err) < 0 ||
	    s_mp_bin_close(&m->out, data_at, "skeleton", err) < 0)
		return -1;
	if (m->stats != NULL)
		m->stats->skeleton_bytes = m->out.pos - before;
	return 0;
}

static int
s_make(s_make_t *m, const char *name, wsync_err_t *err)
{
	const wsync_file_t *b = m->base, *h = m->head;

	if (strcmp(wsync_file_model(b), wsync_file_model(h)) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: base is model %s, head is model %s",
		    name, wsync_file_model(b), wsync_file_model(h));
	if (s_mp_count(&m->out, 0xde, 9, err) < 0 ||
	    s_mp_str(&m->out, "wsync-delta", err) < 0 ||
	    s_mp_uint(&m->out, WSYNC_DELTA_FORMAT, err) < 0 ||
	    s_mp_str(&m->out, "model", err) < 0 || s_mp_str(&m->out, wsync_file_model(h), err) < 0 ||
	    s_mp_str(&m->out, "base", err) < 0 || s_mp_uint(&m->out, wsync_file_version(b), err) < 0 ||
	    s_mp_str(&m->out, "base_content", err) < 0 ||
	    s_mp_uint(&m->out, wsync_file_content_id(b), err) < 0 ||
	    s_mp_str(&m->out, "version", err) < 0 ||
	    s_mp_uint(&m->out, wsync_file_version(h), err) < 0 ||
	    s_mp_str(&m->out, "content", err) < 0 ||
	    s_mp_uint(&m->out, wsync_file_content_id(h), err) < 0 ||
	    s_mp_str(&m->out, "size", err) < 0 || s_mp_uint(&m->out, wsync_file_size(h), err) < 0 ||
	    s_mp_str(&m->out, "skeleton", err) < 0 || s_make_skeleton(m, err) < 0 ||
	    s_mp_str(&m->out, "tensors", err) < 0 ||
	    s_mp_count(&m->out, 0xdc, wsync_file_count(h), err) < 0)
		return -1;
	for (size_t i = 0; i < wsync_file_count(h); i++)
		if (s_make_tensor(m, wsync_file_tensor(h, i), err) < 0)
			return -1;
	return delta_out_flush(&m->out, err);
}

int
wsync_delta_make(int base_fd, int head_fd, int out_fd, const char *name,
    wsync_delta_stats_t *stats, wsync_err_t *err)
{
	s_make_t m = { .out = { .fd = out_fd, .name = name }, .stats = stats };
	wsync_file_t *base = NULL, *head = NULL;
	int rc = -1;

	if (stats != NULL)
		memset(stats, 0, sizeof(*stats));
	if ((m.out.start = lseek(out_fd, 0, SEEK_CUR)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot seek (not a regular file?): %s", name,
		    strerror(errno));
		goto out;
	}
	if ((base = wsync_file_open_fd(base_fd, "base", err)) == NULL ||
	    (head = wsync_file_open_fd(head_fd, "head", err)) == NULL ||
	    (m.z = s_cctx_new(name, err)) == NULL)
		goto out;
	m.out.buf = malloc(OUT_BUF);
	m.tmp = malloc(CHUNK);
	m.group = malloc((size_t)GROUP_MAX * 12);
	if (m.out.buf == NULL || m.tmp == NULL || m.group == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	m.base = base;
	m.head = head;
	if (s_make(&m, name, err) < 0)
		goto out;
	if (stats != NULL) {
		stats->bytes = m.out.pos;
		stats->head_bytes = wsync_file_size(head);
	}
	rc = 0;
out:
	ZSTD_freeCCtx(m.z);
	free(m.out.buf);
	free(m.tmp);
	free(m.group);
	wsync_file_close(&base);
	wsync_file_close(&head);
	return rc;
}
