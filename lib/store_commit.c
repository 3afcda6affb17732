/* store_commit.c - upload files, their checks, numbering, stamping, commit, publishing. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "proto_int.h"
#include "store_impl_int.h"

#ifdef WSYNC_TEST_HOOKS
/*
 * The test-only crash hook (wsync-serve(1), WSYNC_TEST_CRASH_AT): each step of
 * a commit that writes to disk counts, and the one numbered crash_at kills
 * the process as kill -9 would, so that tests can stop a commit between any
 * two of its writes.
 */
void
wsync_store_crash_point(wsync_store_t *s)
{
	if (s->crash_at > 0 && ++s->step == s->crash_at)
		raise(SIGKILL);
}
#endif

int
wsync_store_temp_open(wsync_store_t *s, const char *model, wsync_store_temp_t *t,
    wsync_err_t *err)
{
	snprintf(t->model, sizeof(t->model), "%s", model);
	t->fd = -1;
	t->verified = 0;
	if (wsync_store_path(t->path, sizeof(t->path), "%s/upload.XXXXXX", s->uploads) < 0 ||
	    (t->fd = mkostemp(t->path, O_CLOEXEC)) < 0) {
		t->path[0] = '\0';
		return wsync_err_set(err, EX_IOERR, "%s: cannot create a temporary file: %s",
		    s->uploads, strerror(errno));
	}
	return 0;
}

void
wsync_store_temp_remove(wsync_store_temp_t *t)
{
	if (t->fd >= 0)
		close(t->fd);
	if (t->path[0] != '\0')
		unlink(t->path);
	t->fd = -1;
	t->path[0] = '\0';
}

int
wsync_store_model_fits(const wsync_file_t *f, const char *model)
{
#ifdef WSYNC_TEST_HOOKS
	/* The test-only fault of wsync-serve(1): a compromised hub's store. */
	if (getenv("WSYNC_TEST_FOREIGN_MODEL") != NULL)
		return 1;
#endif
	return strcmp(wsync_file_model(f), model) == 0;
}

/* Checks an uploaded file the way a commit needs: parses, verifies, names its model, can be stamped. */
static int
s_check(const wsync_store_temp_t *t, int trust, struct wsync_staged *st, wsync_err_t *err)
{
	char name[WSYNC_MAX_MODEL + 16];
	wsync_file_t *f;
	int rc = -1;

	snprintf(name, sizeof(name), "model \"%s\"", t->model);
	if ((f = wsync_file_open_fd(t->fd, name, err)) == NULL)
		return -1;
	if (!trust && wsync_file_verify_fd(f, t->fd, NULL, 0, err) < 0)
		goto done;
	if (!wsync_store_model_fits(f, t->model)) {
		wsync_err_set(err, EX_DATAERR, "%s: the file is a version of model \"%s\": a "
		    "version is pushed under its own model's name", name, wsync_file_model(f));
		goto done;
	}
	if (wsync_file_version_offset(f) == 0) {
		wsync_err_set(err, EX_DATAERR, "%s: not written with a fixed-width version field "
		    "(rewrite it with wsync-convert)", name);
		goto done;
	}
	st->size = wsync_file_size(f);
	st->content = wsync_file_content_id(f);
	st->offset = wsync_file_version_offset(f);
	rc = 0;
done:
	wsync_file_close(&f);
	return rc;
}

/* Writes version into the file as 8 big-endian bytes at offset, and syncs it. */
static int
s_stamp(int fd, uint64_t offset, uint64_t version)
{
	unsigned char be[8];

	for (int i = 0; i < 8; i++)
		be[i] = (unsigned char)(version >> (56 - 8 * i));
	if (pwrite(fd, be, sizeof(be), (off_t)offset) != (ssize_t)sizeof(be)) {
		if (errno == 0)
			errno = EIO;
		return -1;
	}
	return fsync(fd);
}

/*
 * Numbers the staged files: each gets the next number of its model, in order,
 * or the number given, when above the last.
 */
