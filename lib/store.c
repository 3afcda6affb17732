/* store.c - the hub's version store: numbering, committing, retention (see store_int.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "index_int.h"
#include "io_int.h"
#include "proto_int.h"
#include "store_int.h"

#define S_SIDECAR_MAX (1 << 20)         /* bytes a sidecar may have */

struct wsync_store {
	char *dir;
	char *uploads;                  /* STORE/.uploads */
	int lock;                       /* STORE/.lock, flocked while open */
	char id[33];                    /* STORE/.id: this store's random identity */
	unsigned keep;
	wsync_log_fn log;
	void *log_arg;
	wsync_model_t **models;         /* sorted by id */
	size_t nmodels, cap;
	json_t *numbers;                /* model id -> last number given (decimal string) */
	int crash_at;                   /* WSYNC_TEST_CRASH_AT: 0, or a commit step to die at */
	int step;                       /* commit steps taken so far */
	/* Retired version files kept for reuse (STORE/.uploads/spare.N), oldest first. */
	unsigned spares;                /* the most kept; 0: retiring unlinks */
	char spare[WSYNC_STORE_MAX_SPARES][32];
	size_t nspare;
	uint64_t spare_seq;
};

#define s_log(s, ...) wsync_logf((s)->log, (s)->log_arg, __VA_ARGS__)

/* Logs that path (dir/name, name may be NULL) was skipped, and why. */
static void
s_log_skip(const wsync_store_t *s, const char *event, const char *dir, const char *name,
    const char *why)
{
	char path[PATH_MAX + 256], qpath[4 * sizeof(path)], qwhy[2048];

	snprintf(path, sizeof(path), "%s%s%s", dir, name ? "/" : "", name ? name : "");
	s_log(s, "event=%s path=\"%s\" error=\"%s\"", event,
	    wsync_log_quote(path, qpath, sizeof(qpath)), wsync_log_quote(why, qwhy, sizeof(qwhy)));
}

__attribute__((format(printf, 3, 4)))
static int
s_path(char *buf, size_t size, const char *fmt, ...)
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

/* Creates directory path 0700 unless it is one already. */
static int
s_mkdir(const char *path, wsync_err_t *err)
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

static int
s_sync_dir(const char *path)
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

/* Frees what a version's sidecar gave it. */
static void
s_sidecar_free(wsync_version_t *v)
{
	free(v->pusher);
	for (size_t i = 0; i < v->ntargets; i++)
		free(v->targets[i]);
	free(v->targets);
	v->pusher = NULL;
	v->targets = NULL;
	v->ntargets = 0;
}

struct wsync_map {
	void *base;
	size_t len;
	atomic_int refs;
};

/* Drops one reference; the last one unmaps. Runs in ZeroMQ's I/O thread too. */
static void
s_map_release(void *data, void *hint)
{
	wsync_map_t *m = hint;
	const unsigned char *end = (const unsigned char *)m->base + m->len;

	/* A chunk sent: its pages stay in the file, not in the hub's memory. */
	if (data != NULL)
		wsync_pages_release(data, (size_t)(end - (const unsigned char *)data) <
		    WSYNC_CHUNK ? (size_t)(end - (const unsigned char *)data) : WSYNC_CHUNK);
	if (atomic_fetch_sub(&m->refs, 1) == 1) {
		munmap(m->base, m->len);
		free(m);
	}
}

const unsigned char *
wsync_version_bytes(wsync_version_t *v, wsync_err_t *err)
{
	wsync_map_t *m;

	if (v->map != NULL)
		return v->map->base;
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	m->len = (size_t)v->size;
	m->base = mmap(NULL, m->len, PROT_READ, MAP_SHARED, v->fd, 0);
	if (m->base == MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "version %" PRIu64 ": cannot map: %s", v->version,
		    strerror(errno));
		free(m);
		return NULL;
	}
	atomic_init(&m->refs, 1);
	v->map = m;
	return m->base;
}

