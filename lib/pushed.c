/* pushed.c - the tensor hashes of files pushed, remembered for the push that names one its base. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash_int.h"
#include "io_int.h"
#include "pushed_int.h"

/* An entry: [MAGIC, 1, dev, ino, size, mtime s, ns, ctime s, ns, content, [hashes]]. */
#define S_MAGIC "wsync-pushed"
#define S_FIELDS 11
/* The largest entry read: 8 bytes and a tag a hash, for a million tensors. */
#define S_MAX_ENTRY (16u << 20)

int
wsync_pushed_settled(const struct stat *st, const struct timespec *when)
{
	/* Whole seconds: a file system keeping 1 or 2 s times; a change 2 s later moves them. */
	if (st->st_ctim.tv_nsec == 0)
		return st->st_ctim.tv_sec + 2 <= when->tv_sec;
	return st->st_ctim.tv_sec < when->tv_sec ||
	    (st->st_ctim.tv_sec == when->tv_sec && st->st_ctim.tv_nsec < when->tv_nsec);
}

/*
 * The cache's directory into buf, made when make is set; -1 when there is
 * none. Made from XDG_CACHE_HOME or HOME's .cache down, never above: a HOME
 * that does not exist is not made.
 */
static int
s_dir(char *buf, size_t size, int make)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	size_t from;
	char *slash;
	int n;

	if (xdg != NULL && xdg[0] == '/') {
		n = snprintf(buf, size, "%s/wsync/pushed", xdg);
		from = strlen(xdg);
	} else if (home != NULL && home[0] == '/') {
		n = snprintf(buf, size, "%s/.cache/wsync/pushed", home);
		from = strlen(home) + 1;
	} else
		return -1;
	if (n < 0 || (size_t)n >= size)
		return -1;
	if (!make)
		return 0;
	/* Each level made in turn, private: the entries say which files a user pushed. */
	for (slash = strchr(buf + from, '/'); ; slash = strchr(slash + 1, '/')) {
		if (slash != NULL)
			*slash = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
			if (slash != NULL)
				*slash = '/';
			return -1;
		}
		if (slash == NULL)
			return 0;
		*slash = '/';
	}
}

/* The entry's path for the file st describes into buf; -1 when there is no cache. */
static int
s_entry(const struct stat *st, char *buf, size_t size, int make)
{
	uint64_t key[2] = { (uint64_t)st->st_dev, (uint64_t)st->st_ino };
	size_t len;

	if (s_dir(buf, size, make) < 0)
		return -1;
	len = strlen(buf);
	return snprintf(buf + len, size - len, "/%016llx",
	    (unsigned long long)XXH3_64bits(key, sizeof(key))) >= (int)(size - len) ? -1 : 0;
}

/* The entry's fields, in order, as they must read for st. */
static void
s_fields(const struct stat *st, int64_t *f)
{
	f[0] = (int64_t)st->st_dev;
	f[1] = (int64_t)st->st_ino;
	f[2] = (int64_t)st->st_size;
	f[3] = (int64_t)st->st_mtim.tv_sec;
	f[4] = (int64_t)st->st_mtim.tv_nsec;
	f[5] = (int64_t)st->st_ctim.tv_sec;
	f[6] = (int64_t)st->st_ctim.tv_nsec;
}

int
wsync_pushed_same(const struct stat *a, const struct stat *b)
{
	int64_t fa[7], fb[7];

	s_fields(a, fa);
	s_fields(b, fb);
	return memcmp(fa, fb, sizeof(fa)) == 0;
}

/* An integer field of the entry, as int64_t: 0 on success. */
static int
s_int(const msgpack_object *o, int64_t *v)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
		*v = (int64_t)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*v = o->via.i64;
	else
		return -1;
	return 0;
}

/* Whether the entry in buf is the file st's, with n hashes: copied out on a match. */
static int
s_match(const char *buf, size_t len, const struct stat *st, size_t n, uint64_t *hashes,
    uint64_t *content)
{
	msgpack_unpacked u;
	const msgpack_object *a;
	int64_t want[7], got;
	size_t off = 0;
	int hit = 0;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len ||
	    u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size != S_FIELDS)
		goto out;
	a = u.data.via.array.ptr;
	if (a[0].type != MSGPACK_OBJECT_STR || a[0].via.str.size != strlen(S_MAGIC) ||
	    memcmp(a[0].via.str.ptr, S_MAGIC, strlen(S_MAGIC)) != 0 ||
	    a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[1].via.u64 != 1)
		goto out;
	s_fields(st, want);
	for (int i = 0; i < 7; i++)
		if (s_int(&a[2 + i], &got) < 0 || got != want[i])
			goto out;
	if (a[9].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[10].type != MSGPACK_OBJECT_ARRAY ||
	    a[10].via.array.size != n)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (a[10].via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			goto out;
	for (size_t i = 0; i < n; i++)
		hashes[i] = a[10].via.array.ptr[i].via.u64;
	*content = a[9].via.u64;
	hit = 1;
out:
	msgpack_unpacked_destroy(&u);
	return hit;
}

