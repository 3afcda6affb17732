/* watch_recycle.c - a watcher's replaced outputs, kept and rewritten with the next version. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta_int.h"
#include "file_int.h"
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

/* Adds the spare at buf, the newest; unlinked when its name cannot be kept. */
static void
s_add(wsync_recycle_t *r, const char *buf)
{
	char *name = strdup(buf);

	if (name == NULL) {
		unlink(buf);
		return;
	}
	if (r->n == WSYNC_RECYCLE_SPARES) {
		unlink(r->names[0]);
		s_forget(r, 0);
	}
	r->names[r->n++] = name;
}

void
wsync_recycle_keep(wsync_recycle_t *r, const char *path)
{
	char buf[PATH_MAX];

	if (wsync_temp_link(path, path, buf, sizeof(buf)) == 0)
		s_add(r, buf);
}

/* 1 when the .wsync file fd's header says it holds content. */
static int
s_holds(int fd, uint64_t content)
{
	wsync_err_t ignored;
	wsync_file_t *f = wsync_file_open_fd(fd, "spare", &ignored);
	int yes = f != NULL && wsync_file_content_id(f) == content;

	wsync_file_close(&f);
	return yes;
}

/* wsync_recycle_take, of a spare that holds content unless any. */
static int
s_take(wsync_recycle_t *r, int any, uint64_t content, char *buf, size_t size)
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
		    S_ISREG(st.st_mode) && st.st_nlink == 1 && (any || s_holds(fd, content)) &&
		    (size_t)snprintf(buf, size, "%s", r->names[i]) < size) {
			s_forget(r, i);
			return fd;
		}
		close(fd);
	}
	return -1;
}

int
wsync_recycle_take(wsync_recycle_t *r, char *buf, size_t size)
{
	return s_take(r, 1, 0, buf, size);
}

int
wsync_recycle_take_content(wsync_recycle_t *r, uint64_t content, char *buf, size_t size)
{
	return s_take(r, 0, content, buf, size);
}

void
wsync_recycle_delta(wsync_recycle_t *r, int delta_fd, uint64_t base, uint64_t head)
{
	int fd = dup(delta_fd);

	if (r->delta_kept)
		close(r->delta_fd);
	r->delta_kept = fd >= 0;
	r->delta_fd = fd;
	r->delta_base = base;
	r->delta_head = head;
}

void
wsync_recycle_forward(wsync_recycle_t *r, const char *name)
{
	char buf[PATH_MAX];
	wsync_err_t ignored;
	int fd;

	if (!r->delta_kept ||
	    (fd = wsync_recycle_take_content(r, r->delta_base, buf, sizeof(buf))) < 0)
		return;
	/* Half made (a damaged delta, no room): neither version, of no use. */
	if (wsync_delta_apply_over(fd, r->delta_fd, 0, name, NULL, NULL, &ignored) < 0)
		unlink(buf);
	else
		s_add(r, buf);
	close(fd);
}

void
wsync_recycle_clear(wsync_recycle_t *r)
{
	if (r->delta_kept)
		close(r->delta_fd);
	r->delta_kept = 0;
	while (r->n > 0) {
		unlink(r->names[0]);
		s_forget(r, 0);
	}
}
