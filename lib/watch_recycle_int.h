/* watch_recycle_int.h - a watcher's replaced outputs, kept for the next version. */
#ifndef WSYNC_WATCH_RECYCLE_INT_H
#define WSYNC_WATCH_RECYCLE_INT_H

#include <stddef.h>
#include <stdint.h>

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
	/*
	 * The last delta applied at the output, kept (an unnamed file): a spare
	 * that holds its base is brought forward by it, then by the next delta,
	 * writing only what changed (wsync_delta_apply_over).
	 */
	int delta_kept;
	int delta_fd;
	uint64_t delta_base;                /* its base's content id */
	uint64_t delta_head;                /* and its head's */
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
/* As wsync_recycle_take, a spare whose header says it holds content (a content id). */
int wsync_recycle_take_content(wsync_recycle_t *r, uint64_t content, char *buf, size_t size);
/* Keeps delta_fd (a dup of it) as the last delta applied, from base to head (content ids). */
void wsync_recycle_delta(wsync_recycle_t *r, int delta_fd, uint64_t base, uint64_t head);
/*
 * Brings a spare that holds the kept delta's base forward to its head, in
 * place (wsync_delta_apply_over, unchecked: the apply of the next delta over
 * it checks every tensor): the next version's delta then makes it in one
 * pass, only what changed written. Between versions, once one is applied.
 * name is for errors, which leave nothing behind.
 */
void wsync_recycle_forward(wsync_recycle_t *r, const char *name);
/* Unlinks every spare and frees their names; lets go of the delta kept. */
void wsync_recycle_clear(wsync_recycle_t *r);

#endif
