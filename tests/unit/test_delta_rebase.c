/*
 * test_delta_rebase.c - a delta written again for other copies of its base
 * and head (wsync_delta_rebase): made against one layout of the base, it
 * rebuilds the head from another once rebased, and not before; with the
 * head given it takes the head's number; the deltas of two halves make the
 * whole's; a base lacking a tensor is refused naming it. Run from the
 * repository root (tests/fixtures/mkstep.py writes the models).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "delta_int.h"
#include "tap.h"

static char s_dir[64];

static const char *
s_path(const char *name)
{
	static char buf[32][256];
	static int next;
	char *p = buf[next++ % 32];

	snprintf(p, sizeof(buf[0]), "%s/%s", s_dir, name);
	return p;
}

/*
 * Writes into out the tensors of in whose index i has i % every == rem,
 * with a meta entry that moves every offset, and version. 0 on success.
 */
static int
s_rewrite(const char *in, const char *out, size_t every, size_t rem, uint64_t version)
{
	wsync_err_t err;
	wsync_file_t *f = wsync_file_open(in, &err);
	wsync_tree_t *t = f != NULL ? wsync_tree_new(wsync_file_model(f), &err) : NULL;
	uint64_t size;
	int fd = -1, rc = -1;

	if (t == NULL || wsync_tree_set_meta(t, "moved", "by a meta entry of some length",
	    &err) < 0)
		goto out;
	wsync_tree_set_version(t, version);
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *x = wsync_file_tensor(f, i);
		if (i % every == rem && wsync_tree_add_keys(t, &x->path, 1, x->dtype, x->ndim,
		    x->shape, x->data, x->nbytes, &err) < 0)
			goto out;
	}
	if (wsync_tree_size(t, &size, &err) < 0 ||
	    (fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600)) < 0 ||
	    ftruncate(fd, (off_t)size) < 0 || wsync_tree_write_map(t, fd, &err) < 0)
		goto out;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	wsync_tree_destroy(&t);
	wsync_file_close(&f);
	return rc;
}

/* Makes base -> head into delta; 0 on success. */
static int
s_make(const char *base, const char *head, const char *delta)
{
	wsync_err_t err;
	int b = open(base, O_RDONLY), h = open(head, O_RDONLY);
	int d = open(delta, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int rc = wsync_delta_make(b, h, d, delta, WSYNC_DELTA_ANY, NULL, &err);

	close(b);
	close(h);
	close(d);
	return rc;
}

/* Rebases the n deltas onto base (numbered number), head (may be NULL), into out; err's code. */
static int
s_rebase(const char *const *deltas, size_t n, const char *base, uint64_t number,
    const char *head, const char *out, wsync_err_t *err)
{
	int fds[2], b = open(base, O_RDONLY), h = head != NULL ? open(head, O_RDONLY) : -1;
	int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600), rc;

	for (size_t i = 0; i < n; i++)
		fds[i] = open(deltas[i], O_RDONLY);
	rc = wsync_delta_rebase(fds, n, b, number, h, o, out, NULL, err) < 0 ? err->code : 0;
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	close(b);
	if (h >= 0)
		close(h);
	close(o);
	return rc;
}

/* Applies delta to base into out; err's code, version the head's. */
static int
s_apply(const char *base, const char *delta, const char *out, uint64_t *version,
    wsync_err_t *err)
{
	int b = open(base, O_RDONLY), d = open(delta, O_RDONLY);
	int o = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int rc = wsync_delta_apply(b, d, o, delta, version, NULL, err) < 0 ? err->code : 0;

	close(b);
	close(d);
	close(o);
	return rc;
}

static int
s_same_files(const char *a, const char *b)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
	return system(cmd) == 0;
}

static void
test_a_delta_rebased_onto_another_layout_of_its_base_rebuilds_the_head(void)
{
	const char *d[1] = { s_path("d.wdelta") };
	wsync_err_t err = { 0 };
	uint64_t version = 0;

	ok(s_apply(s_path("base2.wsync"), d[0], s_path("out.wsync"), &version, &err) ==
	    EX_DATAERR, "the delta as made does not apply to the base laid out otherwise "
	    "(%s)", err.msg);
	ok(s_rebase(d, 1, s_path("base2.wsync"), 7, NULL, s_path("r.wdelta"), &err) == 0,
	    "the delta rebases onto the base laid out otherwise (%s)", err.msg);
	ok(s_apply(s_path("base2.wsync"), s_path("r.wdelta"), s_path("out.wsync"), &version,
	    &err) == 0, "the rebased delta applies to it (%s)", err.msg);
	ok(s_same_files(s_path("out.wsync"), s_path("head.wsync")),
	    "and rebuilds the head byte for byte");
}

