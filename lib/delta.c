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
 * then its tensors on all threads (pool.c) (the tensors first, then the
 * skeleton, when it applies a delta as it arrives: wsync_delta_apply_fed
 * walks the document an object at a time as its bytes come, mpcheck.c), each
 * in one pass a MiB at a time:
 * B's piece read into a buffer and hashed, patched there, hashed again while
 * in cache and written at its offset; then it parses what it wrote and checks it
 * against the delta. It parses an image of H rather than the file: the
 * skeleton's bytes at their offsets in an anonymous mapping whose tensor
 * data is never touched. Mapping the
 * file would bring in, with each bin header the parser reads, the page
 * cache's whole folio around it (a MiB or more on disk), one per tensor:
 * 64 MiB of RSS for a 1 GiB model of 64 tensors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <msgpack.h>
#include <pthread.h>
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
#include "kept_int.h"
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
 * Writes what is buffered: at the output's own offset, or at flushed when
 * positioned. Threads that write their tensors into one file take turns on
 * its inode's lock, and still write it faster than through a shared mapping,
 * whose pages cost this machine's kernel more to map and let go of than to
 * copy (a 1 GiB rebuild on 2 threads: 0.33 s written, 0.50 s mapped).
 */
int
delta_out_flush(delta_out_t *o, wsync_err_t *err)
{
	if (o->n > 0 && (o->positioned ? wsync_write_at(o->fd, o->buf, o->n, o->flushed) :
	    wsync_write_all(o->fd, o->buf, o->n)) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", o->name,
		    strerror(errno));
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

/* The top level's fields but the tensors, from their values v (none NULL), into h. */
static int
s_rd_top(s_in_t *in, const msgpack_object *const *v, wsync_delta_header_t *h)
{
	uint64_t format, *num[H_COUNT] = { &format, NULL, &h->base, &h->base_content,
		&h->version, &h->content, &h->size };

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
	if (h->size == 0 || h->size > (UINT64_C(1) << 62))
		return s_bad(in, "an absurd head size");
	return 0;
}

/* The tensors of n, in a head of which h holds the rest: a tensors array of n, allocated. */
static int
s_tensors_alloc(s_in_t *in, wsync_delta_header_t *h, uint64_t n)
{
	if (n > WSYNC_MAX_TENSORS)
		return s_bad(in, "more tensors than a model may have");
	h->ntensors = (size_t)n;
	if ((h->tensors = calloc(h->ntensors + 1, sizeof(*h->tensors))) == NULL)
		return wsync_err_set(in->err, EX_OSERR, "%s: out of memory", in->name);
	return 0;
}

/*
 * What the skeleton must expand to, data being the bytes of the tensors' data:
 * no more than a header of this many tensors and the largest meta hold, so a
 * small frame cannot fill a disk.
 */
static int
s_check_skeleton(s_in_t *in, const wsync_delta_header_t *h, uint64_t data)
{
	if (h->size - data > SKELETON_FIXED_MAX + h->ntensors * SKELETON_TENSOR_MAX)
		return wsync_err_set(in->err, EX_DATAERR, "%s: a head of %llu bytes outside its "
		    "%zu tensors' data, more than any header", in->name,
		    (unsigned long long)(h->size - data), h->ntensors);
	return 0;
}

/* The top-level map, decoded into h. */
static int
s_rd_root(s_in_t *in, const msgpack_object *o, wsync_delta_header_t *h)
{
	const msgpack_object *v[H_COUNT];
	const msgpack_object_array *ts;

	if (o->type != MSGPACK_OBJECT_MAP)
		return s_bad(in, "not a map");
	if (s_fields(in, &o->via.map, s_header_keys, H_COUNT, v, "the top level") < 0)
		return -1;
	for (int k = 0; k < H_COUNT; k++)
		if (v[k] == NULL)
			return wsync_err_set(in->err, EX_DATAERR, "%s: not a wsync delta: no "
			    "\"%s\"", in->name, s_header_keys[k]);
	if (s_rd_top(in, v, h) < 0)
		return -1;
	if (v[H_TENSORS]->type != MSGPACK_OBJECT_ARRAY)
		return s_bad(in, "\"tensors\" is not an array");
	ts = &v[H_TENSORS]->via.array;
	if (s_tensors_alloc(in, h, ts->size) < 0)
		return -1;
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
	for (size_t i = 0; i < h->ntensors; i++) {
		if (s_check_tensor(&in, h, &h->tensors[i], &prev_end) < 0)
			return -1;
		data += h->tensors[i].len;
	}
	return s_check_skeleton(&in, h, data);
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
	int base_fd;                    /* B's file, read at offsets; -1: B is in memory */
	const unsigned char *base_map;  /* B's file kept mapped (kept_int.h), or NULL */
	unsigned char *out_map;         /* H's file kept mapped: written by memcpy; or NULL */
	wsync_kept_map_t *held_base, *held_out;  /* those mappings, held by this apply */
	uint64_t base_off;              /* where the tensor read from B starts there */
	s_zin_t skel, data;
	unsigned char *image;           /* H's size, anonymous: the skeleton where H has it */
	unsigned char *tmp;             /* CHUNK bytes: a tensor's piece (the sparse form's window) */
	unsigned char *win;             /* the sparse form's window: a->tmp, or H's mapping (s_piece) */
	unsigned char *group;           /* a sparse group */
	const char *name;
	XXH3_state_t hash;              /* of the tensor written */
	XXH3_state_t bhash;             /* of B's tensor read, when hash_base */
	int hash_base;
	wsync_delta_keep_fn keep;       /* NULL: every tensor is written */
	void *keep_arg;
	struct wsync_delta_feed *feed;  /* the delta still arriving, or NULL */
	wsync_err_t err;                /* this thread's, when it applies tensors */
} s_apply_t;

static int s_feed_cut(struct wsync_delta_feed *f);

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
 * Bytes [at, at + n) of t, made at p (s_piece): hashed into hash (unless
 * NULL) while in cache, written (already in place where H is kept mapped).
 */
static int
s_emit(s_apply_t *a, const wsync_delta_tensor_t *t, uint64_t at, const unsigned char *p,
    size_t n, XXH3_state_t *hash, wsync_err_t *err)
{
	/* A delta that stopped arriving stops its apply between pieces, not at its end. */
	if (a->feed != NULL && s_feed_cut(a->feed))
		return wsync_err_set(err, EX_TEMPFAIL, "%s: the delta stopped arriving", a->name);
	if (hash != NULL)
		wsync_hash_update(hash, p, n);
	/* Kept mapped: made where it belongs already (s_piece). */
	if (a->out_map != NULL)
		return 0;
	if (wsync_write_at(a->out.fd, p, n, t->off + at) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", a->name,
		    strerror(errno));
	return 0;
}

/* Where bytes [at, ...) of H's tensor t are made: in place when H is kept mapped, else a->tmp. */
static unsigned char *
s_piece(s_apply_t *a, const wsync_delta_tensor_t *t, uint64_t at)
{
	return a->out_map != NULL ? a->out_map + t->off + at : a->tmp;
}

/* B's bytes [p, p + n) are used: their pages let go when B is a mapping of its own. */
static void
s_base_done(const s_apply_t *a, const unsigned char *p, size_t n)
{
	if (a->base_map == NULL)
		delta_release(a->base, p, n);
}

/*
 * Copies bytes [at, at + n) of B's tensor b to p, hashing them on the way
 * when a->hash_base (s_apply_tensor checks the hash): read from B's file where it
 * is one (a->base_fd, the tensor at a->base_off), else from memory. Read,
 * not through B's mapping: mapping a page and letting it go costs this
 * kernel more than copying it. -1 with err.
 */
static int
s_take_base(s_apply_t *a, unsigned char *p, const unsigned char *b, uint64_t at, size_t n,
    wsync_err_t *err)
{
	if (a->base_fd >= 0) {
		if (wsync_read_at(a->base_fd, p, n, a->base_off + at) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot read the base: %s", a->name,
			    strerror(errno));
	} else {
		memcpy(p, b + at, n);
		s_base_done(a, b + at, n);
	}
	if (a->hash_base)
		wsync_hash_update(&a->bhash, p, n);
	return 0;
}

/*
 * Whether B's tensor bt (its bytes at b) does not match its hash: read and
 * hashed again, only once H's did not, to say which of the two was damaged.
 * 1 damaged, 0 not, -1 with err when it cannot be read.
 */
static int
s_base_damaged(s_apply_t *a, const wsync_tensor_t *bt, const unsigned char *b,
    wsync_err_t *err)
{
	XXH3_64bits_reset(&a->bhash);
	a->hash_base = 1;
	for (uint64_t at = 0; at < bt->nbytes; at += CHUNK) {
		size_t n = bt->nbytes - at < CHUNK ? (size_t)(bt->nbytes - at) : CHUNK;
		if (s_take_base(a, a->tmp, b, at, n, err) < 0)
			return -1;
	}
	return XXH3_64bits_digest(&a->bhash) != bt->hash;
}

/* The same form: B's bytes, whose hash is the tensor's, so hashed once. */
static int
s_apply_same(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		unsigned char *p = s_piece(a, t, at);
		if (s_take_base(a, p, b, at, n, err) < 0 || s_emit(a, t, at, p, n, NULL, err) < 0)
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
		unsigned char *d = s_piece(a, t, at);
		/* Dense changes, rare: B read through its mapping, a buffer fewer. */
		if (s_zin_read(&a->data, d, n) < 0)
			return -1;
		for (size_t i = 0; i < n; i++)
			d[i] ^= b[at + i];
		s_base_done(a, b + at, n);
		if (s_emit(a, t, at, d, n, &a->hash, err) < 0)
			return -1;
	}
	return s_zin_end(&a->data);
}

