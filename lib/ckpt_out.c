/* ckpt_out.c - a version written as a checkpoint directory, swapped into place behind a symlink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "io_int.h"
#include "tempfile_int.h"
#include "wsync.h"

#define S_INDEX "model.safetensors.index.json"
#define S_FILES_PREFIX WSYNC_CKPT_FILES "."
/* Older directories looked at for removal in one publish. */
#define S_MAX_OLD 4096

int
wsync_ckpt_selected(const wsync_ckpt_out_t *o, const char *name)
{
	if (o == NULL || o->nselect == 0)
		return 1;
	for (int i = 0; i < o->nselect; i++)
		if (fnmatch(o->select[i], name, 0) == 0)
			return 1;
	return 0;
}

/* The model id a directory records: f's, or "model" for a safetensors file, which has none. */
static const char *
s_model(const wsync_file_t *f)
{
	const char *m = wsync_file_model(f);

	return m != NULL && m[0] != '\0' ? m : "model";
}

static int
s_is_file(const wsync_tensor_t *t)
{
	return strncmp(t->path, S_FILES_PREFIX, sizeof(S_FILES_PREFIX) - 1) == 0;
}

/* Creates name in dir (which must not hold it), writes len bytes and fsyncs; -1 with err. */
static int
s_write_file(const char *dir, const char *name, const void *data, size_t len, wsync_err_t *err)
{
	char path[PATH_MAX];
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return wsync_err_set(err, EX_USAGE, "%s/%s: path too long", dir, name);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644 & ~wsync_umask())) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot create: %s", path, strerror(errno));
	if (wsync_write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (close(fd) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
	return 0;
}

/* Shard k (1-based) of m, tensors [from, to) of f that o selects, streamed from f's mapping. */
static int
s_write_shard(const wsync_file_t *f, const char *dir, const wsync_ckpt_out_t *o, size_t from,
    size_t to, unsigned k, unsigned m, json_t *map, wsync_err_t *err)
{
	char name[64], path[PATH_MAX];
	wsync_tree_t *tree = wsync_tree_new(s_model(f), err);
	int fd = -1, rc = -1;

	snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors", k, m);
	if (tree == NULL)
		return -1;
	for (size_t i = 0; i < wsync_file_meta_count(f); i++)
		if (wsync_tree_set_meta(tree, wsync_file_meta(f, i)->key,
		    wsync_file_meta(f, i)->value, err) < 0)
			goto out;
	for (size_t i = from; i < to; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		if (s_is_file(t) || !wsync_ckpt_selected(o, t->path))
			continue;
		if (wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, err) < 0)
			goto out;
		if (json_object_set_new(map, t->path, json_string(name)) < 0) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) {
		wsync_err_set(err, EX_USAGE, "%s: path too long", dir);
		goto out;
	}
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644 & ~wsync_umask())) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot create: %s", path, strerror(errno));
		goto out;
	}
	if (wsync_tree_write_safetensors_fd(tree, fd, path, err) < 0)
		goto out;
	if (fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
	wsync_tree_destroy(&tree);
	/* What was written need not stay in this process's memory. */
	if (f->mem == WSYNC_MEM_MMAP)
		for (size_t i = from; i < to; i++)
			wsync_pages_release(wsync_file_tensor(f, i)->data,
			    (size_t)wsync_file_tensor(f, i)->nbytes);
	return rc;
}

