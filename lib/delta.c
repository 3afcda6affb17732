/*
 * delta.c - deltas between two versions of a model (wsync-format(5), DELTA):
 * their names, the buffered output both sides use, reading and applying them
 * (delta_make.c makes them).
 *
 * A delta is one msgpack map, written and read with msgpack-c. The writer
 * streams it: the inputs are mapped and read a window at a time (their pages
 * let go behind), every encoded form goes through one zstd stream into a
 * bounded scratch, then into a bounded output buffer. The reader bounds the
 * document's declared sizes (mpcheck.c) before msgpack-c unpacks it, its
 * bins left in place in the mapped delta. The applier writes H's skeleton,
 * then its tensors on all threads (pool.c), each in one pass a MiB at a time:
 * B's piece hashed as it is copied into the output's pages, patched there,
 * hashed again while in cache; then it parses what it wrote and checks it
 * against the delta. It parses an image of H rather than the file: the
 * skeleton's bytes at their offsets in an anonymous mapping whose tensor
 * data is never touched. Mapping the
 * file would bring in, with each bin header the parser reads, the page
 * cache's whole folio around it (a MiB or more on disk), one per tensor:
 * 64 MiB of RSS for a 1 GiB model of 64 tensors.
 */
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
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
#include "mpcheck_int.h"
#include "pool_int.h"

static const char *const s_enc_names[WSYNC_DELTA_ENC_COUNT] = {
	"same", "xor", "sparse", "whole", "raw"
};

const char *
wsync_delta_enc_name(wsync_delta_enc_t enc)
{
	return (unsigned)enc < WSYNC_DELTA_ENC_COUNT ? s_enc_names[enc] : NULL;
}

/* ---- output: a buffered writer that can fill in lengths and take back ---- */

/*
 * Brings in the pages of a mapped output that hold [off, off + n), ready for
 * writing: one call rather than a fault each, and an error where the file
 * system has no room for one, which a plain fault would make a SIGBUS.
 * -1 with errno; 0 where the kernel has no MADV_POPULATE_WRITE, whose output
 * wsync_delta_apply_some reserved whole first.
 */
static int
s_out_populate(unsigned char *map, uint64_t off, size_t n)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = (uintptr_t)(map + off) &
	    ~(page - 1);

	if (madvise((void *)start, n + ((uintptr_t)(map + off) - start),
	    MADV_POPULATE_WRITE) < 0 && errno != EINVAL) {
		/* EFAULT: a fault would have been a SIGBUS, which a file's page gives when full. */
		if (errno == EFAULT)
			errno = ENOSPC;
		return -1;
	}
#else
	(void)map;
	(void)off;
	(void)n;
#endif
	return 0;
}

/*
 * Writes what is buffered; a mapped output is written through its mapping,
 * then its pages let go of: a thread writing the file through write(2) holds
 * its inode's lock, so threads writing their tensors into one file would
 * take turns.
 */
int
delta_out_flush(delta_out_t *o, wsync_err_t *err)
{
	if (o->n > 0 && o->map != NULL) {
		if (s_out_populate(o->map, o->flushed, o->n) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", o->name,
			    strerror(errno));
		memcpy(o->map + o->flushed, o->buf, o->n);
		wsync_pages_release_around(o->map + o->flushed, o->n);
	} else if (o->n > 0 && (o->positioned ? wsync_write_at(o->fd, o->buf, o->n,
	    o->flushed) : wsync_write_all(o->fd, o->buf, o->n)) < 0) {
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", o->name,
		    strerror(errno));
	}
	o->flushed += o->n;
	o->n = 0;
	return 0;
}

int
delta_out_put(delta_out_t *o, const void *p, size_t len, wsync_err_t *err)
{
	const unsigned char *s = p;

	o->pos += len;
	while (len > 0) {
		size_t k = OUT_BUF - o->n < len ? OUT_BUF - o->n : len;
		memcpy(o->buf + o->n, s, k);
		o->n += k;
		s += k;
		len -= k;
		if (o->n == OUT_BUF && delta_out_flush(o, err) < 0)
			return -1;
	}
	return 0;
}

/* wsync_pages_release_around for an input that is mapped, never for one read into memory. */
static void
delta_release(const wsync_file_t *f, const void *p, size_t len)
{
	if (f->mem == WSYNC_MEM_MMAP)
		wsync_pages_release_around(p, len);
}

/* ---- reading a delta's document ---- */

/* Bounds on the document: map, tensors array, entry maps; their objects. */
#define DOC_DEPTH 3
#define DOC_OBJECTS (64 + (size_t)WSYNC_MAX_TENSORS * (1 + 2 * PATH_KEYS))

typedef struct s_in {
	const char *buf;                /* the delta; bins point into it */
	const char *name;
	wsync_err_t *err;
} s_in_t;

static int
s_bad(s_in_t *in, const char *what)
{
	return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: %s", in->name, what);
}

/* 1 when key o is the string s. */
static int
s_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	    memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/*
 * Finds map's values for keys (nkeys of them, at most 32) into val, NULL when
 * absent; refuses a key that is not a string, unknown or repeated, naming
 * what (the top level, or a tensor).
 */
