/* tempfile.c - files written beside their final name, renamed into place (see tempfile_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "io_int.h"
#include "tempfile_int.h"

#define S_SUFFIX ".tmp.XXXXXX"

/* Writes "path.tmp.XXXXXX" into buf; its length, or -1 when it does not fit. */
static int
s_pattern(const char *path, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s" S_SUFFIX, path);

	return n < 0 || (size_t)n >= size ? -1 : n;
}

int
wsync_temp_open(const char *path, char *buf, size_t size, wsync_err_t *err)
{
	int fd;

	if (s_pattern(path, buf, size) < 0) {
		if (size > 0)
			buf[0] = '\0';
		return wsync_err_set(err, EX_USAGE, "%s: path too long", path);
	}
	if ((fd = mkostemp(buf, O_CLOEXEC)) < 0) {
		int e = errno;
		buf[0] = '\0';
		errno = e;
		return wsync_err_set(err, EX_IOERR, "%s: cannot create a temporary file: %s",
		    path, strerror(e));
	}
	return fd;
}

int
wsync_temp_link(const char *src, const char *path, char *buf, size_t size)
{
	static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

	for (int tries = 0; tries < 16; tries++) {
		unsigned char r[6];
		int n = s_pattern(path, buf, size);
		if (n < 0 || getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		for (int i = 0; i < 6; i++)
			buf[n - 6 + i] = set[r[i] % (sizeof(set) - 1)];
		if (link(src, buf) == 0)
			return 0;
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

int
wsync_sync_parent(const char *path)
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
wsync_temp_commit(int fd, const char *tmp, const char *path, mode_t mode, wsync_err_t *err)
{
	int e;

	if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
		e = errno;
		close(fd);
		goto fail;
	}
	if (close(fd) < 0) {
		e = errno;
		goto fail;
	}
	if (rename(tmp, path) < 0) {
		e = errno;
		unlink(tmp);
		errno = e;
		return wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", path,
		    strerror(e));
	}
	wsync_sync_parent(path);
	return 0;
fail:
	unlink(tmp);
	errno = e;
	return wsync_err_set(err, EX_IOERR, "%s: %s", path, strerror(e));
}

mode_t
wsync_umask(void)
{
	mode_t mask = umask(022);

	umask(mask);
	return mask;
}

int
wsync_temp_write_text(const char *path, const char *text, mode_t mode, wsync_err_t *err)
{
	char tmp[PATH_MAX];
	int fd;

	if ((fd = wsync_temp_open(path, tmp, sizeof(tmp), err)) < 0)
		return -1;
	if (wsync_write_all(fd, text, strlen(text)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	return wsync_temp_commit(fd, tmp, path, mode, err);
}
