/* test_signcheck.c - a worker's checks of signed versions: the counter, rollback, one push together. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "signcheck_int.h"
#include "tap.h"
#include "signround_int.h"

static char s_dir[64];
static wsync_signkey_t *s_key;
static wsync_verifykey_t s_pub;
static float s_data[4][256];

/* DIR/name. */
static const char *
s_path(const char *name)
{
	static char buf[4][160];
	static unsigned at;
	char *p = buf[at++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", s_dir, name);
	return p;
}

/* Writes the n models (their data from s_data[which[i]]) as one push signed with seq. */
static void
s_push(const char *const *models, const int *which, int n, uint64_t seq, const char *suffix)
{
	uint64_t shape[1] = { 256 };
	wsync_tree_t *trees[4];
	wsync_err_t err;
	char name[64];

	for (int i = 0; i < n; i++) {
		trees[i] = wsync_tree_new(models[i], &err);
		wsync_tree_add(trees[i], "w", WSYNC_F32, 1, shape, s_data[which[i]],
		    sizeof(s_data[0]), &err);
	}
	if (wsync_sign_trees(trees, n, s_key, seq, NULL, &err) < 0)
		printf("# sign: %s\n", err.msg);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s%s", models[i], suffix);
		if (wsync_tree_write_file(trees[i], s_path(name), &err) < 0)
			printf("# write: %s\n", err.msg);
		wsync_tree_destroy(&trees[i]);
	}
}

/* Leaves the stack below the caller full of non-NUL bytes, as a long run before would. */
__attribute__((noinline)) static void
s_dirty_stack(void)
{
	volatile char junk[16384];

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = 'x';
}

static void
test_counter(void)
{
	const char *key = s_path("k.key");
	wsync_err_t err;
	uint64_t seq = 0;

	ok(wsync_signseq_next(key, 0, &seq, &err) == 0 && seq == 1,
	    "the counter starts at 1 when KEY.seq is missing");
	ok(wsync_signseq_next(key, 0, &seq, &err) == 0 && seq == 2, "and goes up by one");
	ok(wsync_signseq_next(key, 50, &seq, &err) == 0 && seq == 50, "takes a given seq above it");
	ok(wsync_signseq_next(key, 50, &seq, &err) < 0 && err.code == EX_DATAERR,
	    "refuses a given seq not above it (65)");
	ok(wsync_signseq_next(key, 0, &seq, &err) == 0 && seq == 51, "goes on from the given one");
	ok(wsync_signseq_next(s_path("none.key"), 0, &seq, &err) < 0 && err.code == EX_NOINPUT,
	    "a missing key file is 66");
	/* An empty KEY.seq (a crash of an editor, a "touch"): read nothing, refused. */
	FILE *f = fopen(s_path("k.key.seq"), "w");
	if (f != NULL)
		fclose(f);
	s_dirty_stack();
	ok(wsync_signseq_next(key, 0, &seq, &err) < 0 && err.code == EX_DATAERR &&
	    strstr(err.msg, "not a sequence number") != NULL,
	    "an empty KEY.seq is refused as not a sequence number (65)");
}

static void
test_rollback(void)
{
	const char *model[] = { "m" };
	wsync_applied_t last;
	wsync_manifest_t m;
	wsync_err_t err;

	s_push(model, (int[]){ 0 }, 1, 5, ".5");
	s_push(model, (int[]){ 1 }, 1, 4, ".4");
	s_push(model, (int[]){ 1 }, 1, 5, ".5b");
	wsync_applied_read(s_path("m.5"), &last);
	ok(last.is_signed && last.seq == 5 && last.content != 0, "reads the seq of the file in place");
	ok(wsync_verify_fetched(s_path("m.5"), "m", 3, &s_pub, 1, &last, &m, &err) == 0 &&
	    m.seq == 5, "the same version again is taken");
	wsync_manifest_free(&m);
	ok(wsync_verify_fetched(s_path("m.4"), "m", 4, &s_pub, 1, &last, NULL, &err) ==
	    WSYNC_VERIFY_ROLLBACK && err.code == EX_NOPERM &&
	    strcmp(err.msg, "refused (rollback): m version 4: signed with seq 4, not above seq 5 "
	    "of the version in place: an old signed version served again") == 0,
	    "a lower seq is a rollback, named as a version: %s", err.msg);
	ok(wsync_verify_fetched(s_path("m.5b"), "m", 4, &s_pub, 1, &last, NULL, &err) ==
	    WSYNC_VERIFY_ROLLBACK, "the same seq with other bytes is one too");
	wsync_applied_read(s_path("absent"), &last);
	ok(!last.is_signed && last.content == 0, "a missing output holds nothing");
	ok(wsync_verify_fetched(s_path("m.4"), "m", 4, &s_pub, 1, &last, NULL, &err) == 0,
	    "over nothing, any signed seq is taken");
}

