/* client_select.c - fetching some tensors of a version: its headers walked with small gets, then their data. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "mpcheck_int.h"

/* Bytes got past what the walker needs at once: a tensor's keys, shape and pad fit. */
#define S_AHEAD 4096
/* The walker's buffer: the longest piece it reads whole (a meta value, 64 KiB) fits. */
#define S_BUF (WSYNC_MAX_META_VALUE + S_AHEAD)
/* Maps and arrays nested deeper than the tree may be are refused. */
#define S_MAX_NEST (WSYNC_MAX_DEPTH + 4)

struct s_walk {
	wsync_client_t *c;
	const char *model, *worker;
	const wsync_head_t *h;
	const wsync_ckpt_out_t *sel;
	int fd;
	int64_t deadline;
	wsync_err_t *err;
	unsigned char *buf;          /* bytes [boff, boff + blen) of the version */
	uint64_t boff;
	size_t blen;
	wsync_range_t *want;         /* data ranges of the selected tensors */
	size_t nwant, capwant;
	char path[WSYNC_MAX_PATH + 1];
};

static int
s_bad(struct s_walk *w, uint64_t off, const char *what)
{
	return wsync_err_set(w->err, EX_DATAERR, "%s version %" PRIu64 ": %s at byte %" PRIu64,
	    w->model, w->h->version, what, off);
}

/* Makes bytes [off, off + n) readable in w->buf, getting them (and some ahead) when missing. */
static const unsigned char *
s_need(struct s_walk *w, uint64_t off, size_t n)
{
	uint64_t len;
	ssize_t got;

	if (off >= w->boff && off + n <= w->boff + w->blen)
		return w->buf + (off - w->boff);
	if (n > S_BUF || off > w->h->size || n > w->h->size - off) {
		s_bad(w, off, "truncated or oversized header");
		return NULL;
	}
	len = n + S_AHEAD > S_BUF ? S_BUF : n + S_AHEAD;
	if (len > w->h->size - off)
		len = w->h->size - off;
	if (wsync_client_get_ranges(w->c, w->model, w->h, w->worker, w->fd,
	    &(wsync_range_t){ off, len }, 1, w->deadline, w->err) < 0)
		return NULL;
	if ((got = pread(w->fd, w->buf, (size_t)len, (off_t)off)) != (ssize_t)len) {
		wsync_err_set(w->err, EX_IOERR, "%s: read back: %s", w->model,
		    got < 0 ? strerror(errno) : "short");
		return NULL;
	}
	w->boff = off;
	w->blen = (size_t)len;
	return w->buf;
}

/* What a msgpack header says: its kind, its count (map, array) or length (str, bin). */
enum s_kind { S_SCALAR, S_STR, S_BIN, S_ARRAY, S_MAP };

/* Reads the header at *off (moved past it): kind and n; -1 on an unknown type. */
static int
s_head(struct s_walk *w, uint64_t *off, enum s_kind *kind, uint64_t *n)
{
	const unsigned char *p = s_need(w, *off, 1);
	unsigned b;
	int len = 0;

	if (p == NULL)
		return -1;
	b = p[0];
	*off += 1;
	*n = 0;
	*kind = S_SCALAR;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return 0;
	if (b >= 0x80 && b <= 0x8f) {
		*kind = S_MAP;
		*n = b & 0x0f;
		return 0;
	}
	if (b >= 0x90 && b <= 0x9f) {
		*kind = S_ARRAY;
		*n = b & 0x0f;
		return 0;
	}
	if (b >= 0xa0 && b <= 0xbf) {
		*kind = S_STR;
		*n = b & 0x1f;
		return 0;
	}
	switch (b) {
	case 0xca: *n = 4; return 0;  /* float 32: n bytes follow, skipped by the caller */
	case 0xcb: *n = 8; return 0;
	case 0xcc: case 0xd0: *n = 1; return 0;
	case 0xcd: case 0xd1: *n = 2; return 0;
	case 0xce: case 0xd2: *n = 4; return 0;
	case 0xcf: case 0xd3: *n = 8; return 0;
	case 0xc4: *kind = S_BIN; len = 1; break;
	case 0xc5: *kind = S_BIN; len = 2; break;
	case 0xc6: *kind = S_BIN; len = 4; break;
	case 0xd9: *kind = S_STR; len = 1; break;
	case 0xda: *kind = S_STR; len = 2; break;
	case 0xdb: *kind = S_STR; len = 4; break;
	case 0xdc: *kind = S_ARRAY; len = 2; break;
	case 0xdd: *kind = S_ARRAY; len = 4; break;
	case 0xde: *kind = S_MAP; len = 2; break;
	case 0xdf: *kind = S_MAP; len = 4; break;
	default: return s_bad(w, *off - 1, "a msgpack type the format does not use");
	}
	if ((p = s_need(w, *off, (size_t)len)) == NULL)
		return -1;
	*n = wsync_be_uint(p, len);
	*off += (uint64_t)len;
	return 0;
}