int
wsync_version_msg(wsync_version_t *v, uint64_t off, uint64_t len, zmq_msg_t *msg,
    wsync_err_t *err)
{
	const unsigned char *base = wsync_version_bytes(v, err);

	if (base == NULL)
		return -1;
	atomic_fetch_add(&v->map->refs, 1);
	if (zmq_msg_init_data(msg, (void *)(base + off), (size_t)len, s_map_release,
	    v->map) < 0) {
		s_map_release(NULL, v->map);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
}

static void
s_version_free(wsync_version_t *v)
{
	if (v->map != NULL)
		s_map_release(NULL, v->map);
	v->map = NULL;
	if (v->fd >= 0)
		close(v->fd);
	v->fd = -1;
	s_sidecar_free(v);
}

/* Copies a target list (NULL stays NULL); -1 when out of memory. */
static int
s_targets_copy(wsync_version_t *v, const char *const *targets, size_t n)
{
	v->targets = NULL;
	v->ntargets = 0;
	if (targets == NULL)
		return 0;
	if ((v->targets = calloc(n > 0 ? n : 1, sizeof(*v->targets))) == NULL)
		return -1;
	for (; v->ntargets < n; v->ntargets++)
		if ((v->targets[v->ntargets] = strdup(targets[v->ntargets])) == NULL)
			return -1;
	return 0;
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

/* The model with this id, added (empty, next = 1) when missing; NULL when out of memory. */
static wsync_model_t *
s_model_get(wsync_store_t *s, const char *id)
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

/* Appends v (newer than every version of m); m owns it afterwards, even on failure. */
static int
s_model_append(wsync_model_t *m, wsync_version_t *v)
{
	if (m->nversions == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 4;
		wsync_version_t *nv = realloc(m->versions, cap * sizeof(*nv));
		if (nv == NULL) {
			s_version_free(v);
			return -1;
		}
		m->versions = nv;
		m->cap = cap;
	}
	m->versions[m->nversions++] = *v;
	return 0;
}

/* ---- recycling retired files ---- */

/*
 * Keeps the retired file of v, at path, as a spare instead of unlinking it:
 * moved into .uploads, where no client looks for versions. Not while ZeroMQ
 * still sends from its mapping. -1 when it is not kept (the caller unlinks).
 */
static int
s_spare_add(wsync_store_t *s, const wsync_version_t *v, const char *path)
{
	char to[PATH_MAX];
	size_t at = s->nspare;

	if (s->spares == 0 || (v->map != NULL && atomic_load(&v->map->refs) != 1))
		return -1;
	if (at == s->spares) {
		/* Full: the oldest goes; a reader's link or lease keeps its bytes. */
		if (s_path(to, sizeof(to), "%s/%s", s->uploads, s->spare[0]) == 0)
			unlink(to);
		memmove(s->spare[0], s->spare[1], --at * sizeof(s->spare[0]));
	}
	snprintf(s->spare[at], sizeof(s->spare[at]), "spare.%" PRIu64, ++s->spare_seq);
	if (s_path(to, sizeof(to), "%s/%s", s->uploads, s->spare[at]) < 0 ||
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
 * A free spare made an upload file of size bytes for model: 1 with t set, 0
 * when none is free, -1 with err. One of the same size first: resizing frees
 * or allocates pages, which is what spares are there to avoid.
 */
static int
s_spare_reuse(wsync_store_t *s, const char *model, uint64_t size, wsync_store_temp_t *t,
    wsync_err_t *err)
{
	char path[PATH_MAX];
	int fd;

	for (int exact = 1; exact >= 0; exact--) {
		/* Oldest first: the likeliest to have been left by every reader. */
		for (size_t i = 0; i < s->nspare; i++) {
			if (s_path(path, sizeof(path), "%s/%s", s->uploads, s->spare[i]) < 0 ||
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
	int rc = s_spare_reuse(s, model, size, t, err);

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
		if (s_path(path, sizeof(path), "%s/%s", s->uploads, s->spare[0]) == 0)
			unlink(path);
		s_spare_drop(s, 0);
	}
}

/* Unlinks (or keeps as spares) and forgets the versions of m that retention drops. */
static void
s_retain(wsync_store_t *s, wsync_model_t *m)
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
		if (s_path(path, sizeof(path), "%s/%s/%" PRIu64 ".wsync", s->dir, m->id,
		    v->version) == 0 && s_spare_add(s, v, path) < 0)
			unlink(path);
		if (s_path(path, sizeof(path), "%s/%s/%" PRIu64 ".json", s->dir, m->id,
		    v->version) == 0)
			unlink(path);
		s_log(s, "event=retire model=%s version=%" PRIu64, m->id, v->version);
		s_version_free(v);
	}
	m->nversions = kept;
	free(retire);
}

/* ---- sidecars ---- */

/* Writes a sidecar into a new synced temporary file in STORE/.uploads, named in tmp. */
static int
s_sidecar_write(const wsync_store_t *s, char *tmp, const wsync_commit_info_t *info,
    wsync_err_t *err)
{
	json_t *doc = json_object(), *targets = info->targets ? json_array() : json_null();
	char *text = NULL;
	int fd = -1, rc = -1;

	for (size_t i = 0; info->targets != NULL && i < info->ntargets; i++)
		json_array_append_new(targets, json_string(info->targets[i]));
	json_object_set_new(doc, "pusher", json_string(info->pusher));
	json_object_set_new(doc, "time", json_real(info->time));
	json_object_set_new(doc, "targets", targets);
	if ((text = json_dumps(doc, JSON_COMPACT)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	if (s_path(tmp, PATH_MAX, "%s/sidecar.XXXXXX", s->uploads) < 0 ||
	    (fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot create a temporary file: %s",
		    s->uploads, strerror(errno));
		tmp[0] = '\0';
		goto done;
	}
	if (wsync_write_all(fd, text, strlen(text)) < 0 || wsync_write_all(fd, "\n", 1) < 0 ||
	    fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", tmp, strerror(errno));
		unlink(tmp);
		tmp[0] = '\0';
		goto done;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(doc);
	return rc;
}

/* Fills pusher, time and targets of v from its sidecar; -1 with why when it is unusable. */
static int
s_sidecar_read(const char *path, wsync_version_t *v, char *why, size_t whylen)
{
	json_error_t jerr;
	json_t *doc = NULL, *pusher, *time, *targets;
	struct stat st;
	int rc = -1;

	snprintf(why, whylen, "out of memory");
	if (stat(path, &st) < 0 || st.st_size > S_SIDECAR_MAX) {
		snprintf(why, whylen, "%s", errno == ENOENT ? "missing" : "unreadable or too large");
		return -1;
	}
	if ((doc = json_load_file(path, 0, &jerr)) == NULL) {
		snprintf(why, whylen, "%s", jerr.text);
		return -1;
	}
	pusher = json_object_get(doc, "pusher");
	time = json_object_get(doc, "time");
	targets = json_object_get(doc, "targets");
	if (!json_is_string(pusher) || !json_is_number(time) ||
	    !(json_is_null(targets) || json_is_array(targets))) {
		snprintf(why, whylen, "fields pusher, time or targets missing or mistyped");
		goto done;
	}
	if ((v->pusher = strdup(json_string_value(pusher))) == NULL)
		goto done;
	v->time = json_number_value(time);
	if (json_is_array(targets)) {
		size_t n = json_array_size(targets);
		if ((v->targets = calloc(n > 0 ? n : 1, sizeof(*v->targets))) == NULL)
			goto done;
		for (; v->ntargets < n; v->ntargets++) {
			const char *t = json_string_value(json_array_get(targets, v->ntargets));
			if (t == NULL || wsync_id_check(t) < 0) {
				snprintf(why, whylen, "target %zu is not a worker id", v->ntargets);
				goto done;
			}
			if ((v->targets[v->ntargets] = strdup(t)) == NULL)
				goto done;
		}
	}
	rc = 0;
done:
	json_decref(doc);
	return rc;
}

/* ---- numbers and the commit journal (STORE/.journal) ---- */

/*
 * The test-only crash hook (wsync-serve(1), WSYNC_TEST_CRASH_AT): each step of
 * a commit that writes to disk counts, and the one numbered crash_at kills
 * the process as kill -9 would, so that tests can stop a commit between any
 * two of its writes.
 */
static void
s_step(wsync_store_t *s)
{
	if (s->crash_at > 0 && ++s->step == s->crash_at)
		raise(SIGKILL);
}

/* The last number model was given (0: none), as the journal keeps it. */
static uint64_t
s_last(const wsync_store_t *s, const char *model)
{
	const char *v = json_string_value(json_object_get(s->numbers, model));
	char *end;
	unsigned long long n;

	if (v == NULL || *v < '0' || *v > '9')
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	return errno == 0 && *end == '\0' ? (uint64_t)n : 0;
}

/* Records number as given to model when it is above what the journal has. */
static int
s_last_set(wsync_store_t *s, const char *model, uint64_t number)
{
	char buf[32];

	if (number <= s_last(s, model))
		return 0;
	snprintf(buf, sizeof(buf), "%" PRIu64, number);
	return json_object_set_new(s->numbers, model, json_string(buf));
}

/* One file of a commit, between its checks and its rename. */
struct s_staged {
	uint64_t version, size, content, offset;
	char final[PATH_MAX];           /* STORE/MODEL/VERSION.wsync */
	char sidecar[PATH_MAX];         /* STORE/MODEL/VERSION.json */
	char sidecar_tmp[PATH_MAX];     /* STORE/.uploads/sidecar.XXXXXX until renamed */
	int renamed;
};

/*
 * Writes STORE/.journal atomically (temporary file, fsync, rename, fsync of
 * the directory): the numbers given so far and, when n > 0, the renames of a
 * commit. Once it is in place the commit has happened: a hub that dies
 * before the renames are done has them done when the store opens again.
 */
static int
s_journal_write(wsync_store_t *s, const wsync_store_temp_t *files, size_t n,
    const struct s_staged *st, wsync_err_t *err)
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
	json_object_set_new(doc, "commit", list);
	if ((text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	if (s_path(path, sizeof(path), "%s/.journal", s->dir) < 0 ||
	    s_path(tmp, sizeof(tmp), "%s/.journal.tmp", s->dir) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
		goto done;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
	    wsync_write_all(fd, text, strlen(text)) < 0 || wsync_write_all(fd, "\n", 1) < 0 ||
	    fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", tmp, strerror(errno));
		goto done;
	}
	s_step(s);
	if (rename(tmp, path) < 0 || s_sync_dir(s->dir) < 0) {
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

	if (s_path(src, sizeof(src), "%s/%s", s->uploads, from) < 0 ||
	    s_path(dir, sizeof(dir), "%s/%s", s->dir, model) < 0 ||
	    s_path(dst, sizeof(dst), "%s/%s", dir, to) < 0)
		return -1;
	if (access(src, F_OK) < 0)
		return errno == ENOENT ? 0 : -1;
	if (access(dst, F_OK) == 0 || (wsync && !s_is_staged(src, to, content)))
		return 0;
	if (s_mkdir(dir, &ignored) < 0 || rename(src, dst) < 0 || s_sync_dir(dir) < 0)
		return -1;
	return 1;
}

/*
 * Reads STORE/.journal: its numbers, and finishes the renames of the commit
 * it records (a hub that died after writing it). A store without one (new,
 * or older than the journal) starts with no numbers: those of the files on
 * disk count then.
 */
static int
s_journal_recover(wsync_store_t *s, wsync_err_t *err)
{
	char path[PATH_MAX], q[4 * PATH_MAX];
	json_error_t jerr;
	json_t *doc, *numbers, *list, *e;
	size_t i, done = 0;

	if (s_path(path, sizeof(path), "%s/.journal", s->dir) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
	if ((doc = json_load_file(path, 0, &jerr)) == NULL) {
		if (access(path, F_OK) < 0 && errno == ENOENT)
			return 0;
		return wsync_err_set(err, EX_DATAERR, "%s: unreadable: %s (a journal is "
		    "written atomically: this is damage, not a crash)", path, jerr.text);
	}
	numbers = json_object_get(doc, "numbers");
	list = json_object_get(doc, "commit");
	if (!json_is_object(numbers) || !json_is_array(list)) {
		json_decref(doc);
		return wsync_err_set(err, EX_DATAERR, "%s: not a wsync store journal", path);
	}
	json_object_update(s->numbers, numbers);
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
		s_log(s, "event=recover journal=\"%s\" renamed=%zu", wsync_log_quote(path, q,
		    sizeof(q)), done);
	return 0;
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
		s_log(s, "event=cleanup dir=\"%s\" removed=%zu", wsync_log_quote(s->uploads, q,
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

	if (s_path(path, sizeof(path), "%s/%s/%" PRIu64 ".wsync", s->dir, m->id, number) < 0)
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
	/* Every byte, against its hash: what was committed is served, or nothing. */
	if (wsync_file_verify(f, NULL, NULL, &err) < 0)
		goto skip;
	/* Verified here, as of this mtime (taken before the hashing). */
	v.mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
	v.size = wsync_file_size(f);
	v.content = wsync_file_content_id(f);
	wsync_file_close(&f);
	if (s_path(path, sizeof(path), "%s/%s/%" PRIu64 ".json", s->dir, m->id, number) < 0 ||
	    s_sidecar_read(path, &v, why, sizeof(why)) < 0) {
		strncat(why, " (using the file's time, no pusher, no targets)",
		    sizeof(why) - strlen(why) - 1);
		s_log_skip(s, "sidecar", path, NULL, why);
		s_sidecar_free(&v);
		v.time = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
		if ((v.pusher = strdup("")) == NULL) {
			s_version_free(&v);
			return -1;
		}
	}
	return s_model_append(m, &v);
skip:
	s_log_skip(s, "skip", path, NULL, err.msg);
	wsync_file_close(&f);
	s_version_free(&v);
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

	if (s_path(dir, sizeof(dir), "%s/%s", s->dir, id) < 0 || (d = opendir(dir)) == NULL)
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
	if ((m = s_model_get(s, id)) == NULL)
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
		    s_path(path, sizeof(path), "%s/%" PRIu64 ".json", dir, sidecars[i]) == 0 &&
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
		    strcmp(e->d_name, ".journal") == 0 || strcmp(e->d_name, ".journal.tmp") == 0)
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

	if (s_path(path, sizeof(path), "%s/.lock", s->dir) < 0 ||
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

	if (s_path(path, sizeof(path), "%s/.id", s->dir) < 0 ||
	    s_path(tmp, sizeof(tmp), "%s/.id.tmp", s->dir) < 0)
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
	s->crash_at = getenv("WSYNC_TEST_CRASH_AT") ? atoi(getenv("WSYNC_TEST_CRASH_AT")) : 0;
	s->log = log;
	s->log_arg = log_arg;
	if (s_mkdir(dir, err) < 0)
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
	if ((s->numbers = json_object()) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	/* Roll forward a commit the journal records before its uploads are cleaned. */
	if (s_lock(s, err) < 0 || s_identity(s, err) < 0 ||
	    s_mkdir(s->uploads, err) < 0 || s_journal_recover(s, err) < 0 ||
	    s_clean_uploads(s, err) < 0 || s_scan(s, err) < 0)
		goto fail;
	for (size_t i = 0; i < s->nmodels; i++) {
		wsync_model_t *m = s->models[i];
		uint64_t last = s_last(s, m->id);
		/* The journal's numbers hold even when the newest files are gone. */
		if (last >= m->next && last < UINT64_MAX)
			m->next = last + 1;
		if (s_last_set(s, m->id, m->next - 1) < 0) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
		s_retain(s, m);
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
	for (size_t i = 0; i < s->nmodels; i++) {
		wsync_model_t *m = s->models[i];
		for (size_t j = 0; j < m->nversions; j++)
			s_version_free(&m->versions[j]);
		free(m->versions);
		free(m);
	}
	if (s->lock >= 0)
		close(s->lock);
	json_decref(s->numbers);
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

/* ---- uploads and commits ---- */

int
wsync_store_temp_open(wsync_store_t *s, const char *model, wsync_store_temp_t *t,
    wsync_err_t *err)
{
	snprintf(t->model, sizeof(t->model), "%s", model);
	t->fd = -1;
	if (s_path(t->path, sizeof(t->path), "%s/upload.XXXXXX", s->uploads) < 0 ||
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

/* Checks an uploaded file the way a commit needs: parses, verifies, can be stamped. */
static int
s_check(const wsync_store_temp_t *t, int trust, struct s_staged *st, wsync_err_t *err)
{
	char name[WSYNC_MAX_MODEL + 16];
	wsync_file_t *f;
	int rc = -1;

	snprintf(name, sizeof(name), "model \"%s\"", t->model);
	if ((f = wsync_file_open_fd(t->fd, name, err)) == NULL)
		return -1;
	if (!trust && wsync_file_verify(f, NULL, NULL, err) < 0)
		goto done;
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

/* Numbers the staged files: each gets the next number of its model, in order. */
static int
s_number(wsync_store_t *s, const wsync_store_temp_t *files, size_t n, struct s_staged *st,
    wsync_err_t *err)
{
	for (size_t i = 0; i < n; i++) {
		const wsync_model_t *m = wsync_store_find(s, files[i].model);
		uint64_t first = m != NULL ? m->next : 1, last = s_last(s, files[i].model), v;
		if (last >= first && last < UINT64_MAX)
			first = last + 1;
		v = first;
		for (size_t j = 0; j < i; j++)
			v += strcmp(files[j].model, files[i].model) == 0;
		if (v == UINT64_MAX || v < first)
			return wsync_err_set(err, EX_DATAERR, "model \"%s\" has no version numbers "
			    "left", files[i].model);
		st[i].version = v;
		if (s_path(st[i].final, sizeof(st[i].final), "%s/%s/%" PRIu64 ".wsync", s->dir,
		    files[i].model, v) < 0 || s_path(st[i].sidecar, sizeof(st[i].sidecar),
		    "%s/%s/%" PRIu64 ".json", s->dir, files[i].model, v) < 0)
			return wsync_err_set(err, EX_IOERR, "%s: path too long", s->dir);
	}
	return 0;
}

/* Removes the sidecars of a commit that failed before its journal was written. */
static void
s_unstage(size_t n, struct s_staged *st)
{
	for (size_t i = 0; i < n; i++)
		if (st[i].sidecar_tmp[0] != '\0')
			unlink(st[i].sidecar_tmp);
}

/* Puts committed files in memory; they own the temporary files' descriptors afterwards. */
static int
s_publish(wsync_store_t *s, wsync_store_temp_t *files, size_t n, struct s_staged *st,
    const wsync_commit_info_t *info, wsync_committed_t *out)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		wsync_version_t v = { .version = st[i].version, .size = st[i].size,
		    .content = st[i].content, .time = info->time, .fd = files[i].fd };
		wsync_model_t *m = s_model_get(s, files[i].model);
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
		if (m == NULL || (v.pusher = strdup(info->pusher)) == NULL ||
		    s_targets_copy(&v, info->targets, info->ntargets) < 0) {
			/* On disk already: the next open of the store finds it. */
			s_version_free(&v);
			rc = -1;
			continue;
		}
		m->next = st[i].version + 1;
		if (s_model_append(m, &v) < 0)
			rc = -1;
	}
	for (size_t i = 0; i < n; i++) {
		wsync_model_t *m = s_model_get(s, files[i].model);
		if (m != NULL)
			s_retain(s, m);
	}
	return rc;
}

int
wsync_store_commit(wsync_store_t *s, wsync_store_temp_t *files, size_t n,
    const wsync_commit_info_t *info, wsync_committed_t *out, wsync_err_t *err)
{
	struct s_staged *st = calloc(n > 0 ? n : 1, sizeof(*st));
	json_t *saved = NULL;
	char dir[PATH_MAX];
	int rc = -1;

	if (st == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	s->step = 0;
	for (size_t i = 0; i < n; i++)
		if (s_check(&files[i], info->trust, &st[i], err) < 0)
			goto done;
	if (s_number(s, files, n, st, err) < 0)
		goto done;
	for (size_t i = 0; i < n; i++) {
		if (s_path(dir, sizeof(dir), "%s/%s", s->dir, files[i].model) < 0 ||
		    s_mkdir(dir, err) < 0)
			goto fail;
		s_step(s);
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
		s_step(s);
		if (s_sidecar_write(s, st[i].sidecar_tmp, info, err) < 0)
			goto fail;
	}
	/* The commit point: once the journal names the renames, they happen. */
	if ((saved = json_deep_copy(s->numbers)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		s_last_set(s, files[i].model, st[i].version);
	if (s_journal_write(s, files, n, st, err) < 0) {
		json_decref(s->numbers);
		s->numbers = saved;
		saved = NULL;
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		s_step(s);
		if (rename(st[i].sidecar_tmp, st[i].sidecar) == 0) {
			st[i].sidecar_tmp[0] = '\0';
			s_step(s);
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
		if (s_path(dir, sizeof(dir), "%s/%s", s->dir, files[i].model) == 0)
			s_sync_dir(dir);
	s_step(s);
	if (s_publish(s, files, n, st, info, out) < 0)
		wsync_err_set(err, EX_SOFTWARE, "out of memory after committing");
	else
		rc = 0;
	goto done;
fail:
	s_unstage(n, st);
done:
	json_decref(saved);
	free(st);
	return rc;
}