static void
test_with_the_head_the_delta_takes_its_skeleton_and_number(void)
{
	const char *d[1] = { s_path("d.wdelta") };
	wsync_err_t err = { 0 };
	uint64_t version = 0;

	ok(s_rebase(d, 1, s_path("base2.wsync"), 7, s_path("head9.wsync"), s_path("r9.wdelta"),
	    &err) == 0, "the delta rebases onto a head stamped otherwise (%s)", err.msg);
	ok(s_apply(s_path("base2.wsync"), s_path("r9.wdelta"), s_path("out9.wsync"), &version,
	    &err) == 0 && version == 9, "it applies and gives the head's number 9 (%s, %llu)",
	    err.msg, (unsigned long long)version);
	ok(s_same_files(s_path("out9.wsync"), s_path("head9.wsync")),
	    "and rebuilds that head byte for byte");
}

static void
test_the_deltas_of_two_halves_make_the_wholes(void)
{
	const char *d[2] = { s_path("d0.wdelta"), s_path("d1.wdelta") };
	wsync_err_t err = { 0 };
	uint64_t version = 0;

	ok(s_make(s_path("base.0.wsync"), s_path("head.0.wsync"), d[0]) == 0 &&
	    s_make(s_path("base.1.wsync"), s_path("head.1.wsync"), d[1]) == 0,
	    "each half's delta is made from its own half before");
	ok(s_rebase(d, 2, s_path("base.wsync"), 1, s_path("head.wsync"), s_path("u.wdelta"),
	    &err) == 0, "the two deltas make the whole's, against the whole base (%s)",
	    err.msg);
	ok(s_apply(s_path("base.wsync"), s_path("u.wdelta"), s_path("outu.wsync"), &version,
	    &err) == 0, "which applies to the whole base (%s)", err.msg);
	ok(s_same_files(s_path("outu.wsync"), s_path("head.wsync")),
	    "and rebuilds the whole head byte for byte");
	ok(s_rebase(d, 1, s_path("base.wsync"), 1, s_path("head.wsync"), s_path("v.wdelta"),
	    &err) == EX_DATAERR && strstr(err.msg, "the head has") != NULL,
	    "one half's delta alone does not make the whole's (%s)", err.msg);
}

static void
test_a_base_lacking_a_tensor_is_refused_naming_it(void)
{
	const char *d[1] = { s_path("d.wdelta") };
	wsync_err_t err = { 0 };

	ok(s_rebase(d, 1, s_path("base.1.wsync"), 1, NULL, s_path("x.wdelta"), &err) ==
	    EX_DATAERR && strstr(err.msg, ": the base holds no tensor of that name") != NULL &&
	    strstr(err.msg, "tensor ") != NULL, "a base with half the tensors is refused, naming "
	    "one (%s)", err.msg);
}

int
main(void)
{
	char cmd[600];
	int made;

	snprintf(s_dir, sizeof(s_dir), "/tmp/test_delta_rebase.XXXXXX");
	if (mkdtemp(s_dir) == NULL)
		return 1;
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/fixtures/mkstep.py bf16 0.01 %u "
	    "%s %s >/dev/null", 1u << 20, s_path("base.wsync"), s_path("head.wsync"));
	made = system(cmd) == 0 && s_make(s_path("base.wsync"), s_path("head.wsync"),
	    s_path("d.wdelta")) == 0 &&
	    s_rewrite(s_path("base.wsync"), s_path("base2.wsync"), 1, 0, 0) == 0 &&
	    s_rewrite(s_path("head.wsync"), s_path("head9.wsync"), 1, 0, 9) == 0;
	for (size_t r = 0; made && r < 2; r++) {
		char b[32], h[32];
		snprintf(b, sizeof(b), "base.%zu.wsync", r);
		snprintf(h, sizeof(h), "head.%zu.wsync", r);
		made = s_rewrite(s_path("base.wsync"), s_path(b), 2, r, 0) == 0 &&
		    s_rewrite(s_path("head.wsync"), s_path(h), 2, r, 0) == 0;
	}
	ok(made, "mkstep.py writes a model and its step, and their other layouts (run from "
	    "the repository root)");
	if (made) {
		test_a_delta_rebased_onto_another_layout_of_its_base_rebuilds_the_head();
		test_with_the_head_the_delta_takes_its_skeleton_and_number();
		test_the_deltas_of_two_halves_make_the_wholes();
		test_a_base_lacking_a_tensor_is_refused_naming_it();
	}
	snprintf(cmd, sizeof(cmd), "%s %s", getenv("KEEP") ? "echo" : "rm -rf", s_dir);
	if (system(cmd) != 0)
		printf("# cannot remove %s\n", s_dir);
	return tap_done();
}
