/*
 * delta_make.c - making a delta from a base and a head, streamed (see delta.c).
 *
 * The document is written with msgpack-c's packer into the buffered output.
 * A bin's length comes before its bytes, so each encoded form is compressed
 * first into a scratch (its first OUT_BUF bytes in memory, the rest in an
 * anonymous file), then packed with its length known. Before any of it, a
 * pass that only compares B's and H's elements (in a tensor of 16 MiB or
 * more, one chunk in 8) estimates the delta's size: when that is past the
 * caller's limit (the hub's: half of H), or the delta grows past it while it
 * is made, the maker stops and H travels whole.
 *
 * B's and H's bytes are read, a CHUNK at a time into a window of each, never
 * touched through their mappings: a fault maps the whole folio its page is in
 * (ext4 makes them up to 2 MiB), so pages around a piece come in that letting
 * go of the piece's own pages misses, and where tensors are walked out of file
 * order (a pusher's rewritten copy) every tensor's edges stay mapped: a 4 GiB
 * model on ext4 held 117 to 172 MiB. Read, an input costs its window, whatever
 * the file system does, and no more time (tmpfs, 256 MiB: 0.134 s, 0.139 s
 * mapped).
 *
 * The tensors are planned and encoded on all the threads a pass may use
 * (pool.c), a tensor each at a time: each thread compresses its forms into a
 * scratch file of its own, and whichever thread finishes the next tensor in
 * H's order packs it, and those after it that are ready, into the delta. The
 * delta's bytes are the same whatever the number of threads. A tensor is one
 * zstd frame (wsync-format(5)), so a large one is made by one thread: splitting
 * it would take a frame per piece, which the format does not have.
 *
 * Over (wsync_delta_make_over), H is no file: its tensors are read from the
 * pusher's source and hashed as they are encoded, so the delta's head (H's
 * content id, its skeleton with the hashes) is packed once every tensor is
 * made, the tensors packed into a scratch meanwhile and copied after it; and,
 * to patch, B's pieces are mapped writable and the runs that differ written
 * over them, so that B's file ends as H's.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include "pool_int.h"

#define ENTRY_COST 64                   /* a tensor entry's keys and numbers, estimated */
#define SAMPLE_MIN (16u << 20)          /* a tensor this large is estimated from a sample */
#define SAMPLE_EVERY 8                  /* of its chunks, one in this many */
#define MAP_WINDOW (8u << 20)           /* over: B's bytes mapped at a time */

/* ---- msgpack, written through the buffered output ---- */

int
delta_pk_write(void *data, const char *buf, size_t len)
{
	delta_out_t *o = data;

	return delta_out_put(o, buf, len, o->err);
}

int
delta_pk_str(msgpack_packer *pk, const char *s)
{
	return msgpack_pack_str_with_body(pk, s, strlen(s));
}