static int
s_fields(s_in_t *in, const msgpack_object_map *map, const char *const *keys, int nkeys,
    const msgpack_object **val, const char *what)
{
	for (int k = 0; k < nkeys; k++)
		val[k] = NULL;
	for (uint32_t i = 0; i < map->size; i++) {
		const msgpack_object *key = &map->ptr[i].key;
		int k = 0;
		while (k < nkeys && !s_is(key, keys[k]))
			k++;
		if (k == nkeys || val[k] != NULL)
			return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: %s: %s "
			    "key%s%.*s%s", in->name, what, k == nkeys ? "an unknown" : "a repeated",
			    key->type == MSGPACK_OBJECT_STR ? " \"" : " that is not a string",
			    key->type == MSGPACK_OBJECT_STR ? (int)(key->via.str.size > 64 ? 64 :
			    key->via.str.size) : 0, key->type == MSGPACK_OBJECT_STR ?
			    key->via.str.ptr : "", key->type == MSGPACK_OBJECT_STR ? "\"" : "");
		val[k] = &map->ptr[i].val;
	}
	return 0;
}

/* An unsigned integer field's value. */
static int
s_uint(s_in_t *in, const msgpack_object *o, const char *what, const char *key, uint64_t *v)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: %s: \"%s\" "
		    "is not an unsigned integer", in->name, what, key);
	*v = o->via.u64;
	return 0;
}

enum { T_PATH, T_OFF, T_LEN, T_HASH, T_ENC, T_BASE_OFF, T_DATA };
static const char *const s_tensor_keys[PATH_KEYS] = {
	"path", "off", "len", "hash", "enc", "base_off", "data"
};

/* One tensor entry, with the keys its encoding needs. */
static int
s_rd_tensor(s_in_t *in, const msgpack_object *o, wsync_delta_tensor_t *t)
{
	const msgpack_object *v[PATH_KEYS], *p;
	char what[WSYNC_MAX_PATH + 16];
	int enc;

	if (o->type != MSGPACK_OBJECT_MAP)
		return s_bad(in, "a tensor entry that is not a map");
	if (s_fields(in, &o->via.map, s_tensor_keys, PATH_KEYS, v, "a tensor entry") < 0)
		return -1;
	if ((p = v[T_PATH]) == NULL || p->type != MSGPACK_OBJECT_STR ||
	    p->via.str.size == 0 || p->via.str.size > WSYNC_MAX_PATH ||
	    memchr(p->via.str.ptr, 0, p->via.str.size) != NULL)
		return s_bad(in, "a tensor entry without a good path");
	if ((t->path = strndup(p->via.str.ptr, p->via.str.size)) == NULL)
		return wsync_err_set(in->err, EX_OSERR, "%s: out of memory", in->name);
	snprintf(what, sizeof(what), "tensor %s", t->path);
	for (int k = T_OFF; k <= T_ENC; k++)
		if (v[k] == NULL)
			return wsync_err_set(in->err, EX_DATAERR, "%s: %s: no \"%s\"", in->name,
			    what, s_tensor_keys[k]);
	if (s_uint(in, v[T_OFF], what, "off", &t->off) < 0 ||
	    s_uint(in, v[T_LEN], what, "len", &t->len) < 0 ||
	    s_uint(in, v[T_HASH], what, "hash", &t->hash) < 0)
		return -1;
	for (enc = 0; enc < WSYNC_DELTA_ENC_COUNT; enc++)
		if (s_is(v[T_ENC], s_enc_names[enc]))
			break;
	if (enc == WSYNC_DELTA_ENC_COUNT)
		return wsync_err_set(in->err, EX_DATAERR, "%s: %s: unknown encoding \"%.*s\"",
		    in->name, what, v[T_ENC]->type == MSGPACK_OBJECT_STR ?
		    (int)(v[T_ENC]->via.str.size > 32 ? 32 : v[T_ENC]->via.str.size) : 0,
		    v[T_ENC]->type == MSGPACK_OBJECT_STR ? v[T_ENC]->via.str.ptr : "");
	t->enc = (wsync_delta_enc_t)enc;
	if ((v[T_BASE_OFF] != NULL) != (enc == WSYNC_DELTA_SAME || enc == WSYNC_DELTA_XOR ||
	    enc == WSYNC_DELTA_SPARSE) || (v[T_DATA] != NULL) != (enc != WSYNC_DELTA_SAME))
		return wsync_err_set(in->err, EX_DATAERR, "%s: %s: encoding %s with the wrong "
		    "keys", in->name, what, s_enc_names[enc]);
	if (v[T_BASE_OFF] != NULL && s_uint(in, v[T_BASE_OFF], what, "base_off",
	    &t->base_off) < 0)
		return -1;
	if (v[T_DATA] != NULL) {
		if (v[T_DATA]->type != MSGPACK_OBJECT_BIN)
			return wsync_err_set(in->err, EX_DATAERR, "%s: %s: \"data\" is not a bin",
			    in->name, what);
		t->data_off = (uint64_t)(v[T_DATA]->via.bin.ptr - in->buf);
		t->data_len = v[T_DATA]->via.bin.size;
	}
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

/* The top-level map, decoded into h. */
static int
s_rd_root(s_in_t *in, const msgpack_object *o, wsync_delta_header_t *h)
{
	const msgpack_object *v[H_COUNT];
	uint64_t format, *num[H_COUNT] = { &format, NULL, &h->base, &h->base_content,
		&h->version, &h->content, &h->size };
	const msgpack_object_array *ts;

	if (o->type != MSGPACK_OBJECT_MAP)
		return s_bad(in, "not a map");
	if (s_fields(in, &o->via.map, s_header_keys, H_COUNT, v, "the top level") < 0)
		return -1;
	for (int k = 0; k < H_COUNT; k++)
		if (v[k] == NULL)
			return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: no "
			    "\"%s\"", in->name, s_header_keys[k]);
	for (int k = 0; k <= H_SIZE; k++)
		if (num[k] != NULL && s_uint(in, v[k], "the top level", s_header_keys[k],
		    num[k]) < 0)
			return -1;
	if (format != WSYNC_DELTA_FORMAT)
		return wsync_err_set(in->err, EX_DATAERR, "%s: delta format %llu, this reader "
		    "knows %d", in->name, (unsigned long long)format, WSYNC_DELTA_FORMAT);
	if (v[H_MODEL]->type != MSGPACK_OBJECT_STR || v[H_MODEL]->via.str.size > WSYNC_MAX_MODEL)
		return s_bad(in, "a bad model id");
	memcpy(h->model, v[H_MODEL]->via.str.ptr, v[H_MODEL]->via.str.size);
	h->model[v[H_MODEL]->via.str.size] = '\0';
	if (wsync_model_id_check(h->model) != 0)
		return s_bad(in, "a bad model id");
	if (v[H_SKELETON]->type != MSGPACK_OBJECT_BIN)
		return s_bad(in, "\"skeleton\" is not a bin");
	h->skeleton_off = (uint64_t)(v[H_SKELETON]->via.bin.ptr - in->buf);
	h->skeleton_len = v[H_SKELETON]->via.bin.size;
	if (v[H_TENSORS]->type != MSGPACK_OBJECT_ARRAY)
		return s_bad(in, "\"tensors\" is not an array");
	ts = &v[H_TENSORS]->via.array;
	if (ts->size > WSYNC_MAX_TENSORS)
		return s_bad(in, "more tensors than a model may have");
	h->ntensors = ts->size;
	if ((h->tensors = calloc(h->ntensors + 1, sizeof(*h->tensors))) == NULL)
		return wsync_err_set(in->err, EX_OSERR, "%s: out of memory", in->name);
	for (size_t j = 0; j < h->ntensors; j++)
		if (s_rd_tensor(in, &ts->ptr[j], &h->tensors[j]) < 0)
			return -1;
	return 0;
}

