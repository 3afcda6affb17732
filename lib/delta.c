/*
 * delta.c - deltas between two versions of a model (wsync-format(5), DELTA).
 *
 * A delta is one msgpack map. The writer streams it: the inputs are mapped
 * and read a window at a time (their pages let go behind), every encoded
 * form goes through one zstd stream into a bounded output buffer, and the
 * length of each bin is filled in once it is known. The applier writes H in
 * file order, skeleton bytes and tensor data in turn, hashing each tensor as
 * it goes, then parses what it wrote and checks it against the delta.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>
#include <zstd.h>

#include "delta_int.h"
#include "file_int.h"
#include "hash_int.h"
#include "io_int.h"

#define CHUNK (1u << 20)                /* bytes of a tensor encoded or decoded at once */
#define OUT_BUF (1u << 20)              /* the output buffer */
#define LEVEL 3                         /* zstd level of every encoded form but xor */
#define XOR_LEVEL 1                     /* xor's: level 3 is larger on dense xors */
#define WINDOW_LOG 22                   /* zstd window the writer uses (4 MiB) */
#define WINDOW_LOG_MAX 23               /* and the largest the applier accepts */
#define GROUP_MAX 65536                 /* changed elements in one sparse group */
/* The most a head's header can take: the top level and meta, then per tensor. */
#define SKELETON_FIXED_MAX ((uint64_t)WSYNC_MAX_META * \
	(WSYNC_MAX_KEY + WSYNC_MAX_META_VALUE + 16) + 4096)
#define SKELETON_TENSOR_MAX ((uint64_t)WSYNC_MAX_PATH + WSYNC_MAX_DEPTH * 8 + \
	WSYNC_MAX_DIMS * 9 + 256)
#define PATH_KEYS 7                     /* keys a tensor entry may hold */

static const char *const s_enc_names[WSYNC_DELTA_ENC_COUNT] = {
	"same", "xor", "sparse", "whole", "raw"
};

const char *
wsync_delta_enc_name(wsync_delta_enc_t enc)
{
	return (unsigned)enc < WSYNC_DELTA_ENC_COUNT ? s_enc_names[enc] : NULL;
}

/* ---- output: a buffered writer that can fill in lengths and take back ---- */

typedef struct s_out {
	int fd;
	const char *name;
	off_t start;                    /* fd's offset when writing began */
	uint64_t pos;                   /* bytes emitted */
	uint64_t flushed;               /* of which written to fd */
	unsigned char *buf;
	size_t n;
	XXH3_state_t *hash;             /* when set, emitted bytes are hashed too */
} s_out_t;

static int
s_out_flush(s_out_t *o, wsync_err_t *err)
{
	if (o->n > 0 && wsync_write_all(o->fd, o->buf, o->n) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", o->name,
		    strerror(errno));
	o->flushed += o->n;
	o->n = 0;
	return 0;
}

static int
s_out_put(s_out_t *o, const void *p, size_t len, wsync_err_t *err)
{
	const unsigned char *s = p;

	if (o->hash != NULL)
		wsync_hash_update(o->hash, p, len);
	o->pos += len;
	while (len > 0) {
		size_t k = OUT_BUF - o->n < len ? OUT_BUF - o->n : len;
		memcpy(o->buf + o->n, s, k);
		o->n += k;
		s += k;
		len -= k;
		if (o->n == OUT_BUF && s_out_flush(o, err) < 0)
			return -1;
	}
	return 0;
}

/* Overwrites 4 bytes emitted at at with v, big-endian (a bin32 length). */
static int
s_out_patch32(s_out_t *o, uint64_t at, uint32_t v, wsync_err_t *err)
{
	unsigned char b[4] = { v >> 24, v >> 16, v >> 8, v };

	for (int i = 0; i < 4; i++) {
		if (at + i >= o->flushed) {
			o->buf[at + i - o->flushed] = b[i];
		} else if (pwrite(o->fd, &b[i], 1, o->start + (off_t)(at + i)) != 1) {
			return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", o->name,
			    strerror(errno));
		}
	}
	return 0;
}

/* Forgets everything emitted after at, which a cheaper form replaces. */
static int
s_out_rewind(s_out_t *o, uint64_t at, wsync_err_t *err)
{
	if (at >= o->flushed) {
		o->n = at - o->flushed;
	} else {
		if (ftruncate(o->fd, o->start + (off_t)at) < 0 ||
		    lseek(o->fd, o->start + (off_t)at, SEEK_SET) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot truncate: %s", o->name,
			    strerror(errno));
		o->flushed = at;
		o->n = 0;
	}
	o->pos = at;
	return 0;
}

/* ---- msgpack, written ---- */