int
wsync_pushed_recall(const struct stat *st, size_t n, uint64_t *hashes, uint64_t *content)
{
	char path[PATH_MAX], *buf = NULL;
	struct stat est;
	int fd, hit = 0;

	if (s_entry(st, path, sizeof(path), 0) < 0 ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (fstat(fd, &est) == 0 && est.st_size > 0 && (uint64_t)est.st_size <= S_MAX_ENTRY &&
	    (buf = malloc((size_t)est.st_size)) != NULL &&
	    wsync_read_at(fd, buf, (size_t)est.st_size, 0) == 0)
		hit = s_match(buf, (size_t)est.st_size, st, n, hashes, content);
	free(buf);
	close(fd);
	return hit;
}

/* An entry of the cache, for pruning: its name and when it was written. */
struct s_aged {
	char name[NAME_MAX + 1];
	struct timespec at;
};

static int
s_cmp_aged(const void *a, const void *b)
{
	const struct timespec *x = &((const struct s_aged *)a)->at,
	    *y = &((const struct s_aged *)b)->at;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/*
 * Past WSYNC_PUSHED_MAX entries in dir, the oldest removed, never kept (the
 * entry just written): written within one tick of the clock, entries tie.
 * Another pusher's temporary files are left to it.
 */
static void
s_prune(const char *dir, const char *kept)
{
	struct s_aged *all = NULL, *grown;
	size_t n = 0, cap = 0;
	struct dirent *de;
	struct stat st;
	DIR *d;
	int dfd;

	if ((d = opendir(dir)) == NULL)
		return;
	dfd = dirfd(d);
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp.") != NULL ||
		    strcmp(de->d_name, kept) == 0 ||
		    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			cap = cap == 0 ? 2 * WSYNC_PUSHED_MAX : 2 * cap;
			if ((grown = realloc(all, cap * sizeof(*all))) == NULL)
				break;
			all = grown;
		}
		snprintf(all[n].name, sizeof(all[n].name), "%s", de->d_name);
		all[n++].at = st.st_mtim;
	}
	if (n + 1 > WSYNC_PUSHED_MAX) {
		qsort(all, n, sizeof(*all), s_cmp_aged);
		for (size_t i = 0; i < n + 1 - WSYNC_PUSHED_MAX; i++)
			unlinkat(dfd, all[i].name, 0);
	}
	free(all);
	closedir(d);
}

void
wsync_pushed_remember(const struct stat *st, size_t n, const uint64_t *hashes,
    uint64_t content)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16], name[32];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int64_t f[7];
	int fd, bad = 0;

	/* One that could not be read back is not written. */
	if (n > (S_MAX_ENTRY - 128) / 9 || s_entry(st, path, sizeof(path), 1) < 0 ||
	    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp))
		return;
	snprintf(name, sizeof(name), "%s", strrchr(path, '/') + 1);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	bad |= msgpack_pack_array(&pk, S_FIELDS);
	bad |= msgpack_pack_str_with_body(&pk, S_MAGIC, strlen(S_MAGIC));
	bad |= msgpack_pack_uint64(&pk, 1);
	s_fields(st, f);
	for (int i = 0; i < 7; i++)
		bad |= msgpack_pack_int64(&pk, f[i]);
	bad |= msgpack_pack_uint64(&pk, content);
	bad |= msgpack_pack_array(&pk, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		bad |= msgpack_pack_uint64(&pk, hashes[i]);
	/* Not synced: an entry lost to a crash costs one pass over a base, no more. */
	if (!bad && (fd = mkostemp(tmp, O_CLOEXEC)) >= 0) {
		bad = wsync_write_all(fd, sb.data, sb.size) < 0;
		close(fd);
		if (bad || rename(tmp, path) < 0)
			unlink(tmp);
		else if (s_dir(path, sizeof(path), 0) == 0)
			s_prune(path, name);
	}
	msgpack_sbuffer_destroy(&sb);
}

void
wsync_pushed_forget(const struct stat *st)
{
	char path[PATH_MAX];

	if (s_entry(st, path, sizeof(path), 0) == 0)
		unlink(path);
}
