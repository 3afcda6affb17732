/*
 * delta - the size and speed of a delta between two versions of a model,
 * against the peers' method measured in the same run:
 *
 *   delta BASE HEAD [OUT]
 *
 * Makes the delta from BASE to HEAD (into OUT, else a temporary file beside
 * HEAD), applies it to BASE and checks the result equals HEAD byte for byte,
 * each in a child process whose peak RSS is reported. Then computes what
 * NeMo-RL, slime and verl send: for each tensor that changed, zstd level 1
 * of its xor with the base's. Prints one table; exits 1 when the rebuilt
 * file differs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "delta_int.h"

/* One child's run: seconds, peak RSS in KiB, exit status. */
typedef struct run {
	double seconds;
	long rss_kib;
	int status;
} run_t;

static void
s_die(const char *what, const char *detail)
{
	fprintf(stderr, "delta: %s: %s\n", what, detail);
	exit(70);
}

static int
s_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);

	if (fd < 0)
		s_die(path, strerror(errno));
	return fd;
}

/*
 * Makes (make 1: whatever its size; 2: with the hub's limit, half of the
 * head) or applies (make 0) the delta in a child, so that its peak RSS is
 * its own; fills *r. The stats of a make come back through a pipe.
 */
static void
s_child(int make, const char *base, const char *head, const char *delta,
    const char *out, wsync_delta_stats_t *stats, run_t *r)
{
	int pipefd[2];
	int64_t t0;
	struct rusage ru;
	pid_t pid;

	if (pipe(pipefd) < 0)
		s_die("pipe", strerror(errno));
	t0 = wsync_now_ms();
	if ((pid = fork()) < 0)
		s_die("fork", strerror(errno));
	if (pid == 0) {
		wsync_err_t err;
		wsync_delta_stats_t st;
		int b = s_open(base, O_RDONLY), rc;
		if (make) {
			int h = s_open(head, O_RDONLY);
			int d = s_open(delta, O_WRONLY | O_CREAT | O_TRUNC);
			rc = wsync_delta_make(b, h, d, delta, make == 1 ? WSYNC_DELTA_ANY :
			    WSYNC_DELTA_WORTH, &st, &err);
		} else {
			int d = s_open(delta, O_RDONLY);
			int o = s_open(out, O_RDWR | O_CREAT | O_TRUNC);
			rc = wsync_delta_apply(b, d, o, delta, NULL, NULL, &err);
		}
		if (rc < 0) {
			fprintf(stderr, "delta: %s\n", err.msg);
			_exit(err.code);
		}
		if (make && write(pipefd[1], &st, sizeof(st)) != (ssize_t)sizeof(st))
			_exit(74);
		_exit(0);
	}
	close(pipefd[1]);
	if (make && read(pipefd[0], stats, sizeof(*stats)) != (ssize_t)sizeof(*stats))
		memset(stats, 0, sizeof(*stats));
	close(pipefd[0]);
	if (wait4(pid, &r->status, 0, &ru) < 0)
		s_die("wait4", strerror(errno));
	r->seconds = (double)(wsync_now_ms() - t0) / 1000.0;
	r->rss_kib = ru.ru_maxrss;
}

/* zstd level 1 of the xor of every tensor of h that changed from b: the peers' method. */
static uint64_t
s_peers(const wsync_file_t *b, const wsync_file_t *h, size_t *changed)
{
	uint64_t total = 0;

	*changed = 0;
	for (size_t i = 0; i < wsync_file_count(h); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(h, i);
		const wsync_tensor_t *bt = wsync_file_find(b, t->path);
		const unsigned char *x = t->data, *y;
		unsigned char *buf;
		size_t cap, n;
		if (t->nbytes == 0 || (bt != NULL && bt->hash == t->hash &&
		    bt->nbytes == t->nbytes))
			continue;
		++*changed;
		cap = ZSTD_compressBound(t->nbytes);
		if ((buf = malloc(t->nbytes + cap)) == NULL)
			s_die("malloc", strerror(errno));
		y = bt != NULL && bt->nbytes == t->nbytes ? bt->data : NULL;
		for (uint64_t j = 0; j < t->nbytes; j++)
			buf[j] = x[j] ^ (y != NULL ? y[j] : 0);
		n = ZSTD_compress(buf + t->nbytes, cap, buf, t->nbytes, 1);
		if (ZSTD_isError(n))
			s_die("zstd", ZSTD_getErrorName(n));
		total += n;
		free(buf);
	}
	return total;
}

