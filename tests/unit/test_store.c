/* test_store.c - the hub's version store: numbering, atomic commits, retention, restarts. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include "store_impl_int.h"
#include "tap.h"

static char s_dir[64];                  /* this run's store */
static char s_log[8192];                /* what the store logged since s_log_reset */

static void
s_log_line(void *arg, const char *line)
{
	size_t n = strlen(s_log);

	(void)arg;
	snprintf(s_log + n, sizeof(s_log) - n, "%s\n", line);
}

static wsync_store_t *
s_open(unsigned keep)
{
	wsync_err_t err;
	wsync_store_t *s;

	s_log[0] = '\0';
	s = wsync_store_open(s_dir, keep, s_log_line, NULL, &err);
	if (s == NULL)
		printf("# open: %s\n", err.msg);
	return s;
}

/* A valid .wsync of model, n floats, in a new upload file; value changes the data. */
static int
s_upload_n(wsync_store_t *s, const char *model, float value, uint64_t n,
    wsync_store_temp_t *t)
{
	float *w = calloc(n, sizeof(*w));
	uint64_t shape[1] = { n };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new(model, &err);
	int rc = -1;

	if (w == NULL || tree == NULL || wsync_store_temp_open(s, model, t, &err) < 0)
		goto out;
	w[0] = value;
	for (uint64_t i = 1; i < n; i++)
		w[i] = (float)(i + 1);
	wsync_tree_set_meta(tree, "note", "abc", &err);
	wsync_tree_add(tree, "layer.weight", WSYNC_F32, 1, shape, w, n * sizeof(*w), &err);
	rc = wsync_tree_write_fd(tree, t->fd, model, &err);
out:
	wsync_tree_destroy(&tree);
	free(w);
	return rc;
}

/* A small valid .wsync of model in a new upload file; value changes the data. */
static int
s_upload(wsync_store_t *s, const char *model, float value, wsync_store_temp_t *t)
{
	return s_upload_n(s, model, value, 4, t);
}

/* Commits one fresh upload of model with n floats; its version, or 0 on failure. */
static uint64_t
s_commit_n(wsync_store_t *s, const char *model, const char *const *targets,
    size_t ntargets, uint64_t n)
{
	wsync_commit_info_t info = { "unit:1", 1000.5, targets, ntargets, 0, NULL, 0 };
	wsync_store_temp_t t;
	wsync_committed_t out;
	wsync_err_t err;

	if (s_upload_n(s, model, 1, n, &t) < 0)
		return 0;
	if (wsync_store_commit(s, &t, 1, &info, &out, &err) < 0) {
		printf("# commit: %s\n", err.msg);
		wsync_store_temp_remove(&t);
		return 0;
	}
	return out.version;
}

/* Commits one fresh small upload of model; its version, or 0 on failure. */
static uint64_t
s_commit1(wsync_store_t *s, const char *model, const char *const *targets, size_t ntargets)
{
	return s_commit_n(s, model, targets, ntargets, 4);
}

static int
s_exists(const char *fmt, const char *arg)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), fmt, s_dir, arg);
	return stat(path, &st) == 0;
}

static unsigned
s_mode(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0;
}