static int
s_mp_uint(s_out_t *o, uint64_t v, wsync_err_t *err)
{
	unsigned char b[9];

	if (v < 128)
		return s_out_put(o, (unsigned char[]){ (unsigned char)v }, 1, err);
	b[0] = 0xcf;
	for (int i = 0; i < 8; i++)
		b[1 + i] = (unsigned char)(v >> (56 - 8 * i));
	return s_out_put(o, b, 9, err);
}

static int
s_mp_str(s_out_t *o, const char *s, wsync_err_t *err)
{
	size_t n = strlen(s);
	unsigned char b[3] = { 0xda, (unsigned char)(n >> 8), (unsigned char)n };

	if (n < 32)
		b[0] = (unsigned char)(0xa0 | n);
	return s_out_put(o, b, n < 32 ? 1 : 3, err) < 0 ? -1 : s_out_put(o, s, n, err);
}

/* A map (0xde) or array (0xdc) header: 16-bit count when it fits, else 32. */
static int
s_mp_count(s_out_t *o, unsigned char kind16, uint64_t n, wsync_err_t *err)
{
	unsigned char b[5] = { kind16, (unsigned char)(n >> 8), (unsigned char)n };

	if (n < 65536)
		return s_out_put(o, b, 3, err);
	b[0] = kind16 + 1;
	for (int i = 0; i < 4; i++)
		b[1 + i] = (unsigned char)(n >> (24 - 8 * i));
	return s_out_put(o, b, 5, err);
}

/* Starts a bin32 whose length is filled in later; *at is where the length goes. */
static int
s_mp_bin_open(s_out_t *o, uint64_t *at, wsync_err_t *err)
{
	*at = o->pos + 1;
	return s_out_put(o, (unsigned char[]){ 0xc6, 0, 0, 0, 0 }, 5, err);
}

/* Ends the bin opened at at: its length, or 65 when it reached 4 GiB. */
static int
s_mp_bin_close(s_out_t *o, uint64_t at, const char *what, wsync_err_t *err)
{
	uint64_t len = o->pos - (at + 4);

	if (len > UINT32_MAX)
		return wsync_err_set(err, EX_DATAERR, "%s: %s: encoded form reaches 4 GiB, "
		    "more than a msgpack bin holds", o->name, what);
	return s_out_patch32(o, at, (uint32_t)len, err);
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
s_zput(s_out_t *o, ZSTD_CCtx *z, const void *p, size_t len, int end, wsync_err_t *err)
{
	ZSTD_inBuffer in = { p, len, 0 };
	ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;
	size_t left;

	do {
		ZSTD_outBuffer out;
		if (OUT_BUF - o->n < ZSTD_CStreamOutSize() && s_out_flush(o, err) < 0)
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
	s_out_t out;
	ZSTD_CCtx *z;
	const wsync_file_t *base, *head;
	unsigned char *tmp;             /* CHUNK bytes */
	unsigned char *group;           /* a sparse group: 4 gap planes, 8 value planes */
	wsync_delta_stats_t *stats;
} s_make_t;

/*
 * Lets go of a mapped file's pages in [p, p + len) once read, and of the page
 * p starts in: read in file order, its first bytes were read before, and
 * without it every window would leave a page behind.
 */
static void
s_release_map(const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p & ~(page - 1);

	wsync_pages_release((const void *)start, len + ((uintptr_t)p - start));
}

/* s_release_map for an input that is mapped, never for one read into memory. */
static void
s_release(const wsync_file_t *f, const void *p, size_t len)
{
	if (f->mem == WSYNC_MEM_MMAP)
		s_release_map(p, len);
}

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
		s_release(m->head, h + at, n);
		s_release(m->base, b + at, n);
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
		s_release(m->head, h + at, n);
		s_release(m->base, b + at, n);
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
		    s_out_put(&m->out, h + at, n, err);
		if (rc < 0)
			return -1;
		s_release(m->head, h + at, n);
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
		s_release(m->head, (const unsigned char *)t->data + at, n);
		s_release(m->base, (const unsigned char *)bt->data + at, n);
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
		    s_mp_str(&m->out, s_enc_names[enc], err) < 0)
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
			if (s_out_rewind(&m->out, entry, err) < 0)
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
		s_release(m->head, h + at, end - at);
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
	return s_out_flush(&m->out, err);
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

/* ---- msgpack, read ---- */

typedef struct s_in {
	const unsigned char *p;
	size_t len, at;
	const char *name;
	wsync_err_t *err;
} s_in_t;

static int
s_bad(s_in_t *in, const char *what)
{
	return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: %s at byte %zu",
	    in->name, what, in->at);
}

/* Reads an n-byte big-endian number. */
static int
s_rd_be(s_in_t *in, unsigned n, uint64_t *v)
{
	if (in->len - in->at < n)
		return s_bad(in, "truncated");
	*v = 0;
	for (unsigned i = 0; i < n; i++)
		*v = *v << 8 | in->p[in->at++];
	return 0;
}

