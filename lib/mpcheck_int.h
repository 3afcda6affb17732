/* mpcheck_int.h - bounding a msgpack document before msgpack-c unpacks it. */
#ifndef WSYNC_MPCHECK_INT_H
#define WSYNC_MPCHECK_INT_H

#include <stddef.h>
#include <stdint.h>

/* The big-endian unsigned of n (1 to 8) bytes at p, as msgpack writes lengths. */
uint64_t wsync_be_uint(const unsigned char *p, int n);

/*
 * Walks the one msgpack object at p, reading only type bytes and lengths, and
 * checks that it is complete, that no container declares more entries than
 * the bytes left could hold, that nesting stays within max_depth and the
 * object count within max_objects. msgpack-c's C unpacker allocates a
 * container's entries from its declared count before reading them, so
 * without this a 5-byte input can make it ask for 64 GiB.
 * Returns 0 and sets *end to the offset after the object, or -1 with why set.
 */
int wsync_msgpack_check(const unsigned char *p, size_t len, size_t *end,
    int max_depth, size_t max_objects, char *why, size_t whylen);

/* Bodies of at most this many bytes (with their header) go into an image. */
#define WSYNC_MPIMAGE_BODY 65536

/*
 * The one msgpack document in the first len bytes of the file fd, checked
 * as wsync_msgpack_check does, copied into an anonymous mapping of len bytes
 * at the same offsets: every header, and bodies of up to WSYNC_MPIMAGE_BODY
 * bytes; larger ones (a tensor's data) are neither read nor copied, their
 * pages left untouched. The file is read with pread, a window at a time.
 * msgpack-c parses the image as it would the file, without the file being
 * mapped: a mapped file brings, with each header read, the page cache's whole
 * folio around it (a MiB or more) into the reader's RSS.
 * Returns the image (the caller munmaps len bytes) and sets *end, or NULL
 * with why set.
 */
unsigned char *wsync_msgpack_image(int fd, size_t len, size_t *end, int max_depth,
    size_t max_objects, char *why, size_t whylen);

/*
 * How many bytes of the document have arrived, once at least upto have or no
 * more will come (then fewer than upto): a document walked while its bytes
 * are still being written, in order, into its file.
 */
typedef uint64_t (*wsync_mp_wait_fn)(void *arg, uint64_t upto);

/*
 * A document of len bytes in the file fd, walked an object at a time as
 * wsync_msgpack_image does the whole, into an image of its own: each read
 * first waits (wait, unless NULL) for the bytes it needs. NULL with why set.
 */
typedef struct wsync_mpwalk wsync_mpwalk_t;
wsync_mpwalk_t *wsync_mpwalk_new(int fd, size_t len, wsync_mp_wait_fn wait, void *arg,
    char *why, size_t whylen);
/* The image: the headers and small bodies of the objects walked, at their offsets. */
const unsigned char *wsync_mpwalk_image(const wsync_mpwalk_t *w);
/*
 * Walks the object at off into the image, checked as wsync_msgpack_check does
 * (max_objects counts every object the walk has met so far). 0 with *end the
 * offset after it, -1 with why set (errno EPIPE: its bytes stopped coming).
 */
int wsync_mpwalk_object(wsync_mpwalk_t *w, size_t off, size_t *end, int max_depth,
    size_t max_objects, char *why, size_t whylen);
/*
 * The header of the map (map 1: its pairs in *count) or array (map 0: its
 * elements) at off, and where its first object starts; -1 with why set (errno
 * EPIPE: its bytes stopped coming, 0: it is not one).
 */
int wsync_mpwalk_open(wsync_mpwalk_t *w, size_t off, int map, uint64_t *count, size_t *first,
    char *why, size_t whylen);
void wsync_mpwalk_free(wsync_mpwalk_t **w);

#endif
