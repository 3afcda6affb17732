/*
 * tempfile_int.h - a file written beside its final name and renamed into
 * place, so that a reader sees the old file or the new one, never half of one.
 * Every temporary name is "PATH.tmp.XXXXXX" (wsync-watch(1) removes those a
 * killed watcher left).
 */
#ifndef WSYNC_TEMPFILE_INT_H
#define WSYNC_TEMPFILE_INT_H

#include <stddef.h>
#include <sys/types.h>

#include "wsync.h"

/*
 * Creates a new temporary file beside path (mode 0600, close-on-exec) and
 * returns its descriptor, its name in buf. -1 with err: 64 when the name does
 * not fit, 74 when it cannot be created.
 */
int wsync_temp_open(const char *path, char *buf, size_t size, wsync_err_t *err);
/* Links src to a new temporary name beside path (written to buf); -1 with errno. */
int wsync_temp_link(const char *src, const char *path, char *buf, size_t size);
/*
 * Gives the temporary file tmp (open as fd) mode, makes it durable, closes fd
 * and renames tmp onto path, then syncs path's directory. fd is closed and,
 * on failure, tmp removed either way; -1 with err (74) naming path.
 */
int wsync_temp_commit(int fd, const char *tmp, const char *path, mode_t mode,
    wsync_err_t *err);
/* Writes text to path through a temporary file of mode, renamed into place; -1 with err. */
int wsync_temp_write_text(const char *path, const char *text, mode_t mode, wsync_err_t *err);
/* fsyncs the directory holding path, so that a rename into it is durable. */
int wsync_sync_parent(const char *path);
/* The process's umask, read without changing it for good. */
mode_t wsync_umask(void);

#endif
