/* io_int.h - descriptor I/O the writers and readers share. */
#ifndef WSYNC_IO_INT_H
#define WSYNC_IO_INT_H

#include <stddef.h>
#include "wsync.h"

/* Writes all len bytes to fd, retrying on EINTR and short writes; -1 with errno. */
int wsync_write_all(int fd, const void *buf, size_t len);
/* Writes all len bytes at off of fd, retrying on EINTR and short writes; -1 with errno. */
int wsync_write_at(int fd, const void *buf, size_t len, uint64_t off);
/* Writes v at off of fd big-endian (a msgpack uint64's bytes: a hash in a header); -1 with errno. */
int wsync_write_be64_at(int fd, uint64_t v, uint64_t off);
/* Reads all len bytes at off of fd; -1 with errno (EIO: the file ends first). */
int wsync_read_at(int fd, void *buf, size_t len, uint64_t off);

/*
 * Lets go of the pages of a MAP_SHARED file mapping in [p, p + len) (those
 * wholly inside): the data stays in the file and comes back on the next
 * touch, but stops counting in this process's memory. Never for anonymous
 * memory, whose data it would drop.
 */
void wsync_pages_release(const void *p, size_t len);
/*
 * As wsync_pages_release, with the page p starts in too: for a mapping read
 * front to back a piece at a time, whose first bytes the piece before read,
 * where keeping the page each piece starts in would keep one page per piece
 * (64 MiB of a 4 GiB input read in 256 KiB pieces).
 */
void wsync_pages_release_around(const void *p, size_t len);
/* Maps in the pages of [p, p + len) at once, cheaper than a fault per page. */
void wsync_pages_populate(const void *p, size_t len);
/*
 * A buffer of len bytes that read(), pread() and write() copy into or out of
 * at full speed: page-aligned (caller frees with free()). malloc's large
 * blocks start 16 bytes into a page, and the kernel copies to or from an
 * address off a 64-byte line several times slower (pread of 2 GiB from tmpfs
 * into 1 MiB pieces: 0.89 s there, 0.23 s aligned, on the bench machines).
 * NULL when out of memory.
 */
void *wsync_io_buffer(size_t len);

/* Writes something to a descriptor; the shape of both tree writers. */
typedef int (*wsync_write_fn)(wsync_tree_t *tree, int fd, const char *name,
    wsync_err_t *err);

/*
 * Runs write on a temporary file beside path, fsyncs it and renames it into
 * place, so a reader never sees a half-written file; "-" writes to stdout.
 */
int wsync_write_atomic(const char *path, wsync_write_fn write, wsync_tree_t *tree,
    wsync_err_t *err);

#endif