int
delta_pk_kv(msgpack_packer *pk, const char *key, uint64_t v)
{
	return delta_pk_str(pk, key) < 0 ? -1 : msgpack_pack_uint64(pk, v);
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

/* ---- making a delta ---- */

/* What one thread holds: its zstd stream, its windows, its scratch. */
typedef struct s_worker {
	ZSTD_CCtx *z;
	delta_out_t scratch;            /* this thread's encoded forms, one after another */
	uint64_t form_start;            /* where in the scratch the form being made starts */
	uint64_t form_limit;            /* the form stops once it holds this many bytes */
	unsigned char *bwin, *hwin;     /* CHUNK bytes each: the piece of B, of H read */
	unsigned char *tmp;             /* CHUNK bytes */
	unsigned char *group;           /* a sparse group: 4 gap planes, 8 value planes */
	unsigned char *map;             /* over: B's window mapped, maplen bytes at mapoff */
	uint64_t mapoff;
	size_t maplen;
	int sampling;                   /* a sample's pieces are read: B's mapped piece by piece */
	unsigned char *patch;           /* over: B's piece in it, written with H's bytes */
	XXH3_state_t *hash;             /* over: H's tensor hashed as it is read */
	XXH3_state_t *bhash;            /* base_read: B's tensor bti hashed up to bnext */
	size_t bti;
	uint64_t bnext;
	wsync_err_t err;
} s_worker_t;

/* One tensor of H: its encoding, planned then made, and where its form lies. */
typedef struct s_form {
	unsigned char enc;
	unsigned char made;             /* the form is whole in its worker's scratch */
	unsigned worker;
	uint64_t off, len;              /* in that worker's scratch */
	uint64_t cost;                  /* as estimated */
} s_form_t;

typedef struct s_make {
	delta_out_t out;                /* the delta */
	uint64_t limit;                 /* the delta is not worth it past this many bytes */
	msgpack_packer pk;              /* writes to out */
	const wsync_file_t *base, *head;
	int base_fd, head_fd;           /* what B and H are read from */
	const wsync_delta_over_t *over; /* set: H's data read from it, B made into H */
	uint64_t *hashes;               /* over: H's tensor hashes, as computed */
	uint64_t *base_hashes;          /* base_read: B's, each once read whole in order */
	unsigned char *base_hashed;
	s_form_t *forms;                /* per tensor of H */
	s_worker_t *workers;
	unsigned nworkers;
	pthread_mutex_t lock;           /* held while out is written: */
	size_t packed;                  /* the tensors packed into out so far */
	atomic_uint_least64_t encoded;  /* bytes of forms made: past limit, the delta is too */
	wsync_delta_stats_t *stats;
} s_make_t;

/*
 * Feeds len bytes to the frame being compressed into the scratch; end
 * finishes the frame. 1 once the form holds form_limit bytes: it costs too
 * much, and the caller stops making it.
 */
static int
s_zput(s_worker_t *wk, const void *p, size_t len, int end, wsync_err_t *err)
{
	delta_out_t *o = &wk->scratch;
	ZSTD_inBuffer in = { p, len, 0 };
	ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;
	size_t left;

	do {
		ZSTD_outBuffer out;
		if (OUT_BUF - o->n < ZSTD_CStreamOutSize() && delta_out_flush(o, err) < 0)
			return -1;
		out = (ZSTD_outBuffer){ o->buf + o->n, OUT_BUF - o->n, 0 };
		left = ZSTD_compressStream2(wk->z, &out, &in, mode);
		if (ZSTD_isError(left))
			return wsync_err_set(err, EX_SOFTWARE, "%s: zstd: %s", o->name,
			    ZSTD_getErrorName(left));
		o->n += out.pos;
		o->pos += out.pos;
		if (o->pos - wk->form_start >= wk->form_limit)
			return 1;
	} while (end ? left != 0 : in.pos < in.size);
	return 0;
}

/* Starts a zstd frame at the end of the scratch, at level, of size bytes when known (else -1). */
static void
s_zstart(s_worker_t *wk, int level, long long size, uint64_t form_limit)
{
	ZSTD_CCtx_reset(wk->z, ZSTD_reset_session_only);
	ZSTD_CCtx_setParameter(wk->z, ZSTD_c_compressionLevel, level);
	if (size >= 0)
		ZSTD_CCtx_setPledgedSrcSize(wk->z, (unsigned long long)size);
	wk->form_start = wk->scratch.pos;
	wk->form_limit = form_limit;
}

/* Takes the form being made back out of the scratch. */
static int
s_form_drop(s_worker_t *wk, wsync_err_t *err)
{
	delta_out_t *o = &wk->scratch;

	if (wk->form_start >= o->flushed) {
		o->n = (size_t)(wk->form_start - o->flushed);
	} else {
		if (ftruncate(o->fd, (off_t)wk->form_start) < 0 ||
		    lseek(o->fd, (off_t)wk->form_start, SEEK_SET) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot cut the scratch file: "
			    "%s", o->name, strerror(errno));
		o->flushed = wk->form_start;
		o->n = 0;
	}
	o->pos = wk->form_start;
	return 0;
}

/*
 * Packs len bytes at off of worker src's scratch file as one bin, read a
 * CHUNK at a time into tmp, then gives the file's pages back.
 */
static int
s_pack_form(s_make_t *m, const s_worker_t *src, uint64_t off, uint64_t len,
    unsigned char *tmp, const char *what, wsync_err_t *err)
{
	const delta_out_t *o = &src->scratch;

	if (len > UINT32_MAX)
		return wsync_err_set(err, EX_DATAERR, "%s: %s: encoded form reaches 4 GiB, "
		    "more than a msgpack bin holds", o->name, what);
	if (msgpack_pack_bin(&m->pk, (size_t)len) < 0)
		return -1;
	for (uint64_t at = 0; at < len; at += CHUNK) {
		size_t n = len - at < CHUNK ? (size_t)(len - at) : CHUNK;
		if (wsync_read_at(o->fd, tmp, n, off + at) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot read the scratch "
			    "file: %s", o->name, strerror(errno));
		if (msgpack_pack_bin_body(&m->pk, tmp, n) < 0)
			return -1;
	}
	/* Only memory: a scratch that keeps its pages is as good. */
	if (len > 0)
		(void)fallocate(o->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		    (off_t)len);
	return 0;
}

/*
 * n bytes (at most CHUNK) of input f at offset off: read from fd into win
 * when f is mapped, else where f holds them in memory. NULL with err.
 */
static const unsigned char *
s_read(const s_make_t *m, const wsync_file_t *f, int fd, unsigned char *win, uint64_t off,
    size_t n, wsync_err_t *err)
{
	if (f->mem != WSYNC_MEM_MMAP)
		return (const unsigned char *)wsync_file_bytes(f) + off;
	if (wsync_read_at(fd, win, n, off) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot read the %s: %s", m->out.name, f->name,
		    strerror(errno));
		return NULL;
	}
	return win;
}

/* Lets go of the worker's window of B. */
static void
s_unmap(s_worker_t *wk)
{
	if (wk->map != NULL)
		munmap(wk->map, wk->maplen);
	wk->map = wk->patch = NULL;
}

/*
 * Over: n bytes of B at off (within B's bytes up to end), mapped shared for
 * writing; the worker's patch points at them. A window of MAP_WINDOW bytes
 * is mapped at a time, the next pieces taken from it while they fall in it,
 * and let go as the next is mapped, so that B's pages mapped stay one
 * window's. Mapped, where the applier reads and writes: only the runs that
 * differ are written here, and a window read and written back whole cost more
 * (1 GiB at 1%: 0.43-0.60 s a pass mapped, 0.58-0.68 s written back). Each
 * mapping costs a call and, the process having threads, a flush of the other
 * cores' TLBs when it goes, so windows are larger than the pieces read.
 * NULL with err.
 */
static unsigned char *
s_base_window(const s_make_t *m, s_worker_t *wk, uint64_t off, size_t n, uint64_t end,
    wsync_err_t *err)
{
	uint64_t start = off - off % (uint64_t)sysconf(_SC_PAGESIZE), len;
	void *p;

	/* Mapped whole already, its pages too: nothing to map or let go. */
	if (m->over->base_map != NULL)
		return wk->patch = m->over->base_map + off;
	if (wk->map != NULL && off >= wk->mapoff && off + n <= wk->mapoff + wk->maplen)
		return wk->patch = wk->map + (off - wk->mapoff);
	s_unmap(wk);
	len = end - start < MAP_WINDOW ? end - start : MAP_WINDOW;
	if (len < (off - start) + n)
		len = (off - start) + n;
	p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
	    m->base_fd, (off_t)start);
	if (p == MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "%s: cannot map the base to write into: %s",
		    m->out.name, strerror(errno));
		return NULL;
	}
	wk->map = p;
	wk->mapoff = start;
	wk->maplen = (size_t)len;
	wk->patch = wk->map + (off - start);
	return wk->patch;
}

/*
 * base_read: B's tensor bi (nbytes) hashed as it is read, n bytes at at,
 * when read from its start in order (a sample is not): read whole, its hash
 * is known, B's skeleton holding none. Any pass that reads it whole will do.
 */
static void
s_base_hash(const s_make_t *m, s_worker_t *wk, size_t bi, uint64_t nbytes, uint64_t at,
    const unsigned char *b, size_t n)
{
	if (at == 0) {
		XXH3_64bits_reset(wk->bhash);
		wk->bti = bi;
		wk->bnext = 0;
	}
	if (wk->bti != bi || wk->bnext != at) {
		wk->bti = SIZE_MAX;
		return;
	}
	wsync_hash_update(wk->bhash, b, n);
	wk->bnext = at + n;
	if (wk->bnext == nbytes) {
		m->base_hashes[bi] = XXH3_64bits_digest(wk->bhash);
		m->base_hashed[bi] = 1;
		wk->bti = SIZE_MAX;
	}
}

