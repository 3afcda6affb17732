/* test_batch.c - the batch line parser: words, quoting, options, checks, exact error texts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "batch_int.h"

/* Parses text (copied) into *r; returns the parser's result, why holds its error. */
static int
parse(const char *text, char *line, size_t cap, wsync_push_req_t *r, char *why, size_t size)
{
	snprintf(line, cap, "%s", text);
	why[0] = '\0';
	return wsync_batch_parse(line, r, why, size);
}

/* Checks that text is refused with exactly the error want. */
static void
refused(const char *text, const char *want)
{
	char line[512], why[600];
	wsync_push_req_t r;
	int rc = parse(text, line, sizeof(line), &r, why, sizeof(why));

	ok(rc == -1 && strcmp(why, want) == 0, "[%s] is refused: %s (got %d: %s)", text, want, rc,
	    why);
	wsync_push_req_free(&r);
}

static void
test_words(void)
{
	char line[512], why[600];
	wsync_push_req_t r;

	ok(parse("", line, sizeof(line), &r, why, sizeof(why)) == 1, "an empty line is no request");
	ok(parse(" \t\r\n", line, sizeof(line), &r, why, sizeof(why)) == 1,
	    "a line of blanks is no request");

	ok(parse("-m policy v1.wsync\n", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.verb == WSYNC_PUSH_VERB_PUSH && r.n == 1 && strcmp(r.items[0].model, "policy") == 0 &&
	    strcmp(r.items[0].path, "v1.wsync") == 0 && !r.waits &&
	    r.timeout_ms == 30000, "a plain push: one model, its file, no wait, 30 s");

	ok(parse("-m policy \"my file.wsync\"", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "my file.wsync") == 0, "a quoted word keeps its blanks");

	ok(parse("-m policy \"a \\\"q\\\" \\\\ b\"", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "a \"q\" \\ b") == 0, "\\\" and \\\\ in quotes are \" and \\");

	ok(parse("-m policy \"a\\nb\"", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "a\\nb") == 0, "another backslash in quotes stays itself");

	ok(parse("-m policy a\"b\\c", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "a\"b\\c") == 0,
	    "quotes and backslashes inside an unquoted word are bytes of it");

	ok(parse("-m \"policy=x y.wsync\" -w all", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.n == 1 && strcmp(r.items[0].model, "policy") == 0 &&
	    strcmp(r.items[0].path, "x y.wsync") == 0 && r.wait_mode == WSYNC_WAIT_ALL,
	    "a quoted -m MODEL=FILE");

	ok(parse("-m policy \"\"", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "") == 0, "\"\" is an empty word");

	refused("-m policy \"v1.wsync", "a quoted word has no closing quote");
	refused("-m policy \"v1\\\"", "a quoted word has no closing quote");
	refused("-m policy \"v1\"x", "a closing quote must end its word");
}

static void
test_options(void)
{
	char line[512], why[600];
	wsync_push_req_t r;

	ok(parse("--model=policy -t2.5 --wait 2 v.wsync", line, sizeof(line), &r, why,
	    sizeof(why)) == 0 && r.timeout_ms == 2500 && r.wait_mode == WSYNC_WAIT_COUNT &&
	    r.wait_count == 2 && strcmp(r.items[0].path, "v.wsync") == 0,
	    "--name=value, -tVALUE and a file after the options");

	ok(parse("v.wsync -mpolicy -w w1,3090box -W a,b", line, sizeof(line), &r, why,
	    sizeof(why)) == 0 && strcmp(r.items[0].path, "v.wsync") == 0 &&
	    r.wait_mode == WSYNC_WAIT_IDS && r.nwait_ids == 2 &&
	    strcmp(r.wait_ids[1], "3090box") == 0 && r.ntargets == 2 &&
	    strcmp(r.targets[0], "a") == 0, "a file before the options; -w ids and -W workers");
	wsync_push_req_free(&r);

	ok(parse("-m policy -- -v1.wsync", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    strcmp(r.items[0].path, "-v1.wsync") == 0, "-- ends the options");

	ok(parse("--wait-f 3 --mod policy", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.wait_for == 3 && r.wait_mode == WSYNC_WAIT_ALL,
	    "a long option by a unique prefix; --wait-for waits for all by default");

	ok(parse("-m a=a.wsync -m b=b.wsync", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.n == 2 && strcmp(r.items[1].model, "b") == 0 &&
	    strcmp(r.items[1].path, "b.wsync") == 0, "several models, each with its file");

	ok(parse("--slot -m a=10 -m b=20 -W w1", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.verb == WSYNC_PUSH_VERB_SLOT && r.n == 2 && r.sizes[0] == 10 && r.sizes[1] == 20 &&
	    r.ntargets == 1, "a slot request: models and sizes");
	wsync_push_req_free(&r);

	ok(parse("--commit 7 -w all --trust-hashes --next-slot -t 1", line, sizeof(line), &r, why,
	    sizeof(why)) == 0 && r.verb == WSYNC_PUSH_VERB_COMMIT && r.upload == 7 && r.trust &&
	    r.next_slot && r.timeout_ms == 1000, "a commit request with its options");

	ok(parse("--abort=9", line, sizeof(line), &r, why, sizeof(why)) == 0 &&
	    r.verb == WSYNC_PUSH_VERB_ABORT && r.upload == 9, "an abort request");
}

static void
test_errors(void)
{
	refused("-m policy", "no file given (use - for stdin)");
	refused("-m policy a b", "one file per push; for several models use -m MODEL=FILE");
	refused("v1.wsync", "no model given (-m MODEL)");
	refused("-m policy -", "- (stdin) carries the requests in --batch: give a file");
	refused("-m a=a.wsync -m b", "with several models, give each its file as -m MODEL=FILE");
	refused("--wait-for 2 -m policy v1.wsync", "--wait-for takes one -m MODEL and no file");
	refused("--wait-for 0 -m policy", "--wait-for wants a version of 1 or more, not \"0\"");
	refused("-m .hidden v", "bad model id \".hidden\": use 1 to 64 of A-Z a-z 0-9 . _ - (not "
	    "starting with '.')");
	refused("-m policy v -t soon", "--timeout wants seconds (like 2.5), not \"soon\"");
	refused("-m policy v -t 2200000", "--timeout wants seconds (like 2.5), not \"2200000\"");
	refused("-m policy v -w 99999999", "--wait wants all, a number of workers or worker ids, "
	    "not \"99999999\"");
	refused("-e ipc:///elsewhere -m policy v",
	    "-e is an option of the wsync-push --batch command, not of a request");
	refused("--endpoint=ipc:///x -m policy v",
	    "--endpoint is an option of the wsync-push --batch command, not of a request");
	refused("-qm policy v", "-q is an option of the wsync-push --batch command, not of a request");
	refused("--progress -m policy v",
	    "--progress is an option of the wsync-push --batch command, not of a request");
	refused("--batch", "--batch is an option of the wsync-push --batch command, not of a request");
	refused("-m policy v --bogus", "unknown option '--bogus'");
	refused("-m policy v --bogus=1", "unknown option '--bogus'");
	refused("-m policy v --wait", "option '--wait' needs a value");
	refused("-m policy v -t", "option '-t' needs a value");
	refused("-m policy v -x", "unknown option '-x'");
	refused("--w all -m policy v", "unknown option '--w'");
	refused("--slot=1 -m policy=10", "option '--slot' takes no value");
	refused("--slot", "--slot wants -m MODEL=SIZE for each model");
	refused("--slot -m policy", "--slot wants -m MODEL=SIZE (bytes, 1 or more), not -m policy");
	refused("--slot -m policy=0",
	    "--slot wants -m MODEL=SIZE (bytes, 1 or more), not -m policy=0");
	refused("--slot -m policy=10 -w all", "--slot takes no wait: give -w with --commit");
	refused("--slot -m policy=10 v1.wsync", "a slot request takes no file");
	refused("--commit x", "--commit wants the upload number a slot answer gave, not \"x\"");
	refused("--commit 3 -m policy",
	    "--commit takes only the upload, -t, -w, --trust-hashes and --next-slot");
	refused("--abort 3 -w all", "--abort takes only the upload");
	refused("--slot --commit 1", "one of --slot, --commit and --abort a request");
	refused("--trust-hashes v1.wsync -m policy", "--trust-hashes goes with --commit");
	refused("--next-slot --slot -m policy=10", "--next-slot goes with --commit");
}

static void
test_limits(void)
{
	char line[4096] = "", why[600];
	wsync_push_req_t r;
	size_t len = 0;

	for (int i = 0; i < 273; i++)
		len += (size_t)snprintf(line + len, sizeof(line) - len, "x ");
	ok(wsync_batch_parse(line, &r, why, sizeof(why)) == -1 &&
	    strcmp(why, "more than 272 words in a request") == 0, "a request of too many words: %s",
	    why);
	len = 0;
	for (int i = 0; i < 65; i++)
		len += (size_t)snprintf(line + len, sizeof(line) - len, "-m m%d=f ", i);
	ok(wsync_batch_parse(line, &r, why, sizeof(why)) == -1 &&
	    strcmp(why, "at most 64 models in one push") == 0, "at most 64 models: %s", why);
}

int
main(void)
{
	test_words();
	test_options();
	test_errors();
	test_limits();
	return tap_done();
}
