/* wsync-push - publish weight files as the next version of models; optionally wait. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "cli.h"

#define S_CONNECT_MS 5000

static const char s_usage[] =
    "usage: wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] [-W ID,...]\n"
    "                  [--transfer MODE] [-q|--progress] [--sign-key FILE [--seq N]]\n"
    "                  [--base FILE] [--exclude GLOB]... [--max-file BYTES]\n"
    "                  -m MODEL FILE|DIR|-\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] [-q|--progress]\n"
    "                  [--sign-key FILE] --part R/N --group KEY -m MODEL FILE|-\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] [-W ID,...]\n"
    "                  [--transfer MODE] [-q|--progress] [--sign-key FILE [--seq N]]\n"
    "                  [--exclude GLOB]... [--max-file BYTES] -m MODEL=FILE...\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] --wait-for VERSION -m MODEL\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [--transfer MODE] [--sign-key FILE]\n"
    "                  [--no-delta] --batch\n";

static void
s_help(void)
{
	printf("%s\n"
	    "Publish a weight file (.wsync or safetensors), or a checkpoint directory (its\n"
	    "shards and the small files beside them), as the next version of a model.\n"
	    "Several -m MODEL=FILE are committed together: no worker sees one without the\n"
	    "others. Prints the new version (MODEL VERSION lines for several models).\n"
	    "\n"
	    "  -e, --endpoint ENDPOINT  the hub (default: $WSYNC_ENDPOINT, else the local hub)\n"
	    "  -m, --model MODEL[=FILE] the model to publish (FILE: several in one commit)\n"
	    "  -t, --timeout SEC        bound on the whole push and wait (default 30)\n"
	    "  -w, --wait all|N|ID,...  return once all live workers, N workers, or these\n"
	    "                           workers have applied the version (or a newer one)\n"
	    "  -W, --workers ID,...     announce the version to these workers only\n"
	    "      --wait-for VERSION   push nothing; wait for VERSION of MODEL (with --wait)\n"
	    "      --transfer MODE      auto (default), copy or link (write the files into the\n"
	    "                           hub's store on this host), or socket (send them)\n"
	    "      --progress           show the upload's progress on stderr even when it is\n"
	    "                           not a terminal or the push is short\n"
	    "  -q, --quiet              no progress line; only errors on stderr\n"
	    "      --sign-key FILE      sign the push (all its models in one manifest) with\n"
	    "                           this minisign or signify secret key\n"
	    "      --seq N              the signed push's sequence number (the trainer's\n"
	    "                           step), above every one signed with the key before\n"
	    "                           (default: the counter in FILE.seq, plus one)\n"
	    "      --base FILE          over the socket, send the delta from the older version\n"
	    "                           FILE holds when the hub still has it and the delta\n"
	    "                           is at most half of it (else the version whole)\n"
	    "      --exclude GLOB       a checkpoint directory: leave out the files whose names\n"
	    "                           match GLOB (repeatable), such as optimizer.pt\n"
	    "      --max-file BYTES     a checkpoint directory: the bound on a file beside the\n"
	    "                           weights (default 16 MiB; all of them: 4 times it)\n"
	    "      --part R/N           push part R (from 0) of a version in N parts, each\n"
	    "                           pushed by its own process: the hub commits one\n"
	    "                           version once all N are in (with --group)\n"
	    "      --group KEY          the version the parts build together: a number above\n"
	    "                           the last group of the model (the trainer's step)\n"
	    "      --no-delta           with --batch: send each version whole (else, over the\n"
	    "                           socket, as a delta from the one pushed before it)\n"
	    "      --batch              stay connected: read one push a line on stdin (its\n"
	    "                           options as above), answer \"ok MODEL VERSION...\" or\n"
	    "                           \"error CODE MESSAGE\" a line on stdout, until end of\n"
	    "                           input (-t bounds connecting); on the hub's host a\n"
	    "                           request may also ask for a slot in the store to\n"
	    "                           write a version into (see wsync-push(1))\n"
	    CLI_KEY_HELP
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "Exit status: 0 ok, 64 usage, 65 bad weight file, 66 no input or no such model,\n"
	    "69 hub unavailable, 70 internal error, 74 I/O error, 75 timed out,\n"
	    "76 protocol error, 77 permission denied. See wsync-push(1).\n", s_usage);
	exit(0);
}

/* What the command does: one push (or a wait), or serve pushes a line at a time. */
enum s_verb { S_VERB_PUSH, S_VERB_BATCH };

/* The connection: options of the command, not of a push request. */
struct s_conn {
	const char *endpoint;
	const char *key, *hub_key;
	const char *sign_key;           /* NULL: pushes are not signed */
	int transfer;
	const char *part;               /* --part R/N; NULL: a whole version */
	const char *group;              /* --group KEY */
	unsigned rank, parts;           /* R and N of --part */
	uint64_t group_key;             /* KEY of --group */
};

