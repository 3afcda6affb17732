/*
 * test_pushed.c - what a pusher remembers of a file it pushed: recalled only
 * for that file as it was (device, inode, size, mtime, ctime) and with the
 * same number of tensors, forgotten on request, a damaged entry a miss, at
 * most WSYNC_PUSHED_MAX entries kept, the oldest going first, and a file
 * changed within the clock's last tick not settled.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pushed_int.h"
#include "tap.h"

static char s_dir[] = "/tmp/wsync-test-pushed.XXXXXX";

/* A file of n bytes in the test's directory, made anew; its stat into st. */
static void
s_file(const char *name, size_t n, struct stat *st)
{
	char path[256];
	char *buf = calloc(1, n + 1);
	int fd;

	snprintf(path, sizeof(path), "%s/%s", s_dir, name);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0 || buf == NULL ||
	    write(fd, buf, n) != (ssize_t)n || fstat(fd, st) < 0) {
		perror(path);
		exit(70);
	}
	close(fd);
	free(buf);
}

/* The number of entries in the cache. */
static int
s_entries(void)
{
	char cmd[512];
	int n = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ls -A %s/cache/wsync/pushed | wc -l", s_dir);
	if ((p = popen(cmd, "r")) == NULL || fscanf(p, "%d", &n) != 1)
		n = -1;
	if (p != NULL)
		pclose(p);
	return n;
}

int
main(void)
{
	uint64_t hashes[3] = { 11, 22, 0xffffffffffffffffull }, got[3] = { 0 }, content = 0;
	char cache[300], cmd[600];
	struct stat a, b, moved;
	struct timespec when;

	if (mkdtemp(s_dir) == NULL)
		return 70;
	snprintf(cache, sizeof(cache), "%s/cache", s_dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	s_file("a", 100, &a);
	s_file("b", 100, &b);

	ok(!wsync_pushed_recall(&a, 3, got, &content), "nothing is recalled before anything is "
	    "remembered");
	wsync_pushed_remember(&a, 3, hashes, 0xabcdef);
	ok(wsync_pushed_recall(&a, 3, got, &content) && memcmp(got, hashes, sizeof(got)) == 0 &&
	    content == 0xabcdef, "a file's hashes and content id are recalled as remembered");
	ok(!wsync_pushed_recall(&b, 3, got, &content), "another file's are not");
	ok(!wsync_pushed_recall(&a, 2, got, &content), "nor the file's, for another number of "
	    "tensors");
	moved = a;
	moved.st_ctim.tv_nsec ^= 1;
	ok(!wsync_pushed_recall(&moved, 3, got, &content), "nor once its ctime moved");
	moved = a;
	moved.st_mtim.tv_sec--;
	ok(!wsync_pushed_recall(&moved, 3, got, &content), "nor once its mtime moved");
	moved = a;
	moved.st_size++;
	ok(!wsync_pushed_recall(&moved, 3, got, &content), "nor once its size changed");

	wsync_pushed_forget(&a);
	ok(!wsync_pushed_recall(&a, 3, got, &content), "a forgotten file is not recalled");

	wsync_pushed_remember(&a, 3, hashes, 0xabcdef);
	/* A byte of the device number flipped (its complement written over it). */
	snprintf(cmd, sizeof(cmd), "for f in %s/wsync/pushed/*; do b=$(od -An -tu1 -j20 -N1 $f); "
	    "printf \"\\\\$(printf %%o $((255 - b)))\" | dd of=$f bs=1 seek=20 conv=notrunc "
	    "status=none; done", cache);
	ok(system(cmd) == 0 && !wsync_pushed_recall(&a, 3, got, &content),
	    "a damaged entry is a miss");

	/* The first entry made an hour older: entries written within one tick tie. */
	snprintf(cmd, sizeof(cmd), "rm -f %s/wsync/pushed/*", cache);
	if (system(cmd) != 0)
		return 70;
	for (int i = 0; i < WSYNC_PUSHED_MAX + 5; i++) {
		char name[32];
		struct stat st;
		snprintf(name, sizeof(name), "f%d", i);
		s_file(name, 10, &st);
		if (i == 0)
			b = st;
		wsync_pushed_remember(&st, 3, hashes, (uint64_t)i);
		snprintf(cmd, sizeof(cmd), "touch -d '1 hour ago' %s/wsync/pushed/*", cache);
		if (i == 0 && system(cmd) != 0)
			return 70;
		if (i == WSYNC_PUSHED_MAX + 4)
			ok(wsync_pushed_recall(&st, 3, got, &content), "the entry written last is "
			    "kept, however the others tie");
	}
	ok(s_entries() == WSYNC_PUSHED_MAX, "at most %d entries are kept (%d)", WSYNC_PUSHED_MAX,
	    s_entries());
	ok(!wsync_pushed_recall(&b, 3, got, &content), "the oldest went first");

	clock_gettime(CLOCK_REALTIME_COARSE, &when);
	moved = a;
	moved.st_ctim = when;
	ok(!wsync_pushed_settled(&moved, &when), "a file changed in the clock's current tick is "
	    "not settled");
	moved.st_ctim.tv_sec = when.tv_sec - 1;
	ok(wsync_pushed_settled(&moved, &when), "one changed a second before is");
	moved.st_ctim.tv_nsec = 0;
	ok(!wsync_pushed_settled(&moved, &when), "a time in whole seconds a second before is not "
	    "(a file system keeping 1 or 2 s times)");
	moved.st_ctim.tv_sec = when.tv_sec - 2;
	ok(wsync_pushed_settled(&moved, &when), "two seconds before, it is");

	unsetenv("XDG_CACHE_HOME");
	setenv("HOME", "relative", 1);
	wsync_pushed_remember(&a, 3, hashes, 1);
	ok(!wsync_pushed_recall(&a, 3, got, &content), "without an absolute XDG_CACHE_HOME or "
	    "HOME nothing is remembered");

	snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
	if (system(cmd) != 0)
		return 70;
	return tap_done();
}
