/* io.c - whole writes and atomic file replacement. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "io_int.h"

int
wsync_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The page-aligned range [*start, *end) inside [p, p + len); 0 when empty. */
static int
s_inner_pages(const void *p, size_t len, uintptr_t *start, uintptr_t *end)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	*start = ((uintptr_t)p + page - 1) & ~(page - 1);
	*end = ((uintptr_t)p + len) & ~(page - 1);
	return *end > *start;
}

int
wsync_lease_open(const char *path)
{
	/* A few rounds: each failure means the path was given a newer file meanwhile. */
	for (int round = 0; round < 8; round++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct stat held, named;
		if (fd < 0)
			return -1;
		/* Exclusively locked: a hub is rewriting it, so the path names another. */
		if (flock(fd, LOCK_SH | LOCK_NB) == 0 && fstat(fd, &held) == 0 &&
		    stat(path, &named) == 0 && held.st_dev == named.st_dev &&
		    held.st_ino == named.st_ino)
			return fd;
		close(fd);
	}
	errno = EAGAIN;
	return -1;
}

void
wsync_pages_release(const void *p, size_t len)
{
	uintptr_t start, end;

	if (s_inner_pages(p, len, &start, &end))
		madvise((void *)start, end - start, MADV_DONTNEED);
}

void
wsync_pages_populate(const void *p, size_t len)
{
#ifdef MADV_POPULATE_READ
	uintptr_t start, end;

	/* Older kernels refuse it (EINVAL): then the pages come by faults, as before. */
	if (s_inner_pages(p, len, &start, &end))
		madvise((void *)start, end - start, MADV_POPULATE_READ);
#else
	(void)p;
	(void)len;
#endif
}

/* The process umask; mkstemp makes 0600 files, written files get 0666 & ~umask. */
static mode_t
s_umask(void)
{
	mode_t mask = umask(022);

	umask(mask);
	return mask;
}

/* fsyncs the directory holding path, so that a rename into it is durable. */
static int
s_sync_dir(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd, rc;

	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		return -1;
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

int
wsync_write_atomic(const char *path, wsync_write_fn write_fn, wsync_tree_t *tree,
    wsync_err_t *err)
{
	char tmp[PATH_MAX];
	int fd = -1, saved;

	if (strcmp(path, "-") == 0)
		return write_fn(tree, STDOUT_FILENO, "stdout", err);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp))
		return wsync_err_set(err, EX_IOERR, "%s: path too long", path);
	if ((fd = mkstemp(tmp)) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot create a temporary file: %s",
		    path, strerror(errno));
	if (write_fn(tree, fd, path, err) < 0)
		goto fail;
	if (fchmod(fd, 0666 & ~s_umask()) < 0 || fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		wsync_err_set(err, EX_IOERR, "%s: %s", path, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", path,
		    strerror(errno));
		goto fail;
	}
	s_sync_dir(path);
	return 0;
fail:
	saved = errno;
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	errno = saved;
	return -1;
}
