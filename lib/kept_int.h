/*
 * kept_int.h - files of a store on tmpfs kept mapped from one pass to the next.
 *
 * On 4 KiB pages a rebuild that reads its base with pread and writes its
 * output with pwrite pays the kernel per page, twice: a copy out of the page
 * cache, a copy into it, a look-up each (2 GiB on 2 threads, here: 0.34 s).
 * Through mappings whose page tables are already filled it is one memcpy
 * (0.20-0.24 s). A mapping is filled once, when its file is first written
 * through it, and kept while the file lives: a recycling hub's files go round
 * (version, spare, slot, version), so every later rebuild of one of them, and
 * every rebuild that reads one as its base, finds its pages mapped.
 *
 * Only on tmpfs, where the mapped pages are the file's own and cost no more
 * memory (they show in the process's RSS as shared memory), and only for
 * files the process wrote itself through the mapping: a file another process
 * could write or cut short is never read through one (wsync_kept_forget).
 */
#ifndef WSYNC_KEPT_INT_H
#define WSYNC_KEPT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct wsync_kept_set wsync_kept_t;        /* the set */
typedef struct wsync_kept_map wsync_kept_map_t; /* one file's mapping, held by a pass */

/* Whether dir lies on tmpfs. */
int wsync_kept_fits(const char *dir);
#define WSYNC_KEPT_MAPS 64      /* files a set keeps mapped at most (each holds a descriptor) */

/* A set of at most max files kept mapped (wsync_kept_set_max); NULL when out of memory. */
wsync_kept_t *wsync_kept_new(unsigned max);
/*
 * Keeps at most max files (up to WSYNC_KEPT_MAPS): those over it, the least
 * recently held first, go when the next file is mapped.
 */
void wsync_kept_set_max(wsync_kept_t *k, unsigned max);
/* Unmaps every file and frees the set; no map may be held. */
void wsync_kept_free(wsync_kept_t **k);

/*
 * The file open read-write at fd, named path, of size bytes, mapped to be
 * written: its kept mapping, made (and filled) when the file is not kept yet,
 * only if every one of its pages exists already (a recycled file: writing
 * through the mapping then never needs a page tmpfs may not have). NULL when
 * k is NULL or the file does not qualify: the caller writes with pwrite.
 * *held is released with wsync_kept_release.
 */
unsigned char *wsync_kept_out(wsync_kept_t *k, int fd, const char *path, uint64_t size,
    wsync_kept_map_t **held);
/* The kept mapping of the file open at fd, or NULL when it is not kept (at its size). */
const unsigned char *wsync_kept_in(wsync_kept_t *k, int fd, wsync_kept_map_t **held);
/* Lets go of a mapping held by a pass (NULL: nothing). */
void wsync_kept_release(wsync_kept_map_t *m);

/* The file open at fd is not kept any more: another process is about to write it. */
void wsync_kept_forget(wsync_kept_t *k, int fd);
/* Unmaps the files no longer linked anywhere: their pages are freed. */
void wsync_kept_sweep(wsync_kept_t *k);

/*
 * One file only this process can reach (an unnamed scratch file: a
 * wsync-push --batch's copy of the version it pushed last, made into the
 * next one in place), kept mapped to be written from one push to the next.
 */
typedef struct {
	unsigned char *base;    /* NULL: none */
	size_t len;
	dev_t dev;
	ino_t ino;
} wsync_kept_one_t;
/*
 * The file at fd mapped whole for writing: m's mapping while it is that
 * file at its size, else a new one (the old let go), made when the file lies
 * on tmpfs and all its pages exist; NULL when it does not qualify (m let go).
 */
unsigned char *wsync_kept_one(wsync_kept_one_t *m, int fd);
/* Lets m's mapping go. */
void wsync_kept_one_release(wsync_kept_one_t *m);

#endif