static void
test_round(void)
{
	const char *models[] = { "actor", "critic" };
	wsync_round_model_t m[2] = { { .head.version = 2 }, { .head.version = 2 } };
	wsync_round_t o = { .models = models, .n = 2, .keys = &s_pub, .nkeys = 1 };
	wsync_err_t err;

	s_push(models, (int[]){ 0, 2 }, 2, 1, ".1");
	s_push(models, (int[]){ 1, 3 }, 2, 2, ".2");
	wsync_applied_read(s_path("actor.1"), &m[0].in_place);
	wsync_applied_read(s_path("critic.1"), &m[1].in_place);
	for (int i = 0; i < 2; i++) {
		wsync_applied_t a;
		wsync_applied_read(s_path(i == 0 ? "actor.2" : "critic.2"), &a);
		m[i].head.content = a.content;
	}
	m[0].tmp = (char *)s_path("actor.2");
	m[1].tmp = (char *)s_path("critic.2");
	ok(wsync_check_round(&o, m) == 0 &&
	    m[0].why[0] == '\0' && m[1].why[0] == '\0' && m[0].next.seq == 2 &&
	    m[1].next.seq == 2,
	    "both models of a push in one round are taken");
	m[1].tmp = NULL;
	ok(wsync_check_round(&o, m) == 0 &&
	    strncmp(m[0].why, "refused (mixed): actor version 2: its signed push (seq 2) has critic at "
	    "content ", 80) == 0, "the new actor beside the old critic is refused: %s", m[0].why);
	/* The critic of the same push, its signature stripped (the same bytes, unsigned). */
	wsync_tree_t *critic = wsync_tree_new("critic", &err);
	wsync_tree_add(critic, "w", WSYNC_F32, 1, (uint64_t[]){ 256 }, s_data[3], sizeof(s_data[3]),
	    &err);
	wsync_tree_write_file(critic, s_path("critic.u"), &err);
	wsync_tree_destroy(&critic);
	m[0].tmp = (char *)s_path("actor.2");
	m[1].tmp = (char *)s_path("critic.u");
	ok(wsync_check_round(&o, m) == 0 &&
	    strncmp(m[1].why, "refused (unsigned)", 18) == 0 &&
	    strncmp(m[0].why, "refused (mixed)", 15) == 0,
	    "a partner refused takes the other model of its push down with it");
}

static void
test_foreign(void)
{
	const char *models[] = { "actor", "critic" };
	wsync_manifest_t m;
	wsync_err_t err;

	s_push(models, (int[]){ 0, 2 }, 2, 7, ".7");
	ok(wsync_verify_fetched(s_path("critic.7"), "actor", 3, &s_pub, 1, NULL, NULL, &err) ==
	    WSYNC_VERIFY_NOT_LISTED && err.code == EX_NOPERM &&
	    strcmp(err.msg, "refused (not-listed): actor version 3: the file is a version of model "
	    "critic, not of actor") == 0,
	    "a signed critic fetched as actor is not-listed, though its manifest lists actor: %s",
	    err.msg);
	ok(wsync_verify_fetched(s_path("actor.7"), "actor", 3, &s_pub, 1, NULL, &m, &err) == 0 &&
	    m.seq == 7, "the actor of the same push, fetched as actor, is taken");
	wsync_manifest_free(&m);
}

int
main(void)
{
	char cmd[128], base[96], line[WSYNC_SIGN_PUBLIC];
	wsync_err_t err;
	int status;

	snprintf(s_dir, sizeof(s_dir), "/tmp/test_signcheck.XXXXXX");
	if (mkdtemp(s_dir) == NULL)
		return 1;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 256; j++)
			s_data[i][j] = (float)(i * 1000 + j);
	snprintf(base, sizeof(base), "%s/k", s_dir);
	if (wsync_signkey_generate(base, 0, line, &err) < 0 ||
	    wsync_verifykey_load(s_path("k.pub"), &s_pub, &err) < 0 ||
	    (s_key = wsync_signkey_load(s_path("k.key"), &err)) == NULL) {
		printf("# keys: %s\n", err.msg);
		return 1;
	}
	test_counter();
	test_rollback();
	test_round();
	test_foreign();
	wsync_signkey_destroy(&s_key);
	status = tap_done();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
	if (system(cmd) != 0)
		return 1;
	return status;
}