/*
 * Bytes [at, at + n) of H's tensor i (t) in *h and, when bt is set, of B's bt
 * in *b. Over, H's are read from the source, and B's mapped to be written.
 */
static int
s_chunk(const s_make_t *m, s_worker_t *wk, size_t i, const wsync_tensor_t *t,
    const wsync_tensor_t *bt, uint64_t at, size_t n, const unsigned char **h,
    const unsigned char **b, wsync_err_t *err)
{
	if (m->over != NULL) {
		if (m->over->read(m->over->arg, i, at, wk->hwin, n, err) < 0)
			return -1;
		*h = wk->hwin;
	} else if ((*h = s_read(m, m->head, m->head_fd, wk->hwin, t->offset + at, n,
	    err)) == NULL) {
		return -1;
	}
	if (bt == NULL)
		return 0;
	if (m->over != NULL && m->over->base_read != NULL) {
		size_t bi = (size_t)(bt - wsync_file_tensor(m->base, 0));
		if (m->over->base_read(m->over->base_arg, bi, at, wk->bwin, n, err) < 0)
			return -1;
		*b = wk->bwin;
		if (m->over->base_hashes == NULL)
			s_base_hash(m, wk, bi, bt->nbytes, at, wk->bwin, n);
		return 0;
	}
	*b = m->over != NULL && m->over->patch ? s_base_window(m, wk, bt->offset + at, n,
	    wk->sampling ? bt->offset + at + n : bt->offset + bt->nbytes, err) :
	    s_read(m, m->base, m->base_fd, wk->bwin, bt->offset + at, n, err);
	return *b == NULL ? -1 : 0;
}

/*
 * Over: H's n bytes at h hashed; whole, written over B's piece (patching)
 * where they differ.
 */
static void
s_over_piece(const s_make_t *m, s_worker_t *wk, const unsigned char *h, size_t n, int whole)
{
	if (m->over == NULL)
		return;
	wsync_hash_update(wk->hash, h, n);
	if (whole && wk->patch != NULL && memcmp(wk->patch, h, n) != 0)
		memcpy(wk->patch, h, n);
}

static uint64_t
s_load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* The xor of the 8 bytes at a + i and b + i, byte k of them in bits 8k to 8k + 7. */
static uint64_t
s_xor64(const unsigned char *a, const unsigned char *b, size_t i)
{
	return le64toh(s_load64(a + i) ^ s_load64(b + i));
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

/* Encodes H's tensor ti (t) against B's tensor bt as zstd of their xor. */
static int
s_encode_xor(const s_make_t *m, s_worker_t *wk, size_t ti, const wsync_tensor_t *t,
    const wsync_tensor_t *bt, wsync_err_t *err)
{
	const unsigned char *h, *b;
	int rc;

	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		if (s_chunk(m, wk, ti, t, bt, at, n, &h, &b, err) < 0)
			return -1;
		for (size_t i = 0; i < n; i++)
			wk->tmp[i] = h[i] ^ b[i];
		s_over_piece(m, wk, h, n, 1);
		if ((rc = s_zput(wk, wk->tmp, n, 0, err)) != 0)
			return rc;
	}
	return s_zput(wk, NULL, 0, 1, err);
}

/* Writes one sparse group of c changes: count, 4 gap planes, w value planes. */
static int
s_sparse_group(s_worker_t *wk, uint32_t c, unsigned w, wsync_err_t *err)
{
	unsigned char cb[4] = { c, c >> 8, c >> 16, c >> 24 };
	int rc;

	if ((rc = s_zput(wk, cb, 4, 0, err)) != 0)
		return rc;
	for (unsigned plane = 0; plane < 4 + w; plane++)
		if ((rc = s_zput(wk, wk->group + (size_t)plane * GROUP_MAX, c, 0, err)) != 0)
			return rc;
	return 0;
}

/*
 * Adds element e, whose xor is v (its w bytes, the first lowest), to the
 * sparse group being gathered (*c changes in it, *prev the one before),
 * writing the group out when it is full.
 */
static inline int
s_sparse_add(s_worker_t *wk, uint32_t *c, uint64_t *prev, uint64_t e, uint64_t v, unsigned w,
    wsync_err_t *err)
{
	uint64_t gap = e - *prev - 1;
	unsigned char *g = wk->group + *c;
	int rc;

	for (unsigned j = 0; j < 4; j++)
		g[(size_t)j * GROUP_MAX] = (unsigned char)(gap >> (8 * j));
	for (unsigned j = 0; j < w; j++)
		g[(size_t)(4 + j) * GROUP_MAX] = (unsigned char)(v >> (8 * j));
	*prev = e;
	if (++*c == GROUP_MAX) {
		if ((rc = s_sparse_group(wk, *c, w, err)) != 0)
			return rc;
		*c = 0;
	}
	return 0;
}

/*
 * The elements of width w (1, 2, 4 or 8 bytes) that differ in a word whose
 * xor is x: bit 8k + 7 set for each byte k that starts one. Each lane is
 * folded onto its first byte, and a byte's high bit set when any of its bits
 * is, without a branch per element.
 */
static inline uint64_t
s_lanes(uint64_t x, unsigned w)
{
	uint64_t first;

	switch (w) {
	case 1:
		first = 0x0101010101010101ULL;
		break;
	case 2:
		x |= x >> 8;
		first = 0x0001000100010001ULL;
		break;
	case 4:
		x |= x >> 16;
		x |= x >> 8;
		first = 0x0000000100000001ULL;
		break;
	default:
		return x != 0 ? 0x80 : 0;
	}
	x &= first * 0xff;
	return (((x & first * 0x7f) + first * 0x7f) | x) & first * 0x80;
}

/*
 * Adds the changed elements of the word at byte i of the tensor (its xor x)
 * to the sparse group, in order; as s_sparse_add.
 */