static int
s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void
s_fresh(void)
{
	nftw(s_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void
test_names(void)
{
	uint64_t v = 0;
	int sidecar = -1;

	ok(wsync_store_parse_name("12.wsync", &v, &sidecar) == 0 && v == 12 && sidecar == 0,
	    "12.wsync is version 12");
	ok(wsync_store_parse_name("7.json", &v, &sidecar) == 0 && v == 7 && sidecar == 1,
	    "7.json is the sidecar of version 7");
	ok(wsync_store_parse_name("18446744073709551615.wsync", &v, &sidecar) == 0 &&
	    v == UINT64_MAX, "the largest uint64 is a version");
	ok(wsync_store_parse_name("18446744073709551616.wsync", &v, &sidecar) < 0,
	    "a number past uint64 is not");
	ok(wsync_store_parse_name("0.wsync", &v, &sidecar) < 0, "0 is not a version");
	ok(wsync_store_parse_name("01.wsync", &v, &sidecar) < 0, "a leading zero is refused");
	ok(wsync_store_parse_name("3.wsync.tmp", &v, &sidecar) < 0 &&
	    wsync_store_parse_name("x.wsync", &v, &sidecar) < 0 &&
	    wsync_store_parse_name("3", &v, &sidecar) < 0, "other names are refused");
}

static void
test_retention_is_pure(void)
{
	char *t[] = { "w1" };
	wsync_version_t v[5] = { { .version = 1 }, { .version = 2 }, { .version = 3 },
	    { .version = 4 }, { .version = 5 } };
	unsigned char r[5];

	ok(wsync_store_retention(v, 5, 3, r) == 2 && r[0] && r[1] && !r[2] && !r[3] && !r[4],
	    "keep 3 of 5 retires the two oldest");
	ok(wsync_store_retention(v, 5, 9, r) == 0, "keep 9 of 5 retires nothing");
	ok(wsync_store_retention(v, 5, 0, r) == 4 && !r[4], "keep 0 is taken as 1: the head stays");
	for (int i = 1; i < 5; i++) {
		v[i].targets = t;
		v[i].ntargets = 1;
	}
	ok(wsync_store_retention(v, 5, 2, r) == 2 && !r[0] && r[1] && r[2] && !r[3] && !r[4],
	    "the newest untargeted version stays for the workers no push named");
	ok(wsync_model_head(&(wsync_model_t){ .versions = v, .nversions = 5 }, NULL)->version == 1,
	    "an unnamed worker's head skips targeted versions");
	ok(wsync_model_head(&(wsync_model_t){ .versions = v, .nversions = 5 }, "w1")->version == 5,
	    "a named worker sees the versions pushed to it");
	ok(wsync_model_head(&(wsync_model_t){ .versions = v, .nversions = 5 }, "w2")->version == 1,
	    "another worker does not");
}

static void
test_commit_numbers_and_stamps(void)
{
	wsync_store_t *s = s_open(3);
	const wsync_model_t *m;
	wsync_file_t *f;
	wsync_err_t err;
	char path[512];

	ok(s != NULL && wsync_store_count(s) == 0, "a new store is empty");
	ok(s_commit1(s, "policy", NULL, 0) == 1, "the first version of a model is 1");
	ok(s_commit1(s, "policy", NULL, 0) == 2, "the next is 2");
	ok(s_commit1(s, "value", NULL, 0) == 1, "models are numbered apart");
	m = wsync_store_find(s, "policy");
	ok(m != NULL && m->nversions == 2 && m->next == 3 &&
	    strcmp(wsync_model_newest(m)->pusher, "unit:1") == 0 &&
	    wsync_model_newest(m)->time == 1000.5, "the model holds both, with pusher and time");
	snprintf(path, sizeof(path), "%s/policy/2.wsync", s_dir);
	f = wsync_file_open(path, &err);
	ok(f != NULL && wsync_file_version(f) == 2 && wsync_file_verify(f, NULL, NULL, &err) == 0,
	    "the committed file carries its version stamped in place, and verifies");
	ok(f != NULL && wsync_file_content_id(f) == wsync_model_newest(m)->content &&
	    wsync_file_size(f) == wsync_model_newest(m)->size, "size and content id match");
	wsync_file_close(&f);
	ok(s_mode(s_dir) == 0700, "the store directory is 0700");
	snprintf(path, sizeof(path), "%s/policy", s_dir);
	ok(s_mode(path) == 0700, "a model directory is 0700");
	snprintf(path, sizeof(path), "%s/policy/2.wsync", s_dir);
	ok(s_mode(path) == 0444, "a version file is read-only, 0444, in its 0700 directory");
	snprintf(path, sizeof(path), "%s/policy/2.json", s_dir);
	ok(s_mode(path) == 0600, "its sidecar is 0600");
	wsync_store_close(&s);
	ok(s == NULL, "close clears the handle");
}

/* Flips the first data byte of the tensor in upload t. */
static void
s_corrupt(const wsync_store_temp_t *t)
{
	wsync_err_t err;
	wsync_file_t *f = wsync_file_open(t->path, &err);
	unsigned char b;

	if (f == NULL)
		return;
	pread(t->fd, &b, 1, (off_t)wsync_file_tensor(f, 0)->offset);
	b ^= 0xff;
	pwrite(t->fd, &b, 1, (off_t)wsync_file_tensor(f, 0)->offset);
	wsync_file_close(&f);
}

static void
test_bad_file_fails_the_whole_commit(void)
{
	wsync_store_t *s = s_open(3);
	wsync_commit_info_t info = { "unit:1", 1, NULL, 0, 0, NULL, 0 };
	wsync_store_temp_t t[3];
	wsync_committed_t out[3];
	wsync_err_t err = { 0 };
	const wsync_model_t *m = wsync_store_find(s, "policy");
	uint64_t head = wsync_model_newest(m)->version;

	s_upload(s, "policy", 10, &t[0]);
	s_upload(s, "value", 11, &t[1]);
	s_upload(s, "critic", 12, &t[2]);
	s_corrupt(&t[1]);
	ok(wsync_store_commit(s, t, 3, &info, out, &err) < 0 && err.code == EX_DATAERR &&
	    strcmp(err.msg, "model \"value\": tensor layer.weight: data does not match its "
	    "hash") == 0, "a bad file fails the commit naming model and tensor: %s", err.msg);
	m = wsync_store_find(s, "policy");
	ok(wsync_model_newest(m)->version == head && m->next == head + 1,
	    "the good file of the same commit did not become visible");
	ok(wsync_store_find(s, "critic") == NULL && !s_exists("%s/%s", "critic") &&
	    !s_exists("%s/policy/%s", "3.wsync") && !s_exists("%s/policy/%s", "3.json"),
	    "nothing of it is on disk");
	ok(t[0].fd >= 0 && access(t[0].path, F_OK) == 0, "the caller still owns the uploads");
	for (int i = 0; i < 3; i++)
		wsync_store_temp_remove(&t[i]);
	ok(s_commit1(s, "policy", NULL, 0) == head + 1, "the failed commit used no number");

	s_upload(s, "policy", 20, &t[0]);
	s_upload(s, "value", 21, &t[1]);
	s_upload(s, "policy", 22, &t[2]);
	ok(wsync_store_commit(s, t, 3, &info, out, &err) == 0 && out[0].version == head + 2 &&
	    out[1].version == 2 && out[2].version == head + 3,
	    "a multi-file commit numbers each model in order");
	ok(t[0].fd == -1 && t[0].path[0] == '\0', "a commit consumes its uploads");
	wsync_store_close(&s);
}

/* A relay's commits: the number given, above the last, and kept across a reopen. */
static void
test_commit_takes_a_given_number(void)
{
	wsync_store_t *s;
	uint64_t given = 7;
	wsync_commit_info_t info = { "", 1, NULL, 0, 1, &given, 0 };
	wsync_store_temp_t t;
	wsync_committed_t out;
	wsync_err_t err = { 0 };

	s = s_open(3);
	s_upload(s, "mirrored", 1, &t);
	ok(wsync_store_commit(s, &t, 1, &info, &out, &err) == 0 && out.version == 7,
	    "a commit with a given number takes it (7 for the first)");
	given = 7;
	s_upload(s, "mirrored", 2, &t);
	ok(wsync_store_commit(s, &t, 1, &info, &out, &err) < 0 && err.code == EX_DATAERR &&
	    strcmp(err.msg, "model \"mirrored\": version 7 is not above the last, 7") == 0,
	    "a number not above the last is refused: %s", err.msg);
	wsync_store_temp_remove(&t);
	wsync_store_close(&s);
	s = s_open(3);
	ok(s_commit1(s, "mirrored", NULL, 0) == 8, "after a reopen the next number follows it");
	wsync_store_close(&s);
}

/* Rewrites upload t so that its version is a 1-byte int, moving no tensor. */
static void
s_unfix_version(const wsync_store_temp_t *t)
{
	wsync_err_t err;
	wsync_file_t *f = wsync_file_open(t->path, &err);
	const unsigned char *b;
	unsigned char *out, *meta;
	size_t n, voff;

	if (f == NULL)
		return;
	b = wsync_file_bytes(f);
	n = wsync_file_size(f);
	voff = wsync_file_version_offset(f);
	out = malloc(n);
	meta = memmem(b, n, "\xa3" "abc", 4);
	/* 8 bytes fewer for the version, 8 more for the meta value "abc". */
	memcpy(out, b, voff - 1);
	out[voff - 1] = 0;
	memcpy(out + voff, b + voff + 8, (size_t)(meta - b) - voff - 8);
	memcpy(out + (meta - b) - 8, "\xab" "abc12345678", 12);
	memcpy(out + (meta - b) + 4, meta + 4, n - (size_t)(meta - b) - 4);
	pwrite(t->fd, out, n, 0);
	free(out);
	wsync_file_close(&f);
}

static void
test_refuses_a_version_it_cannot_stamp(void)
{
	wsync_store_t *s = s_open(3);
	wsync_commit_info_t info = { "", 1, NULL, 0, 0, NULL, 0 };
	wsync_store_temp_t t;
	wsync_committed_t out;
	wsync_err_t err = { 0 };
	wsync_file_t *f;

	s_upload(s, "policy", 1, &t);
	s_unfix_version(&t);
	f = wsync_file_open(t.path, &err);
	ok(f != NULL && wsync_file_version_offset(f) == 0 && wsync_file_verify(f, NULL, NULL,
	    &err) == 0, "a valid file with a 1-byte version field");
	wsync_file_close(&f);
	ok(wsync_store_commit(s, &t, 1, &info, &out, &err) < 0 && err.code == EX_DATAERR &&
	    strstr(err.msg, "model \"policy\": not written with a fixed-width version field") ==
	    err.msg, "is refused: %s", err.msg);
	wsync_store_temp_remove(&t);
	wsync_store_close(&s);
}

static void
test_retention_and_immutability(void)
{
	wsync_store_t *s = s_open(2);
	const wsync_model_t *m;
	char path[512], log[128];
	uint64_t first, last = 0;
	unsigned char byte;
	int fd;

	m = wsync_store_find(s, "policy");
	ok(m->nversions == 2 && strstr(s_log, "event=retire model=policy version=") != NULL,
	    "opening with a smaller keep retires what is over it");
	first = m->versions[0].version;
	snprintf(path, sizeof(path), "%s/policy/%llu.wsync", s_dir, (unsigned long long)first);
	fd = open(path, O_RDONLY);
	for (int i = 0; i < 3; i++)
		last = s_commit1(s, "policy", NULL, 0);
	m = wsync_store_find(s, "policy");
	ok(m->nversions == 2 && m->versions[0].version == last - 1 &&
	    m->versions[1].version == last, "keep 2 holds the two newest");
	snprintf(log, sizeof(log), "event=retire model=policy version=%llu",
	    (unsigned long long)first);
	ok(strstr(s_log, log) != NULL && access(path, F_OK) < 0,
	    "a retired version is logged and unlinked");
	ok(fd >= 0 && pread(fd, &byte, 1, 0) == 1 && byte == 0x85,
	    "a reader holding a descriptor keeps its bytes");
	close(fd);
	wsync_store_close(&s);
}

static void
test_restart_keeps_numbering(void)
{
	wsync_store_t *s = s_open(2);
	const char *targets[] = { "w1", "w2" };
	const wsync_model_t *m = wsync_store_find(s, "policy");
	uint64_t head = wsync_model_newest(m)->version, v;
	char path[512];
	FILE *fp;

	v = s_commit1(s, "policy", targets, 2);
	ok(v == head + 1, "a targeted commit gets the next number");
	wsync_store_close(&s);
	snprintf(path, sizeof(path), "%s/.uploads/upload.crashed", s_dir);
	fp = fopen(path, "w");
	fputs("half an upload", fp);
	fclose(fp);
	snprintf(path, sizeof(path), "%s/not a model", s_dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/policy/%llu.wsync", s_dir,
	    (unsigned long long)(v + 5));
	fp = fopen(path, "w");
	fputs("garbage", fp);
	fclose(fp);

	s = s_open(2);
	m = wsync_store_find(s, "policy");
	ok(s != NULL && wsync_model_newest(m)->version == v, "a reopened store has the same head");
	ok(wsync_model_newest(m)->ntargets == 2 &&
	    strcmp(wsync_model_newest(m)->targets[1], "w2") == 0 &&
	    strcmp(wsync_model_newest(m)->pusher, "unit:1") == 0,
	    "targets and pusher come back from the sidecar");
	ok(!s_exists("%s/.uploads/%s", "upload.crashed") &&
	    strstr(s_log, "event=cleanup") != NULL, "leftover uploads are removed at open");
	ok(strstr(s_log, "/not a model\" error=\"not a model directory\"") != NULL,
	    "a directory that is not a model id is skipped and logged");
	ok(strstr(s_log, "event=skip") != NULL && m->next == v + 6,
	    "a file that does not parse is skipped, but its number is never reused");
	ok(s_commit1(s, "policy", NULL, 0) == v + 6, "so the next commit goes past it");
	wsync_store_close(&s);
}

/* The newest version of model in a store opened anew (0: none); the store stays closed. */
static uint64_t
s_head_after_open(const char *model, uint64_t *next)
{
	wsync_store_t *s = s_open(3);
	const wsync_model_t *m = s ? wsync_store_find(s, model) : NULL;
	uint64_t v = m && wsync_model_newest(m) ? wsync_model_newest(m)->version : 0;

	*next = m ? m->next : 1;
	wsync_store_close(&s);
	return v;
}

/* Counts the entries of STORE/.uploads. */
static int
s_uploads_left(void)
{
	char path[512];
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/.uploads", s_dir);
	if ((d = opendir(path)) == NULL)
		return -1;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

#ifdef WSYNC_TEST_HOOKS
/*
 * Kills a child committing policy and critic together at each step of the
 * commit in turn (WSYNC_TEST_CRASH_AT), then opens the store again: both new
 * versions or neither, every version verified, no upload left, and numbers
 * that never go back.
 */
static void
test_crash_at_every_step_is_all_or_nothing(void)
{
	int step, killed = 0, torn = 0, lost = 0, reused = 0, left = 0, forward = 0;

	for (step = 1; step < 64; step++) {
		uint64_t p0, c0, p1, c1, pn, cn;
		pid_t pid;
		int status;

		p0 = s_head_after_open("policy", &pn);
		c0 = s_head_after_open("critic", &cn);
		if ((pid = fork()) == 0) {
			wsync_commit_info_t info = { "unit:crash", 1.0, NULL, 0, 0, NULL, 0 };
			wsync_store_temp_t t[2];
			wsync_committed_t out[2];
			wsync_err_t err;
			wsync_store_t *s;
			char at[16];
			snprintf(at, sizeof(at), "%d", step);
			setenv("WSYNC_TEST_CRASH_AT", at, 1);
			s = wsync_store_open(s_dir, 3, NULL, NULL, &err);
			if (s == NULL || s_upload(s, "policy", (float)step, &t[0]) < 0 ||
			    s_upload(s, "critic", (float)step, &t[1]) < 0 ||
			    wsync_store_commit(s, t, 2, &info, out, &err) < 0)
				_exit(1);
			wsync_store_close(&s);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		p1 = s_head_after_open("policy", &pn);
		c1 = s_head_after_open("critic", &cn);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			ok(p1 == p0 + 1 && c1 == c0 + 1, "a commit not killed (step %d) makes both "
			    "versions", step);
			break;
		}
		killed += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
		torn += (p1 == p0 + 1) != (c1 == c0 + 1);
		lost += p1 < p0 || c1 < c0;
		reused += pn <= p1 || cn <= c1;
		left += s_uploads_left() != 0;
		forward += p1 == p0 + 1;
	}
	ok(killed == step - 1 && step > 6, "the commit was killed at each of its %d steps",
	    step - 1);
	ok(torn == 0, "no kill left one model's new version without the other's");
	ok(lost == 0 && reused == 0, "no kill lost a version or let a number be given again");
	ok(left == 0, "no kill left an upload behind after the next open");
	ok(forward > 0 && forward < step - 1, "kills before the journal roll back (%d of %d "
	    "rolled forward)", forward, step - 1);
}
#endif

/* A store whose newest files were deleted still never gives their numbers again. */
static void
test_numbering_survives_a_deleted_head(void)
{
	wsync_store_t *s = s_open(3);
	uint64_t v = s_commit1(s, "policy", NULL, 0), next;
	char path[512];

	wsync_store_close(&s);
	snprintf(path, sizeof(path), "%s/policy/%llu.wsync", s_dir, (unsigned long long)v);
	unlink(path);
	snprintf(path, sizeof(path), "%s/policy/%llu.json", s_dir, (unsigned long long)v);
	unlink(path);
	ok(s_head_after_open("policy", &next) == v - 1 && next == v + 1,
	    "the head file gone, the store still numbers from %llu", (unsigned long long)v + 1);
	s = s_open(3);
	ok(s_commit1(s, "policy", NULL, 0) == v + 1, "and the next commit gets it");
	wsync_store_close(&s);
	snprintf(path, sizeof(path), "%s/.journal", s_dir);
	ok(s_mode(path) == 0600, "the journal is 0600");
}

/* A version whose bytes changed on disk is not served after a restart. */
static void
test_a_corrupt_version_is_not_served(void)
{
	wsync_store_t *s = s_open(3);
	uint64_t v = s_commit1(s, "policy", NULL, 0), next;
	const wsync_model_t *m = wsync_store_find(s, "policy");
	const wsync_version_t *head = wsync_model_newest(m);
	uint64_t size = head->size;
	unsigned char byte = 0;
	char path[512];
	int fd;

	wsync_store_close(&s);
	snprintf(path, sizeof(path), "%s/policy/%llu.wsync", s_dir, (unsigned long long)v);
	/* The last tensor's data ends the file: flip its last byte. */
	fd = open(path, O_RDWR);
	ok(fd >= 0 && pread(fd, &byte, 1, (off_t)size - 1) == 1, "read the last byte");
	byte ^= 0x01;
	ok(pwrite(fd, &byte, 1, (off_t)size - 1) == 1, "flipped one bit of the head");
	close(fd);
	ok(s_head_after_open("policy", &next) == v - 1 && next == v + 1,
	    "the store serves the version before it, and numbers past it");
	ok(strstr(s_log, "event=skip") != NULL && strstr(s_log, "layer.weight") != NULL,
	    "the skip is logged, naming the tensor");
}

static void
test_second_open_is_refused(void)
{
	wsync_store_t *a = s_open(3), *b;
	wsync_err_t err = { 0 };

	b = wsync_store_open(s_dir, 3, NULL, NULL, &err);
	ok(a != NULL && b == NULL && err.code == EX_UNAVAILABLE && strstr(err.msg, "in use"),
	    "a store open in one hub is refused to a second: %s", err.msg);
	wsync_store_close(&a);
	wsync_store_close(&b);
}

/* The path of a version's file, in buf. */
static const char *
s_version_path(char *buf, size_t size, uint64_t version)
{
	snprintf(buf, size, "%s/policy/%llu.wsync", s_dir, (unsigned long long)version);
	return buf;
}

/* Opens a slot of size for "policy"; 1 recycled, 0 new, -1 failed (t removed after). */
static int
s_slot(wsync_store_t *s, uint64_t size, struct stat *st)
{
	wsync_store_temp_t t;
	wsync_err_t err;
	int rc = wsync_store_slot_open(s, "policy", size, &t, &err);

	if (rc >= 0) {
		fstat(t.fd, st);
		wsync_store_temp_remove(&t);
	}
	return rc;
}

static void
test_spares_only_when_nobody_holds_them(void)
{
	wsync_store_t *s;
	char path[512], link_path[600];
	struct stat st, held;
	uint64_t v1, v2;
	int lease;

	s_fresh();
	s = s_open(1);
	ok(s_slot(s, 100, &st) == 0 && st.st_size == 100,
	    "without spares a slot is a new file of the size asked");
	wsync_store_set_spares(s, 4);
	v1 = s_commit1(s, "policy", NULL, 0);
	/* Version 1 linked elsewhere, as a watcher's output is. */
	snprintf(link_path, sizeof(link_path), "%s/out.wsync", s_dir);
	link(s_version_path(path, sizeof(path), v1), link_path);
	v2 = s_commit1(s, "policy", NULL, 0);
	ok(v2 == v1 + 1 && access(path, F_OK) < 0 && s_slot(s, 100, &st) == 0,
	    "a retired file with another link is not reused");
	/* Version 2 leased by a reader when version 3 retires it. */
	lease = wsync_lease_open(s_version_path(path, sizeof(path), v2));
	fstat(lease, &held);
	s_commit1(s, "policy", NULL, 0);
	ok(lease >= 0 && s_slot(s, (uint64_t)held.st_size, &st) == 0,
	    "a retired file a reader leases is not reused");
	close(lease);
	ok(s_slot(s, 100, &st) == 1 && st.st_ino == held.st_ino && st.st_size == 100,
	    "once the lease is gone it is, resized to the slot");
	unlink(link_path);
	ok(s_slot(s, 100, &st) == 1, "and once the other link is gone, so is the first");
	ok(s_slot(s, 100, &st) == 0, "a spare serves one slot");
	wsync_store_close(&s);
}

static void
test_spares_prefer_the_size_asked(void)
{
	wsync_store_t *s;
	struct stat st, big;
	char path[512];

	s_fresh();
	s = s_open(1);
	wsync_store_set_spares(s, 4);
	s_commit1(s, "policy", NULL, 0);
	s_commit_n(s, "policy", NULL, 0, 4096);
	stat(s_version_path(path, sizeof(path), 2), &big);
	/* Version 3 retires version 2; version 1, smaller, is the older spare. */
	s_commit1(s, "policy", NULL, 0);
	ok(s_slot(s, (uint64_t)big.st_size, &st) == 1 && st.st_ino == big.st_ino,
	    "of several spares, one of the slot's size is taken first, though newer");
	ok(s_slot(s, (uint64_t)big.st_size, &st) == 1 && st.st_size == big.st_size,
	    "then any other, resized");
	wsync_store_set_spares(s, 0);
	s_commit1(s, "policy", NULL, 0);
	ok(s_slot(s, 100, &st) == 0, "with spares set to 0 a retired file is not kept");
	wsync_store_close(&s);
}

/*
 * A commit cut short after its commit point: the journal names an upload and
 * its sidecar, stamped and synced, not yet renamed. Opening the store does
 * the renames; a second open finds nothing left to do.
 */
static void
test_journal_recovery_finishes_a_commit(void)
{
	wsync_commit_info_t info = { "unit:journal", 2000.5, NULL, 0, 0, NULL, 0 };
	struct wsync_staged st = { .version = 2 };
	wsync_store_temp_t t;
	wsync_file_t *f;
	wsync_err_t err;
	wsync_store_t *s;
	unsigned char be[8] = { 0, 0, 0, 0, 0, 0, 0, 2 };
	const wsync_model_t *m;
	uint64_t next;
	int stamped;

	s_fresh();
	s = s_open(3);
	ok(s_commit1(s, "policy", NULL, 0) == 1, "journal: version 1 committed");
	s_upload(s, "policy", 2, &t);
	/* Stamped and synced as a commit leaves it before the journal. */
	f = wsync_file_open(t.path, &err);
	stamped = f != NULL && pwrite(t.fd, be, sizeof(be),
	    (off_t)wsync_file_version_offset(f)) == (ssize_t)sizeof(be) && fsync(t.fd) == 0;
	st.content = f ? wsync_file_content_id(f) : 0;
	wsync_file_close(&f);
	snprintf(st.final, sizeof(st.final), "%s/policy/2.wsync", wsync_store_dir(s));
	snprintf(st.sidecar, sizeof(st.sidecar), "%s/policy/2.json", wsync_store_dir(s));
	ok(stamped && wsync_sidecar_write(s, st.sidecar_tmp, &info, &err) == 0 &&
	    wsync_journal_last_set(s, "policy", 2) == 0 &&
	    wsync_journal_write(s, &t, 1, &st, &err) == 0,
	    "journal: a commit of version 2 written, its renames not done");
	close(t.fd);
	wsync_store_close(&s);

	s = s_open(3);
	m = s ? wsync_store_find(s, "policy") : NULL;
	ok(m != NULL && wsync_model_newest(m)->version == 2 &&
	    strcmp(wsync_model_newest(m)->pusher, "unit:journal") == 0,
	    "journal: the next open finishes the commit, sidecar and all");
	ok(strstr(s_log, "event=recover") != NULL && strstr(s_log, "renamed=2") != NULL &&
	    s_uploads_left() == 0, "journal: it logs the two renames and leaves no upload");
	wsync_store_close(&s);
	ok(s_head_after_open("policy", &next) == 2 && next == 3 &&
	    strstr(s_log, "event=recover") == NULL,
	    "journal: a second open has nothing to recover");
}

int
main(void)
{
	snprintf(s_dir, sizeof(s_dir), "/tmp/test_store.XXXXXX");
	if (mkdtemp(s_dir) == NULL)
		return 1;
	rmdir(s_dir);
	test_names();
	test_retention_is_pure();
	test_commit_numbers_and_stamps();
	test_bad_file_fails_the_whole_commit();
	test_refuses_a_version_it_cannot_stamp();
	test_retention_and_immutability();
	test_restart_keeps_numbering();
#ifdef WSYNC_TEST_HOOKS
	test_crash_at_every_step_is_all_or_nothing();
#endif
	test_numbering_survives_a_deleted_head();
	test_a_corrupt_version_is_not_served();
	test_second_open_is_refused();
	test_spares_only_when_nobody_holds_them();
	test_spares_prefer_the_size_asked();
	test_journal_recovery_finishes_a_commit();
	test_commit_takes_a_given_number();
	s_fresh();
	return tap_done();
}