static int
s_rd_uint(s_in_t *in, uint64_t *v)
{
	unsigned char c;

	if (in->at >= in->len)
		return s_bad(in, "truncated");
	c = in->p[in->at];
	if (c < 0x80) {
		in->at++;
		*v = c;
		return 0;
	}
	if (c < 0xcc || c > 0xcf)
		return s_bad(in, "expected an unsigned integer");
	in->at++;
	return s_rd_be(in, 1u << (c - 0xcc), v);
}

/* A str (want 0) or bin (want 1): its offset and length, inside the buffer. */
static int
s_rd_bytes(s_in_t *in, int want_bin, size_t *off, size_t *n)
{
	unsigned char c;
	uint64_t v = 0;

	if (in->at >= in->len)
		return s_bad(in, "truncated");
	c = in->p[in->at];
	if (!want_bin && (c & 0xe0) == 0xa0) {
		in->at++;
		v = c & 0x1f;
	} else if (!want_bin && c >= 0xd9 && c <= 0xdb) {
		in->at++;
		if (s_rd_be(in, 1u << (c - 0xd9), &v) < 0)
			return -1;
	} else if (want_bin && c >= 0xc4 && c <= 0xc6) {
		in->at++;
		if (s_rd_be(in, 1u << (c - 0xc4), &v) < 0)
			return -1;
	} else {
		return s_bad(in, want_bin ? "expected a bin" : "expected a string");
	}
	if (v > in->len - in->at)
		return s_bad(in, "a length beyond the end");
	*off = in->at;
	*n = (size_t)v;
	in->at += (size_t)v;
	return 0;
}

/* A map (want 0) or array (want 1) header's count. */
static int
s_rd_count(s_in_t *in, int want_array, uint64_t *n)
{
	unsigned char c, fix = want_array ? 0x90 : 0x80, c16 = want_array ? 0xdc : 0xde;

	if (in->at >= in->len)
		return s_bad(in, "truncated");
	c = in->p[in->at];
	if ((c & 0xf0) == fix) {
		in->at++;
		*n = c & 0x0f;
		return 0;
	}
	if (c != c16 && c != c16 + 1)
		return s_bad(in, want_array ? "expected an array" : "expected a map");
	in->at++;
	return s_rd_be(in, c == c16 ? 2 : 4, n);
}

/* Reads a key and gives its index in keys, refusing unknown and repeated ones. */
static int
s_rd_key(s_in_t *in, const char *const *keys, int nkeys, unsigned *seen, int *which)
{
	size_t off, n;

	if (s_rd_bytes(in, 0, &off, &n) < 0)
		return -1;
	for (int k = 0; k < nkeys; k++) {
		if (strlen(keys[k]) == n && memcmp(in->p + off, keys[k], n) == 0) {
			if (*seen & (1u << k))
				return s_bad(in, "a repeated key");
			*seen |= 1u << k;
			*which = k;
			return 0;
		}
	}
	return s_bad(in, "an unknown key");
}

enum { T_PATH, T_OFF, T_LEN, T_HASH, T_ENC, T_BASE_OFF, T_DATA };
static const char *const s_tensor_keys[PATH_KEYS] = {
	"path", "off", "len", "hash", "enc", "base_off", "data"
};

/* One tensor entry, with the keys its encoding needs. */
static int
s_rd_tensor(s_in_t *in, wsync_delta_tensor_t *t)
{
	unsigned seen = 0, need;
	uint64_t n, v;
	size_t off, len;
	int k;

	if (s_rd_count(in, 0, &n) < 0)
		return -1;
	if (n > PATH_KEYS)
		return s_bad(in, "a tensor entry with too many keys");
	for (uint64_t i = 0; i < n; i++) {
		if (s_rd_key(in, s_tensor_keys, PATH_KEYS, &seen, &k) < 0)
			return -1;
		switch (k) {
		case T_PATH:
			if (s_rd_bytes(in, 0, &off, &len) < 0)
				return -1;
			if (len == 0 || len > WSYNC_MAX_PATH || memchr(in->p + off, 0, len) != NULL)
				return s_bad(in, "a bad tensor path");
			if ((t->path = strndup((const char *)in->p + off, len)) == NULL)
				return wsync_err_set(in->err, EX_OSERR, "%s: out of memory", in->name);
			break;
		case T_ENC:
			if (s_rd_bytes(in, 0, &off, &len) < 0)
				return -1;
			for (v = 0; v < WSYNC_DELTA_ENC_COUNT; v++)
				if (strlen(s_enc_names[v]) == len &&
				    memcmp(in->p + off, s_enc_names[v], len) == 0)
					break;
			if (v == WSYNC_DELTA_ENC_COUNT && t->path != NULL)
				return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: unknown "
				    "encoding \"%.*s\"", in->name, t->path, (int)len, in->p + off);
			if (v == WSYNC_DELTA_ENC_COUNT)
				return s_bad(in, "an unknown encoding");
			t->enc = (wsync_delta_enc_t)v;
			break;
		case T_DATA:
			if (s_rd_bytes(in, 1, &off, &len) < 0)
				return -1;
			t->data_off = off;
			t->data_len = len;
			break;
		default:
			if (s_rd_uint(in, &v) < 0)
				return -1;
			*(k == T_OFF ? &t->off : k == T_LEN ? &t->len : k == T_HASH ? &t->hash :
			    &t->base_off) = v;
			break;
		}
	}
	need = 1u << T_PATH | 1u << T_OFF | 1u << T_LEN | 1u << T_HASH | 1u << T_ENC;
	if ((seen & need) != need)
		return s_bad(in, "a tensor entry without path, off, len, hash or enc");
	if (t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR || t->enc == WSYNC_DELTA_SPARSE)
		need |= 1u << T_BASE_OFF;
	if (t->enc != WSYNC_DELTA_SAME)
		need |= 1u << T_DATA;
	if (seen != need)
		return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: encoding %s with "
		    "the wrong keys", in->name, t->path, s_enc_names[t->enc]);
	return 0;
}

