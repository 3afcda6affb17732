/* store_recycle.c - spares: retired version files kept and recycled into slots. */
/*
 * With wsync-serve --recycle, a writer on the hub's host fills pages that
 * exist already. A slot is an upload whose files the hub hands out in the
 * store to be written in place (wire: begin with "local": true; hub log:
 * transfer=copy); recycling a spare into one shows as recycled= in the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "store_impl_int.h"

/*
 * A spare is moved into .uploads, where no client looks for versions; not
 * while ZeroMQ still sends from its mapping.
 */
int
wsync_spare_keep(wsync_store_t *s, const wsync_version_t *v, const char *path)
{
	char to[PATH_MAX];
	size_t at = s->nspare;

	if (s->spares == 0 || wsync_version_sending(v))
		return -1;
	if (at == s->spares) {
		/* Full: the oldest goes; a reader's link or lease keeps its bytes. */
		if (wsync_store_path(to, sizeof(to), "%s/%s", s->uploads, s->spare[0]) == 0)
			unlink(to);
		memmove(s->spare[0], s->spare[1], --at * sizeof(s->spare[0]));
	}
	snprintf(s->spare[at], sizeof(s->spare[at]), "spare.%" PRIu64, ++s->spare_seq);
	if (wsync_store_path(to, sizeof(to), "%s/%s", s->uploads, s->spare[at]) < 0 ||
	    rename(path, to) < 0) {
		s->nspare = at;
		return -1;
	}
	s->nspare = at + 1;
	return 0;
}

/* Forgets spare i (the file is gone or has been taken). */
static void
s_spare_drop(wsync_store_t *s, size_t i)
{
	memmove(s->spare[i], s->spare[i + 1], (s->nspare - i - 1) * sizeof(s->spare[0]));
	s->nspare--;
}

/*
 * Opens spare path read-write with an exclusive lease, when nothing else can
 * see it: no other link (a client's output) and no reader's shared lease; and,
 * when size is not 0, only a spare of that size. The descriptor, or -1.
 */
static int
s_spare_take(const char *path, uint64_t size)
{
	int ro = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rw = -1;
	struct stat st;

	if (ro < 0)
		return -1;
	if (fstat(ro, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
	    (size == 0 || (uint64_t)st.st_size == size) && fchmod(ro, 0600) == 0) {
		if ((rw = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
		    (flock(rw, LOCK_EX | LOCK_NB) < 0 || fstat(rw, &st) < 0 ||
		    st.st_nlink != 1)) {
			close(rw);
			rw = -1;
		}
		/* In use: read-only again, as a version is. */
		if (rw < 0)
			fchmod(ro, 0444);
	}
	close(ro);
	return rw;
}

/*
 * Zeroes the start of a reused file: a slot committed before its writer wrote
 * it must not parse as the retired version it was (possibly another model's).
 */
static int
s_wipe_head(int fd, uint64_t size)
{
	static const unsigned char zeros[4096];
	size_t n = size < sizeof(zeros) ? (size_t)size : sizeof(zeros);

	return pwrite(fd, zeros, n, 0) == (ssize_t)n ? 0 : -1;
}

/*
 * Recycles a free spare into a slot's file of size bytes for model: 1 with t
 * set, 0 when none is free, -1 with err. One of the same size first: resizing frees
 * or allocates pages, which is what spares are there to avoid.
 */
static int
s_spare_recycle(wsync_store_t *s, const char *model, uint64_t size, wsync_store_temp_t *t,
    wsync_err_t *err)
{
	char path[PATH_MAX];
	int fd;

	for (int exact = 1; exact >= 0; exact--) {
		/* Oldest first: the likeliest to have been left by every reader. */
		for (size_t i = 0; i < s->nspare; i++) {
			if (wsync_store_path(path, sizeof(path), "%s/%s", s->uploads, s->spare[i]) < 0 ||
			    (fd = s_spare_take(path, exact ? size : 0)) < 0) {
				if (access(path, F_OK) < 0)
					s_spare_drop(s, i--);
				continue;
			}
			/* The upload's own name, then the spare moved onto it. */
			if (wsync_store_temp_open(s, model, t, err) < 0) {
				close(fd);
				return -1;
			}
			close(t->fd);
			t->fd = fd;
			if (rename(path, t->path) < 0 || ftruncate(fd, (off_t)size) < 0 ||
			    s_wipe_head(fd, size) < 0) {
				wsync_err_set(err, EX_IOERR, "%s: cannot reuse %s: %s", s->uploads,
				    s->spare[i], strerror(errno));
				wsync_store_temp_remove(t);
				unlink(path);
				s_spare_drop(s, i);
				return -1;
			}
			s_spare_drop(s, i);
			return 1;
		}
	}
	return 0;
}

int
wsync_store_slot_open(wsync_store_t *s, const char *model, uint64_t size,
    wsync_store_temp_t *t, wsync_err_t *err)
{
	int rc = s_spare_recycle(s, model, size, t, err);

	if (rc != 0)
		return rc;
	if (wsync_store_temp_open(s, model, t, err) < 0)
		return -1;
	if (ftruncate(t->fd, (off_t)size) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot size an upload file: %s", s->uploads,
		    strerror(errno));
		wsync_store_temp_remove(t);
		return -1;
	}
	return 0;
}

void
wsync_store_set_spares(wsync_store_t *s, unsigned n)
{
	char path[PATH_MAX];

	s->spares = n < WSYNC_STORE_MAX_SPARES ? n : WSYNC_STORE_MAX_SPARES;
	while (s->nspare > s->spares) {
		if (wsync_store_path(path, sizeof(path), "%s/%s", s->uploads, s->spare[0]) == 0)
			unlink(path);
		s_spare_drop(s, 0);
	}
}
