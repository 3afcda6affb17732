/* client_slot.c - slots: asking for one, its files, the next slot asked for with a commit. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "push_session_int.h"

#define S_NEXT_SLOT_MS 30000            /* the next slot is given until then */

/* The key of a slot's models, sizes and workers, in key; -1 when it does not fit. */
static int
s_slot_key(const wsync_slot_ask_t *a, char *key, size_t size)
{
	size_t at = 0;

	for (int i = 0; i < a->n; i++)
		at += (size_t)snprintf(key + at, at < size ? size - at : 0, "%s=%" PRIu64 " ",
		    a->models[i], a->sizes[i]);
	at += (size_t)snprintf(key + at, at < size ? size - at : 0, "%s",
	    a->workers != NULL ? "for" : "all");
	for (int i = 0; a->workers != NULL && i < a->nworkers; i++)
		at += (size_t)snprintf(key + at, at < size ? size - at : 0, " %s", a->workers[i]);
	return at < size ? 0 : -1;
}

/* Sends the begin that asks for slot a: its request id, 0 with err. */
static uint64_t
s_slot_send(wsync_client_t *c, const wsync_slot_ask_t *a, wsync_err_t *err)
{
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, "begin", (a->workers != NULL ? 3 : 2) + 1);

	wsync_client_pack_files(&e, a, NULL);
	/* A slot is a begin with local (wsync(7)). */
	wsync_enc_kv_bool(&e, "local", 1);
	if (wsync_client_send(c, &e, NULL, 0, err) < 0)
		id = 0;
	wsync_enc_free(&e);
	return id;
}

/*
 * Takes the slot a begin's reply m gives for a: *upload, paths[i]
 * (malloc'd), every file of its size (a new file's pages allocated at once);
 * aborted on failure.
 */