/* Where t lies in H; prev_end is where the previous tensor's data ended. */
static int
s_check_tensor(s_in_t *in, const wsync_delta_header_t *h, const wsync_delta_tensor_t *t,
    uint64_t *prev_end)
{
	if (t->len > UINT32_MAX || t->off > h->size || t->len > h->size - t->off)
		return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: data outside the "
		    "head's %llu bytes", in->name, t->path, (unsigned long long)h->size);
	if (t->len == 0 && (t->off != 0 || t->enc != WSYNC_DELTA_RAW))
		return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: an empty tensor "
		    "must be raw at offset 0", in->name, t->path);
	if (t->len > 0 && t->off < *prev_end)
		return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: overlaps or comes "
		    "before the previous tensor", in->name, t->path);
	if (t->enc == WSYNC_DELTA_RAW && t->data_len != t->len)
		return wsync_err_set(in->err, EX_DATAERR, "%s: tensor %s: raw data of %llu "
		    "bytes for %llu", in->name, t->path, (unsigned long long)t->data_len,
		    (unsigned long long)t->len);
	if (t->len > 0)
		*prev_end = t->off + t->len;
	return 0;
}

enum { H_FORMAT, H_MODEL, H_BASE, H_BASE_CONTENT, H_VERSION, H_CONTENT, H_SIZE,
	H_SKELETON, H_TENSORS, H_COUNT };
static const char *const s_header_keys[H_COUNT] = {
	"wsync-delta", "model", "base", "base_content", "version", "content", "size",
	"skeleton", "tensors"
};

int
wsync_delta_read_header(const void *buf, size_t len, const char *name,
    wsync_delta_header_t *h, wsync_err_t *err)
{
	s_in_t in = { buf, len, 0, name, err };
	uint64_t n, v, format = 0, prev_end = 0, data = 0;
	size_t off, slen;
	unsigned seen = 0;
	int k;

	memset(h, 0, sizeof(*h));
	if (s_rd_count(&in, 0, &n) < 0)
		return -1;
	if (n != H_COUNT)
		return s_bad(&in, "a top-level map without exactly 9 fields");
	for (uint64_t i = 0; i < n; i++) {
		if (s_rd_key(&in, s_header_keys, H_COUNT, &seen, &k) < 0)
			return -1;
		switch (k) {
		case H_MODEL:
			if (s_rd_bytes(&in, 0, &off, &slen) < 0)
				return -1;
			if (slen > WSYNC_MAX_MODEL)
				return s_bad(&in, "a bad model id");
			memcpy(h->model, in.p + off, slen);
			h->model[slen] = '\0';
			if (wsync_model_id_check(h->model) != 0)
				return s_bad(&in, "a bad model id");
			break;
		case H_SKELETON:
			if (s_rd_bytes(&in, 1, &off, &slen) < 0)
				return -1;
			h->skeleton_off = off;
			h->skeleton_len = slen;
			break;
		case H_TENSORS:
			if (s_rd_count(&in, 1, &v) < 0)
				return -1;
			/* Every entry takes at least 30 bytes: no allocation beyond the input's size. */
			if (v > WSYNC_MAX_TENSORS || v > (len - in.at) / 30)
				return s_bad(&in, "more tensors than the delta could hold");
			h->ntensors = (size_t)v;
			if ((h->tensors = calloc(h->ntensors + 1, sizeof(*h->tensors))) == NULL)
				return wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
			for (size_t j = 0; j < h->ntensors; j++)
				if (s_rd_tensor(&in, &h->tensors[j]) < 0)
					return -1;
			break;
		default:
			if (s_rd_uint(&in, &v) < 0)
				return -1;
			*(k == H_FORMAT ? &format : k == H_BASE ? &h->base :
			    k == H_BASE_CONTENT ? &h->base_content : k == H_VERSION ? &h->version :
			    k == H_CONTENT ? &h->content : &h->size) = v;
			if (k == H_FORMAT && v != WSYNC_DELTA_FORMAT)
				return wsync_err_set(err, EX_DATAERR, "%s: delta format %llu, "
				    "this reader knows %d", name, (unsigned long long)v,
				    WSYNC_DELTA_FORMAT);
			break;
		}
	}
	if (in.at != len)
		return s_bad(&in, "trailing bytes after the document");
	if (h->size > (UINT64_C(1) << 62))
		return s_bad(&in, "an absurd head size");
	for (size_t i = 0; i < h->ntensors; i++) {
		if (s_check_tensor(&in, h, &h->tensors[i], &prev_end) < 0)
			return -1;
		data += h->tensors[i].len;
	}
	/*
	 * What the skeleton must expand to: no more than a header of this many
	 * tensors and the largest meta hold, so a small frame cannot fill a disk.
	 */
	if (h->size - data > SKELETON_FIXED_MAX + h->ntensors * SKELETON_TENSOR_MAX)
		return wsync_err_set(err, EX_DATAERR, "%s: a head of %llu bytes outside its "
		    "%zu tensors' data, more than any header", name,
		    (unsigned long long)(h->size - data), h->ntensors);
	return 0;
}

