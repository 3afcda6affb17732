/* watch_recycle_int.h - a watcher's replaced outputs, kept for the next version. */
#ifndef WSYNC_WATCH_RECYCLE_INT_H
#define WSYNC_WATCH_RECYCLE_INT_H

#include <stddef.h>

#define WSYNC_RECYCLE_SPARES 4      /* replaced outputs kept per model */

/*
 * The files a watcher wrote itself that a newer version replaced at its
 * output, kept under a temporary name beside it (PATH.tmp.XXXXXX, which a
 * restarted watcher removes): their pages exist, so the next version sent
 * over the socket is written into one at the speed of a memory copy, once
 * no reader holds it (wsync(7), LEASES).
 */
typedef struct wsync_recycle {
	char *names[WSYNC_RECYCLE_SPARES];  /* oldest first, owned */
	size_t n;
} wsync_recycle_t;

/*
 * Keeps the file at path (which a newer version is about to replace) as a
 * spare, under a new name beside it; the oldest spare goes when there are
 * too many. Nothing happens when it cannot be linked.
 */
void wsync_recycle_keep(wsync_recycle_t *r, const char *path);
/*
 * A spare no one else links or leases, opened for reading and writing with
 * an exclusive flock held until it is closed, its name in buf (size bytes),
 * taken out of r; -1 when there is none.
 */
int wsync_recycle_take(wsync_recycle_t *r, char *buf, size_t size);
/* Unlinks every spare and frees their names. */
void wsync_recycle_clear(wsync_recycle_t *r);

#endif
