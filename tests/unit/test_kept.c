/*
 * test_kept.c - files of a store on tmpfs kept mapped: only a file whose
 * pages all exist, with one link, open read-write, is mapped to be written;
 * what is written through the mapping is the file's; a kept file is found
 * again by its inode (and at its size only); forgotten files and removed ones
 * (a sweep) are not; the least recently held goes when the set is full,
 * never one held; a removed file's mapping goes once its last holder lets go;
 * one unnamed file kept mapped from one pass to the next, at its size.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kept_int.h"
#include "tap.h"

#define LEN (1u << 20)

static char s_dir[] = "/dev/shm/wsync-test-kept.XXXXXX";

/* s_dir/name. */
static const char *
s_path(const char *name)
{
	static char path[4][256];
	static int i;

	i = (i + 1) % 4;
	snprintf(path[i], sizeof(path[i]), "%s/%s", s_dir, name);
	return path[i];
}

/* A file of len bytes open read-write: written (every page exists) or a hole. */
static int
s_file(const char *name, size_t len, int written)
{
	int fd = open(s_path(name), O_RDWR | O_CREAT | O_TRUNC, 0600);
	char *buf = malloc(len);

	if (fd < 0 || buf == NULL || ftruncate(fd, (off_t)len) < 0) {
		perror(name);
		exit(70);
	}
	memset(buf, 'x', len);
	if (written && pwrite(fd, buf, len, 0) != (ssize_t)len) {
		perror(name);
		exit(70);
	}
	free(buf);
	return fd;
}

/* Whether /proc/self/maps shows a mapping of s_dir/name. */
static int
s_mapped(const char *name)
{
	char line[1024];
	const char *path = s_path(name);
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		found |= strstr(line, path) != NULL;
	if (f != NULL)
		fclose(f);
	return found;
}

/* One unnamed file kept mapped (a batch pusher's copy of its last version). */
static void
test_one(void)
{
	wsync_kept_one_t one = { 0 };
	int fd = open(s_dir, O_TMPFILE | O_RDWR, 0600), ro;
	char *buf = malloc(2 * LEN), path[64], got[3] = "";
	unsigned char *p;
	struct stat st;
	int other;

	if (fd < 0 || buf == NULL)
		exit(70);
	memset(buf, 'x', 2 * LEN);
	ok(ftruncate(fd, LEN) == 0 && wsync_kept_one(&one, fd) == NULL && one.base == NULL,
	    "one file: not mapped while some of its pages are holes");
	p = pwrite(fd, buf, LEN, 0) == LEN ? wsync_kept_one(&one, fd) : NULL;
	ok(p != NULL && one.len == LEN, "mapped once it is written whole");
	if (p != NULL)
		memcpy(p + 5, "abc", 3);
	ok(pread(fd, got, 3, 5) == 3 && memcmp(got, "abc", 3) == 0 &&
	    wsync_kept_one(&one, fd) == p, "what is written through it is the file's, and the "
	    "same mapping serves the next pass");
	ok(pwrite(fd, buf, 2 * LEN, 0) == 2 * LEN && wsync_kept_one(&one, fd) != NULL &&
	    one.len == 2 * LEN, "the file grown: mapped again at its size");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY);
	ok(ro >= 0 && wsync_kept_one(&one, ro) == NULL && one.base == NULL && !s_mapped("#"),
	    "a descriptor open read-only is not mapped, and the mapping is let go");
	p = wsync_kept_one(&one, fd);
	other = open(s_dir, O_TMPFILE | O_RDWR, 0600);
	ok(p != NULL && other >= 0 && pwrite(other, buf, 2 * LEN, 0) == 2 * LEN &&
	    wsync_kept_one(&one, other) != NULL && fstat(other, &st) == 0 && one.ino == st.st_ino &&
	    one.len == 2 * LEN,
	    "another file of the same size: mapped anew");
	wsync_kept_one_release(&one);
	ok(one.base == NULL && !s_mapped("#"), "released: nothing of the two stays mapped");
	free(buf);
	close(other);
	close(ro);
	close(fd);
}

/*
 * Whether the mapping of s_dir/name goes within 10 s: a map dropped from the
 * set is unmapped in a thread of its own.
 */
static int
s_unmapped(const char *name)
{
	struct timespec ms = { 0, 1000000 };

	for (int i = 0; i < 10000 && s_mapped(name); i++)
		nanosleep(&ms, NULL);
	return !s_mapped(name);
}