void
wsync_delta_header_free(wsync_delta_header_t *h)
{
	for (size_t i = 0; h->tensors != NULL && i < h->ntensors; i++)
		free((char *)h->tensors[i].path);
	free(h->tensors);
	memset(h, 0, sizeof(*h));
}

/* ---- applying a delta ---- */

/* A zstd frame read a few bytes at a time, exactly to its end. */
typedef struct s_zin {
	ZSTD_DCtx *z;
	ZSTD_inBuffer in;
	unsigned char *buf;             /* CHUNK bytes decompressed */
	size_t have, at;
	size_t released;                /* input let go of: read, and mapped from the delta */
	int ended;                      /* the frame is complete */
	const char *name, *what;
	wsync_err_t *err;
} s_zin_t;

static int
s_zin_start(s_zin_t *r, const unsigned char *p, size_t len, const char *what)
{
	ZSTD_DCtx_reset(r->z, ZSTD_reset_session_only);
	r->in = (ZSTD_inBuffer){ p, len, 0 };
	r->have = r->at = r->released = 0;
	r->ended = 0;
	r->what = what;
	return 0;
}

/* Decompresses more into the buffer; 0 at the frame's end with nothing left. */
static int
s_zin_fill(s_zin_t *r, wsync_err_t *err)
{
	r->have = r->at = 0;
	while (r->have == 0 && !r->ended) {
		ZSTD_outBuffer out = { r->buf, CHUNK, 0 };
		size_t left = ZSTD_decompressStream(r->z, &out, &r->in);
		if (ZSTD_isError(left))
			return wsync_err_set(err, EX_DATAERR, "%s: %s: damaged (zstd: %s)",
			    r->name, r->what, ZSTD_getErrorName(left));
		r->have = out.pos;
		s_release_map((const unsigned char *)r->in.src + r->released,
		    r->in.pos - r->released);
		r->released = r->in.pos;
		if (left == 0)
			r->ended = 1;
		else if (out.pos == 0 && r->in.pos == r->in.size)
			return wsync_err_set(err, EX_DATAERR, "%s: %s: truncated", r->name,
			    r->what);
	}
	if (r->ended && r->have == 0 && r->in.pos != r->in.size)
		return wsync_err_set(err, EX_DATAERR, "%s: %s: bytes after its zstd frame",
		    r->name, r->what);
	return (int)(r->have > 0);
}

/* Points *p at up to n next bytes (*got of them); 65 when the frame ends first. */
static int
s_zin_next(s_zin_t *r, size_t n, const unsigned char **p, size_t *got)
{
	if (r->at == r->have) {
		int rc = s_zin_fill(r, r->err);
		if (rc < 0)
			return -1;
		if (rc == 0)
			return wsync_err_set(r->err, EX_DATAERR, "%s: %s: ends early", r->name,
			    r->what);
	}
	*p = r->buf + r->at;
	*got = r->have - r->at < n ? r->have - r->at : n;
	r->at += *got;
	return 0;
}

