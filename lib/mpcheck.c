/* mpcheck.c - bounds a msgpack document's declared sizes (see mpcheck_int.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mpcheck_int.h"

uint64_t
wsync_be_uint(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/*
 * Decodes the header at p[off]: *skip is the bytes of header and body to step
 * over, *children the objects it contains (two per map entry). -1 when the
 * header itself is cut short or the byte is never used (0xc1).
 */
static int
s_header(const unsigned char *p, size_t len, size_t off, uint64_t *skip,
    uint64_t *children)
{
	unsigned b = p[off];
	int n;

	*children = 0;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
		*skip = 1;
		return 0;
	}
	if (b <= 0x8f || (b >= 0x90 && b <= 0x9f)) {
		*skip = 1;
		*children = (uint64_t)(b & 0x0f) * (b <= 0x8f ? 2 : 1);
		return 0;
	}
	if (b >= 0xa0 && b <= 0xbf) {
		*skip = 1 + (b & 0x1f);
		return 0;
	}
	switch (b) {
	case 0xcc: case 0xd0: *skip = 2; return 0;
	case 0xcd: case 0xd1: *skip = 3; return 0;
	case 0xca: case 0xce: case 0xd2: *skip = 5; return 0;
	case 0xcb: case 0xcf: case 0xd3: *skip = 9; return 0;
	case 0xd4: *skip = 3; return 0;
	case 0xd5: *skip = 4; return 0;
	case 0xd6: *skip = 6; return 0;
	case 0xd7: *skip = 10; return 0;
	case 0xd8: *skip = 18; return 0;
	case 0xc4: case 0xd9: n = 1; break;
	case 0xc5: case 0xda: n = 2; break;
	case 0xc6: case 0xdb: n = 4; break;
	case 0xc7: n = 1; break;
	case 0xc8: n = 2; break;
	case 0xc9: n = 4; break;
	case 0xdc: case 0xde: n = 2; break;
	case 0xdd: case 0xdf: n = 4; break;
	default: return -1;
	}
	if (len - off < 1 + (size_t)n)
		return -1;
	if (b >= 0xdc) {
		*skip = 1 + (uint64_t)n;
		*children = wsync_be_uint(p + off + 1, n) * (b >= 0xde ? 2 : 1);
	} else {
		/* str, bin and ext: a length, then (ext only) a type byte, then the body. */
		*skip = 1 + (uint64_t)n + (b >= 0xc7 && b <= 0xc9) + wsync_be_uint(p + off + 1, n);
	}
	return 0;
}

/* A document read from a file into an image: a window of it read at a time. */
typedef struct s_fill {
	int fd;
	unsigned char *image;           /* the document's length, anonymous */
	unsigned char win[1 << 16];
	size_t win_off, win_len;
	wsync_mp_wait_fn wait;          /* NULL: the whole document is in the file */
	void *wait_arg;
} s_fill_t;

/* Copies bytes [off, off + n) of the file into the image. */
static int
s_fill(s_fill_t *f, size_t off, size_t n)
{
	while (n > 0) {
		size_t k;
		if (off < f->win_off || off >= f->win_off + f->win_len) {
			size_t want = sizeof(f->win);
			ssize_t got;
			/* Bytes past those arrived are not read: they may still change. */
			if (f->wait != NULL) {
				uint64_t have = f->wait(f->wait_arg, off + n);
				if (have < off + n) {
					errno = EPIPE;
					return -1;
				}
				if (have - off < want)
					want = (size_t)(have - off);
			}
			do
				got = pread(f->fd, f->win, want, (off_t)off);
			while (got < 0 && errno == EINTR);
			if (got <= 0) {
				if (got == 0)
					errno = EIO;
				return -1;
			}
			f->win_off = off;
			f->win_len = (size_t)got;
		}
		k = f->win_off + f->win_len - off;
		if (k > n)
			k = n;
		memcpy(f->image + off, f->win + (off - f->win_off), k);
		off += k;
		n -= k;
	}
	return 0;
}

/* The walk of wsync_msgpack_check; with fill, each header (and small body) is read first. */
static int
s_walk(const unsigned char *p, size_t len, s_fill_t *fill, size_t start, size_t *end,
    int max_depth, size_t *objects, size_t max_objects, char *why, size_t whylen)
{
	uint64_t left[64];           /* objects still to read at each open level */
	int depth = 0;
	size_t off = start;

	if (max_depth > 63)
		max_depth = 63;
	left[0] = 1;
	while (depth > 0 || left[0] > 0) {
		uint64_t skip, children;

		if (left[depth] == 0) {
			depth--;
			continue;
		}
		left[depth]--;
		if (fill != NULL && off < len && s_fill(fill, off, len - off < 9 ? len - off : 9) < 0) {
			snprintf(why, whylen, "cannot read byte %zu: %s", off, strerror(errno));
			return -1;
		}
		if (off >= len || s_header(p, len, off, &skip, &children) < 0) {
			snprintf(why, whylen, off >= len ? "truncated at byte %zu" :
			    "bad msgpack header at byte %zu", off);
			return -1;
		}
		if (++*objects > max_objects) {
			snprintf(why, whylen, "more than %zu msgpack objects", max_objects);
			return -1;
		}
		if (skip > len - off) {
			snprintf(why, whylen, "truncated: the object at byte %zu needs %llu "
			    "bytes, %zu are left", off, (unsigned long long)skip, len - off);
			return -1;
		}
		/* Keys, strings and small bins go into the image; a tensor's data does not. */
		if (fill != NULL && children == 0 && skip > 9 && skip <= WSYNC_MPIMAGE_BODY &&
		    s_fill(fill, off, (size_t)skip) < 0) {
			snprintf(why, whylen, "cannot read byte %zu: %s", off, strerror(errno));
			return -1;
		}
		off += skip;
		if (children == 0)
			continue;
		if (children > len - off) {
			snprintf(why, whylen, "truncated: the container at byte %zu declares %llu objects; "
			    "only %zu bytes are left", off - skip, (unsigned long long)children,
			    len - off);
			return -1;
		}
		if (depth == max_depth) {
			snprintf(why, whylen, "nested deeper than %d levels at byte %zu",
			    max_depth, off - skip);
			return -1;
		}
		left[++depth] = children;
	}
	*end = off;
	return 0;
}