int
wsync_delta_read_header(const void *buf, size_t len, const char *name,
    wsync_delta_header_t *h, wsync_err_t *err)
{
	s_in_t in = { buf, name, err };
	msgpack_unpacked doc;
	uint64_t prev_end = 0, data = 0;
	size_t end = 0, off = 0;
	char why[256];
	int rc;

	memset(h, 0, sizeof(*h));
	if (len == 0)
		return s_bad(&in, "it is empty");
	if (wsync_msgpack_check(buf, len, &end, DOC_DEPTH, DOC_OBJECTS, why, sizeof(why)) < 0)
		return s_bad(&in, why);
	if (end != len)
		return s_bad(&in, "trailing bytes after the document");
	msgpack_unpacked_init(&doc);
	if (msgpack_unpack_next(&doc, buf, len, &off) != MSGPACK_UNPACK_SUCCESS)
		rc = s_bad(&in, "msgpack-c cannot unpack it");
	else
		rc = s_rd_root(&in, &doc.data, h);
	msgpack_unpacked_destroy(&doc);
	if (rc < 0)
		return -1;
	if (h->size == 0 || h->size > (UINT64_C(1) << 62))
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
		wsync_pages_release_around((const unsigned char *)r->in.src + r->released,
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
	delta_out_t out;
	const wsync_delta_header_t *h;
	const unsigned char *delta;
	const wsync_file_t *base;
	s_zin_t skel, data;
	unsigned char *image;           /* H's size, anonymous: the skeleton where H has it */
	unsigned char *tmp;             /* CHUNK bytes: a tensor's piece when out is not mapped */
	unsigned char *win;             /* the sparse form's window: in out's mapping, or tmp */
	unsigned char *group;           /* a sparse group */
	const char *name;
	XXH3_state_t hash;              /* of the tensor written */
	XXH3_state_t bhash;             /* of B's tensor read */
	wsync_delta_keep_fn keep;       /* NULL: every tensor is written */
	void *keep_arg;
	int over;                       /* the output holds B: H is made there in place */
	int verify;                     /* over: each tensor made is hashed and checked */
	unsigned char *wbuf;            /* over: CHUNK bytes, a window of the tensor made */
	uint64_t wat;                   /* its first byte's place in the tensor */
	int wload, wdirty;              /* it holds the window's bytes; they changed */
	wsync_err_t err;                /* this thread's, when it applies tensors */
} s_apply_t;

/*
 * Moves a positioned output to file offset off: what it writes next goes
 * there. What it leaves unwritten is a hole, which reads as zeros.
 */
static int
s_out_seek(delta_out_t *o, uint64_t off, wsync_err_t *err)
{
	if (delta_out_flush(o, err) < 0)
		return -1;
	o->pos = o->flushed = off;
	return 0;
}

/* B's tensor whose data starts at off and has len bytes (its hash checked as it is read). */
static const wsync_tensor_t *
s_base_at(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	const wsync_file_t *b = a->base;
	size_t lo = 0, hi = wsync_file_count(b);
	const wsync_tensor_t *bt = NULL;

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
	return bt;
}

/*
 * Where bytes [at, at + n) of tensor t are made: in the output's mapping, its
 * pages brought in first, else in tmp, which s_emit writes. NULL with err
 * when the file system has no room for them.
 */
static unsigned char *
s_dst(s_apply_t *a, const wsync_delta_tensor_t *t, uint64_t at, size_t n, wsync_err_t *err)
{
	if (a->out.map == NULL)
		return a->tmp;
	if (s_out_populate(a->out.map, t->off + at, n) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: tensor %s: cannot write: %s", a->name, t->path,
		    strerror(errno));
		return NULL;
	}
	return a->out.map + t->off + at;
}