/* Copies exactly n next bytes to dst. */
static int
s_zin_read(s_zin_t *r, void *dst, size_t n)
{
	unsigned char *d = dst;

	while (n > 0) {
		const unsigned char *p = NULL;
		size_t got = 0;
		if (s_zin_next(r, n, &p, &got) < 0)
			return -1;
		memcpy(d, p, got);
		d += got;
		n -= got;
	}
	return 0;
}

/* 0 when the frame ends here, nothing after it; 65 otherwise. */
static int
s_zin_end(s_zin_t *r)
{
	int rc = r->at < r->have ? 1 : s_zin_fill(r, r->err);

	if (rc < 0)
		return -1;
	if (rc > 0)
		return wsync_err_set(r->err, EX_DATAERR, "%s: %s: longer than it should be",
		    r->name, r->what);
	return 0;
}

typedef struct s_apply {
	s_out_t out;
	const wsync_delta_header_t *h;
	const unsigned char *delta;
	const wsync_file_t *base;
	s_zin_t skel, data;
	unsigned char *tmp;             /* CHUNK bytes */
	unsigned char *group;           /* a sparse group */
	const char *name;
	XXH3_state_t hash;
} s_apply_t;

/* B's tensor whose data starts at off and has len bytes, its hash checked. */
static const wsync_tensor_t *
s_base_at(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	const wsync_file_t *b = a->base;
	size_t lo = 0, hi = wsync_file_count(b);
	const wsync_tensor_t *bt = NULL;
	XXH3_state_t st;

	/* Tensors with data are in file order; an empty one says offset 0: step over it. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2, j = mid;
		const wsync_tensor_t *c;
		while (j < hi && wsync_file_tensor(b, j)->nbytes == 0)
			j++;
		if (j == hi) {
			hi = mid;
			continue;
		}
		c = wsync_file_tensor(b, j);
		if (c->offset == t->base_off) {
			bt = c;
			break;
		}
		if (c->offset < t->base_off)
			lo = j + 1;
		else
			hi = mid;
	}
	if (bt == NULL || bt->nbytes != t->len) {
		wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the base has no tensor of %llu "
		    "bytes at offset %llu", a->name, t->path, (unsigned long long)t->len,
		    (unsigned long long)t->base_off);
		return NULL;
	}
	XXH3_64bits_reset(&st);
	for (uint64_t at = 0; at < bt->nbytes; at += CHUNK) {
		size_t n = bt->nbytes - at < CHUNK ? (size_t)(bt->nbytes - at) : CHUNK;
		wsync_hash_update(&st, (const unsigned char *)bt->data + at, n);
		s_release(b, (const unsigned char *)bt->data + at, n);
	}
	if (XXH3_64bits_digest(&st) != bt->hash) {
		wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the base's %s does not match "
		    "its hash (a damaged base)", a->name, t->path, bt->path);
		return NULL;
	}
	return bt;
}

/* Copies n bytes of B to the output, letting go of B's pages behind. */
static int
s_put_base(s_apply_t *a, const unsigned char *p, uint64_t n, wsync_err_t *err)
{
	for (uint64_t at = 0; at < n; at += CHUNK) {
		size_t k = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
		if (s_out_put(&a->out, p + at, k, err) < 0)
			return -1;
		s_release(a->base, p + at, k);
	}
	return 0;
}

static int
s_apply_xor(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		if (s_zin_read(&a->data, a->tmp, n) < 0)
			return -1;
		for (size_t i = 0; i < n; i++)
			a->tmp[i] ^= b[at + i];
		if (s_out_put(&a->out, a->tmp, n, err) < 0)
			return -1;
		s_release(a->base, b + at, n);
	}
	return s_zin_end(&a->data);
}

/*
 * Writes the window at *win (patched), then B's elements up to end a window
 * at a time, and loads the window that starts there; n elements in all.
 */
static int
s_sparse_flush(s_apply_t *a, const unsigned char *b, uint64_t *win, uint64_t end,
    uint64_t n, unsigned w, wsync_err_t *err)
{
	uint64_t per = CHUNK / w;

	while (*win < end) {
		size_t k = (size_t)(n - *win < per ? n - *win : per) * w;
		if (s_out_put(&a->out, a->tmp, k, err) < 0)
			return -1;
		s_release(a->base, b + *win * w, k);
		*win += k / w;
		if (*win < n)
			memcpy(a->tmp, b + *win * w, (size_t)(n - *win < per ? n - *win : per) * w);
	}
	return 0;
}

/*
 * The sparse form (s_encode_sparse): B's bytes with the changed elements
 * xored, built a window of CHUNK bytes at a time in tmp.
 */