int
wsync_msgpack_check(const unsigned char *p, size_t len, size_t *end, int max_depth,
    size_t max_objects, char *why, size_t whylen)
{
	size_t objects = 0;

	return s_walk(p, len, NULL, 0, end, max_depth, &objects, max_objects, why, whylen);
}

/* ---- a document walked as it arrives ---- */

struct wsync_mpwalk {
	s_fill_t fill;
	size_t len;
	size_t objects;
};

wsync_mpwalk_t *
wsync_mpwalk_new(int fd, size_t len, wsync_mp_wait_fn wait, void *arg, char *why,
    size_t whylen)
{
	wsync_mpwalk_t *w;
	unsigned char *image;

	if (len == 0) {
		snprintf(why, whylen, "truncated at byte 0");
		return NULL;
	}
	/* Reserves nothing: only the pages a header or a small body lands in are written. */
	image = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
	    MAP_NORESERVE, -1, 0);
	if (image == MAP_FAILED || (w = calloc(1, sizeof(*w))) == NULL) {
		snprintf(why, whylen, "cannot map %zu bytes for its headers: %s", len,
		    strerror(errno));
		if (image != MAP_FAILED)
			munmap(image, len);
		return NULL;
	}
	w->fill.fd = fd;
	w->fill.image = image;
	w->fill.wait = wait;
	w->fill.wait_arg = arg;
	w->len = len;
	return w;
}

const unsigned char *
wsync_mpwalk_image(const wsync_mpwalk_t *w)
{
	return w->fill.image;
}

int
wsync_mpwalk_object(wsync_mpwalk_t *w, size_t off, size_t *end, int max_depth,
    size_t max_objects, char *why, size_t whylen)
{
	/* errno says EPIPE only when the bytes stopped coming, not what an earlier call left. */
	errno = 0;
	return s_walk(w->fill.image, w->len, &w->fill, off, end, max_depth, &w->objects,
	    max_objects, why, whylen);
}

int
wsync_mpwalk_open(wsync_mpwalk_t *w, size_t off, int map, uint64_t *count, size_t *first,
    char *why, size_t whylen)
{
	const unsigned char *p = w->fill.image;
	uint64_t skip, children;
	int is;

	errno = 0;
	if (off >= w->len || s_fill(&w->fill, off, w->len - off < 9 ? w->len - off : 9) < 0) {
		snprintf(why, whylen, off >= w->len ? "truncated at byte %zu" :
		    "cannot read byte %zu: %s", off, strerror(errno));
		return -1;
	}
	is = map ? (p[off] >= 0x80 && p[off] <= 0x8f) || p[off] == 0xde || p[off] == 0xdf :
	    (p[off] >= 0x90 && p[off] <= 0x9f) || p[off] == 0xdc || p[off] == 0xdd;
	if (!is || s_header(p, w->len, off, &skip, &children) < 0) {
		snprintf(why, whylen, "no %s at byte %zu", map ? "map" : "array", off);
		return -1;
	}
	if (children > w->len - off - skip) {
		snprintf(why, whylen, "truncated: the container at byte %zu declares %llu objects; "
		    "only %zu bytes are left", off, (unsigned long long)children,
		    w->len - off - (size_t)skip);
		return -1;
	}
	w->objects++;
	*count = map ? children / 2 : children;
	*first = off + (size_t)skip;
	return 0;
}

unsigned char *
wsync_msgpack_image(int fd, size_t len, size_t *end, int max_depth, size_t max_objects,
    char *why, size_t whylen)
{
	wsync_mpwalk_t *w = wsync_mpwalk_new(fd, len, NULL, NULL, why, whylen);
	unsigned char *image;

	if (w == NULL)
		return NULL;
	if (wsync_mpwalk_object(w, 0, end, max_depth, max_objects, why, whylen) < 0) {
		wsync_mpwalk_free(&w);
		return NULL;
	}
	/* The image outlives the walk. */
	image = w->fill.image;
	free(w);
	return image;
}

void
wsync_mpwalk_free(wsync_mpwalk_t **w)
{
	if (*w == NULL)
		return;
	munmap((*w)->fill.image, (*w)->len);
	free(*w);
	*w = NULL;
}