/*
 * Bytes [at, at + n) of t, made at p (s_dst): hashed into hash (unless NULL)
 * while in cache, written, let go of.
 */
static int
s_emit(s_apply_t *a, const wsync_delta_tensor_t *t, uint64_t at, const unsigned char *p,
    size_t n, XXH3_state_t *hash, wsync_err_t *err)
{
	if (hash != NULL)
		wsync_hash_update(hash, p, n);
	if (a->out.map != NULL)
		wsync_pages_release_around(p, n);
	else if (wsync_write_at(a->out.fd, p, n, t->off + at) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", a->name,
		    strerror(errno));
	return 0;
}

/*
 * Copies bytes [at, at + n) of B's tensor b to p, hashing them on the way
 * (s_apply_tensor checks B's hash at the end), and lets go of B's pages.
 */
static void
s_take_base(s_apply_t *a, unsigned char *p, const unsigned char *b, uint64_t at, size_t n)
{
	wsync_hash_update(&a->bhash, b + at, n);
	memcpy(p, b + at, n);
	delta_release(a->base, b + at, n);
}

/* The same form: B's bytes, whose hash is the tensor's, so hashed once. */
static int
s_apply_same(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		unsigned char *d = s_dst(a, t, at, n, err);
		if (d == NULL)
			return -1;
		s_take_base(a, d, b, at, n);
		if (s_emit(a, t, at, d, n, NULL, err) < 0)
			return -1;
	}
	return 0;
}

static int
s_apply_xor(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		unsigned char *d = s_dst(a, t, at, n, err);
		if (d == NULL || s_zin_read(&a->data, d, n) < 0)
			return -1;
		wsync_hash_update(&a->bhash, b + at, n);
		for (size_t i = 0; i < n; i++)
			d[i] ^= b[at + i];
		delta_release(a->base, b + at, n);
		if (s_emit(a, t, at, d, n, &a->hash, err) < 0)
			return -1;
	}
	return s_zin_end(&a->data);
}

/* Loads the window at element win of n: B's bytes, where the output has them. */
static int
s_window_load(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    uint64_t win, uint64_t n, unsigned w, wsync_err_t *err)
{
	uint64_t per = CHUNK / w;
	size_t k = (size_t)(n - win < per ? n - win : per) * w;

	if ((a->win = s_dst(a, t, win * w, k, err)) == NULL)
		return -1;
	s_take_base(a, a->win, b, win * w, k);
	return 0;
}

/*
 * Writes the window at *win (patched), then B's elements up to end a window
 * at a time, and loads the window that starts there; n elements in all.
 */
static int
s_sparse_flush(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    uint64_t *win, uint64_t end, uint64_t n, unsigned w, wsync_err_t *err)
{
	uint64_t per = CHUNK / w;

	while (*win < end) {
		size_t k = (size_t)(n - *win < per ? n - *win : per) * w;
		if (s_emit(a, t, *win * w, a->win, k, &a->hash, err) < 0)
			return -1;
		*win += k / w;
		if (*win < n && s_window_load(a, t, b, *win, n, w, err) < 0)
			return -1;
	}
	return 0;
}

/* The sparse form's element width, first in its frame, in *w: 0, or -1 with err (65). */
static int
s_sparse_width(s_apply_t *a, const wsync_delta_tensor_t *t, unsigned char *w, wsync_err_t *err)
{
	if (s_zin_read(&a->data, w, 1) < 0)
		return -1;
	if ((*w != 1 && *w != 2 && *w != 4 && *w != 8) || t->len % *w != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: sparse elements of %u "
		    "bytes in %llu", a->name, t->path, *w, (unsigned long long)t->len);
	return 0;
}

/*
 * The sparse form's next group of changes into a->group (4 gap planes, w
 * value planes), *c of them: 1, or 0 at the frame's end, -1 with err (65).
 */
static int
s_sparse_group(s_apply_t *a, const wsync_delta_tensor_t *t, unsigned w, uint32_t *c,
    wsync_err_t *err)
{
	unsigned char cb[4];
	int rc = a->data.at < a->data.have ? 1 : s_zin_fill(&a->data, err);

	if (rc <= 0)
		return rc;
	if (s_zin_read(&a->data, cb, 4) < 0)
		return -1;
	*c = (uint32_t)cb[0] | (uint32_t)cb[1] << 8 | (uint32_t)cb[2] << 16 |
	    (uint32_t)cb[3] << 24;
	if (*c == 0 || *c > GROUP_MAX)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: a sparse group of %u "
		    "changes", a->name, t->path, *c);
	return s_zin_read(&a->data, a->group, (size_t)*c * (4 + w)) < 0 ? -1 : 1;
}

/*
 * Change i of the group of c in a->group: its element, next and the gap
 * after it, in *e; 0, or -1 with err (65) past the tensor's n elements.
 */