static int
s_slot_take(wsync_client_t *c, const wsync_msg_t *m, const wsync_slot_ask_t *a,
    uint64_t *upload, char **paths, wsync_err_t *err)
{
	int *fds = calloc((size_t)a->n + 1, sizeof(*fds)), rc = -1;

	if (fds == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (wsync_msg_u64(m, "upload", upload) < 0)
		wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without upload", c->endpoint);
	else if ((rc = wsync_client_slot_files(c, m, a->sizes, a->n, fds, paths, err)) == 1)
		rc = wsync_err_set(err, EX_NOPERM, "%s/.uploads: the hub's slots cannot be "
		    "written by this user", c->store);
	for (int i = 0; rc == 0 && i < a->n; i++) {
		/* A new file's pages, allocated at once; a recycled one's exist already. */
		struct stat st;
		if (fstat(fds[i], &st) == 0 && (uint64_t)st.st_blocks * 512 < a->sizes[i] &&
		    fallocate(fds[i], 0, 0, (off_t)a->sizes[i]) < 0 && errno != EOPNOTSUPP)
			rc = wsync_err_set(err, EX_IOERR, "%s: cannot allocate %" PRIu64 " bytes: %s",
			    paths[i], a->sizes[i], strerror(errno));
	}
	for (int i = 0; i < a->n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	if (rc < 0 && *upload != 0) {
		wsync_client_abort_quietly(c, *upload);
		for (int i = 0; i < a->n; i++) {
			free(paths[i]);
			paths[i] = NULL;
		}
	}
	return rc;
}

/* The earlier of deadline and 1 s from now: how long a reply on its way may take. */
static int64_t
s_soon(int64_t deadline)
{
	int64_t soon = wsync_now_ms() + 1000;

	return soon < deadline ? soon : deadline;
}

void
wsync_client_next_ask(wsync_client_t *c, const wsync_slot_ask_t *a)
{
	struct wsync_push_session *ps;
	wsync_err_t ignored;

	if ((ps = wsync_push_session(c, &ignored)) == NULL ||
	    s_slot_key(a, ps->next_slot.key, sizeof(ps->next_slot.key)) < 0)
		return;
	ps->next_slot.at = wsync_now_ms();
	ps->next_slot.id = s_slot_send(c, a, &ignored);
}

/*
 * The reply to the next slot's begin, decoded into m (the caller frees it,
 * then forgets the slot), waited for until deadline: 0; 2 with err, its
 * refusal; -1 with err, no reply.
 */
static int
s_next_reply(wsync_client_t *c, struct wsync_next_slot *next, int64_t deadline, wsync_msg_t *m,
    wsync_err_t *err)
{
	uint64_t got;

	msgpack_unpacked_init(&m->doc);
	if (next->reply == NULL) {
		/* The session's hook keeps its reply, a refusal as well, whenever it comes. */
		wsync_msg_t other;
		wsync_parts_t p = { .n = 0 };
		int rc = wsync_client_await(c, next->id, deadline, &other, &p, 0, err);
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "slot: no answer from %s within the "
			    "timeout", c->endpoint);
		if (rc == 0)
			wsync_client_release(&other, &p);
	}
	if (next->reply == NULL && next->id != 0)
		return -1;
	if (next->reply == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	msgpack_unpacked_destroy(&m->doc);
	if (wsync_msg_decode(m, next->reply, next->len, err) < 0)
		return -1;
	return wsync_reply_decode(m, &got, err) == 0 ? 0 : 2;
}

void
wsync_client_next_drop(wsync_client_t *c, int timeout_ms)
{
	struct wsync_push_session *ps = wsync_push_find(c);
	wsync_err_t ignored;
	wsync_msg_t m;
	uint64_t upload;

	if (ps == NULL || ps->next_slot.id == 0)
		return;
	if (s_next_reply(c, &ps->next_slot, wsync_now_ms() + timeout_ms, &m, &ignored) == 0 &&
	    wsync_msg_u64(&m, "upload", &upload) == 0)
		wsync_client_abort_quietly(c, upload);
	wsync_msg_free(&m);
	wsync_push_next_forget(ps);
}

int
wsync_client_slot(wsync_client_t *c, const wsync_slot_ask_t *a, int timeout_ms,
    uint64_t *upload, char **paths, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	struct wsync_push_session *ps = wsync_push_find(c);
	char key[sizeof(ps->next_slot.key)];
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id;
	int rc;

	*upload = 0;
	if (ps != NULL && ps->sign != NULL)
		return wsync_err_set(err, EX_USAGE, "a slot cannot be signed (its writer makes its "
		    "bytes): to sign, push files");
	if (!c->store_here)
		return wsync_err_set(err, EX_USAGE, "a slot is a file in the hub's store, which "
		    "is not visible from here (another host, user or mount namespace): push a "
		    "file");
	for (int i = 0; i < a->n; i++)
		if (a->sizes[i] == 0 || a->sizes[i] != (uint64_t)(size_t)a->sizes[i])
			return wsync_err_set(err, EX_USAGE, "a slot of %" PRIu64 " bytes for model "
			    "%s", a->sizes[i], a->models[i]);
	/*
	 * The next slot, unless the hub may drop it soon (at 60 s). Its
	 * reply is here already, or on its way (at most 1 s more); if the hub
	 * refused it, or restarted since (its file gone), a new one is asked for.
	 */
	if (ps != NULL && ps->next_slot.id != 0 && s_slot_key(a, key, sizeof(key)) == 0 &&
	    strcmp(key, ps->next_slot.key) == 0 &&
	    wsync_now_ms() - ps->next_slot.at < S_NEXT_SLOT_MS) {
		if ((rc = s_next_reply(c, &ps->next_slot, s_soon(deadline), &m, err)) == 0)
			rc = s_slot_take(c, &m, a, upload, paths, err);
		wsync_msg_free(&m);
		wsync_push_next_forget(ps);
		if (rc == 0)
			return 0;
	}
	wsync_client_next_drop(c, wsync_ms_left(s_soon(deadline)));
	if ((id = s_slot_send(c, a, err)) == 0)
		return -1;
	if ((rc = wsync_client_await(c, id, deadline, &m, &p, 0, err)) == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "begin: no answer from %s within the "
		    "timeout", c->endpoint);
	if (rc < 0)
		return -1;
	rc = s_slot_take(c, &m, a, upload, paths, err);
	wsync_client_release(&m, &p);
	return rc;
}

/*
 * Only a file right in STORE/.uploads, reached without following a link,
 * regular, with no other link, empty or of its declared size: whatever a hub
 * says, nothing else gets written.
 */
int
wsync_client_slot_files(wsync_client_t *c, const wsync_msg_t *m, const uint64_t *sizes,
    int n, int *fds, char **paths, wsync_err_t *err)
{
	const msgpack_object *list = wsync_msg_get(m, "paths");
	char dir[PATH_MAX + 16];
	struct stat dst;
	int dfd, rc = -1;

	for (int i = 0; i < n; i++)
		fds[i] = -1;
	if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY ||
	    list->via.array.size != (uint32_t)n)
		return wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without paths",
		    c->endpoint);
	snprintf(dir, sizeof(dir), "%s/.uploads", c->store);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 1;
	if (fstat(dfd, &dst) < 0) {
		rc = 1;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		const char *name = path + strlen(dir) + 1;
		struct stat st;
		if (wsync_obj_str(&list->via.array.ptr[i], path, sizeof(path)) < 0 ||
		    strncmp(path, dir, strlen(dir)) != 0 || path[strlen(dir)] != '/' ||
		    strncmp(name, "upload.", 7) != 0 || strchr(name, '/') != NULL) {
			wsync_err_set(err, EX_PROTOCOL, "%s: an upload path outside %s", c->endpoint,
			    dir);
			goto out;
		}
		if ((fds[i] = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			rc = 1;
			goto out;
		}
		if (fstat(fds[i], &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
		    (st.st_size != 0 && (uint64_t)st.st_size != sizes[i]) ||
		    st.st_dev != dst.st_dev) {
			wsync_err_set(err, EX_PROTOCOL, "%s: %s is not a fresh upload file",
			    c->endpoint, path);
			goto out;
		}
		if (paths != NULL && (paths[i] = strdup(path)) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
	}
	rc = 0;
out:
	for (int i = 0; rc != 0 && i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
		if (paths != NULL) {
			free(paths[i]);
			paths[i] = NULL;
		}
	}
	close(dfd);
	return rc;
}
