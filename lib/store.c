/* store.c - the store opened, scanned and verified, its models in memory, lookup, retention. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "index_int.h"
#include "io_int.h"
#include "pool_int.h"
#include "proto_int.h"
#include "store_impl_int.h"

/* Logs that path (dir/name, name may be NULL) was skipped, and why. */
static void
s_log_skip(const wsync_store_t *s, const char *event, const char *dir, const char *name,
    const char *why)
{
	char path[PATH_MAX + 256], qpath[4 * sizeof(path)], qwhy[2048];

	snprintf(path, sizeof(path), "%s%s%s", dir, name ? "/" : "", name ? name : "");
	wsync_store_log(s, "event=%s path=\"%s\" error=\"%s\"", event,
	    wsync_log_quote(path, qpath, sizeof(qpath)), wsync_log_quote(why, qwhy, sizeof(qwhy)));
}

int
wsync_store_path(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int
wsync_store_version_path(char *buf, size_t size, const char *dir, const char *model,
    uint64_t version, int sidecar)
{
	return wsync_store_path(buf, size, "%s/%s/%" PRIu64 "%s", dir, model, version,
	    sidecar ? ".json" : ".wsync");
}

int
wsync_store_mkdir(const char *path, wsync_err_t *err)
{
	struct stat st;

	if (mkdir(path, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return wsync_err_set(err, EX_IOERR, "%s: cannot create: %s", path,
		    strerror(errno));
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return wsync_err_set(err, EX_IOERR, "%s: not a directory", path);
	return 0;
}

int
wsync_store_sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/* ---- pure helpers ---- */

int
wsync_store_parse_name(const char *name, uint64_t *version, int *sidecar)
{
	uint64_t v = 0;
	const char *p = name;

	if (*p < '1' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (strcmp(p, ".wsync") == 0)
		*sidecar = 0;
	else if (strcmp(p, ".json") == 0)
		*sidecar = 1;
	else
		return -1;
	*version = v;
	return 0;
}

size_t
wsync_store_retention(const wsync_version_t *versions, size_t n, unsigned keep,
    unsigned char *retire)
{
	size_t untargeted = n, count = 0;

	if (keep == 0)
		keep = 1;
	for (size_t i = n; i-- > 0;)
		if (versions[i].targets == NULL) {
			untargeted = i;
			break;
		}
	for (size_t i = 0; i < n; i++) {
		retire[i] = i + keep < n && i != untargeted;
		count += retire[i];
	}
	return count;
}

int
wsync_version_visible(const wsync_version_t *v, const char *worker)
{
	if (v->targets == NULL)
		return 1;
	if (worker == NULL)
		return 0;
	for (size_t i = 0; i < v->ntargets; i++)
		if (strcmp(v->targets[i], worker) == 0)
			return 1;
	return 0;
}

const wsync_version_t *
wsync_model_version(const wsync_model_t *m, uint64_t version)
{
	size_t lo = 0, hi = m->nversions;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->versions[mid].version == version)
			return &m->versions[mid];
		if (m->versions[mid].version < version)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const wsync_version_t *
wsync_model_newest(const wsync_model_t *m)
{
	return m->nversions > 0 ? &m->versions[m->nversions - 1] : NULL;
}

const wsync_version_t *
wsync_model_head(const wsync_model_t *m, const char *worker)
{
	for (size_t i = m->nversions; i-- > 0;)
		if (wsync_version_visible(&m->versions[i], worker))
			return &m->versions[i];
	return NULL;
}

/* ---- models and versions in memory ---- */

void
wsync_version_free(wsync_version_t *v)
{
	wsync_version_unmap(v);
	if (v->fd >= 0)
		close(v->fd);
	v->fd = -1;
	wsync_sidecar_free(v);
}

static const char *
s_model_name(const void *models, size_t i)
{
	return ((wsync_model_t *const *)models)[i]->id;
}

static size_t
s_model_index(const wsync_store_t *s, const char *id, int *found)
{
	return wsync_index_find(s->models, s->nmodels, s_model_name, id, found);
}

wsync_model_t *
wsync_store_model_add(wsync_store_t *s, const char *id)
{
	int found;
	size_t at = s_model_index(s, id, &found);
	wsync_model_t *m;

	if (found)
		return s->models[at];
	if (s->nmodels == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		wsync_model_t **nm = realloc(s->models, cap * sizeof(*nm));
		if (nm == NULL)
			return NULL;
		s->models = nm;
		s->cap = cap;
	}
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return NULL;
	snprintf(m->id, sizeof(m->id), "%s", id);
	m->next = 1;
	memmove(&s->models[at + 1], &s->models[at], (s->nmodels - at) * sizeof(*s->models));
	s->models[at] = m;
	s->nmodels++;
	return m;
}

int
wsync_model_append(wsync_model_t *m, wsync_version_t *v)
{
	if (m->nversions == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 4;
		wsync_version_t *nv = realloc(m->versions, cap * sizeof(*nv));
		if (nv == NULL) {
			wsync_version_free(v);
			return -1;
		}
		m->versions = nv;
		m->cap = cap;
	}
	m->versions[m->nversions++] = *v;
	return 0;
}

/* ---- retention ---- */

/* Keeps a retired version for wsync_store_bury; freed at once when it cannot be kept. */
static void
s_grave(wsync_store_t *s, wsync_version_t *v)
{
	if (s->ngraves == s->graves_cap) {
		size_t cap = s->graves_cap ? s->graves_cap * 2 : 4;
		wsync_version_t *g = realloc(s->graves, cap * sizeof(*g));
		if (g == NULL) {
			wsync_version_free(v);
			return;
		}
		s->graves = g;
		s->graves_cap = cap;
	}
	s->graves[s->ngraves++] = *v;
}

/* The graves of one bury: freed off the hub's loop. */
struct s_burial {
	wsync_version_t *v;
	size_t n;
};

static void *
s_bury_thread(void *arg)
{
	struct s_burial *b = arg;

	for (size_t i = 0; i < b->n; i++)
		wsync_version_free(&b->v[i]);
	free(b->v);
	free(b);
	return NULL;
}

void
wsync_store_bury(wsync_store_t *s)
{
	struct s_burial *b;
	int started = 0;

	if (s->ngraves == 0)
		return;
	/*
	 * Closing a retired file that was unlinked frees its pages, ~0.15 s a
	 * GiB on tmpfs: in a thread of its own, so the loop answers the
	 * watchers fetching the new version meanwhile. Inline if it cannot start.
	 */
	if ((b = malloc(sizeof(*b))) != NULL &&
	    (b->v = malloc(s->ngraves * sizeof(*b->v))) != NULL) {
		memcpy(b->v, s->graves, s->ngraves * sizeof(*b->v));
		b->n = s->ngraves;
		started = wsync_detach(s_bury_thread, b) == 0;
		if (!started)
			free(b->v);
	}
	if (!started) {
		free(b);
		for (size_t i = 0; i < s->ngraves; i++)
			wsync_version_free(&s->graves[i]);
	}
	s->ngraves = 0;
}

void
wsync_store_retain(wsync_store_t *s, wsync_model_t *m)
{
	unsigned char *retire = calloc(m->nversions ? m->nversions : 1, 1);
	size_t kept = 0;
	char path[PATH_MAX];

	if (retire == NULL ||
	    wsync_store_retention(m->versions, m->nversions, s->keep, retire) == 0) {
		free(retire);
		return;
	}
	for (size_t i = 0; i < m->nversions; i++) {
		wsync_version_t *v = &m->versions[i];
		if (!retire[i]) {
			m->versions[kept++] = *v;
			continue;
		}
		if (wsync_store_version_path(path, sizeof(path), s->dir, m->id, v->version, 0) == 0 &&
		    wsync_spare_keep(s, v, path) < 0)
			unlink(path);
		if (wsync_store_version_path(path, sizeof(path), s->dir, m->id, v->version, 1) == 0)
			unlink(path);
		wsync_store_log(s, "event=retire model=%s version=%" PRIu64, m->id, v->version);
		s_grave(s, v);
	}
	m->nversions = kept;
	free(retire);
}

/* ---- opening ---- */

/* Removes what a crashed hub left in STORE/.uploads. */
static int
s_clean_uploads(wsync_store_t *s, wsync_err_t *err)
{
	DIR *d = opendir(s->uploads);
	struct dirent *e;
	size_t removed = 0;

	if (d == NULL)
		return wsync_err_set(err, EX_IOERR, "%s: cannot read: %s", s->uploads,
		    strerror(errno));
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		    unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	closedir(d);
	if (removed > 0) {
		char q[4 * PATH_MAX];
		wsync_store_log(s, "event=cleanup dir=\"%s\" removed=%zu", wsync_log_quote(s->uploads, q,
		    sizeof(q)), removed);
	}
	return 0;
}

static int
s_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Opens version number of model m from its file and sidecar and appends it;
 * a file that does not fit is logged and skipped. -1 only when out of memory.
 */
static int
s_load_version(wsync_store_t *s, wsync_model_t *m, uint64_t number)
{
	char path[PATH_MAX], why[300];
	wsync_version_t v = { .version = number, .fd = -1 };
	wsync_file_t *f = NULL;
	struct stat st;
	wsync_err_t err;

	if (wsync_store_version_path(path, sizeof(path), s->dir, m->id, number, 0) < 0)
		return 0;
	if ((v.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(v.fd, &st) < 0) {
		snprintf(err.msg, sizeof(err.msg), "%s", strerror(errno));
		goto skip;
	}
	if ((f = wsync_file_open_fd(v.fd, path, &err)) == NULL)
		goto skip;
	if (wsync_file_version(f) != number) {
		snprintf(err.msg, sizeof(err.msg), "stamped version %" PRIu64 " differs from its "
		    "name", wsync_file_version(f));
		goto skip;
	}
	if (!wsync_store_model_fits(f, m->id)) {
		snprintf(err.msg, sizeof(err.msg), "a version of model \"%s\" under the name of "
		    "model \"%s\": served no more", wsync_file_model(f), m->id);
		goto skip;
	}
	/* Every byte, against its hash: what was committed is served, or nothing. */
	if (wsync_file_verify(f, NULL, NULL, &err) < 0)
		goto skip;
	/* Verified here, as of this mtime (taken before the hashing). */
	v.mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
	v.size = wsync_file_size(f);
	v.content = wsync_file_content_id(f);
	wsync_file_close(&f);
	if (wsync_store_version_path(path, sizeof(path), s->dir, m->id, number, 1) < 0 ||
	    wsync_sidecar_read(path, &v, why, sizeof(why)) < 0) {
		strncat(why, " (using the file's time, no pusher, no targets)",
		    sizeof(why) - strlen(why) - 1);
		s_log_skip(s, "sidecar", path, NULL, why);
		wsync_sidecar_free(&v);
		v.time = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
		if ((v.pusher = strdup("")) == NULL) {
			wsync_version_free(&v);
			return -1;
		}
	}
	return wsync_model_append(m, &v);
skip:
	s_log_skip(s, "skip", path, NULL, err.msg);
	wsync_file_close(&f);
	wsync_version_free(&v);
	return 0;
}

/* Reads one model directory: its versions, oldest first, and its next number. */
static int
s_load_model(wsync_store_t *s, const char *id, wsync_err_t *err)
{
	char dir[PATH_MAX], path[PATH_MAX];
	uint64_t *numbers = NULL, *sidecars = NULL, number;
	size_t n = 0, nside = 0, cap = 0, capside = 0;
	wsync_model_t *m;
	struct dirent *e;
	DIR *d = NULL;
	int rc = -1, sidecar;

	if (wsync_store_path(dir, sizeof(dir), "%s/%s", s->dir, id) < 0 || (d = opendir(dir)) == NULL)
		return wsync_err_set(err, EX_IOERR, "%s/%s: cannot read: %s", s->dir, id,
		    strerror(errno));
	while ((e = readdir(d)) != NULL) {
		uint64_t **list;
		size_t *len, *lcap;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (wsync_store_parse_name(e->d_name, &number, &sidecar) < 0) {
			s_log_skip(s, "skip", dir, e->d_name, "not VERSION.wsync or VERSION.json");
			continue;
		}
		list = sidecar ? &sidecars : &numbers;
		len = sidecar ? &nside : &n;
		lcap = sidecar ? &capside : &cap;
		if (*len == *lcap) {
			size_t c = *lcap ? *lcap * 2 : 16;
			uint64_t *nl = realloc(*list, c * sizeof(*nl));
			if (nl == NULL)
				goto oom;
			*list = nl;
			*lcap = c;
		}
		(*list)[(*len)++] = number;
	}
	if ((m = wsync_store_model_add(s, id)) == NULL)
		goto oom;
	/* A model directory may hold no version at all (every file deleted). */
	if (n > 0)
		qsort(numbers, n, sizeof(*numbers), s_cmp_u64);
	for (size_t i = 0; i < n; i++)
		if (s_load_version(s, m, numbers[i]) < 0)
			goto oom;
	/* Numbers are never reused, even those of files that did not load. */
	if (n > 0)
		m->next = numbers[n - 1] == UINT64_MAX ? UINT64_MAX : numbers[n - 1] + 1;
	/* A sidecar without its file is what a crash between the two renames leaves. */
	for (size_t i = 0; i < nside; i++)
		if ((n == 0 || bsearch(&sidecars[i], numbers, n, sizeof(*numbers),
		    s_cmp_u64) == NULL) &&
		    wsync_store_path(path, sizeof(path), "%s/%" PRIu64 ".json", dir, sidecars[i]) == 0 &&
		    unlink(path) == 0)
			s_log_skip(s, "cleanup", path, NULL, "a sidecar without its version");
	rc = 0;
	goto done;
oom:
	wsync_err_set(err, EX_SOFTWARE, "out of memory");
done:
	closedir(d);
	free(numbers);
	free(sidecars);
	return rc;
}

static int
s_scan(wsync_store_t *s, wsync_err_t *err)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	struct stat st;
	int rc = 0;

	if (d == NULL)
		return wsync_err_set(err, EX_IOERR, "%s: cannot read: %s", s->dir, strerror(errno));
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    strcmp(e->d_name, ".uploads") == 0 || strcmp(e->d_name, ".lock") == 0 ||
		    strcmp(e->d_name, ".id") == 0 || strcmp(e->d_name, ".id.tmp") == 0 ||
		    strcmp(e->d_name, ".journal") == 0 || strcmp(e->d_name, ".journal.tmp") == 0 ||
		    strcmp(e->d_name, ".deltas") == 0)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) || wsync_model_id_check(e->d_name) < 0) {
			s_log_skip(s, "skip", s->dir, e->d_name, "not a model directory");
			continue;
		}
		rc = s_load_model(s, e->d_name, err);
	}
	closedir(d);
	return rc;
}