int
main(void)
{
	wsync_kept_t *k;
	wsync_kept_map_t *m, *m2, *m3;
	unsigned char *p;
	const unsigned char *q;
	char got[4] = "";
	int a, b, c, ro;

	if (!wsync_kept_fits("/dev/shm") || mkdtemp(s_dir) == NULL) {
		printf("ok 1 - kept mappings # skip no tmpfs at /dev/shm\n");
		tap_n++;
		return tap_done();
	}
	ok(wsync_kept_fits(s_dir), "a directory on tmpfs fits");
	ok(!wsync_kept_fits("/proc"), "one elsewhere does not");
	if ((k = wsync_kept_new(2)) == NULL)
		return 70;

	a = s_file("a", LEN, 0);
	ok(wsync_kept_out(k, a, s_path("a"), LEN, &m) == NULL && m == NULL,
	    "a file whose pages do not all exist is not mapped");
	close(a);
	a = s_file("a", LEN, 1);
	ok(wsync_kept_out(k, a, s_path("a"), LEN + 1, &m) == NULL, "nor one of another size");
	if (link(s_path("a"), s_path("a2")) < 0)
		return 70;
	ok(wsync_kept_out(k, a, s_path("a"), LEN, &m) == NULL, "nor one with another link");
	unlink(s_path("a2"));
	ro = open(s_path("a"), O_RDONLY);
	ok(wsync_kept_out(k, ro, s_path("a"), LEN, &m) == NULL, "nor one open read-only");

	p = wsync_kept_out(k, a, s_path("a"), LEN, &m);
	ok(p != NULL && m != NULL, "a written file open read-write with one link is mapped");
	if (p == NULL)
		return tap_done();
	memcpy(p + LEN - 3, "abc", 3);
	ok(pread(ro, got, 3, LEN - 3) == 3 && memcmp(got, "abc", 3) == 0,
	    "what is written through the mapping is the file's");
	wsync_kept_release(m);
	q = wsync_kept_in(k, ro, &m);
	ok(q == p, "the file is found again by its inode, through another descriptor");
	wsync_kept_release(m);
	ok(wsync_kept_out(k, a, s_path("a"), LEN, &m) == p, "and written through the same mapping");
	wsync_kept_release(m);
	if (ftruncate(a, LEN / 2) < 0)
		return 70;
	ok(wsync_kept_in(k, ro, &m) == NULL, "not once the file has another size");
	if (ftruncate(a, LEN) < 0)
		return 70;
	ok(wsync_kept_in(k, ro, &m) == p && m != NULL, "and again at its size");
	wsync_kept_release(m);
	ok(wsync_kept_out(k, a, s_path("a"), LEN, &m) == NULL,
	    "but not to be written while some of its pages are holes");
	close(a);
	a = s_file("a", LEN, 1);

	wsync_kept_forget(k, a);
	ok(wsync_kept_in(k, ro, &m) == NULL && s_unmapped("a"),
	    "a forgotten file is not found, and unmapped");

	/* Two files fill the set; the least recently held goes for a third. */
	b = s_file("b", LEN, 1);
	c = s_file("c", LEN, 1);
	ok(wsync_kept_out(k, a, s_path("a"), LEN, &m) != NULL, "a is kept again");
	wsync_kept_release(m);
	ok(wsync_kept_out(k, b, s_path("b"), LEN, &m) != NULL, "b is kept");
	wsync_kept_release(m);
	ok(wsync_kept_in(k, a, &m) != NULL, "a is held again");
	wsync_kept_release(m);
	ok(wsync_kept_out(k, c, s_path("c"), LEN, &m) != NULL && wsync_kept_in(k, b, &m2) == NULL &&
	    wsync_kept_in(k, a, &m3) != NULL, "with the set full, c takes the place of b, the "
	    "least recently held");
	ok(wsync_kept_out(k, b, s_path("b"), LEN, &m2) == NULL,
	    "with every kept file held, another is not mapped");
	wsync_kept_release(m3);

	/* c removed while held: swept out of the set, unmapped when let go. */
	unlink(s_path("c"));
	wsync_kept_sweep(k);
	ok(wsync_kept_in(k, c, &m2) == NULL, "a removed file is swept out of the set");
	ok(s_mapped("c") && p != NULL, "its mapping stays while a pass holds it");
	wsync_kept_release(m);
	ok(s_unmapped("c"), "and goes with the last holder");
	ok(wsync_kept_in(k, a, &m) != NULL, "the file not removed stays kept");
	wsync_kept_release(m);

	wsync_kept_free(&k);
	ok(k == NULL && !s_mapped("a"), "freeing the set unmaps every file");

	test_one();
	ok(wsync_kept_out(NULL, a, s_path("a"), LEN, &m) == NULL && wsync_kept_in(NULL, a, &m) ==
	    NULL, "no set keeps nothing");
	wsync_kept_forget(NULL, a);
	wsync_kept_sweep(NULL);
	close(a);
	close(b);
	close(c);
	close(ro);
	unlink(s_path("a"));
	unlink(s_path("b"));
	rmdir(s_dir);
	return tap_done();
}