/* Skips the value at *off, reading its headers (not the bytes of a bin or string). */
static int
s_skip(struct s_walk *w, uint64_t *off, int nest)
{
	enum s_kind kind;
	uint64_t n;

	if (nest > S_MAX_NEST)
		return s_bad(w, *off, "nesting too deep");
	if (s_head(w, off, &kind, &n) < 0)
		return -1;
	switch (kind) {
	case S_SCALAR: case S_STR: case S_BIN:
		if (n > w->h->size - *off)
			return s_bad(w, *off, "a length beyond the end");
		*off += n;
		return 0;
	case S_ARRAY:
		for (uint64_t i = 0; i < n; i++)
			if (s_skip(w, off, nest + 1) < 0)
				return -1;
		return 0;
	case S_MAP:
		for (uint64_t i = 0; i < 2 * n; i++)
			if (s_skip(w, off, nest + 1) < 0)
				return -1;
		return 0;
	}
	return 0;
}

static int
s_want(struct s_walk *w, uint64_t off, uint64_t len)
{
	if (w->nwant == w->capwant) {
		size_t cap = w->capwant ? w->capwant * 2 : 64;
		wsync_range_t *p = realloc(w->want, cap * sizeof(*p));
		if (p == NULL)
			return wsync_err_set(w->err, EX_SOFTWARE, "out of memory");
		w->want = p;
		w->capwant = cap;
	}
	w->want[w->nwant++] = (wsync_range_t){ off, len };
	return 0;
}

/* 1 when the tensor at path is fetched: selected, or a small file. */
static int
s_selected(const wsync_ckpt_out_t *sel, const char *path)
{
	return strncmp(path, WSYNC_CKPT_FILES ".", sizeof(WSYNC_CKPT_FILES)) == 0 ||
	    wsync_ckpt_selected(sel, path);
}

/*
 * Walks the map of the tree at *off whose path is w->path (plen bytes): a
 * "data" bin is a tensor's data, taken when selected and skipped unread
 * otherwise; a map goes one level down.
 */