/* --part and --group go together, with one model and nothing a part cannot do. */
static void
s_part_check(struct s_conn *conn, const wsync_push_req_t *r)
{
	char end;

	if (conn->part == NULL && conn->group == NULL)
		return;
	if (conn->part == NULL || conn->group == NULL)
		cli_usage_error("--part and --group go together: a part names the version it "
		    "belongs to");
	if (sscanf(conn->part, "%u/%u%c", &conn->rank, &conn->parts, &end) != 2 ||
	    conn->parts == 0 || conn->parts > 256 || conn->rank >= conn->parts ||
	    strchr(conn->part, '-') != NULL)
		cli_usage_error("--part %s: not R/N, a part R from 0 to N-1 of 1 to 256",
		    conn->part);
	conn->group_key = cli_number("--group", conn->group);
	if (r->n != 1 || r->with_files != 0 || r->wait_for != 0)
		cli_usage_error("--part pushes one file of one model: -m MODEL FILE");
	if (r->targets != NULL || r->base != NULL || r->seq != 0 ||
	    conn->transfer == WSYNC_TRANSFER_COPY || conn->transfer == WSYNC_TRANSFER_LINK)
		cli_usage_error("--part goes over the socket to every worker, whole, signed for "
		    "its group: not with -W, --base, --seq or --transfer copy|link");
}

/* Connects for the models of r (none for --batch), abandoning on *stop; dies on failure. */
static wsync_client_t *
s_connect(const struct s_conn *conn, const wsync_push_req_t *r, volatile sig_atomic_t *stop)
{
	wsync_client_t *client;
	wsync_err_t err;

	client = wsync_client_new(&(wsync_client_opts_t){ .endpoint = conn->endpoint,
	    .role = "push", .models = r->models, .nmodels = r->n, .transfer = conn->transfer,
	    .key = conn->key, .hub_key = conn->hub_key, .progress = cli_progress,
	    .stop = stop,
	    .timeout_ms = r->timeout_ms < S_CONNECT_MS ? r->timeout_ms : S_CONNECT_MS }, &err);
	if (client == NULL)
		cli_die_err(&err);
	if (conn->sign_key != NULL && wsync_client_sign_with(client, conn->sign_key, &err) < 0)
		cli_die_err(&err);
	return client;
}

/*
 * Each checkpoint directory pushed is read as ckpt says; says what each leaves
 * out (subdirectories, shards its index does not name), and refuses one that
 * cannot be read before anything is sent.
 */
static void
s_read_dirs(wsync_push_req_t *r, const wsync_ckpt_in_t *ckpt)
{
	wsync_err_t err;

	for (int i = 0; i < r->n; i++) {
		wsync_ckpt_t *ck;
		r->items[i].ckpt = ckpt;
		/* --wait-for names a model, no file. */
		if (r->items[i].path == NULL || !wsync_is_dir(r->items[i].path))
			continue;
		if ((ck = wsync_ckpt_open_in(r->items[i].path, ckpt, &err)) == NULL)
			cli_die_err(&err);
		if (wsync_ckpt_left_out(ck)[0] != '\0')
			cli_warn("%s: left out: %s", r->items[i].path, wsync_ckpt_left_out(ck));
		wsync_ckpt_close(&ck);
	}
}

/*
 * A typo in -w ID waits the whole timeout for no one: names the ids the hub
 * has never heard from (a worker started just now is waited for all the same).
 */
static void
s_warn_unseen(wsync_client_t *client, const wsync_push_req_t *r)
{
	wsync_err_t err;
	char *unseen = wsync_push_req_unseen(client, r, r->timeout_ms, &err);

	if (unseen == NULL)
		cli_die_err(&err);
	if (unseen[0] != '\0')
		cli_warn("--wait: the hub has never heard from %s; waiting for %s all the same",
		    unseen, strchr(unseen, ',') != NULL ? "them" : "it");
	free(unseen);
}

/*
 * One push (or, with --wait-for, the version given): prints the versions,
 * then waits as asked. A wait that timed out lists the workers missing.
 */