/* Writes the shards, the index and the small files into the existing empty dir. */
static int
s_write_into(const wsync_file_t *f, const char *dir, const wsync_ckpt_out_t *o, wsync_err_t *err)
{
	uint64_t limit = o != NULL && o->shard_size > 0 ? o->shard_size : WSYNC_CKPT_SHARD_SIZE;
	uint64_t fill = 0, total = 0;
	size_t n = wsync_file_count(f), from = 0;
	unsigned m = 0, k = 0;
	json_t *index = NULL, *map = NULL;
	char *text = NULL;
	int rc = -1, open_shard = 0;

	/* Shards in file order: a new one when the next tensor would overflow the current. */
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		if (s_is_file(t) || !wsync_ckpt_selected(o, t->path))
			continue;
		if (!open_shard || fill + t->nbytes > limit) {
			m++;
			fill = 0;
			open_shard = 1;
		}
		fill += t->nbytes;
		total += t->nbytes;
	}
	if ((map = json_object()) == NULL || (index = json_pack("{s:{s:I, s:s, s:s}, s:O}",
	    "metadata", "total_size", (json_int_t)total, "wsync_model", s_model(f),
	    "wsync_content", "", "weight_map", map)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	{
		char content[17];
		snprintf(content, sizeof(content), "%016" PRIx64, wsync_file_content_id(f));
		json_object_set_new(json_object_get(index, "metadata"), "wsync_content",
		    json_string(content));
	}
	fill = 0;
	open_shard = 0;
	for (size_t i = 0; i <= n; i++) {
		const wsync_tensor_t *t = i < n ? wsync_file_tensor(f, i) : NULL;
		if (t != NULL && (s_is_file(t) || !wsync_ckpt_selected(o, t->path)))
			continue;
		if (t == NULL || !open_shard || fill + t->nbytes > limit) {
			if (open_shard && s_write_shard(f, dir, o, from, i, ++k, m, map, err) < 0)
				goto out;
			from = i;
			fill = 0;
			open_shard = 1;
		}
		if (t != NULL)
			fill += t->nbytes;
	}
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		const char *name = t->path + sizeof(S_FILES_PREFIX) - 1;
		if (!s_is_file(t))
			continue;
		if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, S_INDEX) == 0 ||
		    strcmp(name, "..") == 0 || name[0] == '.') {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: not a file name wsync writes",
			    wsync_file_name(f), t->path);
			goto out;
		}
		if (s_write_file(dir, name, t->data, (size_t)t->nbytes, err) < 0)
			goto out;
	}
	if ((text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	if (s_write_file(dir, S_INDEX, text, strlen(text), err) < 0)
		goto out;
	{
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: cannot sync: %s", dir, strerror(errno));
			if (dfd >= 0)
				close(dfd);
			goto out;
		}
		close(dfd);
	}
	rc = 0;
out:
	free(text);
	json_decref(map);
	json_decref(index);
	return rc;
}

/* Removes a directory of plain files; -1 with errno. */
static int
s_rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d == NULL)
		return errno == ENOENT ? 0 : -1;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	return rmdir(dir);
}

int
wsync_ckpt_write(const wsync_file_t *f, const char *dir, const wsync_ckpt_out_t *o,
    wsync_err_t *err)
{
	if (mkdir(dir, 0755) < 0)
		return wsync_err_set(err, errno == EEXIST ? EX_CANTCREAT : EX_IOERR,
		    "%s: cannot create the directory: %s", dir, strerror(errno));
	if (s_write_into(f, dir, o, err) < 0) {
		s_rmtree(dir);
		return -1;
	}
	return 0;
}

static int
s_cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/*
 * Removes LINK.vN when no reader leases it: an exclusive flock taken at once,
 * then a rename out of the way so no new reader finds it, then the files.
 */
static void
s_retire(const char *path)
{
	char gone[PATH_MAX];
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
	    (size_t)snprintf(gone, sizeof(gone), "%s.tmp.gone%ld", path, (long)getpid()) <
	    sizeof(gone) && rename(path, gone) == 0)
		s_rmtree(gone);
	close(fd);
}