static int
s_node(struct s_walk *w, uint64_t *off, size_t plen, int nest)
{
	enum s_kind kind;
	uint64_t n, klen;

	if (nest > WSYNC_MAX_DEPTH + 1)
		return s_bad(w, *off, "tree nested too deep");
	if (s_head(w, off, &kind, &n) < 0)
		return -1;
	if (kind != S_MAP)
		return s_bad(w, *off, "a tree level that is not a map");
	for (uint64_t i = 0; i < n; i++) {
		const unsigned char *p;
		char k[WSYNC_MAX_KEY];
		uint64_t voff;
		enum s_kind vkind;
		uint64_t vn;
		if (s_head(w, off, &kind, &klen) < 0)
			return -1;
		if (kind != S_STR || klen == 0 || klen > WSYNC_MAX_KEY)
			return s_bad(w, *off, "a key that is not a string of 1 to 255 bytes");
		/* Copied: the next get may refill the buffer. */
		if ((p = s_need(w, *off, (size_t)klen)) == NULL)
			return -1;
		memcpy(k, p, (size_t)klen);
		*off += klen;
		voff = *off;
		if (klen == 4 && memcmp(k, "data", 4) == 0) {
			if (s_head(w, off, &vkind, &vn) < 0)
				return -1;
			if (vkind == S_BIN) {
				if (vn > w->h->size - *off)
					return s_bad(w, *off, "a length beyond the end");
				w->path[plen] = '\0';
				if (s_selected(w->sel, w->path) && vn > 0 && s_want(w, *off, vn) < 0)
					return -1;
				*off += vn;
				continue;
			}
			*off = voff;
		}
		if (s_head(w, &voff, &vkind, &vn) < 0)
			return -1;
		if (vkind == S_MAP) {
			size_t at = plen + (plen > 0);
			if (at + klen > WSYNC_MAX_PATH)
				return s_bad(w, *off, "a path longer than 1024 bytes");
			memcpy(w->path + at, k, (size_t)klen);
			if (plen > 0)
				w->path[plen] = '.';
			if (s_node(w, off, at + (size_t)klen, nest + 1) < 0)
				return -1;
			continue;
		}
		if (s_skip(w, off, nest + 1) < 0)
			return -1;
	}
	return 0;
}

int
wsync_client_get_selected(wsync_client_t *c, const char *model, const wsync_head_t *h,
    const char *worker, const wsync_ckpt_out_t *sel, int fd, int64_t deadline,
    wsync_err_t *err)
{
	struct s_walk w = { .c = c, .model = model, .worker = worker, .h = h, .sel = sel,
	    .fd = fd, .deadline = deadline, .err = err };
	enum s_kind kind;
	uint64_t off = 0, n, klen;
	int rc = -1;

	if ((w.buf = malloc(S_BUF)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (s_head(&w, &off, &kind, &n) < 0)
		goto out;
	if (kind != S_MAP) {
		s_bad(&w, 0, "not a map");
		goto out;
	}
	for (uint64_t i = 0; i < n; i++) {
		const unsigned char *k;
		if (s_head(&w, &off, &kind, &klen) < 0)
			goto out;
		if (kind != S_STR || (k = s_need(&w, off, (size_t)klen)) == NULL) {
			if (kind != S_STR)
				s_bad(&w, off, "a top-level key that is not a string");
			goto out;
		}
		off += klen;
		if (klen == 4 && memcmp(k, "tree", 4) == 0) {
			if (s_node(&w, &off, 0, 0) < 0)
				goto out;
		} else if (s_skip(&w, &off, 0) < 0)
			goto out;
	}
	rc = wsync_client_get_ranges(c, model, h, worker, fd, w.want, w.nwant, deadline, err);
out:
	free(w.want);
	free(w.buf);
	return rc;
}

int
wsync_client_verify_selected(int fd, const char *model, const wsync_head_t *h,
    const wsync_ckpt_out_t *sel, wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open_fd(fd, model, err);
	int rc = -1;

	if (f == NULL)
		return -1;
	if (wsync_file_content_id(f) != h->content || wsync_file_version(f) != h->version) {
		wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": received content "
		    "%016" PRIx64 " version %" PRIu64 ", the hub announced %016" PRIx64, model,
		    h->version, wsync_file_content_id(f), wsync_file_version(f), h->content);
		goto out;
	}
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		uint64_t got;
		if (!s_selected(sel, t->path))
			continue;
		if ((got = wsync_hash(t->data, (size_t)t->nbytes)) != t->hash) {
			wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": tensor %s: hash "
			    "%016" PRIx64 ", its header says %016" PRIx64, model, h->version, t->path,
			    got, t->hash);
			goto out;
		}
	}
	rc = 0;
out:
	wsync_file_close(&f);
	return rc;
}
