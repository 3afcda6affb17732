/* store_journal.c - numbers given and the commit journal (STORE/.journal), its recovery. */
/*
 * The journal is written atomically as a commit's commit point, and read when
 * the store opens to finish the renames of a commit a crash cut short.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "io_int.h"
#include "proto_int.h"
#include "store_impl_int.h"

/* The decimal string under model in map, as a number; 0 when absent or not one. */
static uint64_t
s_number(const json_t *map, const char *model)
{
	const char *v = json_string_value(json_object_get(map, model));
	char *end;
	unsigned long long n;

	if (v == NULL || *v < '0' || *v > '9')
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	return errno == 0 && *end == '\0' ? (uint64_t)n : 0;
}

uint64_t
wsync_journal_last(const wsync_store_t *s, const char *model)
{
	return s_number(s->numbers, model);
}

uint64_t
wsync_store_group_last(const wsync_store_t *s, const char *model)
{
	return s_number(s->groups, model);
}

int
wsync_journal_group_set(wsync_store_t *s, const char *model, uint64_t key)
{
	char buf[32];

	/* Only ever raised: an older group's key never lets a replay of a newer one in. */
	if (key <= wsync_store_group_last(s, model))
		return 0;
	snprintf(buf, sizeof(buf), "%" PRIu64, key);
	return json_object_set_new(s->groups, model, json_string(buf));
}

int
wsync_journal_last_set(wsync_store_t *s, const char *model, uint64_t number)
{
	char buf[32];

	if (number <= wsync_journal_last(s, model))
		return 0;
	snprintf(buf, sizeof(buf), "%" PRIu64, number);
	return json_object_set_new(s->numbers, model, json_string(buf));
}

/*
 * Writes STORE/.journal atomically (temporary file, fsync, rename, fsync of
 * the directory): the numbers given so far and, when n > 0, the renames of a
 * commit. Once it is in place the commit has happened: a hub that dies
 * before the renames are done has them done when the store opens again.
 */
