/*
 * client_pushdelta.c - a push sent as a delta from a version the hub retains
 * (wsync(7), DELTAS): the version written out, its delta from the base file
 * made, and sent instead of the version when it is smaller.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "push_session_int.h"
#include "delta_int.h"
#include "source_int.h"

/* An unnamed file in $TMPDIR (else /tmp), read-write; -1 with err. */
static int
s_scratch(wsync_err_t *err)
{
	const char *td = getenv("TMPDIR");
	const char *dir = td != NULL && td[0] == '/' ? td : "/tmp";
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		wsync_err_set(err, EX_CANTCREAT, "%s: cannot make a scratch file for the delta: %s",
		    dir, strerror(errno));
	return fd;
}

/*
 * src's document written out into a scratch file (size bytes): the file fd
 * when it is one (its pages exist: a copy costs no fresh ones), else a new
 * one; -1 with err (fd closed).
 */
static int
s_written(wsync_client_t *c, wsync_source_t *src, uint64_t size, int fd, wsync_err_t *err)
{
	if (fd < 0 && (fd = s_scratch(err)) < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0) {
		wsync_err_set(err, EX_IOERR, "scratch file: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (wsync_source_write_fd(src, fd, size, NULL, NULL, c->stop, err) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The version of model this client pushed last and kept; NULL when none. */
static struct wsync_kept *
s_kept(struct wsync_push_session *ps, const char *model)
{
	for (int i = 0; i < ps->nkept; i++)
		if (strcmp(ps->kept[i].model, model) == 0)
			return &ps->kept[i];
	return NULL;
}

/*
 * The version of item as a .wsync file: its own file when it is sent as it
 * is and not kept, else written out from src into a scratch file. -1 with err.
 */
static int
s_head_file(wsync_client_t *c, const wsync_push_item_t *item, wsync_source_t *src,
    uint64_t size, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_find(c);
	struct wsync_kept *k = ps->keep_pushed ? s_kept(ps, item->model) : NULL;
	int spare = -1;
	struct stat st;

	/* A kept version must stay as sent: the trainer may write its file again. */
	if (!ps->keep_pushed && wsync_source_tree(src) == NULL && strcmp(item->path, "-") != 0 &&
	    stat(item->path, &st) == 0 && S_ISREG(st.st_mode))
		return open(item->path, O_RDONLY | O_CLOEXEC);
	if (k != NULL) {
		spare = k->spare;
		k->spare = -1;
	}
	return s_written(c, src, size, spare, err);
}


/*
 * The delta from bfd (patch: made into the version as it is read), or, base
 * set, from base read where it lies (its content id into send's
 * base_content, and whether its hashes were remembered into its recalled),
 * to src's version, made straight from src (wsync_source_delta_over,
 * _from), into a scratch file: *out on 0 (and stats); 1 not worth it, 2 when
 * it cannot be made so (a pipe, an input sent as it is, a signed push, or
 * another layout to patch), nothing done; -1 with err.
 */
static int
s_straight_from(struct wsync_push_session *ps, wsync_source_t *src, uint64_t size, int bfd,
    int patch, unsigned char *base_map, wsync_source_t *base, struct wsync_push_send *send,
    const char *name, wsync_delta_stats_t *stats, int *out, wsync_err_t *err)
{
	int rc;

	if (ps->sign != NULL)
		return 2;
	if ((*out = s_scratch(err)) < 0)
		return -1;
	rc = base != NULL ? wsync_source_delta_from(src, size, base, *out, name,
	    WSYNC_DELTA_WORTH, stats, &send->base_content, &send->recalled, err) :
	    wsync_source_delta_over(src, size, bfd, patch, base_map, *out, name, WSYNC_DELTA_WORTH,
	    stats, err);
	if (rc != 0) {
		close(*out);
		*out = -1;
	}
	return rc;
}

/*
 * The version kept (k's file) made into this one while the delta from it is
 * made (wsync_source_delta_over): one pass over the two, where writing this
 * version out and then diffing it takes three. The kept file becomes send's
 * head_fd, k keeping none until the push is kept. 0 with send set (sent
 * whole when the delta is not worth it); 1 when src cannot be read so (a
 * pipe, an input sent as it is, a signed push) or lies out otherwise than
 * the version kept, nothing done; -1 with err.
 */
static int
s_over(wsync_client_t *c, struct wsync_push_session *ps, wsync_source_t *src, uint64_t size,
    struct wsync_kept *k, struct wsync_push_send *send, wsync_err_t *err)
{
	wsync_delta_stats_t stats;
	/* Mapped once (on tmpfs) and kept: the next push patches the same file, back in k. */
	unsigned char *map = wsync_kept_one(&k->map, k->fd);
	int out = -1, rc = s_straight_from(ps, src, size, k->fd, 1, map, NULL, send,
	    "the version pushed before", &stats, &out, err);

	if (rc == 2)
		return 1;
	/* The kept file holds this version now, or part of it: it goes with the push, mapped. */
	send->head_fd = k->fd;
	k->fd = -1;
	send->head_map = k->map;
	k->map = (wsync_kept_one_t){ 0 };
	if (rc == 1) {
		snprintf(ps->delta_note, sizeof(ps->delta_note), "the delta from version %" PRIu64
		    " is not worth it (over half of the version)", send->base);
		rc = wsync_source_write_fd(src, send->head_fd, size, NULL, NULL, c->stop, err);
		wsync_client_pushdelta_whole(send, size);
		return rc;
	}
	if (rc < 0)
		return -1;
	send->fd = out;
	send->bytes = stats.bytes;
	return 0;
}

/*
 * A single push's delta from its --base (bfd, or base read where it lies),
 * made straight from src (nothing patched): no file of the version is
 * written, which only a push that keeps it needs. 0 with send set (sent
 * whole, from src, when the delta is not worth it); 1 when src cannot be
 * read so (s_straight_from's 2); -1 with err.
 */
static int
s_straight(struct wsync_push_session *ps, const wsync_push_item_t *item,
    wsync_source_t *src, uint64_t size, int bfd, wsync_source_t *base,
    struct wsync_push_send *send, wsync_err_t *err)
{
	wsync_delta_stats_t stats;
	int out = -1, rc = s_straight_from(ps, src, size, bfd, 0, NULL, base, send, item->base,
	    &stats, &out, err);

	if (rc == 1) {
		snprintf(ps->delta_note, sizeof(ps->delta_note), "the delta from %s is not worth "
		    "it (over half of the version)", item->base);
		wsync_client_pushdelta_whole(send, size);
		return 0;
	}
	if (rc != 0)
		return rc == 2 ? 1 : rc;
	send->fd = out;
	send->bytes = stats.bytes;
	return 0;
}

/*
 * A single push's delta from its --base in the form the trainer pushed it
 * (a safetensors file, a checkpoint directory), read where it lies and
 * hashed on the way (s_straight): no file of it or of the version written.
 * As s_straight; 2, nothing done, for a .wsync base or what cannot be read
 * so (a pipe or stream, a signed push).
 */
static int
s_straight_source(struct wsync_push_session *ps, const wsync_push_item_t *item,
    wsync_source_t *src, uint64_t size, struct wsync_push_send *send, wsync_err_t *err)
{
	wsync_source_t *base;
	struct stat st;
	int rc;

	/* A stream is read once: s_base_file reads it, as the trainer sent it. */
	if (strcmp(item->base, "-") == 0 || stat(item->base, &st) < 0 ||
	    !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
		return 2;
	if ((base = wsync_source_open(item->base, item->model, item->ckpt, err)) == NULL)
		return -1;
	if (wsync_source_tree(base) == NULL) {
		wsync_source_destroy(&base);
		return 2;
	}
	send->delta = 1;
	rc = s_straight(ps, item, src, size, -1, base, send, err);
	wsync_source_destroy(&base);
	if (rc == 1) {
		send->delta = 0;
		send->recalled = 0;
	}
	return rc == 1 ? 2 : rc;
}

/*
 * Opens item's --base file, in the form the trainer pushed it (a safetensors
 * file, a checkpoint directory, a .wsync file), as a .wsync file: its own
 * when it is a .wsync of the model, else the version it became written out
 * into a scratch file, as the push wrote it then. send gets the base's
 * content id, which the hub matches against its versions, and its number
 * when it has one. The fd, or -1 with err.
 */
static int
s_base_file(wsync_client_t *c, const wsync_push_item_t *item, struct wsync_push_send *send,
    wsync_err_t *err)
{
	wsync_source_t *src;
	wsync_file_t *base = NULL;
	uint64_t size;
	int fd = -1;

	if ((src = wsync_source_open(item->base, item->model, item->ckpt, err)) == NULL)
		return -1;
	if ((size = wsync_source_size(src, err)) == 0)
		goto out;
	fd = wsync_source_tree(src) == NULL ? open(item->base, O_RDONLY | O_CLOEXEC) :
	    s_written(c, src, size, -1, err);
	if (fd < 0 && wsync_source_tree(src) == NULL)
		wsync_err_set(err, EX_NOINPUT, "%s: %s", item->base, strerror(errno));
	if (fd < 0 || (base = wsync_file_open_fd(fd, item->base, err)) == NULL)
		goto out;
	send->delta = 1;
	send->base = wsync_source_tree(src) == NULL ? wsync_file_version(base) : 0;
	send->base_content = wsync_file_content_id(base);
	wsync_file_close(&base);
	wsync_source_destroy(&src);
	return fd;
out:
	if (fd >= 0)
		close(fd);
	wsync_source_destroy(&src);
	return -1;
}

int
wsync_client_pushdelta(wsync_client_t *c, const wsync_push_item_t *item,
    struct wsync_source *src, uint64_t size, struct wsync_push_send *send, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_find(c);
	struct wsync_kept *k = item->base == NULL && ps->keep_pushed ?
	    s_kept(ps, item->model) : NULL;
	wsync_delta_stats_t stats;
	int bfd = -1, rc = -1;

	*send = (struct wsync_push_send){ .fd = -1, .head_fd = -1, .bytes = size };
	if (item->base != NULL && !ps->keep_pushed &&
	    (rc = s_straight_source(ps, item, src, size, send, err)) != 2)
		return rc;
	rc = -1;
	if (item->base != NULL && (bfd = s_base_file(c, item, send, err)) < 0)
		return -1;
	if (bfd >= 0 && !ps->keep_pushed && (rc = s_straight(ps, item, src, size, bfd, NULL, send,
	    err)) <= 0) {
		close(bfd);
		return rc;
	}
	rc = -1;
	/* A push that failed after its kept file was made into it keeps none. */
	if (k != NULL && k->fd >= 0) {
		send->delta = 1;
		send->base = k->version;
		send->base_content = k->content;
		if ((rc = s_over(c, ps, src, size, k, send, err)) <= 0)
			return rc;
		rc = -1;
		if ((bfd = dup(k->fd)) < 0)
			return wsync_err_set(err, EX_OSERR, "dup: %s", strerror(errno));
	}
	if (bfd < 0 && !ps->keep_pushed)
		return 0;
	if ((send->head_fd = s_head_file(c, item, src, size, err)) < 0)
		goto out;
	send->fd = send->head_fd;
	rc = 0;
	if (bfd < 0)
		goto out;
	/* The hub's rule: a delta over half of the version is not worth making. */
	if ((send->fd = s_scratch(err)) < 0 ||
	    (rc = wsync_delta_make(bfd, send->head_fd, send->fd, item->base != NULL ?
	    item->base : "the version pushed before", WSYNC_DELTA_WORTH, &stats, err)) < 0)
		goto out;
	if (rc == 1) {
		if (item->base != NULL)
			snprintf(ps->delta_note, sizeof(ps->delta_note), "the delta from %s is not "
			    "worth it (over half of the version)", item->base);
		else
			snprintf(ps->delta_note, sizeof(ps->delta_note), "the delta from version %"
			    PRIu64 " is not worth it (over half of the version)", send->base);
		wsync_client_pushdelta_whole(send, size);
	} else
		send->bytes = stats.bytes;
	rc = 0;
out:
	if (bfd >= 0)
		close(bfd);
	return rc;
}

void
wsync_client_pushdelta_whole(struct wsync_push_send *send, uint64_t size)
{
	if (!send->delta)
		return;
	if (send->fd >= 0 && send->fd != send->head_fd)
		close(send->fd);
	send->fd = send->head_fd;
	send->bytes = size;
	send->delta = 0;
	send->base = 0;
}

void
wsync_client_pushdelta_keep(wsync_client_t *c, const wsync_push_item_t *item,
    struct wsync_push_send *send)
{
	struct wsync_push_session *ps = wsync_push_find(c);
	struct wsync_kept *k = s_kept(ps, item->model);

	if (send->head_fd < 0)
		return;
	if (k == NULL) {
		/* Full: the slot of the model kept longest goes (models are pushed in turn). */
		if (ps->nkept == WSYNC_KEPT_MAX) {
			if (ps->kept[0].fd >= 0)
				close(ps->kept[0].fd);
			if (ps->kept[0].spare >= 0)
				close(ps->kept[0].spare);
			wsync_kept_one_release(&ps->kept[0].map);
			memmove(&ps->kept[0], &ps->kept[1], sizeof(ps->kept[0]) *
			    (WSYNC_KEPT_MAX - 1));
			ps->nkept--;
		}
		k = &ps->kept[ps->nkept++];
		snprintf(k->model, sizeof(k->model), "%s", item->model);
		k->spare = -1;
		k->map = (wsync_kept_one_t){ 0 };
	} else if (k->fd >= 0) {
		/* The version before becomes the spare the next one is written over. */
		if (k->spare >= 0)
			close(k->spare);
		k->spare = k->fd;
	}
	/* A map is k's only while it maps k's file. */
	wsync_kept_one_release(&k->map);
	k->map = send->head_map;
	send->head_map = (wsync_kept_one_t){ 0 };
	k->fd = send->head_fd;
	k->version = item->version;
	k->content = item->content;
	if (send->fd == send->head_fd)
		send->fd = -1;
	send->head_fd = -1;
}

void
wsync_client_pushdelta_end(struct wsync_push_send *send)
{
	if (send->fd >= 0 && send->fd != send->head_fd)
		close(send->fd);
	if (send->head_fd >= 0)
		close(send->head_fd);
	wsync_kept_one_release(&send->head_map);
	send->fd = send->head_fd = -1;
}

void
wsync_client_keep_pushed(wsync_client_t *c, int on)
{
	wsync_err_t ignored;
	struct wsync_push_session *ps = on ? wsync_push_session(c, &ignored) : wsync_push_find(c);

	if (ps == NULL)
		return;
	ps->keep_pushed = on;
	if (on)
		return;
	for (int i = 0; i < ps->nkept; i++) {
		if (ps->kept[i].fd >= 0)
			close(ps->kept[i].fd);
		if (ps->kept[i].spare >= 0)
			close(ps->kept[i].spare);
		wsync_kept_one_release(&ps->kept[i].map);
	}
	ps->nkept = 0;
}