static int
s_same_bytes(const char *a, const char *b)
{
	wsync_err_t err;
	wsync_file_t *fa = wsync_file_open(a, &err), *fb = wsync_file_open(b, &err);
	int same = fa != NULL && fb != NULL && wsync_file_size(fa) == wsync_file_size(fb) &&
	    memcmp(wsync_file_bytes(fa), wsync_file_bytes(fb), wsync_file_size(fa)) == 0;

	wsync_file_close(&fa);
	wsync_file_close(&fb);
	return same;
}

int
main(int argc, char **argv)
{
	char delta[4096], out[4096], hub_delta[4200];
	wsync_delta_stats_t st, hub_st;
	wsync_file_t *b, *h;
	wsync_err_t err;
	run_t mk, ap, hub_mk;
	uint64_t peers;
	size_t changed;
	double mib;
	int same;

	if (argc < 3 || argc > 4) {
		fputs("usage: delta BASE HEAD [OUT]\n", stderr);
		return 64;
	}
	snprintf(delta, sizeof(delta), "%s", argc == 4 ? argv[3] : argv[2]);
	if (argc == 3)
		snprintf(delta, sizeof(delta), "%s.wdelta", argv[2]);
	snprintf(out, sizeof(out), "%s.rebuilt", argv[2]);
	s_child(1, argv[1], argv[2], delta, NULL, &st, &mk);
	s_child(0, argv[1], NULL, delta, out, NULL, &ap);
	snprintf(hub_delta, sizeof(hub_delta), "%s.hub", delta);
	s_child(2, argv[1], argv[2], hub_delta, NULL, &hub_st, &hub_mk);
	unlink(hub_delta);
	if (mk.status != 0 || ap.status != 0 || hub_mk.status != 0) {
		fprintf(stderr, "delta: make exited %d, apply %d\n", WEXITSTATUS(mk.status),
		    WEXITSTATUS(ap.status));
		return 70;
	}
	same = s_same_bytes(out, argv[2]);
	unlink(out);
	if (argc == 3)
		unlink(delta);
	if ((b = wsync_file_open(argv[1], &err)) == NULL ||
	    (h = wsync_file_open(argv[2], &err)) == NULL)
		s_die("open", err.msg);
	peers = s_peers(b, h, &changed);
	mib = (double)st.head_bytes / 1048576.0;
	printf("%-26s %14s %10s\n", "what", "bytes", "of whole");
	printf("%-26s %14llu %10s\n", "whole head", (unsigned long long)st.head_bytes, "1");
	printf("%-26s %14llu 1/%-8.1f\n", "delta", (unsigned long long)st.bytes,
	    (double)st.head_bytes / (double)st.bytes);
	printf("%-26s %14llu 1/%-8.1f\n", "xor+zstd-1 (peers)", (unsigned long long)peers,
	    (double)st.head_bytes / (double)(peers ? peers : 1));
	printf("%-26s %14llu\n", "skeleton", (unsigned long long)st.skeleton_bytes);
	printf("changed tensors %zu of %zu; delta/peers %.3f\n", changed, wsync_file_count(h),
	    peers ? (double)st.bytes / (double)peers : 0.0);
	printf("%-8s %8s %14s %14s\n", "enc", "tensors", "data bytes", "delta bytes");
	for (int e = 0; e < WSYNC_DELTA_ENC_COUNT; e++)
		printf("%-8s %8llu %14llu %14llu\n", wsync_delta_enc_name(e),
		    (unsigned long long)st.count[e], (unsigned long long)st.data[e],
		    (unsigned long long)st.encoded[e]);
	printf("%-8s %8.3f s %8.0f MiB/s  peak RSS %6ld KiB\n", "make", mk.seconds,
	    mib / mk.seconds, mk.rss_kib);
	printf("%-8s %8.3f s %8.0f MiB/s  peak RSS %6ld KiB\n", "apply", ap.seconds,
	    mib / ap.seconds, ap.rss_kib);
	printf("hub-make %8.3f s (limit: half of the head; estimate %llu bytes): %s\n",
	    hub_mk.seconds, (unsigned long long)hub_st.estimate, hub_st.bytes == st.bytes ?
	    "made" : hub_st.bytes == 0 ? "not worth it, stopped after the estimate" :
	    "not worth it, stopped while made");
	printf("rebuilt %s\n", same ? "byte-identical" : "DIFFERS");
	wsync_file_close(&b);
	wsync_file_close(&h);
	return same ? 0 : 1;
}