int
wsync_journal_write(wsync_store_t *s, const wsync_store_temp_t *files, size_t n,
    const struct wsync_staged *st, wsync_err_t *err)
{
	json_t *doc = json_object(), *list = json_array();
	char path[PATH_MAX], tmp[PATH_MAX], *text = NULL;
	int fd = -1, rc = -1;

	for (size_t i = 0; i < n; i++) {
		char content[17];
		snprintf(content, sizeof(content), "%016" PRIx64, st[i].content);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}",
		    "model", files[i].model, "file", strrchr(files[i].path, '/') + 1,
		    "sidecar", strrchr(st[i].sidecar_tmp, '/') + 1,
		    "to", strrchr(st[i].final, '/') + 1, "sidecar_to",
		    strrchr(st[i].sidecar, '/') + 1, "content", content));
	}
	json_object_set(doc, "numbers", s->numbers);
	/* Written once a model has a version in parts: older journals have none. */
	if (json_object_size(s->groups) > 0)
		json_object_set(doc, "groups", s->groups);
	json_object_set_new(doc, "commit", list);
	if ((text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	if (wsync_store_path(path, sizeof(path), "%s/.journal", s->dir) < 0 ||
	    wsync_store_path(tmp, sizeof(tmp), "%s/.journal.tmp", s->dir) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
		goto done;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
	    wsync_write_all(fd, text, strlen(text)) < 0 || wsync_write_all(fd, "\n", 1) < 0 ||
	    fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", tmp, strerror(errno));
		goto done;
	}
	wsync_store_crash_point(s);
	if (rename(tmp, path) < 0 || wsync_store_sync_dir(s->dir) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
		goto done;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		unlink(tmp);
	free(text);
	json_decref(doc);
	return rc;
}

/* 1 when name is a plain file name (no '/', not "." or ".."), fit for a journal entry. */
static int
s_plain_name(const char *name)
{
	return name != NULL && name[0] != '\0' && strchr(name, '/') == NULL &&
	    strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* 1 when the file at path is the .wsync the journal means: its stamp and content id. */
static int
s_is_staged(const char *path, const char *to, const char *content)
{
	wsync_err_t ignored;
	wsync_file_t *f = wsync_file_open(path, &ignored);
	char want[PATH_MAX], hex[17];
	int same;

	if (f == NULL)
		return 0;
	snprintf(want, sizeof(want), "%" PRIu64 ".wsync", wsync_file_version(f));
	snprintf(hex, sizeof(hex), "%016" PRIx64, wsync_file_content_id(f));
	same = strcmp(want, to) == 0 && content != NULL && strcmp(hex, content) == 0;
	wsync_file_close(&f);
	return same;
}

/*
 * Renames uploads/from to STORE/model/to unless it is gone already (the
 * rename was done before the crash); a .wsync only when it is the file the
 * journal means (content not NULL), not an upload that reused the name.
 * Returns 1 when it renamed, 0 when there was nothing to do, -1 on failure.
 */
static int
s_roll(wsync_store_t *s, const char *from, const char *model, const char *to,
    const char *content, int wsync)
{
	char src[PATH_MAX], dst[PATH_MAX], dir[PATH_MAX];
	wsync_err_t ignored;

	if (wsync_store_path(src, sizeof(src), "%s/%s", s->uploads, from) < 0 ||
	    wsync_store_path(dir, sizeof(dir), "%s/%s", s->dir, model) < 0 ||
	    wsync_store_path(dst, sizeof(dst), "%s/%s", dir, to) < 0)
		return -1;
	if (access(src, F_OK) < 0)
		return errno == ENOENT ? 0 : -1;
	if (access(dst, F_OK) == 0 || (wsync && !s_is_staged(src, to, content)))
		return 0;
	if (wsync_store_mkdir(dir, &ignored) < 0 || rename(src, dst) < 0 ||
	    wsync_store_sync_dir(dir) < 0)
		return -1;
	return 1;
}

/*
 * Reads STORE/.journal: its numbers, and finishes the renames of the commit
 * it records (a hub that died after writing it). A store without one (new,
 * or older than the journal) starts with no numbers: those of the files on
 * disk count then.
 */
int
wsync_journal_recover(wsync_store_t *s, wsync_err_t *err)
{
	char path[PATH_MAX], q[4 * PATH_MAX];
	json_error_t jerr;
	json_t *doc, *numbers, *groups, *list, *e;
	size_t i, done = 0;

	if (wsync_store_path(path, sizeof(path), "%s/.journal", s->dir) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
	if ((doc = json_load_file(path, 0, &jerr)) == NULL) {
		if (access(path, F_OK) < 0 && errno == ENOENT)
			return 0;
		return wsync_err_set(err, EX_DATAERR, "%s: unreadable: %s (a journal is "
		    "written atomically: this is damage, not a crash)", path, jerr.text);
	}
	numbers = json_object_get(doc, "numbers");
	list = json_object_get(doc, "commit");
	groups = json_object_get(doc, "groups");
	if (!json_is_object(numbers) || !json_is_array(list) ||
	    (groups != NULL && !json_is_object(groups))) {
		json_decref(doc);
		return wsync_err_set(err, EX_DATAERR, "%s: not a wsync store journal", path);
	}
	json_object_update(s->numbers, numbers);
	if (groups != NULL)
		json_object_update(s->groups, groups);
	json_array_foreach(list, i, e) {
		const char *model = json_string_value(json_object_get(e, "model"));
		const char *file = json_string_value(json_object_get(e, "file"));
		const char *side = json_string_value(json_object_get(e, "sidecar"));
		const char *to = json_string_value(json_object_get(e, "to"));
		const char *side_to = json_string_value(json_object_get(e, "sidecar_to"));
		const char *content = json_string_value(json_object_get(e, "content"));
		int a, b;
		if (model == NULL || wsync_model_id_check(model) < 0 || !s_plain_name(file) ||
		    !s_plain_name(side) || !s_plain_name(to) || !s_plain_name(side_to)) {
			json_decref(doc);
			return wsync_err_set(err, EX_DATAERR, "%s: commit entry %zu is malformed",
			    path, i);
		}
		/* The sidecar first: a version never shows up without its targets. */
		if ((b = s_roll(s, side, model, side_to, NULL, 0)) < 0 ||
		    (a = s_roll(s, file, model, to, content, 1)) < 0) {
			json_decref(doc);
			return wsync_err_set(err, EX_IOERR, "%s: cannot finish the commit of "
			    "%s/%s: %s", path, model, to, strerror(errno));
		}
		done += (size_t)(a + b);
	}
	json_decref(doc);
	if (done > 0)
		wsync_store_log(s, "event=recover journal=\"%s\" renamed=%zu", wsync_log_quote(path, q,
		    sizeof(q)), done);
	return 0;
}