static int
s_sparse_change(s_apply_t *a, const wsync_delta_tensor_t *t, uint32_t c, uint32_t i,
    uint64_t next, uint64_t n, uint64_t *e, wsync_err_t *err)
{
	const unsigned char *g = a->group + i;

	*e = next + ((uint64_t)g[0] | (uint64_t)g[c] << 8 | (uint64_t)g[2 * (size_t)c] << 16 |
	    (uint64_t)g[3 * (size_t)c] << 24);
	if (*e >= n)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: a sparse change beyond its "
		    "%llu elements", a->name, t->path, (unsigned long long)n);
	return 0;
}

/*
 * The sparse form (s_encode_sparse): B's bytes with the changed elements
 * xored, built a window of CHUNK bytes at a time where the output has them.
 */
static int
s_apply_sparse(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	uint64_t next = 0, n, win = 0, per;  /* the next element that may change; window start */
	unsigned char w;
	uint32_t c;
	int rc;

	if (s_sparse_width(a, t, &w, err) < 0)
		return -1;
	n = t->len / w;
	per = CHUNK / w;
	if (s_window_load(a, t, b, 0, n, w, err) < 0)
		return -1;
	while ((rc = s_sparse_group(a, t, w, &c, err)) > 0) {
		for (uint32_t i = 0; i < c; i++) {
			uint64_t e;
			if (s_sparse_change(a, t, c, i, next, n, &e, err) < 0)
				return -1;
			if (e >= win + per &&
			    s_sparse_flush(a, t, b, &win, e - (e - win) % per, n, w, err) < 0)
				return -1;
			for (unsigned j = 0; j < w; j++)
				a->win[(e - win) * w + j] ^= a->group[(4 + j) * (size_t)c + i];
			next = e + 1;
		}
	}
	if (rc < 0)
		return -1;
	return s_sparse_flush(a, t, b, &win, n, n, w, err);
}

/* The whole and raw forms: H's bytes, decompressed or as they are in the delta. */
static int
s_apply_bytes(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *d,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		unsigned char *p = s_dst(a, t, at, n, err);
		if (p == NULL)
			return -1;
		if (t->enc == WSYNC_DELTA_RAW)
			memcpy(p, d + at, n);
		else if (s_zin_read(&a->data, p, n) < 0)
			return -1;
		if (s_emit(a, t, at, p, n, &a->hash, err) < 0)
			return -1;
	}
	return t->enc == WSYNC_DELTA_RAW ? 0 : s_zin_end(&a->data);
}

/* Writes n bytes of the skeleton. */
static int
s_put_skeleton(s_apply_t *a, uint64_t n, wsync_err_t *err)
{
	while (n > 0) {
		const unsigned char *p = NULL;
		size_t got = 0;
		if (s_zin_next(&a->skel, n < CHUNK ? (size_t)n : CHUNK, &p, &got) < 0)
			return -1;
		memcpy(a->image + a->out.pos, p, got);
		if (delta_out_put(&a->out, p, got, err) < 0)
			return -1;
		n -= got;
	}
	return 0;
}

/*
 * Writes tensor t's data from B and its encoded bytes in one pass, a CHUNK
 * at a time: B's bytes hashed as they are read, the output's as they are
 * made, both while in cache; then checks both hashes.
 */
static int
s_apply_tensor(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	const unsigned char *b = NULL, *d = a->delta + t->data_off;
	const wsync_tensor_t *bt = NULL;
	char what[WSYNC_MAX_PATH + 16];
	uint64_t made;
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
	XXH3_64bits_reset(&a->bhash);
	switch (t->enc) {
	case WSYNC_DELTA_SAME:
		rc = s_apply_same(a, t, b, err);
		break;
	case WSYNC_DELTA_XOR:
		rc = s_apply_xor(a, t, b, err);
		break;
	case WSYNC_DELTA_SPARSE:
		rc = s_apply_sparse(a, t, b, err);
		break;
	default:
		rc = s_apply_bytes(a, t, d, err);
		break;
	}
	if (t->data_len > 0)
		wsync_pages_release_around(d, t->data_len);
	if (rc < 0)
		return -1;
	if (bt != NULL && XXH3_64bits_digest(&a->bhash) != bt->hash)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the base's %s does not "
		    "match its hash (a damaged base)", a->name, t->path, bt->path);
	made = XXH3_64bits_digest(t->enc == WSYNC_DELTA_SAME ? &a->bhash : &a->hash);
	if (made != t->hash)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: rebuilt data does not "
		    "match its hash (a damaged delta)", a->name, t->path);
	return 0;
}

/*
 * Checks the file written against the delta: model, version, tensors, content
 * id. What the parser reads lies outside the tensors' data, so the image
 * parses as the file does once the tensors lie where the delta put them.
 */
static int
s_apply_check(s_apply_t *a, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;
	wsync_file_t *f = wsync_file_open_buffer(a->image, (size_t)h->size, a->name, err);
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

/* Writes the skeleton's bytes where H has them, around its tensors' data. */
static int
s_apply_skeleton(s_apply_t *a, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;
	uint64_t pos = 0;

	a->skel.name = a->name;
	a->skel.err = err;
	s_zin_start(&a->skel, a->delta + h->skeleton_off, h->skeleton_len, "skeleton");
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_delta_tensor_t *t = &h->tensors[i];
		if (t->len == 0)
			continue;
		if (s_out_seek(&a->out, pos, err) < 0 || s_put_skeleton(a, t->off - pos, err) < 0)
			return -1;
		pos = t->off + t->len;
	}
	if (s_out_seek(&a->out, pos, err) < 0 || s_put_skeleton(a, h->size - pos, err) < 0 ||
	    s_zin_end(&a->skel) < 0)
		return -1;
	return delta_out_flush(&a->out, err);
}