static void
s_push(wsync_client_t *client, wsync_push_req_t *r)
{
	int64_t deadline = wsync_now_ms() + r->timeout_ms;
	char *missing = NULL;
	wsync_err_t err;

	s_warn_unseen(client, r);
	if (wsync_push_req_push(client, r, &err) < 0)
		cli_die_err(&err);
	cli_progress_end();
	if (r->base != NULL && wsync_client_delta_note(client)[0] != '\0') {
		char line[WSYNC_MAX_REASON + 100];
		snprintf(line, sizeof(line), "%s version %" PRIu64 " sent whole: %s",
		    r->items[0].model, r->items[0].version, wsync_client_delta_note(client));
		cli_log_msg(NULL, line);
	}
	for (int i = 0; r->wait_for == 0 && i < r->n; i++) {
		if (r->n == 1)
			printf("%" PRIu64 "\n", r->items[i].version);
		else
			printf("%s %" PRIu64 "\n", r->items[i].model, r->items[i].version);
	}
	if (fflush(stdout) != 0)
		cli_die(EX_IOERR, "cannot write to stdout");
	if (wsync_push_req_wait(client, r, deadline, &missing, &err) < 0) {
		if (missing != NULL) {
			cli_warn("%s", err.msg);
			for (char *line = strtok(missing, "\n"); line; line = strtok(NULL, "\n"))
				fprintf(stderr, "  %s\n", line);
			exit(err.code);
		}
		cli_die_err(&err);
	}
}

/*
 * The coprocess: one request a line on stdin, one answer a line on stdout,
 * until end of input; the library's batch session parses and serves them.
 */
static void
s_batch(wsync_client_t *client, volatile sig_atomic_t *stop)
{
	wsync_batch_t *batch;
	wsync_err_t err;
	char *line = NULL, *answer, named[4096];
	size_t cap = 0;

	if ((batch = wsync_batch_new(client, &err)) == NULL)
		cli_die_err(&err);
	while (getline(&line, &cap, stdin) >= 0 && !*stop) {
		if (wsync_batch_serve(batch, line, &answer) < 0)
			cli_die(EX_SOFTWARE, "out of memory");
		/* An error line is a message: it names this program's options. */
		if (answer != NULL && strncmp(answer, "error ", 6) == 0)
			printf("%s\n", cli_options_named(answer, named, sizeof(named)));
		else if (answer != NULL)
			printf("%s\n", answer);
		free(answer);
		if (*stop)
			break;
		if (fflush(stdout) != 0)
			cli_die(EX_IOERR, "cannot write to stdout");
	}
	free(line);
	wsync_batch_destroy(&batch);
	/* A signal ends the coprocess as it ends a single push: 128 + its number. */
	cli_exit_if_interrupted();
}

