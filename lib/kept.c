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

struct wsync_kept {
	pthread_mutex_t lock;
	unsigned max, n;
	uint64_t clock;
	wsync_kept_map_t **maps;
};

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

	if (k == NULL || (k->maps = calloc(max > 0 ? max : 1, sizeof(*k->maps))) == NULL) {
		free(k);
		return NULL;
	}
	pthread_mutex_init(&k->lock, NULL);
	k->max = max;
	return k;
}

static void
s_unmap(wsync_kept_map_t *m)
{
	munmap(m->base, m->len);
	close(m->fd);
	free(m);
}

/* Takes map i out of the set: unmapped now, or by the last pass holding it. */
static void
s_drop(wsync_kept_t *k, unsigned i)
{
	wsync_kept_map_t *m = k->maps[i];

	k->maps[i] = k->maps[--k->n];
	m->dead = 1;
	if (m->refs == 0)
		s_unmap(m);
}

void
wsync_kept_free(wsync_kept_t **k)
{
	if (*k == NULL)
		return;
	while ((*k)->n > 0)
		s_drop(*k, 0);
	pthread_mutex_destroy(&(*k)->lock);
	free((*k)->maps);
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

/* Room for one more map: the least recently held that no pass holds goes. 0, or -1. */
static int
s_room(wsync_kept_t *k)
{
	int victim = -1;

	if (k->n < k->max)
		return 0;
	for (unsigned i = 0; i < k->n; i++)
		if (k->maps[i]->refs == 0 && (victim < 0 || k->maps[i]->used <
		    k->maps[victim]->used))
			victim = (int)i;
	if (victim < 0)
		return -1;
	s_drop(k, (unsigned)victim);
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
	if (k == NULL || size == 0 || size > SIZE_MAX || fstat(fd, &st) < 0 ||
	    !S_ISREG(st.st_mode) || st.st_nlink != 1 || (uint64_t)st.st_size != size ||
	    (uint64_t)st.st_blocks * 512 < size || (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR)
		return NULL;
	pthread_mutex_lock(&k->lock);
	if ((i = s_find(k, &st)) >= 0 && k->maps[i]->len != size)
		s_drop(k, (unsigned)i);
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
		s_unmap(m);
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
		s_drop(k, (unsigned)i);
	pthread_mutex_unlock(&k->lock);
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
			s_drop(k, i);
		else
			i++;
	pthread_mutex_unlock(&k->lock);
}