/* Takes STORE/.lock, so that two hubs never number versions in one store. */
static int
s_lock(wsync_store_t *s, wsync_err_t *err)
{
	char path[PATH_MAX];

	if (wsync_store_path(path, sizeof(path), "%s/.lock", s->dir) < 0 ||
	    (s->lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return wsync_err_set(err, EX_IOERR, "%s/.lock: cannot create: %s", s->dir,
		    strerror(errno));
	if (flock(s->lock, LOCK_EX | LOCK_NB) < 0)
		return wsync_err_set(err, errno == EWOULDBLOCK ? EX_UNAVAILABLE : EX_IOERR,
		    "store %s is in use by another hub", s->dir);
	return 0;
}

/*
 * Reads STORE/.id, or makes it: 32 random hex digits that tell a watcher the
 * hub it follows now keeps another store (whose numbers start over).
 */
static int
s_identity(wsync_store_t *s, wsync_err_t *err)
{
	unsigned char raw[16];
	char path[PATH_MAX], tmp[PATH_MAX];
	ssize_t n = -1;
	int fd;

	if (wsync_store_path(path, sizeof(path), "%s/.id", s->dir) < 0 ||
	    wsync_store_path(tmp, sizeof(tmp), "%s/.id.tmp", s->dir) < 0)
		return wsync_err_set(err, EX_USAGE, "%s: path too long", s->dir);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, s->id, 32);
		close(fd);
		s->id[n == 32 ? 32 : 0] = '\0';
		if (n == 32 && strspn(s->id, "0123456789abcdef") == 32)
			return 0;
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return wsync_err_set(err, EX_SOFTWARE, "cannot get random bytes: %s",
		    strerror(errno));
	for (int i = 0; i < 16; i++)
		snprintf(s->id + 2 * i, 3, "%02x", raw[i]);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
	    wsync_write_all(fd, s->id, 32) < 0 || fsync(fd) < 0 || close(fd) < 0 ||
	    rename(tmp, path) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", path, strerror(errno));
	return 0;
}

const char *
wsync_store_id(const wsync_store_t *s)
{
	return s->id;
}

wsync_store_t *
wsync_store_open(const char *dir, unsigned keep, wsync_log_fn log, void *log_arg,
    wsync_err_t *err)
{
	char rundir[PATH_MAX - 16], path[PATH_MAX];
	wsync_store_t *s;

	if (dir == NULL) {
		if (wsync_runtime_dir(rundir, sizeof(rundir), err) < 0)
			return NULL;
		snprintf(path, sizeof(path), "%s/store", rundir);
		dir = path;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	s->lock = -1;
	s->keep = keep > 0 ? keep : 1;
#ifdef WSYNC_TEST_HOOKS
	s->crash_at = getenv("WSYNC_TEST_CRASH_AT") ? atoi(getenv("WSYNC_TEST_CRASH_AT")) : 0;
#endif
	s->log = log;
	s->log_arg = log_arg;
	if (wsync_store_mkdir(dir, err) < 0)
		goto fail;
	/* Absolute, so that clients on this host can find its files (wsync(7), transfer). */
	if ((s->dir = realpath(dir, NULL)) == NULL) {
		wsync_err_set(err, EX_IOERR, "%s: %s", dir, strerror(errno));
		goto fail;
	}
	if (asprintf(&s->uploads, "%s/.uploads", s->dir) < 0) {
		s->uploads = NULL;
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	if ((s->numbers = json_object()) == NULL || (s->groups = json_object()) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	/* Roll forward a commit the journal records before its uploads are cleaned. */
	if (s_lock(s, err) < 0 || s_identity(s, err) < 0 ||
	    wsync_store_mkdir(s->uploads, err) < 0 || wsync_journal_recover(s, err) < 0 ||
	    s_clean_uploads(s, err) < 0 || s_scan(s, err) < 0)
		goto fail;
	for (size_t i = 0; i < s->nmodels; i++) {
		wsync_model_t *m = s->models[i];
		uint64_t last = wsync_journal_last(s, m->id);
		/* The journal's numbers hold even when the newest files are gone. */
		if (last >= m->next && last < UINT64_MAX)
			m->next = last + 1;
		if (wsync_journal_last_set(s, m->id, m->next - 1) < 0) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
		wsync_store_retain(s, m);
	}
	return s;
fail:
	wsync_store_close(&s);
	return NULL;
}

void
wsync_store_close(wsync_store_t **sp)
{
	wsync_store_t *s = *sp;

	if (s == NULL)
		return;
	wsync_store_bury(s);
	free(s->graves);
	for (size_t i = 0; i < s->nmodels; i++) {
		wsync_model_t *m = s->models[i];
		for (size_t j = 0; j < m->nversions; j++)
			wsync_version_free(&m->versions[j]);
		free(m->versions);
		free(m);
	}
	if (s->lock >= 0)
		close(s->lock);
	json_decref(s->numbers);
	json_decref(s->groups);
	free(s->models);
	free(s->uploads);
	free(s->dir);
	free(s);
	*sp = NULL;
}

const char *
wsync_store_dir(const wsync_store_t *s)
{
	return s->dir;
}

size_t
wsync_store_count(const wsync_store_t *s)
{
	return s->nmodels;
}

const wsync_model_t *
wsync_store_model(const wsync_store_t *s, size_t i)
{
	return i < s->nmodels ? s->models[i] : NULL;
}

const wsync_model_t *
wsync_store_find(const wsync_store_t *s, const char *model)
{
	int found;
	size_t at = s_model_index(s, model, &found);

	return found ? s->models[at] : NULL;
}