/* Loads the window of t at element win of n: B's bytes, at a->win. */
static int
s_window_load(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *b,
    uint64_t win, uint64_t n, unsigned w, wsync_err_t *err)
{
	uint64_t per = CHUNK / w;
	size_t k = (size_t)(n - win < per ? n - win : per) * w;

	a->win = s_piece(a, t, win * w);
	return s_take_base(a, a->win, b, win * w, k, err);
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

/*
 * The sparse form (s_encode_sparse): B's bytes with the changed elements
 * xored, built a window of CHUNK bytes at a time where the output has them.
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
	if (s_window_load(a, t, b, 0, n, w, err) < 0)
		return -1;
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
			    s_sparse_flush(a, t, b, &win, e - (e - win) % per, n, w, err) < 0)
				return -1;
			for (unsigned j = 0; j < w; j++)
				a->win[(e - win) * w + j] ^= g[(4 + j) * (size_t)c];
			next = e + 1;
		}
	}
	return s_sparse_flush(a, t, b, &win, n, n, w, err);
}

/* The whole and raw forms: H's bytes, decompressed or as they are in the delta. */
static int
s_apply_bytes(s_apply_t *a, const wsync_delta_tensor_t *t, const unsigned char *d,
    wsync_err_t *err)
{
	for (uint64_t at = 0; at < t->len; at += CHUNK) {
		size_t n = t->len - at < CHUNK ? (size_t)(t->len - at) : CHUNK;
		unsigned char *p = s_piece(a, t, at);
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
	int rc, damaged;

	snprintf(what, sizeof(what), "tensor %s", t->path);
	if (t->enc == WSYNC_DELTA_SAME || t->enc == WSYNC_DELTA_XOR ||
	    t->enc == WSYNC_DELTA_SPARSE) {
		if ((bt = s_base_at(a, t, err)) == NULL)
			return -1;
		b = a->base_map != NULL ? a->base_map + bt->offset : bt->data;
		a->base_off = bt->offset;
	}
	a->data.name = a->name;
	a->data.err = err;
	s_zin_start(&a->data, d, t->data_len, what);
	XXH3_64bits_reset(&a->hash);
	XXH3_64bits_reset(&a->bhash);
	/*
	 * B's bytes are hashed as they are read only where they are H's: a
	 * damaged B makes H's hash differ too, and B is hashed then, to say so.
	 */
	a->hash_base = t->enc == WSYNC_DELTA_SAME;
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
	made = XXH3_64bits_digest(t->enc == WSYNC_DELTA_SAME ? &a->bhash : &a->hash);
	damaged = bt != NULL && t->enc == WSYNC_DELTA_SAME && made != bt->hash;
	if (bt != NULL && t->enc != WSYNC_DELTA_SAME && made != t->hash &&
	    (damaged = s_base_damaged(a, bt, b, err)) < 0)
		return -1;
	if (damaged)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the base's %s does not "
		    "match its hash (a damaged base)", a->name, t->path, bt->path);
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

/* Writes H's tensor i with the worker's applier; a wsync_pool_fn. */
static int
s_apply_item(void *arg, size_t i, unsigned worker)
{
	s_apply_t *a = (s_apply_t *)arg + worker;
	const wsync_delta_tensor_t *t = &a->h->tensors[i];

	/* A tensor left out is a hole. */
	if (a->keep != NULL && t->len > 0 && !a->keep(a->keep_arg, t->path))
		return 0;
	return s_apply_tensor(a, t, &a->err);
}

/* Tensor i's bytes, for the pool to hand out the largest first; a wsync_pool_size_fn. */
static uint64_t
s_apply_size(void *arg, size_t i)
{
	return ((s_apply_t *)arg)->h->tensors[i].len;
}

/* Whether a's base is the one the delta was made from. */
static int
s_apply_base(s_apply_t *a, wsync_err_t *err)
{
	const wsync_delta_header_t *h = a->h;

	if (wsync_file_content_id(a->base) != h->base_content ||
	    strcmp(wsync_file_model(a->base), h->model) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the base is not the delta's "
		    "(content id %016llx of %s, the delta wants %016llx of %s)", a->name,
		    (unsigned long long)wsync_file_content_id(a->base), wsync_file_model(a->base),
		    (unsigned long long)h->base_content, h->model);
	return 0;
}

/* Sizes the output and checks it, once the skeleton and the tensors are written. */
static int
s_apply_finish(s_apply_t *a, wsync_err_t *err)
{
	/*
	 * A tensor left out at the end is a hole the file must still reach over;
	 * an output that held more (a recycled file) ends where the head does.
	 */
	if (ftruncate(a->out.fd, (off_t)a->h->size) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot size the output: %s", a->name,
		    strerror(errno));
	return s_apply_check(a, err);
}

/*
 * Writes H: the skeleton first, on this thread, then the tensors, each
 * written at its offset by one of nworkers appliers (a[0] is this thread's).
 */
static int
s_apply(s_apply_t *a, unsigned nworkers, wsync_err_t *err)
{
	unsigned failed = 0;

	if (s_apply_base(a, err) < 0 || s_apply_skeleton(a, err) < 0)
		return -1;
	if (wsync_pool_run_sized(a->h->ntensors, nworkers, s_apply_item, s_apply_size, a,
	    &failed) != 0) {
		*err = a[failed].err;
		return -1;
	}
	return s_apply_finish(a, err);
}

/*
 * An applier's buffers and zstd stream, and a piece of a tensor (tmp); the
 * skeleton's writer (skel) holds the output's buffer and a stream for the
 * skeleton too. -1 with err.
 */
static int
s_applier_open(s_apply_t *a, int skel, wsync_err_t *err)
{
	a->group = malloc((size_t)GROUP_MAX * 12);
	a->data.buf = wsync_io_buffer(CHUNK);
	a->data.z = ZSTD_createDCtx();
	a->tmp = wsync_io_buffer(CHUNK);
	if (skel) {
		a->out.buf = wsync_io_buffer(OUT_BUF);
		a->skel.buf = wsync_io_buffer(CHUNK);
		a->skel.z = ZSTD_createDCtx();
	}
	if (a->group == NULL || a->data.buf == NULL || a->data.z == NULL ||
	    a->tmp == NULL || (skel && (a->out.buf == NULL ||
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
	free(a->group);
	free(a->skel.buf);
	free(a->data.buf);
}

/* A delta read for applying: mapped, its header parsed from an image of it. */
typedef struct s_din {
	void *map;
	unsigned char *doc;
	size_t size;
	wsync_delta_header_t h;
} s_din_t;

/* Maps the delta in delta_fd and reads its header into d; -1 with err. */
static int
s_din_open(s_din_t *d, int delta_fd, const char *name, wsync_err_t *err)
{
	struct stat st;
	char why[256];
	size_t end = 0;

	*d = (s_din_t){ .map = MAP_FAILED };
	if (fstat(delta_fd, &st) < 0 || !S_ISREG(st.st_mode))
		return wsync_err_set(err, EX_IOERR, "%s: the delta is not a regular file", name);
	if (st.st_size == 0)
		return wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta (it is empty)", name);
	d->size = (size_t)st.st_size;
	if ((d->map = mmap(NULL, d->size, PROT_READ, MAP_SHARED, delta_fd, 0)) == MAP_FAILED)
		return wsync_err_set(err, EX_IOERR, "%s: cannot map the delta: %s", name,
		    strerror(errno));
	/* The header is read from an image: the encoded bytes stay out of memory till used. */
	if ((d->doc = wsync_msgpack_image(delta_fd, d->size, &end, DOC_DEPTH, DOC_OBJECTS, why,
	    sizeof(why))) == NULL)
		return wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta: %s", name, why);
	return wsync_delta_read_header(d->doc, d->size, name, &d->h, err);
}

static void
s_din_close(s_din_t *d)
{
	wsync_delta_header_free(&d->h);
	if (d->map != MAP_FAILED)
		munmap(d->map, d->size);
	if (d->doc != NULL)
		munmap(d->doc, d->size);
}

int
wsync_delta_size_check(uint64_t size, uint64_t want, const char *name, const char *said,
    wsync_err_t *err)
{
	if (size == want)
		return 0;
	return wsync_err_set(err, EX_DATAERR, "%s: it rebuilds a version of %" PRIu64 " bytes, "
	    "where %s %" PRIu64, name, size, said, want);
}

/* H's size checked against the one announced (0: any), before anything is written. */
static int
s_expected(uint64_t expect, uint64_t size, const char *name, wsync_err_t *err)
{
	return expect == 0 ? 0 : wsync_delta_size_check(size, expect, name,
	    "the version announced has", err);
}

int
wsync_delta_head_size(int delta_fd, const char *name, uint64_t *size, wsync_err_t *err)
{
	s_din_t d;
	int rc = s_din_open(&d, delta_fd, name, err);

	if (rc == 0)
		*size = d.h.size;
	s_din_close(&d);
	return rc;
}

/* An anonymous image of H's size for a's skeleton, reserving no memory; -1 with err. */
static int
s_image_map(s_apply_t *a, wsync_err_t *err)
{
	a->image = mmap(NULL, (size_t)a->h->size, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->image != MAP_FAILED)
		return 0;
	a->image = NULL;
	return wsync_err_set(err, EX_OSERR, "%s: cannot map %llu bytes for the head's image: %s",
	    a->name, (unsigned long long)a->h->size, strerror(errno));
}

/*
 * The appliers of H (header h) from the delta mapped at delta into out_fd,
 * base_fd opened as *base: an applier per thread, a tensor each at a time,
 * each holding about 6 MiB, its zstd stream's window (4 MiB as wsync writes
 * them) and a MiB of decoded bytes and a sparse group. a is their model, with
 * H's image unless image is 0 (reserving no memory: only the skeleton's pages
 * are ever written; the first applier's alone is used). threads: how many at
 * most (0: wsync_threads_for H's size). o->kept (unless NULL): B read
 * through its kept mapping where there is one, H written through one.
 * -1 with err; s_appliers_close either way.
 */
static int
s_appliers_open(s_apply_t *a, s_apply_t **ws, unsigned *nworkers, wsync_file_t **base,
    int base_fd, wsync_delta_dest_t *o, const wsync_delta_header_t *h,
    const void *delta, const char *name, wsync_delta_keep_fn keep, void *keep_arg, int image,
    unsigned threads, wsync_err_t *err)
{
	struct stat ost;
	unsigned n;
	int out_fd = o->fd;

	*a = (s_apply_t){ .out = { .fd = out_fd, .name = name, .err = err, .positioned = 1 },
	    .name = name, .keep = keep, .keep_arg = keep_arg, .h = h, .delta = delta };
	*ws = NULL;
	*nworkers = 0;
	if ((*base = wsync_file_open_fd(base_fd, "base", err)) == NULL)
		return -1;
	a->base = *base;
	a->base_fd = (*base)->mem == WSYNC_MEM_MMAP ? base_fd : -1;
	if ((a->base_map = wsync_kept_in(o->kept, base_fd, &a->held_base)) != NULL)
		a->base_fd = -1;
	/* A selection's holes are not written: its file is never kept mapped. */
	if (keep == NULL)
		a->out_map = wsync_kept_out(o->kept, out_fd, o->path, h->size, &a->held_out);
	o->base_kept = a->base_map != NULL;
	o->head_kept = a->out_map != NULL;
	/* Every byte is written but the holes a selection leaves, which must read as zeros. */
	if (lseek(out_fd, 0, SEEK_CUR) != 0 || fstat(out_fd, &ost) < 0 ||
	    (keep != NULL && ost.st_size != 0))
		return wsync_err_set(err, EX_SOFTWARE, "%s: the output must be %s", name,
		    keep != NULL ? "a new empty file" : "a file open at its start");
	if (image && s_image_map(a, err) < 0)
		return -1;
	n = threads > 0 ? threads : wsync_threads_for(h->size);
	if (n > h->ntensors)
		n = h->ntensors > 0 ? (unsigned)h->ntensors : 1;
	if ((*ws = calloc(n, sizeof(**ws))) == NULL)
		return wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
	for (; *nworkers < n; ) {
		s_apply_t *w = &(*ws)[*nworkers];
		*w = *a;
		w->out.err = *nworkers == 0 ? err : &w->err;
		++*nworkers;
		if (s_applier_open(w, *nworkers == 1, err) < 0)
			return -1;
	}
	return 0;
}

static void
s_appliers_close(s_apply_t *a, s_apply_t *ws, unsigned nworkers, wsync_file_t *base)
{
	for (unsigned k = 0; k < nworkers; k++)
		s_applier_close(&ws[k]);
	free(ws);
	wsync_kept_release(a->held_base);
	wsync_kept_release(a->held_out);
	if (a->image != NULL)
		munmap(a->image, (size_t)a->h->size);
	wsync_file_close(&base);
}

/*
 * wsync_delta_apply_some into o, of a version that came in parts parts (0 or
 * 1: not in parts), *threads (unless NULL) the threads it ran on.
 */
static int
s_apply_some(int base_fd, int delta_fd, wsync_delta_dest_t *o, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, uint64_t expect, unsigned parts,
    unsigned *threads, uint64_t *version, uint64_t *content, wsync_err_t *err)
{
	s_apply_t a = { 0 }, *ws = NULL;
	s_din_t d;
	wsync_file_t *base = NULL;
	unsigned nworkers = 0;
	int rc = -1;

	if (s_din_open(&d, delta_fd, name, err) < 0 || s_expected(expect, d.h.size, name, err) < 0)
		goto out;
	if (s_appliers_open(&a, &ws, &nworkers, &base, base_fd, o, &d.h, d.map, name, keep,
	    keep_arg, 1, parts > 1 ? wsync_threads_parts(d.h.size, parts) : 0, err) < 0 ||
	    s_apply(ws, nworkers, err) < 0)
		goto out;
	if (threads != NULL)
		*threads = nworkers;
	if (version != NULL)
		*version = d.h.version;
	if (content != NULL)
		*content = d.h.content;
	rc = 0;
out:
	s_appliers_close(&a, ws, nworkers, base);
	s_din_close(&d);
	return rc;
}

int
wsync_delta_apply(int base_fd, int delta_fd, int out_fd, const char *name,
    uint64_t *version, uint64_t *content, wsync_err_t *err)
{
	wsync_delta_dest_t o = { .fd = out_fd };

	return wsync_delta_apply_into(base_fd, delta_fd, &o, name, version, content, err);
}

int
wsync_delta_apply_into(int base_fd, int delta_fd, wsync_delta_dest_t *o,
    const char *name, uint64_t *version, uint64_t *content, wsync_err_t *err)
{
	return s_apply_some(base_fd, delta_fd, o, name, NULL, NULL, 0, 0, NULL, version, content,
	    err);
}

int
wsync_delta_apply_some(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, uint64_t expect, uint64_t *version,
    uint64_t *content, wsync_err_t *err)
{
	wsync_delta_dest_t o = { .fd = out_fd };

	return s_apply_some(base_fd, delta_fd, &o, name, keep, keep_arg, expect, 0, NULL,
	    version, content, err);
}

int
wsync_delta_apply_parts(int base_fd, int delta_fd, wsync_delta_dest_t *o,
    const char *name, unsigned parts, unsigned *threads, wsync_err_t *err)
{
	return s_apply_some(base_fd, delta_fd, o, name, NULL, NULL, 0, parts, threads, NULL,
	    NULL, err);
}

/* ---- a delta applied while it arrives ---- */

struct wsync_delta_feed {
	pthread_mutex_t lock;
	pthread_cond_t more;            /* have grew, or the feed stopped */
	uint64_t size, have;            /* bytes [0, have) are in the file */
	int stopped;
	int refused;                    /* the apply refused the delta: nothing more is awaited */
	size_t applied;
	uint64_t expect;                /* H's size, as announced (0: any) */
};

wsync_delta_feed_t *
wsync_delta_feed_new(uint64_t size)
{
	wsync_delta_feed_t *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->more, NULL);
	f->size = size;
	return f;
}

void
wsync_delta_feed_expect(wsync_delta_feed_t *f, uint64_t size)
{
	f->expect = size;
}

void
wsync_delta_feed_arrived(wsync_delta_feed_t *f, uint64_t upto)
{
	pthread_mutex_lock(&f->lock);
	if (upto > f->have) {
		f->have = upto < f->size ? upto : f->size;
		pthread_cond_broadcast(&f->more);
	}
	pthread_mutex_unlock(&f->lock);
}

void
wsync_delta_feed_stop(wsync_delta_feed_t *f)
{
	pthread_mutex_lock(&f->lock);
	f->stopped = 1;
	pthread_cond_broadcast(&f->more);
	pthread_mutex_unlock(&f->lock);
}

int
wsync_delta_feed_stopped(wsync_delta_feed_t *f)
{
	int stopped;

	pthread_mutex_lock(&f->lock);
	stopped = f->stopped || f->refused;
	pthread_mutex_unlock(&f->lock);
	return stopped;
}

size_t
wsync_delta_feed_applied(wsync_delta_feed_t *f)
{
	size_t n;

	pthread_mutex_lock(&f->lock);
	n = f->applied;
	pthread_mutex_unlock(&f->lock);
	return n;
}

void
wsync_delta_feed_free(wsync_delta_feed_t **f)
{
	if (*f == NULL)
		return;
	pthread_cond_destroy(&(*f)->more);
	pthread_mutex_destroy(&(*f)->lock);
	free(*f);
	*f = NULL;
}

/*
 * Whether the feed stopped before the whole delta arrived. Not when the apply
 * refused it: the tensors below the refused one finish, so that the pool
 * reports the lowest failure, the refusal, not a cut.
 */
static int
s_feed_cut(wsync_delta_feed_t *f)
{
	int cut;

	pthread_mutex_lock(&f->lock);
	cut = f->stopped && f->have < f->size;
	pthread_mutex_unlock(&f->lock);
	return cut;
}

/* Waits until upto bytes have arrived or the feed stops; the bytes arrived. A wsync_mp_wait_fn. */
static uint64_t
s_feed_wait(void *arg, uint64_t upto)
{
	wsync_delta_feed_t *f = arg;
	uint64_t have;

	pthread_mutex_lock(&f->lock);
	while (f->have < upto && !f->stopped && !f->refused)
		pthread_cond_wait(&f->more, &f->lock);
	have = f->have;
	pthread_mutex_unlock(&f->lock);
	return have;
}

/* A fed apply: the walk of the delta as it arrives, and the tensors read from it so far. */
typedef struct s_fed {
	wsync_delta_feed_t *feed;
	wsync_mpwalk_t *walk;
	s_in_t in;                      /* in.buf: the walk's image */
	wsync_delta_header_t *h;        /* top level read; tensors [0, read) */
	pthread_mutex_t lock;           /* guards read, failed and parsing */
	size_t off;                     /* where the next entry starts */
	size_t read;
	uint64_t prev_end, data;
	int failed;                     /* the walk failed: err says why */
	wsync_err_t err;
	int parsing;                    /* a worker reads an entry, the lock let go */
	pthread_cond_t parsed;          /* it read one, or failed */
	s_apply_t *ws;
} s_fed_t;

/* The walk's why, as the delta's error: 75 when its bytes stopped coming. */
static int
s_fed_bad(s_fed_t *s, wsync_err_t *err, const char *why)
{
	if (errno == EPIPE)
		return wsync_err_set(err, EX_TEMPFAIL, "%s: the delta stopped arriving", s->in.name);
	return wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta: %s", s->in.name, why);
}

/*
 * Walks the object at off, nested at most depth deep, as it arrives, and
 * unpacks what (a key, a value...) from the image into o, which the caller
 * destroys either way; *end is where it ends. -1 with s->in.err.
 */
static int
s_fed_object(s_fed_t *s, size_t off, int depth, size_t *end, msgpack_unpacked *o,
    const char *what)
{
	char why[256];
	size_t at = 0;

	msgpack_unpacked_init(o);
	if (wsync_mpwalk_object(s->walk, off, end, depth, DOC_OBJECTS, why, sizeof(why)) < 0)
		return s_fed_bad(s, s->in.err, why);
	if (msgpack_unpack_next(o, s->in.buf + off, *end - off, &at) != MSGPACK_UNPACK_SUCCESS) {
		snprintf(why, sizeof(why), "msgpack-c cannot unpack %s", what);
		return s_bad(&s->in, why);
	}
	return 0;
}

/*
 * Reads the next tensor entry (s->read), once it has arrived; -1 with s->err.
 * Only the worker that is parsing calls it: the walk, the entries and what
 * follows them are its alone till it is done.
 */
static int
s_fed_entry(s_fed_t *s)
{
	wsync_delta_tensor_t *t = &s->h->tensors[s->read];
	msgpack_unpacked o;
	size_t end;
	int rc;

	s->in.err = &s->err;
	rc = s_fed_object(s, s->off, DOC_DEPTH - 2, &end, &o, "a tensor entry");
	/* Its data too: a walk reads headers, not what they announce. */
	if (rc == 0 && s_feed_wait(s->feed, end) < end) {
		errno = EPIPE;
		rc = s_fed_bad(s, &s->err, "");
	}
	if (rc == 0)
		rc = s_rd_tensor(&s->in, &o.data, t);
	msgpack_unpacked_destroy(&o);
	if (rc < 0 || s_check_tensor(&s->in, s->h, t, &s->prev_end) < 0)
		return -1;
	s->data += t->len;
	s->off = end;
	return 0;
}

/* Writes H's tensor i once its entry has arrived; a wsync_pool_fn. */
static int
s_fed_item(void *arg, size_t i, unsigned worker)
{
	s_fed_t *s = arg;
	int rc = 0;

	/* One worker reads entries, waiting for their bytes; the others apply those read. */
	pthread_mutex_lock(&s->lock);
	while (s->read <= i && !s->failed) {
		if (s->parsing) {
			pthread_cond_wait(&s->parsed, &s->lock);
			continue;
		}
		s->parsing = 1;
		pthread_mutex_unlock(&s->lock);
		rc = s_fed_entry(s);
		pthread_mutex_lock(&s->lock);
		s->parsing = 0;
		if (rc < 0)
			s->failed = 1;
		else
			s->read++;
		rc = 0;
		pthread_cond_broadcast(&s->parsed);
	}
	if (s->read <= i) {
		s->ws[worker].err = s->err;
		rc = 1;
	}
	pthread_mutex_unlock(&s->lock);
	if (rc != 0)
		return 1;
	if (s_apply_item(s->ws, i, worker) != 0) {
		/*
		 * Refused: no later entry is worth waiting for. The worker reading one
		 * and those waiting to stop (their failures come after this one);
		 * the transfer is told (wsync_delta_feed_stopped).
		 */
		pthread_mutex_lock(&s->feed->lock);
		s->feed->refused = 1;
		pthread_cond_broadcast(&s->feed->more);
		pthread_mutex_unlock(&s->feed->lock);
		pthread_mutex_lock(&s->lock);
		s->failed = 1;
		pthread_cond_broadcast(&s->parsed);
		pthread_mutex_unlock(&s->lock);
		return 1;
	}
	pthread_mutex_lock(&s->feed->lock);
	s->feed->applied++;
	pthread_mutex_unlock(&s->feed->lock);
	return 0;
}

/*
 * Reads the top level up to the tensors array, as it arrives: 0 with the
 * header in h (tensors allocated, none read) and s->off at the first entry,
 * 1 when some key comes after the tensors, -1 with err.
 */
static int
s_fed_top(s_fed_t *s, wsync_err_t *err)
{
	msgpack_unpacked vals[H_COUNT];
	const msgpack_object *v[H_COUNT] = { 0 };
	uint64_t pairs, n;
	size_t off, end;
	char why[256];
	int rc = -1, k = 0, nvals = 0, in_order;

	if (wsync_mpwalk_open(s->walk, 0, 1, &pairs, &off, why, sizeof(why)) < 0)
		return errno == EPIPE ? s_fed_bad(s, err, why) : s_bad(&s->in, "not a map");
	for (uint64_t i = 0; i < pairs; i++, off = end) {
		msgpack_unpacked key;
		rc = s_fed_object(s, off, 0, &end, &key, "a key");
		for (k = 0; rc == 0 && k < H_COUNT && !s_is(&key.data, s_header_keys[k]); k++)
			;
		msgpack_unpacked_destroy(&key);
		if (rc < 0)
			goto out;
		off = end;
		/* Unknown or repeated: s_fields says which, once the whole has arrived. */
		if (k == H_TENSORS || k == H_COUNT || v[k] != NULL)
			break;
		rc = s_fed_object(s, off, DOC_DEPTH - 1, &end, &vals[nvals], "a value");
		v[k] = &vals[nvals++].data;
		if (rc < 0)
			goto out;
	}
	/* The tensors last, after every other key: else the delta is applied once it is all in. */
	in_order = k == H_TENSORS && pairs == H_COUNT;
	for (int j = 0; j < H_TENSORS; j++)
		in_order = in_order && v[j] != NULL;
	if (!in_order) {
		rc = 1;
		goto out;
	}
	rc = -1;
	if (s_rd_top(&s->in, v, s->h) < 0)
		goto out;
	if (wsync_mpwalk_open(s->walk, off, 0, &n, &s->off, why, sizeof(why)) < 0) {
		if (errno == EPIPE)
			s_fed_bad(s, err, why);
		else
			s_bad(&s->in, "\"tensors\" is not an array");
		goto out;
	}
	rc = s_tensors_alloc(&s->in, s->h, n);
out:
	for (int j = 0; j < nvals; j++)
		msgpack_unpacked_destroy(&vals[j]);
	return rc;
}

int
wsync_delta_apply_fed(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, wsync_delta_feed_t *feed, uint64_t *version,
    uint64_t *content, wsync_err_t *err)
{
	s_fed_t s = { .feed = feed, .in = { .name = name, .err = err } };
	wsync_delta_dest_t dest = { .fd = out_fd };
	wsync_delta_header_t h = { 0 };
	s_apply_t a = { 0 }, *ws = NULL;
	wsync_file_t *base = NULL;
	unsigned nworkers = 0, failed = 0;
	void *map = MAP_FAILED;
	char why[256];
	int rc = -1, top;

	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.parsed, NULL);
	if ((s.walk = wsync_mpwalk_new(delta_fd, (size_t)feed->size, s_feed_wait, feed, why,
	    sizeof(why))) == NULL) {
		s_bad(&s.in, why);
		goto out;
	}
	s.in.buf = (const char *)wsync_mpwalk_image(s.walk);
	s.h = &h;
	if ((top = s_fed_top(&s, err)) < 0)
		goto out;
	if (top == 1) {
		/* Another writer's order: the whole delta first. */
		if (s_feed_wait(feed, feed->size) < feed->size) {
			wsync_err_set(err, EX_TEMPFAIL, "%s: the delta stopped arriving", name);
			goto out;
		}
		rc = wsync_delta_apply_some(base_fd, delta_fd, out_fd, name, keep, keep_arg,
		    feed->expect, version, content, err);
		goto out;
	}
	/* Nothing is written of a head of another size than announced. */
	if (s_expected(feed->expect, h.size, name, err) < 0)
		goto out;
	if ((map = mmap(NULL, (size_t)feed->size, PROT_READ, MAP_SHARED, delta_fd, 0)) ==
	    MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "%s: cannot map the delta: %s", name, strerror(errno));
		goto out;
	}
	/* H's image once its entries have checked its size, as the whole delta's header does. */
	if (s_appliers_open(&a, &ws, &nworkers, &base, base_fd, &dest, &h, map, name, keep,
	    keep_arg, 0, 0, err) < 0 || s_apply_base(ws, err) < 0)
		goto out;
	for (unsigned k = 0; k < nworkers; k++)
		ws[k].feed = feed;
	s.ws = ws;
	if (wsync_pool_run(h.ntensors, nworkers, s_fed_item, &s, &failed) != 0) {
		*err = ws[failed].err;
		goto out;
	}
	/* Nothing after the last entry; then the bytes around the tensors. */
	if (s.off != feed->size) {
		wsync_err_set(err, EX_DATAERR, "%s: not a wsync delta: trailing bytes after the "
		    "document", name);
		goto out;
	}
	s.in.err = err;
	if (s_check_skeleton(&s.in, &h, s.data) < 0 || s_image_map(&a, err) < 0)
		goto out;
	ws[0].image = a.image;
	if (s_apply_skeleton(ws, err) < 0 || s_apply_finish(ws, err) < 0)
		goto out;
	if (version != NULL)
		*version = h.version;
	if (content != NULL)
		*content = h.content;
	rc = 0;
out:
	s_appliers_close(&a, ws, nworkers, base);
	if (map != MAP_FAILED)
		munmap(map, (size_t)feed->size);
	wsync_delta_header_free(&h);
	wsync_mpwalk_free(&s.walk);
	pthread_cond_destroy(&s.parsed);
	pthread_mutex_destroy(&s.lock);
	return rc;
}

wsync_file_t *
wsync_delta_head(int delta_fd, const char *name, wsync_err_t *err)
{
	s_apply_t a = { .out = { .fd = -1, .name = name, .err = err, .positioned = 1 },
	    .name = name };
	s_din_t d;
	wsync_file_t *f = NULL;
	int opened = 0;

	if (s_din_open(&d, delta_fd, name, err) < 0)
		goto out;
	a.h = &d.h;
	a.delta = d.map;
	/* H's size in a file whose data pages stay holes: only the skeleton is written. */
	if ((a.out.fd = memfd_create("wsync-head", MFD_CLOEXEC)) < 0 ||
	    ftruncate(a.out.fd, (off_t)d.h.size) < 0) {
		wsync_err_set(err, EX_OSERR, "%s: the head's skeleton: %s", name, strerror(errno));
		goto out;
	}
	if (s_image_map(&a, err) < 0)
		goto out;
	opened = 1;
	if (s_applier_open(&a, 1, err) < 0 || s_apply_skeleton(&a, err) < 0 ||
	    s_apply_check(&a, err) < 0)
		goto out;
	f = wsync_file_open_fd(a.out.fd, name, err);
out:
	if (opened)
		s_applier_close(&a);
	if (a.out.fd >= 0)
		close(a.out.fd);
	if (a.image != NULL)
		munmap(a.image, (size_t)d.h.size);
	s_din_close(&d);
	return f;
}