int
main(int argc, char **argv)
{
	enum {
		OPT_TRANSFER = 256, OPT_BATCH, OPT_PROGRESS, OPT_SIGN_KEY, OPT_NO_DELTA, OPT_EXCLUDE,
		OPT_MAX_FILE, OPT_PART, OPT_GROUP
	};
	static const struct option opts[] = {
		{ "abort", required_argument, NULL, WSYNC_PUSH_OPT_ABORT },
		{ "base", required_argument, NULL, WSYNC_PUSH_OPT_BASE },
		{ "batch", no_argument, NULL, OPT_BATCH },
		{ "commit", required_argument, NULL, WSYNC_PUSH_OPT_COMMIT },
		{ "endpoint", required_argument, NULL, 'e' },
		CLI_KEY_OPTIONS,
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "help", no_argument, NULL, 'h' },
		{ "model", required_argument, NULL, WSYNC_PUSH_OPT_MODEL },
		{ "next-slot", no_argument, NULL, WSYNC_PUSH_OPT_NEXT_SLOT },
		{ "exclude", required_argument, NULL, OPT_EXCLUDE },
		{ "max-file", required_argument, NULL, OPT_MAX_FILE },
		{ "no-delta", no_argument, NULL, OPT_NO_DELTA },
		{ "part", required_argument, NULL, OPT_PART },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "seq", required_argument, NULL, WSYNC_PUSH_OPT_SEQ },
		{ "sign-key", required_argument, NULL, OPT_SIGN_KEY },
		{ "slot", no_argument, NULL, WSYNC_PUSH_OPT_SLOT },
		{ "timeout", required_argument, NULL, WSYNC_PUSH_OPT_TIMEOUT },
		{ "transfer", required_argument, NULL, OPT_TRANSFER },
		{ "trust-hashes", no_argument, NULL, WSYNC_PUSH_OPT_TRUST },
		{ "version", no_argument, NULL, 'V' },
		{ "wait", required_argument, NULL, WSYNC_PUSH_OPT_WAIT },
		{ "wait-for", required_argument, NULL, WSYNC_PUSH_OPT_WAIT_FOR },
		{ "workers", required_argument, NULL, WSYNC_PUSH_OPT_WORKERS },
		{ NULL, 0, NULL, 0 },
	};
	struct s_conn conn = { .transfer = WSYNC_TRANSFER_AUTO };
	enum s_verb verb = S_VERB_PUSH;
	volatile sig_atomic_t *stop;
	wsync_push_req_t r;
	wsync_client_t *client;
	char why[600], **exclude = NULL;
	wsync_ckpt_in_t ckpt = { 0 };
	wsync_err_t err;
	int c, no_delta = 0;

	cli_init("wsync-push");
	wsync_push_req_init(&r);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":e:hm:qt:Vw:W:", opts, NULL)) != -1) {
		/* The option as written: before its value when that came as the next word. */
		const char *arg = optarg != NULL && optind >= 2 && argv[optind - 1] == optarg ?
		    argv[optind - 2] : argv[optind - 1];
		switch (c) {
		case 'e': conn.endpoint = optarg; break;
		case CLI_OPT_KEY: conn.key = optarg; break;
		case CLI_OPT_HUB_KEY: conn.hub_key = optarg; break;
		case 'h': s_help(); break;
		case 'q': cli_quiet(); break;
		case 'V': cli_version(); break;
		case OPT_TRANSFER: conn.transfer = cli_transfer(optarg); break;
		case OPT_PROGRESS: cli_progress_force(); break;
		case OPT_BATCH: verb = S_VERB_BATCH; break;
		case OPT_SIGN_KEY: conn.sign_key = optarg; break;
		case OPT_NO_DELTA: no_delta = 1; break;
		case OPT_PART: conn.part = optarg; break;
		case OPT_GROUP: conn.group = optarg; break;
		case OPT_EXCLUDE:
			if ((exclude = realloc(exclude, (size_t)(ckpt.nexclude + 1) *
			    sizeof(*exclude))) == NULL)
				cli_die(EX_SOFTWARE, "out of memory");
			exclude[ckpt.nexclude++] = optarg;
			ckpt.exclude = (const char *const *)exclude;
			break;
		case OPT_MAX_FILE:
			if ((ckpt.max_file = cli_number("--max-file", optarg)) == 0)
				cli_usage_error("--max-file wants 1 byte or more");
			break;
		case WSYNC_PUSH_OPT_SLOT:
		case WSYNC_PUSH_OPT_COMMIT:
		case WSYNC_PUSH_OPT_ABORT:
			cli_usage_error("%s is a request of wsync-push --batch", arg);
		case WSYNC_PUSH_OPT_MODEL:
		case WSYNC_PUSH_OPT_TIMEOUT:
		case WSYNC_PUSH_OPT_WAIT:
		case WSYNC_PUSH_OPT_WORKERS:
		case WSYNC_PUSH_OPT_WAIT_FOR:
		case WSYNC_PUSH_OPT_TRUST:
		case WSYNC_PUSH_OPT_NEXT_SLOT:
		case WSYNC_PUSH_OPT_SEQ:
		case WSYNC_PUSH_OPT_BASE:
			if (wsync_push_req_option(&r, c, arg, optarg, why, sizeof(why)) < 0)
				cli_usage_error("%s", why);
			break;
		default: cli_bad_option(argv, c);
		}
	}
	switch (verb) {
	case S_VERB_PUSH:
		if (wsync_push_req_check(&r, argv + optind, argc - optind, 0, why, sizeof(why)) < 0)
			cli_usage_error("%s", why);
		if (r.seq != 0 && conn.sign_key == NULL)
			cli_usage_error("--seq goes with --sign-key: an unsigned push has no "
			    "sequence number");
		if (no_delta)
			cli_usage_error("--no-delta goes with --batch: a single push sends a delta "
			    "only with --base");
		s_part_check(&conn, &r);
		s_read_dirs(&r, &ckpt);
		client = s_connect(&conn, &r, cli_catch_signals(0));
		if (conn.part != NULL && wsync_client_push_part(client, conn.rank, conn.parts,
		    conn.group_key, &err) < 0)
			cli_die_err(&err);
		s_push(client, &r);
		break;
	case S_VERB_BATCH:
		/* --trust-hashes or --next-slot alone: the check says what they go with. */
		if ((r.trust || r.next_slot) &&
		    wsync_push_req_check(&r, NULL, 0, 0, why, sizeof(why)) < 0)
			cli_usage_error("%s", why);
		if (r.n != 0 || optind != argc || r.waits || r.targets != NULL ||
		    r.wait_for != 0 || r.seq != 0 || r.base != NULL || ckpt.nexclude > 0 ||
		    ckpt.max_file > 0 || conn.part != NULL || conn.group != NULL)
			cli_usage_error("--batch takes its pushes on stdin, not on the command line "
			    "(only -e, -t, -q, --progress, --transfer, --sign-key, --no-delta and the "
			    "keys go with it)");
		stop = cli_catch_signals(CLI_SIGNAL_STDIN_EOF);
		client = s_connect(&conn, &r, stop);
		/* Over the socket, each push goes as a delta from the one before it. */
		wsync_client_keep_pushed(client, !no_delta);
		s_batch(client, stop);
		break;
	}
	wsync_push_req_free(&r);
	wsync_client_destroy(&client);
	free(exclude);
	return 0;
}
