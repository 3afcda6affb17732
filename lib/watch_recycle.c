/* watch_recycle.c - a watcher's replaced outputs, kept and rewritten with the next version. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "watch_recycle_int.h"
#include "tempfile_int.h"

/* Forgets spare i (its name freed, the file left alone). */
static void
s_forget(wsync_recycle_t *r, size_t i)
{
	free(r->names[i]);
	memmove(&r->names[i], &r->names[i + 1], (r->n - i - 1) * sizeof(*r->names));
	r->n--;
}

void
wsync_recycle_keep(wsync_recycle_t *r, const char *path)
{
	char buf[PATH_MAX];
	char *name;

	if (wsync_temp_link(path, path, buf, sizeof(buf)) < 0)
		return;
	if ((name = strdup(buf)) == NULL) {
		unlink(buf);
		return;
	}
	if (r->n == WSYNC_RECYCLE_SPARES) {
		unlink(r->names[0]);
		s_forget(r, 0);
	}
	r->names[r->n++] = name;
}

int
wsync_recycle_take(wsync_recycle_t *r, char *buf, size_t size)
{
	for (size_t i = 0; i < r->n; i++) {
		struct stat st;
		int fd = open(r->names[i], O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			s_forget(r, i--);
			continue;
		}
		/*
		 * A reader's lease is a shared flock: refused, the spare stays as it
		 * is. Another name is someone's link: never rewritten either.
		 */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 &&
		    S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    (size_t)snprintf(buf, size, "%s", r->names[i]) < size) {
			s_forget(r, i);
			return fd;
		}
		close(fd);
	}
	return -1;
}

void
wsync_recycle_clear(wsync_recycle_t *r)
{
	while (r->n > 0) {
		unlink(r->names[0]);
		s_forget(r, 0);
	}
}
