/*
 * pushed_int.h - what a pusher remembers of the files it pushed: each
 * file's tensor hashes and content id, so that the next push naming it as
 * its --base need not read it twice (once to diff, once to hash). Kept in
 * $XDG_CACHE_HOME/wsync/pushed (else ~/.cache/wsync/pushed), one small file
 * per input file, keyed by its device and inode and trusted only while its
 * size, mtime and ctime are those it had when it was hashed. A stale entry
 * costs speed, never a wrong version: the hub checks every tensor it
 * rebuilds against the new file's own hashes (wsync-push(1) FILES).
 */
#ifndef WSYNC_PUSHED_INT_H
#define WSYNC_PUSHED_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/*
 * Whether st, taken at when (CLOCK_REALTIME_COARSE, read before the stat),
 * can key an entry: its ctime lies before when, so that any later change of
 * the file moves its ctime.
 */
int wsync_pushed_settled(const struct stat *st, const struct timespec *when);
/* Whether a and b key the same entry: the same device, inode, size, mtime and ctime. */
int wsync_pushed_same(const struct stat *a, const struct stat *b);
/*
 * The n hashes and the content id remembered for the file st describes
 * (hashes: n of them, written only on a hit): 1 when an entry holds it as it
 * is now, 0 when none does or the cache cannot be read.
 */
int wsync_pushed_recall(const struct stat *st, size_t n, uint64_t *hashes, uint64_t *content);
/*
 * Remembers the n hashes and content id of the file st describes, replacing
 * what was remembered of it; past WSYNC_PUSHED_MAX entries, the oldest go.
 * A cache that cannot be written is left as it is, silently: it only saves time.
 */
void wsync_pushed_remember(const struct stat *st, size_t n, const uint64_t *hashes,
    uint64_t content);
/* Forgets what is remembered of the file st describes. */
void wsync_pushed_forget(const struct stat *st);

/* The most entries kept: a trainer pushes its last file as the base of the next. */
#define WSYNC_PUSHED_MAX 64

#endif