static int
s_apply_sparse(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	uint64_t next = 0, n, win = 0, per;  /* the next element that may change; window start */
	unsigned char w, cb[4];

	if (s_zin_read(&a->data, &w, 1) < 0)
		return -1;
	if ((w != 1 && w != 2 && w != 4 && w != 8) || t->len % w != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: sparse elements of %u "
		    "bytes in %llu", a->name, t->path, w, (unsigned long long)t->len);
	n = t->len / w;
	per = CHUNK / w;
	memcpy(a->tmp, b, (size_t)(n < per ? n : per) * w);
	for (;;) {
		uint32_t c;
		int rc = a->data.at < a->data.have ? 1 : s_zin_fill(&a->data, err);
		if (rc < 0)
			return -1;
		if (rc == 0)
			break;
		if (s_zin_read(&a->data, cb, 4) < 0)
			return -1;
		c = (uint32_t)cb[0] | (uint32_t)cb[1] << 8 | (uint32_t)cb[2] << 16 |
		    (uint32_t)cb[3] << 24;
		if (c == 0 || c > GROUP_MAX)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: a sparse group of "
			    "%u changes", a->name, t->path, c);
		if (s_zin_read(&a->data, a->group, (size_t)c * (4 + w)) < 0)
			return -1;
		for (uint32_t i = 0; i < c; i++) {
			const unsigned char *g = a->group + i;
			uint64_t e = next + ((uint64_t)g[0] | (uint64_t)g[c] << 8 |
			    (uint64_t)g[2 * (size_t)c] << 16 | (uint64_t)g[3 * (size_t)c] << 24);
			if (e >= n)
				return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: a sparse change "
				    "beyond its %llu elements", a->name, t->path, (unsigned long long)n);
			if (e >= win + per &&
			    s_sparse_flush(a, b, &win, e - (e - win) % per, n, w, err) < 0)
				return -1;
			for (unsigned j = 0; j < w; j++)
				a->tmp[(e - win) * w + j] ^= g[(4 + j) * (size_t)c];
			next = e + 1;
		}
	}
	return s_sparse_flush(a, b, &win, n, n, w, err);
}

/* Writes n bytes of the skeleton. */
static int
s_put_skeleton(s_apply_t *a, uint64_t n, wsync_err_t *err)
{
	while (n > 0) {
		const unsigned char *p = NULL;
		size_t got = 0;
		if (s_zin_next(&a->skel, n < CHUNK ? (size_t)n : CHUNK, &p, &got) < 0 ||
		    s_out_put(&a->out, p, got, err) < 0)
			return -1;
		n -= got;
	}
	return 0;
}

/* Writes tensor t's data, hashed, from B and its encoded bytes. */
static int
s_apply_tensor(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	const unsigned char *b = NULL, *d = a->delta + t->data_off;
	const wsync_tensor_t *bt = NULL;
	char what[WSYNC_MAX_PATH + 16];
	int rc;

	snprintf(what, sizeof(what), "tensor %s", t->path);
	if (t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR ||
	    t->enc == WSYNC_DELTA_SPARSE) {
		if ((bt = s_base_at(a, t, err)) == NULL)
			return -1;
		b = bt->data;
	}
	a->data.name = a->name;
	a->data.err = err;
	s_zin_start(&a->data, d, t->data_len, what);
	XXH3_64bits_reset(&a->hash);
	a->out.hash = &a->hash;
	switch (t->enc) {
	case WSYNC_DELTA_SAME:
		rc = s_put_base(a, b, t->len, err);
		break;
	case WSYNC_DELTA_XOR:
		rc = s_apply_xor(a, t, b, err);
		break;
	case WSYNC_DELTA_SPARSE:
		rc = s_apply_sparse(a, t, b, err);
		break;
	case WSYNC_DELTA_WHOLE:
		rc = 0;
		for (uint64_t at = 0; rc == 0 && at < t->len; at += CHUNK) {
			size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
			rc = s_zin_read(&a->data, a->tmp, n) < 0 ? -1 :
			    s_out_put(&a->out, a->tmp, n, err);
		}
		if (rc == 0)
			rc = s_zin_end(&a->data);
		break;
	default:
		rc = s_out_put(&a->out, d, t->len, err);
		break;
	}
	a->out.hash = NULL;
	if (t->data_len > 0)
		s_release_map(d, t->data_len);
	if (rc < 0)
		return -1;
	if (XXH3_64bits_digest(&a->hash) != t->hash)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: rebuilt data does not "
		    "match its hash (a damaged delta)", a->name, t->path);
	return 0;
}

