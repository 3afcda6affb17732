/* kept.c - files of a store on tmpfs kept mapped from one pass to the next. */
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "kept_int.h"
#include "pool_int.h"

struct wsync_kept_map {
	wsync_kept_t *set;
	dev_t dev;
	ino_t ino;
	size_t len;
	unsigned char *base;
	int fd;                 /* the file read-only, its own open: how a sweep sees it unlinked */
	unsigned refs;          /* passes holding it */
	int dead;               /* unmapped once no pass holds it */
	uint64_t used;          /* when last held: the least recent goes first */
};

struct wsync_kept_set {
	pthread_mutex_t lock;
	unsigned max, n;
	uint64_t clock;
	wsync_kept_map_t *maps[WSYNC_KEPT_MAPS];
};

/* Whether the file st describes (open at fd) lies on tmpfs and has all its pages. */
static int
s_whole_on_tmpfs(int fd, const struct stat *st)
{
	struct statfs fs;

	return S_ISREG(st->st_mode) && st->st_size > 0 && (uint64_t)st->st_size <= SIZE_MAX &&
	    (uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size && fstatfs(fd, &fs) == 0 &&
	    fs.f_type == TMPFS_MAGIC;
}

int
wsync_kept_fits(const char *dir)
{
	struct statfs fs;

	return statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

wsync_kept_t *
wsync_kept_new(unsigned max)
{
	wsync_kept_t *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return NULL;
	pthread_mutex_init(&k->lock, NULL);
	wsync_kept_set_max(k, max);
	return k;
}

void
wsync_kept_set_max(wsync_kept_t *k, unsigned max)
{
	if (k == NULL)
		return;
	pthread_mutex_lock(&k->lock);
	/* The maps over it go when the next one comes (s_room). */
	k->max = max < WSYNC_KEPT_MAPS ? max : WSYNC_KEPT_MAPS;
	pthread_mutex_unlock(&k->lock);
}

static void
s_unmap(wsync_kept_map_t *m)
{
	munmap(m->base, m->len);
	close(m->fd);
	free(m);
}

static void *
s_unmap_thread(void *arg)
{
	s_unmap(arg);
	return NULL;
}

/*
 * Unmaps m in a thread of its own: letting a removed file's pages go costs
 * ~0.15 s a GiB on tmpfs, the last mapping of a file kept ~0.04, which
 * the hub's loop does not wait for (as wsync_store_bury). Inline if it cannot start.
 */
static void
s_unmap_later(wsync_kept_map_t *m)
{
	if (wsync_detach(s_unmap_thread, m) < 0)
		s_unmap(m);
}

/*
 * Takes map i out of the set: unmapped now (later: in a thread), or by the
 * last pass holding it.
 */
static void
s_drop(wsync_kept_t *k, unsigned i, int later)
{
	wsync_kept_map_t *m = k->maps[i];

	k->maps[i] = k->maps[--k->n];
	m->dead = 1;
	if (m->refs == 0 && later)
		s_unmap_later(m);
	else if (m->refs == 0)
		s_unmap(m);
}

void
wsync_kept_free(wsync_kept_t **k)
{
	if (*k == NULL)
		return;
	while ((*k)->n > 0)
		s_drop(*k, 0, 0);
	pthread_mutex_destroy(&(*k)->lock);
	free(*k);
	*k = NULL;
}

/* The map of the file st describes, or -1; with the lock held. */
static int
s_find(const wsync_kept_t *k, const struct stat *st)
{
	for (unsigned i = 0; i < k->n; i++)
		if (k->maps[i]->dev == st->st_dev && k->maps[i]->ino == st->st_ino)
			return (int)i;
	return -1;
}

static unsigned char *
s_hold(wsync_kept_t *k, wsync_kept_map_t *m, wsync_kept_map_t **held)
{
	m->refs++;
	m->used = ++k->clock;
	*held = m;
	return m->base;
}

/*
 * Room for one more map: the least recently held that no pass holds go
 * until there is (a set made smaller loses several). 0, or -1.
 */
static int
s_room(wsync_kept_t *k)
{
	while (k->n >= k->max) {
		int victim = -1;
		for (unsigned i = 0; i < k->n; i++)
			if (k->maps[i]->refs == 0 && (victim < 0 || k->maps[i]->used <
			    k->maps[victim]->used))
				victim = (int)i;
		if (victim < 0)
			return -1;
		s_drop(k, (unsigned)victim, 1);
	}
	return 0;
}

/* A new map of the file at fd (st) named path, filled for writing; NULL when it cannot be. */
static wsync_kept_map_t *
s_map(wsync_kept_t *k, int fd, const char *path, const struct stat *st)
{
	wsync_kept_map_t *m = calloc(1, sizeof(*m));
	struct stat rst;

	if (m == NULL)
		return NULL;
	*m = (wsync_kept_map_t){ .set = k, .dev = st->st_dev, .ino = st->st_ino,
	    .len = (size_t)st->st_size, .base = MAP_FAILED };
	m->fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (m->fd < 0 || fstat(m->fd, &rst) < 0 || rst.st_dev != st->st_dev ||
	    rst.st_ino != st->st_ino ||
	    (m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
	    0)) == MAP_FAILED) {
		if (m->fd >= 0)
			close(m->fd);
		free(m);
		return NULL;
	}
	return m;
}

unsigned char *
wsync_kept_out(wsync_kept_t *k, int fd, const char *path, uint64_t size,
    wsync_kept_map_t **held)
{
	unsigned char *p = NULL;
	wsync_kept_map_t *m;
	struct stat st;
	int i;

	*held = NULL;
	/*
	 * Only a file this process alone may write (one link, opened read-write
	 * here), whose pages all exist: a store of tmpfs that is full then
	 * never turns a write through the mapping into SIGBUS.
	 */
	if (k == NULL || fstat(fd, &st) < 0 || !s_whole_on_tmpfs(fd, &st) || st.st_nlink != 1 ||
	    (uint64_t)st.st_size != size || (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR)
		return NULL;
	pthread_mutex_lock(&k->lock);
	if ((i = s_find(k, &st)) >= 0 && k->maps[i]->len != size)
		s_drop(k, (unsigned)i, 1);
	else if (i >= 0)
		p = s_hold(k, k->maps[i], held);
	if (p == NULL && s_room(k) == 0 && (m = s_map(k, fd, path, &st)) != NULL) {
		k->maps[k->n++] = m;
		p = s_hold(k, m, held);
	}
	pthread_mutex_unlock(&k->lock);
	return p;
}

const unsigned char *
wsync_kept_in(wsync_kept_t *k, int fd, wsync_kept_map_t **held)
{
	const unsigned char *p = NULL;
	struct stat st;
	int i;

	*held = NULL;
	if (k == NULL || fstat(fd, &st) < 0)
		return NULL;
	pthread_mutex_lock(&k->lock);
	/* Bytes past the file's end would be SIGBUS: only a map of the file's size. */
	if ((i = s_find(k, &st)) >= 0 && (uint64_t)k->maps[i]->len == (uint64_t)st.st_size)
		p = s_hold(k, k->maps[i], held);
	pthread_mutex_unlock(&k->lock);
	return p;
}

void
wsync_kept_release(wsync_kept_map_t *m)
{
	wsync_kept_t *k;

	if (m == NULL)
		return;
	/* The set outlives every map held (wsync_kept_free wants none held). */
	k = m->set;
	pthread_mutex_lock(&k->lock);
	if (--m->refs == 0 && m->dead)
		s_unmap_later(m);
	pthread_mutex_unlock(&k->lock);
}

void
wsync_kept_forget(wsync_kept_t *k, int fd)
{
	struct stat st;
	int i;

	if (k == NULL || fstat(fd, &st) < 0)
		return;
	pthread_mutex_lock(&k->lock);
	if ((i = s_find(k, &st)) >= 0)
		s_drop(k, (unsigned)i, 1);
	pthread_mutex_unlock(&k->lock);
}

void
wsync_kept_one_release(wsync_kept_one_t *m)
{
	if (m->base != NULL)
		munmap(m->base, m->len);
	*m = (wsync_kept_one_t){ 0 };
}

unsigned char *
wsync_kept_one(wsync_kept_one_t *m, int fd)
{
	struct stat st;
	void *p;

	if (fstat(fd, &st) < 0 || !s_whole_on_tmpfs(fd, &st) ||
	    (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) {
		wsync_kept_one_release(m);
		return NULL;
	}
	if (m->base != NULL && m->dev == st.st_dev && m->ino == st.st_ino &&
	    m->len == (size_t)st.st_size)
		return m->base;
	wsync_kept_one_release(m);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
	    0);
	if (p == MAP_FAILED)
		return NULL;
	*m = (wsync_kept_one_t){ .base = p, .len = (size_t)st.st_size, .dev = st.st_dev,
	    .ino = st.st_ino };
	return m->base;
}

void
wsync_kept_sweep(wsync_kept_t *k)
{
	struct stat st;

	if (k == NULL)
		return;
	pthread_mutex_lock(&k->lock);
	for (unsigned i = 0; i < k->n; )
		if (fstat(k->maps[i]->fd, &st) < 0 || st.st_nlink == 0)
			s_drop(k, i, 1);
		else
			i++;
	pthread_mutex_unlock(&k->lock);
}