static inline int
s_sparse_word(s_worker_t *wk, uint32_t *c, uint64_t *prev, uint64_t i, uint64_t x,
    unsigned w, unsigned shift, wsync_err_t *err)
{
	uint64_t lane = w == 8 ? ~0ULL : (1ULL << (8 * w)) - 1;
	int rc;

	for (uint64_t m = s_lanes(x, w); m != 0; m &= m - 1) {
		unsigned k = (unsigned)__builtin_ctzll(m) >> 3;
		if ((rc = s_sparse_add(wk, c, prev, (i + k) >> shift, (x >> (8 * k)) & lane, w,
		    err)) != 0)
			return rc;
	}
	return 0;
}

/*
 * Encodes t against bt as zstd of: the element width (1 byte), then groups
 * of changed elements, each a count (u32 little-endian), the gaps since the
 * previous change as four byte planes of u32, and the elements' xors as w
 * byte planes. Byte planes put the high bytes, nearly all zero, together.
 * Over, each 32 bytes that differ are written over B's as they are encoded.
 */
static int
s_encode_sparse(const s_make_t *m, s_worker_t *wk, size_t ti, const wsync_tensor_t *t,
    const wsync_tensor_t *bt, unsigned w, wsync_err_t *err)
{
	const unsigned char *h, *b;
	unsigned char width = (unsigned char)w;
	uint64_t prev = UINT64_MAX;     /* the previous change's element, -1 before any */
	unsigned shift = (unsigned)__builtin_ctz(w);
	uint32_t c = 0;
	int rc;

	if ((rc = s_zput(wk, &width, 1, 0, err)) != 0)
		return rc;
	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK, i = 0;
		if (s_chunk(m, wk, ti, t, bt, at, n, &h, &b, err) < 0)
			return -1;
		s_over_piece(m, wk, h, n, 0);
		/* 32 bytes at a time, nearly all alike at 1%: passed in one test. */
		for (; i + 32 <= n; i += 32) {
			uint64_t x[4] = { s_xor64(h, b, i), s_xor64(h, b, i + 8),
			    s_xor64(h, b, i + 16), s_xor64(h, b, i + 24) };
			if ((x[0] | x[1] | x[2] | x[3]) == 0)
				continue;
			/* A word's xor holds its elements' xors, lane by lane: no element read twice. */
			for (unsigned k = 0; k < 4; k++)
				if (x[k] != 0 && (rc = s_sparse_word(wk, &c, &prev, at + i + 8 * k,
				    x[k], w, shift, err)) != 0)
					return rc;
			if (wk->patch != NULL)
				memcpy(wk->patch + i, h + i, 32);
		}
		/*
		 * The chunk's last bytes, fewer than 32: element by element, then
		 * written over B's (b is B's piece when patching: read before).
		 */
		size_t from = i;
		for (; i < n; i += w) {
			uint64_t v = 0;
			for (unsigned j = 0; j < w; j++)
				v |= (uint64_t)(h[i + j] ^ b[i + j]) << (8 * j);
			if (v != 0 && (rc = s_sparse_add(wk, &c, &prev, (at + i) >> shift, v, w,
			    err)) != 0)
				return rc;
		}
		if (from < n && wk->patch != NULL)
			memcpy(wk->patch + from, h + from, n - from);
	}
	if (c > 0 && (rc = s_sparse_group(wk, c, w, err)) != 0)
		return rc;
	return s_zput(wk, NULL, 0, 1, err);
}

/* Encodes H's tensor ti (t) alone, compressed. */
static int
s_encode_whole(const s_make_t *m, s_worker_t *wk, size_t ti, const wsync_tensor_t *t,
    wsync_err_t *err)
{
	const unsigned char *h;
	int rc;

	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		if (s_chunk(m, wk, ti, t, NULL, at, n, &h, NULL, err) < 0)
			return -1;
		s_over_piece(m, wk, h, n, 0);
		if ((rc = s_zput(wk, h, n, 0, err)) != 0)
			return rc;
	}
	return s_zput(wk, NULL, 0, 1, err);
}

/* Packs H's tensor ti's (t's) bytes as they are, as one bin. */
static int
s_pack_raw(s_make_t *m, s_worker_t *wk, size_t ti, const wsync_tensor_t *t, wsync_err_t *err)
{
	const unsigned char *h;

	if (msgpack_pack_bin(&m->pk, (size_t)t->nbytes) < 0)
		return -1;
	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		if (s_chunk(m, wk, ti, t, NULL, at, n, &h, NULL, err) < 0 ||
		    msgpack_pack_bin_body(&m->pk, h, n) < 0)
			return -1;
	}
	return 0;
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

/*
 * The encoding to try for H's tensor i, judged by a count of changed
 * elements, and what it is estimated to cost: a changed element's bytes (what
 * zstd makes of the planes and the gaps is about that at 1% and less above),
 * a tensor's bytes when it has no base. A wsync_pool_fn: -1 with the
 * worker's err when an input cannot be read.
 */