/* Checks the file written against the delta: model, version, tensors, content id. */
static int
s_apply_check(s_apply_t *a, int out_fd, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;
	wsync_file_t *f = wsync_file_open_fd(out_fd, a->name, err);
	int rc = -1;

	if (f == NULL)
		return -1;
	if (wsync_file_count(f) != h->ntensors || strcmp(wsync_file_model(f), h->model) != 0 ||
	    wsync_file_version(f) != h->version) {
		wsync_err_set(err, EX_DATAERR, "%s: the rebuilt file is not the delta's head "
		    "(model, version or tensor count differ)", a->name);
		goto out;
	}
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_tensor_t *ft = wsync_file_tensor(f, i);
		const wsync_delta_tensor_t *t = &h->tensors[i];
		if (strcmp(ft->path, t->path) != 0 || ft->nbytes != t->len ||
		    ft->hash != t->hash || (t->len > 0 && ft->offset != t->off)) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the rebuilt file does not "
			    "hold it as the delta says", a->name, t->path);
			goto out;
		}
	}
	if (wsync_file_content_id(f) != h->content) {
		wsync_err_set(err, EX_DATAERR, "%s: the rebuilt file's content id %016llx is "
		    "not the delta's %016llx", a->name,
		    (unsigned long long)wsync_file_content_id(f), (unsigned long long)h->content);
		goto out;
	}
	rc = 0;
out:
	wsync_file_close(&f);
	return rc;
}

static int
s_apply(s_apply_t *a, int out_fd, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;
	uint64_t pos = 0;

	if (wsync_file_content_id(a->base) != h->base_content ||
	    strcmp(wsync_file_model(a->base), h->model) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the base is not the delta's "
		    "(content id %016llx of %s, the delta wants %016llx of %s)", a->name,
		    (unsigned long long)wsync_file_content_id(a->base), wsync_file_model(a->base),
		    (unsigned long long)h->base_content, h->model);
	a->skel.name = a->name;
	a->skel.err = err;
	s_zin_start(&a->skel, a->delta + h->skeleton_off, h->skeleton_len, "skeleton");
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_delta_tensor_t *t = &h->tensors[i];
		if (t->len > 0 && s_put_skeleton(a, t->off - pos, err) < 0)
			return -1;
		if (s_apply_tensor(a, t, err) < 0)
			return -1;
		if (t->len > 0)
			pos = t->off + t->len;
	}
	if (s_put_skeleton(a, h->size - pos, err) < 0 || s_zin_end(&a->skel) < 0 ||
	    s_out_flush(&a->out, err) < 0)
		return -1;
	return s_apply_check(a, out_fd, err);
}

int
wsync_delta_apply(int base_fd, int delta_fd, int out_fd, const char *name,
    uint64_t *version, uint64_t *content, wsync_err_t *err)
{
	s_apply_t a = { .out = { .fd = out_fd, .name = name }, .name = name };
	wsync_delta_header_t h = { 0 };
	wsync_file_t *base = NULL;
	void *map = MAP_FAILED;
	struct stat st, ost;
	int rc = -1;

	if (fstat(delta_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		wsync_err_set(err, EX_IOERR, "%s: the delta is not a regular file", name);
		goto out;
	}
	if (st.st_size == 0) {
		wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta (it is empty)", name);
		goto out;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, delta_fd, 0);
	if (map == MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "%s: cannot map the delta: %s", name, strerror(errno));
		goto out;
	}
	if (wsync_delta_read_header(map, (size_t)st.st_size, name, &h, err) < 0 ||
	    (base = wsync_file_open_fd(base_fd, "base", err)) == NULL)
		goto out;
	a.h = &h;
	a.delta = map;
	a.base = base;
	a.out.buf = malloc(OUT_BUF);
	a.tmp = malloc(CHUNK);
	a.group = malloc((size_t)GROUP_MAX * 12);
	a.skel.buf = malloc(CHUNK);
	a.data.buf = malloc(CHUNK);
	a.skel.z = ZSTD_createDCtx();
	a.data.z = ZSTD_createDCtx();
	if (a.out.buf == NULL || a.tmp == NULL || a.group == NULL || a.skel.buf == NULL ||
	    a.data.buf == NULL || a.skel.z == NULL || a.data.z == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	ZSTD_DCtx_setParameter(a.skel.z, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
	ZSTD_DCtx_setParameter(a.data.z, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
	if ((a.out.start = lseek(out_fd, 0, SEEK_CUR)) != 0 || fstat(out_fd, &ost) < 0 ||
	    ost.st_size != 0) {
		wsync_err_set(err, EX_SOFTWARE, "%s: the output must be a new empty file", name);
		goto out;
	}
	if (s_apply(&a, out_fd, err) < 0)
		goto out;
	if (version != NULL)
		*version = h.version;
	if (content != NULL)
		*content = h.content;
	rc = 0;
out:
	wsync_delta_header_free(&h);
	wsync_file_close(&base);
	if (map != MAP_FAILED)
		munmap(map, (size_t)st.st_size);
	ZSTD_freeDCtx(a.skel.z);
	ZSTD_freeDCtx(a.data.z);
	free(a.out.buf);
	free(a.tmp);
	free(a.group);
	free(a.skel.buf);
	free(a.data.buf);
	return rc;
}