/*
 * Over, the window of tensor t being made, CHUNK bytes from a->wat, is done:
 * hashed when verifying, written back when it changed; then the next ones
 * are walked up to the one that holds byte to (each read and hashed when
 * verifying, else passed over: unchanged), which is read in (load: its bytes
 * are needed). Read and written, not mapped: mapping a page costs this
 * machine's kernel about what copying it does, twice over with letting it go.
 */
static int
s_over_to(s_apply_t *a, const wsync_delta_tensor_t *t, uint64_t to, int load,
    wsync_err_t *err)
{
	for (;;) {
		uint64_t at = a->wat;
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		if (a->wload && a->verify)
			wsync_hash_update(&a->hash, a->wbuf, n);
		if (a->wdirty && wsync_write_at(a->out.fd, a->wbuf, n, t->off + at) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: tensor %s: cannot write: %s",
			    a->name, t->path, strerror(errno));
		a->wload = a->wdirty = 0;
		if (at + n >= t->len || to < at + n)
			return 0;
		a->wat = at += n;
		n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		if (!(a->verify || (load && to < at + n)))
			continue;
		if (wsync_read_at(a->out.fd, a->wbuf, n, t->off + at) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: tensor %s: cannot read: %s",
			    a->name, t->path, strerror(errno));
		a->wload = 1;
		if (to < at + n)
			return 0;
	}
}

/* Over: the sparse form's changes xored into B's elements, a window at a time. */
static int
s_over_sparse(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	uint64_t next = 0, n;           /* the next element that may change */
	unsigned char w;
	uint32_t c;
	int rc;

	if (s_sparse_width(a, t, &w, err) < 0)
		return -1;
	n = t->len / w;
	while ((rc = s_sparse_group(a, t, w, &c, err)) > 0) {
		for (uint32_t i = 0; i < c; i++) {
			uint64_t e;
			if (s_sparse_change(a, t, c, i, next, n, &e, err) < 0)
				return -1;
			/* Changes come in order: the windows before this one's are final. */
			if (e * w >= a->wat + CHUNK && s_over_to(a, t, e * w, 1, err) < 0)
				return -1;
			for (unsigned j = 0; j < w; j++)
				a->wbuf[e * w - a->wat + j] ^= a->group[(4 + j) * (size_t)c + i];
			a->wdirty = 1;
			next = e + 1;
		}
	}
	return rc;
}

/*
 * Over: tensor t made from B's bytes where the output holds them, a window
 * at a time, only the windows that changed written back; each hashed while
 * in cache when verifying.
 */
static int
s_over_tensor(s_apply_t *a, const wsync_delta_tensor_t *t, wsync_err_t *err)
{
	const unsigned char *d = a->delta + t->data_off;
	char what[WSYNC_MAX_PATH + 16];
	size_t n = t->len < CHUNK ? (size_t)t->len : CHUNK;
	int rc = 0, bytes = t->enc == WSYNC_DELTA_WHOLE || t->enc == WSYNC_DELTA_RAW;

	/* Unchanged, and not checked: nothing to do. */
	if (t->len == 0 || (t->enc == WSYNC_DELTA_SAME && !a->verify))
		return t->len == 0 && a->verify && XXH3_64bits(NULL, 0) != t->hash ?
		    wsync_err_set(err, EX_DATAERR, "%s: tensor %s: rebuilt data does not match "
		    "its hash (a damaged delta)", a->name, t->path) : 0;
	snprintf(what, sizeof(what), "tensor %s", t->path);
	a->data.name = a->name;
	a->data.err = err;
	s_zin_start(&a->data, d, t->data_len, what);
	XXH3_64bits_reset(&a->hash);
	a->wat = 0;
	a->wload = a->wdirty = 0;
	/* The first window, read in unless overwritten whole. */
	if (!bytes && wsync_read_at(a->out.fd, a->wbuf, n, t->off) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: tensor %s: cannot read: %s", a->name,
		    t->path, strerror(errno));
	a->wload = 1;
	if (t->enc == WSYNC_DELTA_SPARSE) {
		rc = s_over_sparse(a, t, err);
	} else if (t->enc != WSYNC_DELTA_SAME) {
		for (uint64_t at = 0; rc == 0 && at < t->len; at += CHUNK) {
			n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
			if (at > 0 && s_over_to(a, t, at, !bytes, err) < 0)
				return -1;
			a->wload = a->wdirty = 1;
			if (t->enc == WSYNC_DELTA_RAW)
				memcpy(a->wbuf, d + at, n);
			else if (t->enc == WSYNC_DELTA_WHOLE)
				rc = s_zin_read(&a->data, a->wbuf, n);
			else if ((rc = s_zin_read(&a->data, a->tmp, n)) == 0)
				for (size_t i = 0; i < n; i++)
					a->wbuf[i] ^= a->tmp[i];
		}
	}
	if (rc == 0 && t->enc != WSYNC_DELTA_SAME && t->enc != WSYNC_DELTA_RAW)
		rc = s_zin_end(&a->data);
	if (t->data_len > 0)
		wsync_pages_release_around(d, t->data_len);
	if (rc < 0 || s_over_to(a, t, t->len, 0, err) < 0)
		return -1;
	if (a->verify && XXH3_64bits_digest(&a->hash) != t->hash)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: rebuilt data does not "
		    "match its hash (a damaged delta or base)", a->name, t->path);
	return 0;
}