static int
s_choose(void *arg, size_t i, unsigned worker)
{
	s_make_t *m = arg;
	s_worker_t *wk = &m->workers[worker];
	s_form_t *f = &m->forms[i];
	const wsync_tensor_t *t = wsync_file_tensor(m->head, i), *bt = s_base_of(m->base, t);
	unsigned w = (unsigned)wsync_dtype_size(t->dtype);
	uint64_t changed = 0, sampled = 0;
	const unsigned char *h, *b;

	f->cost = ENTRY_COST + strlen(t->path);
	f->enc = WSYNC_DELTA_SAME;
	if (t->nbytes == 0) {
		f->enc = WSYNC_DELTA_RAW;
		return 0;
	}
	if (bt == NULL) {
		f->cost += t->nbytes;
		f->enc = WSYNC_DELTA_WHOLE;
		return 0;
	}
	/*
	 * A large tensor is judged by every SAMPLE_EVERY-th chunk of it, scaled:
	 * the encoding reads all of it anyway, and stops at the limit if the
	 * sample misjudged. The whole count took half of making a delta at 1%.
	 * One whose hash is the base's is counted whole: only its bytes may say
	 * it is unchanged, since two tensors can share an XXH3-64. Over, H's hash
	 * is not known yet: one whose sample shows no change is counted whole, and
	 * H's bytes hashed on the way, the hash of an unchanged tensor being its
	 * own, not what B's header says; one that changed after all is then
	 * judged as its sample was (a change, scaled: 1), as the files' delta is.
	 */
	for (int sample = bt->hash != t->hash || m->over != NULL, again = 0; ; sample = 0) {
		int whole = !sample || t->nbytes < SAMPLE_MIN;
		changed = sampled = 0;
		if (m->over != NULL && whole)
			XXH3_64bits_reset(wk->hash);
		wk->sampling = !whole;
		for (uint64_t at = 0, k = 0; at < t->nbytes; at += CHUNK, k++) {
			size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
			if (!whole && k % SAMPLE_EVERY != SAMPLE_EVERY / 2)
				continue;
			if (s_chunk(m, wk, i, t, bt, at, n, &h, &b, &wk->err) < 0)
				return -1;
			sampled += n;
			changed += s_count_changed(h, b, n, w);
			if (m->over != NULL && whole)
				wsync_hash_update(wk->hash, h, n);
		}
		if (m->over != NULL && whole && changed == 0)
			m->hashes[i] = XXH3_64bits_digest(wk->hash);
		if (again && changed > 0)
			changed = 1;
		if (m->over == NULL || changed > 0 || sampled == t->nbytes)
			break;
		again = 1;
	}
	wk->sampling = 0;
	s_unmap(wk);
	if (sampled < t->nbytes)
		changed = (uint64_t)((double)changed * (double)t->nbytes / (double)sampled);
	/* Only a whole count may say nothing changed. */
	if (changed == 0 && sampled == t->nbytes)
		return 0;
	if (changed == 0)
		changed = 1;
	f->cost += changed * w;
	/*
	 * Sparse stores an element's xor as byte planes, which compress better than
	 * xor's interleaved bytes at any density for elements of 2 bytes or more
	 * (wsync-format(5), DELTA, has the numbers). For 1-byte elements the planes
	 * are the xor itself, and the gaps cost more than they save past about 40%.
	 */
	f->enc = w > 1 || changed * 5 <= t->nbytes * 2 ? WSYNC_DELTA_SPARSE : WSYNC_DELTA_XOR;
	return 0;
}

/* H's tensor i's bytes, for the pool to hand out the largest first; a wsync_pool_size_fn. */
static uint64_t
s_tensor_size(void *arg, size_t i)
{
	return wsync_file_tensor(((s_make_t *)arg)->head, i)->nbytes;
}

/*
 * Plans every tensor's encoding, the tensors on all threads; 1 when the
 * estimate says the delta would pass its limit, before any encoding is done;
 * -1 with err.
 */
static int
s_plan(s_make_t *m, wsync_err_t *err)
{
	uint64_t estimate = 0;
	unsigned failed = 0;

	if (wsync_pool_run_sized(wsync_file_count(m->head), m->nworkers, s_choose,
	    s_tensor_size, m, &failed) != 0) {
		*err = m->workers[failed].err;
		return -1;
	}
	for (size_t i = 0; i < wsync_file_count(m->head); i++)
		estimate += m->forms[i].cost;
	if (m->stats != NULL)
		m->stats->estimate = estimate;
	return estimate > m->limit;
}

/*
 * Packs H's tensor i, its form made, into out: its entry, then its form.
 * 1 when the delta passes its limit.
 */
static int
s_pack_tensor(s_make_t *m, s_worker_t *wk, size_t i, wsync_err_t *err)
{
	const wsync_tensor_t *t = wsync_file_tensor(m->head, i), *bt = s_base_of(m->base, t);
	const s_form_t *f = &m->forms[i];
	wsync_delta_enc_t enc = (wsync_delta_enc_t)f->enc;
	uint64_t entry = m->out.pos;
	char what[WSYNC_MAX_PATH + 16];
	int has_base, rc = 0;

	snprintf(what, sizeof(what), "tensor %s", t->path);
	has_base = enc == WSYNC_DELTA_SAME || enc == WSYNC_DELTA_XOR || enc == WSYNC_DELTA_SPARSE;
	if (msgpack_pack_map(&m->pk, 5 + has_base + (enc != WSYNC_DELTA_SAME)) < 0 ||
	    delta_pk_str(&m->pk, "path") < 0 || delta_pk_str(&m->pk, t->path) < 0 ||
	    delta_pk_kv(&m->pk, "off", t->nbytes ? t->offset : 0) < 0 ||
	    delta_pk_kv(&m->pk, "len", t->nbytes) < 0 || delta_pk_kv(&m->pk, "hash",
	    m->hashes != NULL ? m->hashes[i] : t->hash) < 0 ||
	    delta_pk_str(&m->pk, "enc") < 0 || delta_pk_str(&m->pk, wsync_delta_enc_name(enc)) < 0 ||
	    (has_base && delta_pk_kv(&m->pk, "base_off", bt->offset) < 0) ||
	    (enc != WSYNC_DELTA_SAME && delta_pk_str(&m->pk, "data") < 0))
		return -1;
	if (enc == WSYNC_DELTA_RAW)
		rc = s_pack_raw(m, wk, i, t, err);
	else if (enc != WSYNC_DELTA_SAME)
		rc = s_pack_form(m, &m->workers[f->worker], f->off, f->len, wk->tmp, what, err);
	if (rc < 0)
		return -1;
	if (m->stats != NULL) {
		m->stats->count[enc]++;
		m->stats->data[enc] += t->nbytes;
		m->stats->encoded[enc] += m->out.pos - entry;
	}
	return m->out.pos > m->limit;
}