/* Removes what a killed publish left and the versions beyond keep that nobody leases. */
static void
s_prune(const char *link, uint64_t current, unsigned keep)
{
	char parent[PATH_MAX], prefix[NAME_MAX + 4], path[PATH_MAX];
	const char *base = strrchr(link, '/');
	uint64_t *old = NULL;
	size_t nold = 0, plen;
	struct dirent *de;
	DIR *d;

	if (base == NULL) {
		snprintf(parent, sizeof(parent), ".");
		base = link;
	} else {
		snprintf(parent, sizeof(parent), "%.*s", (int)(base - link), link);
		if (parent[0] == '\0')
			snprintf(parent, sizeof(parent), "/");
		base++;
	}
	plen = (size_t)snprintf(prefix, sizeof(prefix), "%s.v", base);
	if ((d = opendir(parent)) == NULL || (old = calloc(S_MAX_OLD, sizeof(*old))) == NULL)
		goto out;
	while ((de = readdir(d)) != NULL) {
		char *end;
		uint64_t v;
		if (strncmp(de->d_name, prefix, plen) != 0 || de->d_name[plen] < '0' ||
		    de->d_name[plen] > '9')
			continue;
		errno = 0;
		v = strtoull(de->d_name + plen, &end, 10);
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", parent, de->d_name) >=
		    sizeof(path))
			continue;
		if (strncmp(end, ".tmp.", 5) == 0 && v != current) {
			s_retire(path);
			continue;
		}
		if (*end == '\0' && errno == 0 && v < current && nold < S_MAX_OLD)
			old[nold++] = v;
	}
	qsort(old, nold, sizeof(*old), s_cmp_u64_desc);
	for (size_t i = keep; i < nold; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s%" PRIu64, parent, prefix,
		    old[i]) < sizeof(path))
			s_retire(path);
	}
out:
	if (d != NULL)
		closedir(d);
	free(old);
}

int
wsync_ckpt_publish(const wsync_file_t *f, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err)
{
	char tmp[PATH_MAX], ltmp[PATH_MAX], target[NAME_MAX + 1];
	const char *base;
	struct stat st;

	if ((size_t)snprintf(real, size, "%s.v%" PRIu64, link, version) >= size ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", real) >= sizeof(tmp))
		return wsync_err_set(err, EX_USAGE, "%s: path too long", link);
	base = strrchr(real, '/');
	snprintf(target, sizeof(target), "%s", base != NULL ? base + 1 : real);
	if (lstat(link, &st) == 0 && !S_ISLNK(st.st_mode))
		return wsync_err_set(err, EX_CANTCREAT, "%s: exists and is not a symlink: "
		    "safetensors output swaps a symlink there (remove it)", link);
	/* Versions never change: one already written whole (renamed into place) is kept. */
	if (stat(real, &st) < 0) {
		if (mkdtemp(tmp) == NULL)
			return wsync_err_set(err, EX_IOERR, "%s: cannot create a directory: %s",
			    tmp, strerror(errno));
		if (s_write_into(f, tmp, o, err) < 0) {
			s_rmtree(tmp);
			return -1;
		}
		if (chmod(tmp, 0755 & ~wsync_umask()) < 0 || rename(tmp, real) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", real,
			    strerror(errno));
			s_rmtree(tmp);
			return -1;
		}
	}
	for (int tries = 0;; tries++) {
		if ((size_t)snprintf(ltmp, sizeof(ltmp), "%s.tmp.%ld.%d", link, (long)getpid(),
		    tries) >= sizeof(ltmp))
			return wsync_err_set(err, EX_USAGE, "%s: path too long", link);
		if (symlink(target, ltmp) == 0)
			break;
		if (errno != EEXIST || tries == 16)
			return wsync_err_set(err, EX_IOERR, "%s: cannot make a symlink: %s", ltmp,
			    strerror(errno));
	}
	if (rename(ltmp, link) < 0) {
		int e = errno;
		unlink(ltmp);
		return wsync_err_set(err, EX_IOERR, "%s: cannot swap the symlink: %s", link,
		    strerror(e));
	}
	wsync_sync_parent(link);
	s_prune(link, version, keep);
	return 0;
}

int
wsync_ckpt_publish_path(const char *path, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open(path, err);
	int rc;

	if (f == NULL)
		return -1;
	rc = wsync_ckpt_publish(f, link, version, o, keep, real, size, err);
	wsync_file_close(&f);
	return rc;
}