/* Writes H's tensor i with the worker's applier; a wsync_pool_fn. */
static int
s_apply_item(void *arg, size_t i, unsigned worker)
{
	s_apply_t *a = (s_apply_t *)arg + worker;
	const wsync_delta_tensor_t *t = &a->h->tensors[i];

	/* A tensor left out is a hole. */
	if (a->keep != NULL && t->len > 0 && !a->keep(a->keep_arg, t->path))
		return 0;
	return a->over ? s_over_tensor(a, t, &a->err) : s_apply_tensor(a, t, &a->err);
}

/* Tensor i's bytes, for the pool to hand out the largest first; a wsync_pool_size_fn. */
static uint64_t
s_apply_size(void *arg, size_t i)
{
	return ((s_apply_t *)arg)->h->tensors[i].len;
}

/*
 * Writes H: the skeleton first, on this thread, then the tensors, each
 * written at its offset by one of nworkers appliers (a[0] is this thread's).
 */
static int
s_apply(s_apply_t *a, unsigned nworkers, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;
	unsigned failed = 0;

	if (wsync_file_content_id(a->base) != h->base_content ||
	    strcmp(wsync_file_model(a->base), h->model) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the base is not the delta's "
		    "(content id %016llx of %s, the delta wants %016llx of %s)", a->name,
		    (unsigned long long)wsync_file_content_id(a->base), wsync_file_model(a->base),
		    (unsigned long long)h->base_content, h->model);
	if (s_apply_skeleton(a, err) < 0)
		return -1;
	if (wsync_pool_run_sized(h->ntensors, nworkers, s_apply_item, s_apply_size, a,
	    &failed) != 0) {
		*err = a[failed].err;
		return -1;
	}
	/*
	 * A tensor left out at the end is a hole the file must still reach over;
	 * an output that held more (a recycled file) ends where the head does.
	 */
	if (ftruncate(a->out.fd, (off_t)h->size) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot size the output: %s", a->name,
		    strerror(errno));
	return s_apply_check(a, err);
}

/*
 * An applier's buffers and zstd stream; the skeleton's writer (skel) holds
 * the output's buffer and a stream for the skeleton too, and an output that
 * is not mapped a piece of a tensor (tmp). -1 with err.
 */