/* Packs the tensors whose forms are made, in H's order, as far as they go. */
static int
s_pack_ready(s_make_t *m, s_worker_t *wk)
{
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	m->out.err = &wk->err;
	while (rc == 0 && m->packed < wsync_file_count(m->head) && m->forms[m->packed].made)
		rc = s_pack_tensor(m, wk, m->packed++, &wk->err);
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* Over: H's tensor ti (t) written over B's bt whole, and hashed. */
static int
s_over_whole(const s_make_t *m, s_worker_t *wk, size_t ti, const wsync_tensor_t *t,
    const wsync_tensor_t *bt, wsync_err_t *err)
{
	const unsigned char *h, *b;

	XXH3_64bits_reset(wk->hash);
	for (uint64_t at = 0; at < t->nbytes; at += CHUNK) {
		size_t n = t->nbytes - at < CHUNK ? (size_t)(t->nbytes - at) : CHUNK;
		if (s_chunk(m, wk, ti, t, bt, at, n, &h, &b, err) < 0)
			return -1;
		s_over_piece(m, wk, h, n, 1);
	}
	return 0;
}

/*
 * Makes the form of H's tensor i in the worker's scratch, then packs what is
 * ready. A wsync_pool_fn: 1 when the delta passes its limit, -1 with the
 * worker's err. The form falls back to raw when not smaller.
 */
static int
s_encode_tensor(void *arg, size_t i, unsigned worker)
{
	s_make_t *m = arg;
	s_worker_t *wk = &m->workers[worker];
	s_form_t *f = &m->forms[i];
	const wsync_tensor_t *t = wsync_file_tensor(m->head, i), *bt = s_base_of(m->base, t);
	unsigned w = (unsigned)wsync_dtype_size(t->dtype);
	/* The form stops at H's bytes (raw costs less) or at the delta's limit. */
	uint64_t stop = t->nbytes < m->limit ? t->nbytes : m->limit, made;
	int rc = 0;

	if (t->nbytes > UINT32_MAX)
		return wsync_err_set(&wk->err, EX_DATAERR, "%s: tensor %s: %llu bytes, more "
		    "than a msgpack bin holds", m->out.name, t->path,
		    (unsigned long long)t->nbytes);
	if (m->over != NULL)
		XXH3_64bits_reset(wk->hash);
	switch (f->enc) {
	case WSYNC_DELTA_XOR:
		s_zstart(wk, XOR_LEVEL, (long long)t->nbytes, stop);
		rc = s_encode_xor(m, wk, i, t, bt, &wk->err);
		break;
	case WSYNC_DELTA_SPARSE:
		s_zstart(wk, f->cost * 8 < t->nbytes ? SPARSE_LEVEL : LEVEL, -1, stop);
		rc = s_encode_sparse(m, wk, i, t, bt, w, &wk->err);
		break;
	case WSYNC_DELTA_WHOLE:
		s_zstart(wk, LEVEL, (long long)t->nbytes, stop);
		rc = s_encode_whole(m, wk, i, t, &wk->err);
		break;
	default:
		wk->form_start = wk->scratch.pos;
		break;
	}
	if (rc < 0)
		return -1;
	if (rc > 0) {
		if (s_form_drop(wk, &wk->err) < 0)
			return -1;
		if (m->limit <= t->nbytes)
			return 1;
		/* Incompressible: the bytes as they are cost less, and always fit a bin. */
		f->enc = WSYNC_DELTA_RAW;
		if (m->over != NULL && s_over_whole(m, wk, i, t, bt, &wk->err) < 0)
			return -1;
	}
	if (m->over != NULL) {
		/* An unchanged tensor's was taken as its bytes were counted (s_choose). */
		if (f->enc != WSYNC_DELTA_SAME)
			m->hashes[i] = XXH3_64bits_digest(wk->hash);
		s_unmap(wk);
	}
	/* The packer reads the form from the file, whoever packs it. */
	if (delta_out_flush(&wk->scratch, &wk->err) < 0)
		return -1;
	f->worker = worker;
	f->off = wk->form_start;
	f->len = wk->scratch.pos - wk->form_start;
	made = atomic_fetch_add(&m->encoded, f->enc == WSYNC_DELTA_RAW ? t->nbytes : f->len) +
	    (f->enc == WSYNC_DELTA_RAW ? t->nbytes : f->len);
	if (made > m->limit)
		return 1;
	pthread_mutex_lock(&m->lock);
	f->made = 1;
	pthread_mutex_unlock(&m->lock);
	return s_pack_ready(m, wk);
}

/* The skeleton: H's bytes outside every tensor's data, in order, as one zstd frame. */
static int
s_make_skeleton(s_make_t *m, s_worker_t *wk, wsync_err_t *err)
{
	const unsigned char *h;
	uint64_t at = 0, before = m->out.pos;
	int rc;

	s_zstart(wk, LEVEL, -1, UINT64_MAX);
	for (size_t i = 0; i <= wsync_file_count(m->head); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(m->head, i);
		uint64_t end = t == NULL ? wsync_file_size(m->head) : t->offset;
		if (t != NULL && t->nbytes == 0)
			continue;
		for (uint64_t p = at; p < end; p += CHUNK) {
			size_t n = end - p < CHUNK ? (size_t)(end - p) : CHUNK;
			if ((h = s_read(m, m->head, m->head_fd, wk->hwin, p, n, err)) == NULL)
				return -1;
			/* Over, B's file becomes H's outside its tensors too. */
			if (m->over != NULL && m->over->patch && wsync_write_at(m->base_fd, h, n, p) < 0)
				return wsync_err_set(err, EX_IOERR, "%s: cannot write the head's "
				    "header over the base: %s", m->out.name, strerror(errno));
			if ((rc = s_zput(wk, h, n, 0, err)) != 0)
				return rc;
		}
		if (t != NULL)
			at = t->offset + t->nbytes;
	}
	if ((rc = s_zput(wk, NULL, 0, 1, err)) != 0 ||
	    delta_out_flush(&wk->scratch, err) < 0 ||
	    s_pack_form(m, wk, wk->form_start, wk->scratch.pos - wk->form_start, wk->tmp,
	    "skeleton", err) < 0)
		return -1;
	if (m->stats != NULL)
		m->stats->skeleton_bytes = m->out.pos - before;
	return 0;
}

/* Packs the delta's head: H's and B's numbers, the skeleton, the tensors' array. */
static int
s_pack_head(s_make_t *m, wsync_err_t *err)
{
	const wsync_file_t *b = m->base, *h = m->head;
	msgpack_packer *pk = &m->pk;

	if (msgpack_pack_map(pk, 9) < 0 ||
	    delta_pk_kv(pk, "wsync-delta", WSYNC_DELTA_FORMAT) < 0 ||
	    delta_pk_str(pk, "model") < 0 || delta_pk_str(pk, wsync_file_model(h)) < 0 ||
	    delta_pk_kv(pk, "base", wsync_file_version(b)) < 0 ||
	    delta_pk_kv(pk, "base_content", wsync_file_content_id(b)) < 0 ||
	    delta_pk_kv(pk, "version", wsync_file_version(h)) < 0 ||
	    delta_pk_kv(pk, "content", wsync_file_content_id(h)) < 0 ||
	    delta_pk_kv(pk, "size", wsync_file_size(h)) < 0 ||
	    delta_pk_str(pk, "skeleton") < 0 || s_make_skeleton(m, &m->workers[0], err) < 0 ||
	    delta_pk_str(pk, "tensors") < 0 || msgpack_pack_array(pk, wsync_file_count(h)) < 0)
		return -1;
	return 0;
}

/*
 * 0 when the delta is written, 1 when it is not worth it, -1 on error. The
 * tensors are encoded on all threads, each form into its thread's scratch,
 * and packed into out in H's order by whichever thread made the next one.
 */
static int
s_make(s_make_t *m, const char *name, wsync_err_t *err)
{
	const wsync_file_t *b = m->base, *h = m->head;
	unsigned failed = 0;
	int rc;

	if (strcmp(wsync_file_model(b), wsync_file_model(h)) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: base is model %s, head is model %s",
		    name, wsync_file_model(b), wsync_file_model(h));
	if ((rc = s_plan(m, err)) != 0)
		return rc;
	/* Over, H's hashes are known once its tensors are: they come after. */
	if (m->over == NULL && s_pack_head(m, err) < 0)
		return -1;
	if ((rc = wsync_pool_run_sized(wsync_file_count(h), m->nworkers, s_encode_tensor,
	    s_tensor_size, m,
	    &failed)) != 0) {
		if (rc < 0)
			*err = m->workers[failed].err;
		return rc;
	}
	return delta_out_flush(&m->out, err);
}

/* A worker's zstd stream, buffers and scratch file; -1 with err. */
static int
s_worker_open(s_worker_t *wk, const char *name, wsync_err_t *err)
{
	wk->scratch = (delta_out_t){ .fd = -1, .name = name, .err = &wk->err };
	if ((wk->z = s_cctx_new(name, err)) == NULL)
		return -1;
	if ((wk->scratch.fd = memfd_create("wsync-delta", MFD_CLOEXEC)) < 0)
		return wsync_err_set(err, EX_OSERR, "%s: memfd_create: %s", name, strerror(errno));
	wk->scratch.buf = wsync_io_buffer(OUT_BUF);
	wk->tmp = wsync_io_buffer(CHUNK);
	wk->bwin = wsync_io_buffer(CHUNK);
	wk->hwin = wsync_io_buffer(CHUNK);
	wk->group = malloc((size_t)GROUP_MAX * 12);
	wk->hash = XXH3_createState();
	wk->bhash = XXH3_createState();
	wk->bti = SIZE_MAX;
	if (wk->scratch.buf == NULL || wk->tmp == NULL || wk->bwin == NULL ||
	    wk->hwin == NULL || wk->group == NULL || wk->hash == NULL || wk->bhash == NULL)
		return wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
	return 0;
}

static void
s_worker_close(s_worker_t *wk)
{
	s_unmap(wk);
	XXH3_freeState(wk->hash);
	XXH3_freeState(wk->bhash);
	ZSTD_freeCCtx(wk->z);
	if (wk->scratch.fd >= 0)
		close(wk->scratch.fd);
	free(wk->scratch.buf);
	free(wk->tmp);
	free(wk->bwin);
	free(wk->hwin);
	free(wk->group);
}

/*
 * Over: whether H's tensors are in the order of the caller's, and, to patch
 * (B made into H piece by piece), H's data lies where B's does: the same
 * size, every tensor of H with data at its offset in B, of the same path,
 * dtype and shape.
 */
static int
s_over_fits(const s_make_t *m, int patch)
{
	if ((patch && wsync_file_size(m->base) != wsync_file_size(m->head)) ||
	    wsync_file_count(m->head) != m->over->n)
		return 0;
	if (m->over->base_read != NULL) {
		if (patch || wsync_file_count(m->base) != m->over->base_n)
			return 0;
		for (size_t i = 0; i < m->over->base_n; i++)
			if (strcmp(wsync_file_tensor(m->base, i)->path, m->over->base_paths[i]) != 0)
				return 0;
	}
	for (size_t i = 0; i < wsync_file_count(m->head); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(m->head, i), *bt;
		if (strcmp(t->path, m->over->paths[i]) != 0)
			return 0;
		if (patch && t->nbytes > 0 &&
		    ((bt = s_base_of(m->base, t)) == NULL || bt->offset != t->offset))
			return 0;
	}
	return 1;
}

/*
 * n hashes written into the skeleton in fd (what: "head" or "base"), each
 * at its place in at, and *f (the skeleton's file) opened again from it,
 * so that its content id is the hashes'. -1 with err.
 */
static int
s_skeleton_hashes(const s_make_t *m, int fd, const uint64_t *hashes, const uint64_t *at,
    size_t n, const char *what, wsync_file_t **f, wsync_err_t *err)
{
	for (size_t i = 0; i < n; i++)
		if (wsync_write_be64_at(fd, hashes[i], at[i]) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot write the %s's hashes: %s",
			    m->out.name, what, strerror(errno));
	wsync_file_close(f);
	return (*f = wsync_file_open_fd(fd, what, err)) == NULL ? -1 : 0;
}

/*
 * Over, once every tensor is made: H's hashes into its skeleton, then the
 * delta's head packed into out (H's bytes outside its tensors written over
 * B's on the way: B is H now), and the tensors packed into the scratch tmp
 * after it.
 */
static int
s_over_finish(s_make_t *m, wsync_file_t **head, delta_out_t *tmp, wsync_err_t *err)
{
	unsigned char *buf = m->workers[0].tmp;

	if (s_skeleton_hashes(m, m->head_fd, m->hashes, m->over->hash_at, m->over->n, "head",
	    head, err) < 0)
		return -1;
	m->head = *head;
	if (s_pack_head(m, err) < 0)
		return -1;
	for (uint64_t p = 0; p < tmp->pos; p += CHUNK) {
		size_t n = tmp->pos - p < CHUNK ? (size_t)(tmp->pos - p) : CHUNK;
		if (wsync_read_at(tmp->fd, buf, n, p) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: cannot read the scratch file: %s",
			    m->out.name, strerror(errno));
		if (delta_out_put(&m->out, buf, n, err) < 0)
			return -1;
	}
	return delta_out_flush(&m->out, err);
}

/*
 * base_read, once every tensor is made: B's tensors no pass read whole (none
 * of H's has their path, or a zero-length one) hashed now, or all of them
 * taken as given (over's base_hashes), every hash written into B's skeleton,
 * and B opened again from it, so that its content id, which the delta's head
 * carries, is B's. -1 with err.
 */
static int
s_base_finish(s_make_t *m, wsync_file_t **base, wsync_err_t *err)
{
	s_worker_t *wk = &m->workers[0];

	for (size_t i = 0; i < m->over->base_n; i++) {
		const wsync_tensor_t *bt = wsync_file_tensor(*base, i);
		if (m->over->base_hashes != NULL)
			m->base_hashes[i] = m->over->base_hashes[i];
		if (m->base_hashed[i] || m->over->base_hashes != NULL)
			continue;
		XXH3_64bits_reset(wk->bhash);
		for (uint64_t at = 0; at < bt->nbytes; at += CHUNK) {
			size_t n = bt->nbytes - at < CHUNK ? (size_t)(bt->nbytes - at) : CHUNK;
			if (m->over->base_read(m->over->base_arg, i, at, wk->bwin, n, err) < 0)
				return -1;
			wsync_hash_update(wk->bhash, wk->bwin, n);
		}
		m->base_hashes[i] = XXH3_64bits_digest(wk->bhash);
	}
	if (s_skeleton_hashes(m, m->base_fd, m->base_hashes, m->over->base_hash_at,
	    m->over->base_n, "base", base, err) < 0)
		return -1;
	m->base = *base;
	return 0;
}

/* wsync_delta_make, and wsync_delta_make_over when over is set (head_fd: its skeleton). */
static int
s_run(int base_fd, int head_fd, const wsync_delta_over_t *over, int out_fd, const char *name,
    uint64_t limit, wsync_delta_stats_t *stats, wsync_err_t *err)
{
	s_make_t m = { .out = { .fd = out_fd, .name = name, .err = err }, .stats = stats,
	    .over = over };
	delta_out_t out;
	wsync_file_t *base = NULL, *head = NULL;
	unsigned opened = 0;
	int rc = -1;

	if (stats != NULL)
		memset(stats, 0, sizeof(*stats));
	pthread_mutex_init(&m.lock, NULL);
	atomic_init(&m.encoded, 0);
	if ((base = wsync_file_open_fd(base_fd, "base", err)) == NULL ||
	    (head = wsync_file_open_fd(head_fd, "head", err)) == NULL)
		goto out;
	m.base = base;
	m.head = head;
	if (over != NULL && !s_over_fits(&m, over->patch)) {
		rc = 2;
		goto out;
	}
	/* A thread per tensor at most: each holds a few MiB of buffers. */
	m.nworkers = wsync_threads_for(wsync_file_size(head));
	if (m.nworkers > wsync_file_count(head))
		m.nworkers = wsync_file_count(head) > 0 ? (unsigned)wsync_file_count(head) : 1;
	m.out.buf = wsync_io_buffer(OUT_BUF);
	m.forms = calloc(wsync_file_count(head) + 1, sizeof(*m.forms));
	m.workers = calloc(m.nworkers, sizeof(*m.workers));
	m.hashes = over != NULL ? calloc(wsync_file_count(head) + 1, sizeof(*m.hashes)) : NULL;
	if (over != NULL && over->base_read != NULL) {
		m.base_hashes = calloc(over->base_n + 1, sizeof(*m.base_hashes));
		m.base_hashed = calloc(over->base_n + 1, 1);
	}
	if (m.out.buf == NULL || m.forms == NULL || m.workers == NULL ||
	    (over != NULL && m.hashes == NULL) ||
	    (over != NULL && over->base_read != NULL && m.base_hashed == NULL)) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", name);
		goto out;
	}
	for (; opened < m.nworkers; opened++)
		if (s_worker_open(&m.workers[opened], name, err) < 0) {
			opened++;
			goto out;
		}
	/* Over, the tensors are packed into a scratch first: the head comes after them. */
	out = m.out;
	if (over != NULL && (m.out.fd = memfd_create("wsync-delta", MFD_CLOEXEC)) < 0) {
		m.out.fd = out_fd;
		wsync_err_set(err, EX_OSERR, "%s: memfd_create: %s", name, strerror(errno));
		goto out;
	}
	msgpack_packer_init(&m.pk, &m.out, delta_pk_write);
	m.base_fd = base_fd;
	m.head_fd = head_fd;
	m.limit = limit == WSYNC_DELTA_WORTH ? wsync_file_size(head) / 2 : limit;
	rc = s_make(&m, name, err);
	if (over != NULL) {
		delta_out_t tmp = m.out;
		m.out = out;
		if (rc == 0 && over->base_read != NULL)
			rc = s_base_finish(&m, &base, err);
		if (rc == 0)
			rc = s_over_finish(&m, &head, &tmp, err);
		close(tmp.fd);
		/* The head was packed last: the limit counts it as the files' delta does. */
		if (rc == 0 && m.out.pos > m.limit)
			rc = 1;
	}
	if (rc < 0)
		goto out;
	if (stats != NULL) {
		stats->bytes = m.out.pos;
		stats->head_bytes = wsync_file_size(head);
	}
out:
	for (unsigned k = 0; k < opened; k++)
		s_worker_close(&m.workers[k]);
	pthread_mutex_destroy(&m.lock);
	free(m.out.buf);
	free(m.forms);
	free(m.workers);
	free(m.hashes);
	free(m.base_hashes);
	free(m.base_hashed);
	wsync_file_close(&base);
	wsync_file_close(&head);
	return rc;
}

int
wsync_delta_make(int base_fd, int head_fd, int out_fd, const char *name, uint64_t limit,
    wsync_delta_stats_t *stats, wsync_err_t *err)
{
	return s_run(base_fd, head_fd, NULL, out_fd, name, limit, stats, err);
}

int
wsync_delta_make_over(int base_fd, const wsync_delta_over_t *head, int out_fd,
    const char *name, uint64_t limit, wsync_delta_stats_t *stats, wsync_err_t *err)
{
	return s_run(base_fd, head->fd, head, out_fd, name, limit, stats, err);
}