static int
s_number(wsync_store_t *s, const wsync_store_temp_t *files, size_t n, struct wsync_staged *st,
    const uint64_t *given, wsync_err_t *err)
{
	for (size_t i = 0; i < n; i++) {
		const wsync_model_t *m = wsync_store_find(s, files[i].model);
		uint64_t first = m != NULL ? m->next : 1, last = wsync_journal_last(s, files[i].model), v;
		if (last >= first && last < UINT64_MAX)
			first = last + 1;
		v = first;
		for (size_t j = 0; j < i; j++)
			v += strcmp(files[j].model, files[i].model) == 0;
		if (given != NULL) {
			if (given[i] < v)
				return wsync_err_set(err, EX_DATAERR, "model \"%s\": version %" PRIu64
				    " is not above the last, %" PRIu64, files[i].model, given[i], v - 1);
			v = given[i];
		}
		if (v == UINT64_MAX || v < first)
			return wsync_err_set(err, EX_DATAERR, "model \"%s\" has no version numbers "
			    "left", files[i].model);
		st[i].version = v;
		if (wsync_store_version_path(st[i].final, sizeof(st[i].final), s->dir,
		    files[i].model, v, 0) < 0 || wsync_store_version_path(st[i].sidecar,
		    sizeof(st[i].sidecar), s->dir, files[i].model, v, 1) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
	}
	return 0;
}

/* Removes the sidecars of a commit that failed before its journal was written. */
static void
s_unstage(size_t n, struct wsync_staged *st)
{
	for (size_t i = 0; i < n; i++)
		if (st[i].sidecar_tmp[0] != '\0')
			unlink(st[i].sidecar_tmp);
}

/* Puts committed files in memory; they own the temporary files' descriptors afterwards. */
static int
s_publish(wsync_store_t *s, wsync_store_temp_t *files, size_t n, struct wsync_staged *st,
    const wsync_commit_info_t *info, wsync_committed_t *out)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		wsync_version_t v = { .version = st[i].version, .size = st[i].size,
		    .content = st[i].content, .time = info->time, .fd = files[i].fd };
		wsync_model_t *m = wsync_store_model_add(s, files[i].model);
		struct stat sb;
		/* Verified, stamped and synced: from now on, only a write changes this. */
		if (fstat(v.fd, &sb) == 0)
			v.mtime_ns = (uint64_t)sb.st_mtim.tv_sec * 1000000000u +
			    (uint64_t)sb.st_mtim.tv_nsec;
		/* A recycled file's writer is done: readers may lease it now. */
		flock(v.fd, LOCK_UN);
		files[i].fd = -1;
		files[i].path[0] = '\0';
		snprintf(out[i].model, sizeof(out[i].model), "%s", files[i].model);
		out[i].version = st[i].version;
		out[i].size = st[i].size;
		out[i].content = st[i].content;
		out[i].mtime_ns = v.mtime_ns;
		if (m == NULL ||
		    wsync_sidecar_set(&v, info->pusher, info->targets, info->ntargets) < 0) {
			/* On disk already: the next open of the store finds it. */
			wsync_version_free(&v);
			rc = -1;
			continue;
		}
		m->next = st[i].version + 1;
		if (wsync_model_append(m, &v) < 0)
			rc = -1;
	}
	for (size_t i = 0; i < n; i++) {
		wsync_model_t *m = wsync_store_model_add(s, files[i].model);
		if (m != NULL)
			wsync_store_retain(s, m);
	}
	return rc;
}

int
wsync_store_commit(wsync_store_t *s, wsync_store_temp_t *files, size_t n,
    const wsync_commit_info_t *info, wsync_committed_t *out, wsync_err_t *err)
{
	struct wsync_staged *st = calloc(n > 0 ? n : 1, sizeof(*st));
	json_t *saved = NULL, *saved_groups = NULL;
	char dir[PATH_MAX];
	int rc = -1;

	if (st == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
#ifdef WSYNC_TEST_HOOKS
	s->step = 0;
#endif
	for (size_t i = 0; i < n; i++)
		if (s_check(&files[i], info->trust || files[i].verified, &st[i], err) < 0)
			goto done;
	if (s_number(s, files, n, st, info->versions, err) < 0)
		goto done;
	for (size_t i = 0; i < n; i++) {
		if (wsync_store_path(dir, sizeof(dir), "%s/%s", s->dir, files[i].model) < 0 ||
		    wsync_store_mkdir(dir, err) < 0)
			goto fail;
		wsync_store_crash_point(s);
		/*
		 * Read-only from now on: a linked output is this very file, and a
		 * worker writing it in place would change the version for everyone.
		 */
		if (fchmod(files[i].fd, 0444) < 0 ||
		    s_stamp(files[i].fd, st[i].offset, st[i].version) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: cannot stamp version %" PRIu64 ": %s",
			    files[i].path, st[i].version, strerror(errno));
			goto fail;
		}
		wsync_store_crash_point(s);
		if (wsync_sidecar_write(s, st[i].sidecar_tmp, info, err) < 0)
			goto fail;
	}
	/* The commit point: once the journal names the renames, they happen. */
	if ((saved = json_deep_copy(s->numbers)) == NULL ||
	    (saved_groups = json_deep_copy(s->groups)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		wsync_journal_last_set(s, files[i].model, st[i].version);
	/* A group's key is committed with its version: the same journal says both. */
	if ((info->group != 0 && wsync_journal_group_set(s, files[0].model, info->group) < 0 &&
	    wsync_err_set(err, EX_SOFTWARE, "out of memory") < 0) ||
	    wsync_journal_write(s, files, n, st, err) < 0) {
		json_decref(s->numbers);
		json_decref(s->groups);
		s->numbers = saved;
		s->groups = saved_groups;
		saved = saved_groups = NULL;
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		wsync_store_crash_point(s);
		if (rename(st[i].sidecar_tmp, st[i].sidecar) == 0) {
			st[i].sidecar_tmp[0] = '\0';
			wsync_store_crash_point(s);
		}
		if (rename(files[i].path, st[i].final) < 0) {
			/* Committed: the next open of the store finishes the renames. */
			wsync_err_set(err, EX_IOERR, "%s: cannot rename into place (the store "
			    "finishes it when it opens again): %s", st[i].final, strerror(errno));
			for (size_t j = i; j < n; j++) {
				close(files[j].fd);
				files[j].fd = -1;
				files[j].path[0] = '\0';
			}
			goto done;
		}
		st[i].renamed = 1;
	}
	for (size_t i = 0; i < n; i++)
		if (wsync_store_path(dir, sizeof(dir), "%s/%s", s->dir, files[i].model) == 0)
			wsync_store_sync_dir(dir);
	wsync_store_crash_point(s);
	if (s_publish(s, files, n, st, info, out) < 0)
		wsync_err_set(err, EX_SOFTWARE, "out of memory after committing");
	else
		rc = 0;
	goto done;
fail:
	s_unstage(n, st);
done:
	json_decref(saved);
	json_decref(saved_groups);
	free(st);
	return rc;
}