static int
s_applier_open(s_apply_t *a, int skel, wsync_err_t *err)
{
	a->group = malloc((size_t)GROUP_MAX * 12);
	a->data.buf = malloc(CHUNK);
	a->data.z = ZSTD_createDCtx();
	if (a->out.map == NULL)
		a->tmp = malloc(CHUNK);
	if (a->over)
		a->wbuf = malloc(CHUNK);
	if (skel) {
		a->out.buf = malloc(OUT_BUF);
		a->skel.buf = malloc(CHUNK);
		a->skel.z = ZSTD_createDCtx();
	}
	if (a->group == NULL || a->data.buf == NULL || a->data.z == NULL ||
	    (a->out.map == NULL && a->tmp == NULL) || (a->over && a->wbuf == NULL) ||
	    (skel && (a->out.buf == NULL ||
	    a->skel.buf == NULL || a->skel.z == NULL)))
		return wsync_err_set(err, EX_OSERR, "%s: out of memory", a->name);
	ZSTD_DCtx_setParameter(a->data.z, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
	if (skel)
		ZSTD_DCtx_setParameter(a->skel.z, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
	return 0;
}

static void
s_applier_close(s_apply_t *a)
{
	ZSTD_freeDCtx(a->skel.z);
	ZSTD_freeDCtx(a->data.z);
	free(a->out.buf);
	free(a->tmp);
	free(a->wbuf);
	free(a->group);
	free(a->skel.buf);
	free(a->data.buf);
}

/*
 * The output mapped shared, for the appliers to write H's size through it,
 * each its own tensors; NULL where it is written with pwrite(2) instead (a
 * descriptor not open for reading, a file system that maps no file). Each
 * writer brings in its pages as it goes (s_out_populate), so that a page the
 * file system has no room for is an error, never a SIGBUS, and the pages of
 * a new file are made on all threads. A kernel without MADV_POPULATE_WRITE
 * has the file's space reserved here, whole, or the output is not mapped.
 */
static unsigned char *
s_out_map(int fd, uint64_t size)
{
	void *map;

	if (ftruncate(fd, (off_t)size) < 0 || (map = mmap(NULL, (size_t)size,
	    PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		return NULL;
#ifdef MADV_POPULATE_WRITE
	if (madvise(map, 1, MADV_POPULATE_WRITE) == 0)
		return map;
#endif
	if (fallocate(fd, 0, 0, (off_t)size) == 0)
		return map;
	munmap(map, (size_t)size);
	return NULL;
}

int
wsync_delta_apply(int base_fd, int delta_fd, int out_fd, const char *name,
    uint64_t *version, uint64_t *content, wsync_err_t *err)
{
	return wsync_delta_apply_some(base_fd, delta_fd, out_fd, name, NULL, NULL, version,
	    content, err);
}

/*
 * Over: whether the output (B, a->base) can be made into H in place: it is
 * the delta's base, of H's size, every tensor H takes from B where H has it,
 * and every page of it there (no hole to fill). 1 when it can.
 */
static int
s_over_fits(s_apply_t *a, int fd)
{
	const wsync_delta_header_t *h = a->h;
	struct stat st;
	wsync_err_t ignored;

	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != h->size ||
	    (uint64_t)st.st_blocks * 512 < h->size ||
	    wsync_file_content_id(a->base) != h->base_content ||
	    strcmp(wsync_file_model(a->base), h->model) != 0)
		return 0;
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_delta_tensor_t *t = &h->tensors[i];
		if (t->len > 0 && (t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR ||
		    t->enc == WSYNC_DELTA_SPARSE) && (t->base_off != t->off ||
		    s_base_at(a, t, &ignored) == NULL))
			return 0;
	}
	return 1;
}

/* wsync_delta_apply_some, and wsync_delta_apply_over when over (base_fd is out_fd). */
static int
s_apply_run(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, int over, int verify, uint64_t *version,
    uint64_t *content, wsync_err_t *err)
{
	s_apply_t a = { .out = { .fd = out_fd, .name = name, .err = err, .positioned = 1 },
	    .name = name, .keep = keep, .keep_arg = keep_arg, .over = over, .verify = verify },
	    *ws = NULL;
	wsync_delta_header_t h = { 0 };
	wsync_file_t *base = NULL;
	void *map = MAP_FAILED;
	unsigned char *doc = NULL;
	unsigned nworkers = 0, opened = 0;
	struct stat st, ost;
	char why[256];
	size_t end = 0;
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
	/* The header is read from an image: the encoded bytes stay out of memory till used. */
	if ((doc = wsync_msgpack_image(delta_fd, (size_t)st.st_size, &end, DOC_DEPTH,
	    DOC_OBJECTS, why, sizeof(why))) == NULL) {
		wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta: %s", name, why);
		goto out;
	}
	if (wsync_delta_read_header(doc, (size_t)st.st_size, name, &h, err) < 0 ||
	    (base = wsync_file_open_fd(base_fd, "base", err)) == NULL)
		goto out;
	a.h = &h;
	a.delta = map;
	a.base = base;
	if (over && !s_over_fits(&a, out_fd)) {
		rc = 2;
		goto out;
	}
	/* Every byte is written but the holes a selection leaves, which must read as zeros. */
	if (!over && (lseek(out_fd, 0, SEEK_CUR) != 0 || fstat(out_fd, &ost) < 0 ||
	    (keep != NULL && ost.st_size != 0))) {
		wsync_err_set(err, EX_SOFTWARE, "%s: the output must be %s", name, keep != NULL ?
		    "a new empty file" : "a file open at its start");
		goto out;
	}
	/* Reserves no memory: only the skeleton's pages are ever written. */
	a.image = mmap(NULL, (size_t)h.size, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a.image == MAP_FAILED) {
		a.image = NULL;
		wsync_err_set(err, EX_OSERR, "%s: cannot map %llu bytes for the head's image: %s",
		    name, (unsigned long long)h.size, strerror(errno));
		goto out;
	}
	if (keep == NULL && !over)
		a.out.map = s_out_map(out_fd, h.size);
	/*
	 * An applier per thread, a tensor each at a time, the largest first: each
	 * holds about 6 MiB, its zstd stream's window (4 MiB as wsync writes them)
	 * and a MiB of decoded bytes and a sparse group.
	 */
	nworkers = wsync_threads_for(h.size);
	if (nworkers > h.ntensors)
		nworkers = h.ntensors > 0 ? (unsigned)h.ntensors : 1;
	if ((ws = calloc(nworkers, sizeof(*ws))) == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	for (; opened < nworkers; opened++) {
		ws[opened] = a;
		ws[opened].out.err = &ws[opened].err;
		if (s_applier_open(&ws[opened], opened == 0, err) < 0) {
			opened++;
			goto out;
		}
	}
	ws[0].out.err = err;
	if (s_apply(ws, nworkers, err) < 0)
		goto out;
	if (version != NULL)
		*version = h.version;
	if (content != NULL)
		*content = h.content;
	rc = 0;
out:
	for (unsigned k = 0; k < opened; k++)
		s_applier_close(&ws[k]);
	free(ws);
	if (a.out.map != NULL)
		munmap(a.out.map, (size_t)h.size);
	if (a.image != NULL)
		munmap(a.image, (size_t)h.size);
	wsync_delta_header_free(&h);
	wsync_file_close(&base);
	if (map != MAP_FAILED)
		munmap(map, (size_t)st.st_size);
	if (doc != NULL)
		munmap(doc, (size_t)st.st_size);
	return rc;
}

int
wsync_delta_apply_some(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, uint64_t *version, uint64_t *content,
    wsync_err_t *err)
{
	return s_apply_run(base_fd, delta_fd, out_fd, name, keep, keep_arg, 0, 1, version,
	    content, err);
}

int
wsync_delta_apply_over(int fd, int delta_fd, int verify, const char *name, uint64_t *version,
    uint64_t *content, wsync_err_t *err)
{
	return s_apply_run(fd, delta_fd, fd, name, NULL, NULL, 1, verify, version, content, err);
}
