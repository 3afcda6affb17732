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
#include "tempfile_int.h"

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

int
wsync_write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int
wsync_write_be64_at(int fd, uint64_t v, uint64_t off)
{
	unsigned char be[8];

	for (int b = 0; b < 8; b++)
		be[b] = (unsigned char)(v >> (56 - 8 * b));
	return wsync_write_at(fd, be, sizeof(be), off);
}

int
wsync_read_at(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		p += n;
		off += (uint64_t)n;
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
wsync_pages_release_around(const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p & ~(page - 1);

	wsync_pages_release((const void *)start, len + ((uintptr_t)p - start));
}

void *
wsync_io_buffer(size_t len)
{
	size_t page = 4096;

	/* aligned_alloc wants a multiple of the alignment. */
	return aligned_alloc(page, (len + page - 1) / page * page);
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

int
wsync_write_atomic(const char *path, wsync_write_fn write_fn, wsync_tree_t *tree,
    wsync_err_t *err)
{
	char tmp[PATH_MAX];
	int fd, saved;

	if (strcmp(path, "-") == 0)
		return write_fn(tree, STDOUT_FILENO, "stdout", err);
	if ((fd = wsync_temp_open(path, tmp, sizeof(tmp), err)) < 0)
		return -1;
	if (write_fn(tree, fd, path, err) < 0) {
		saved = errno;
		close(fd);
		unlink(tmp);
		errno = saved;
		return -1;
	}
	return wsync_temp_commit(fd, tmp, path, 0666 & ~wsync_umask(), err);
}
