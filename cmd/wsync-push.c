/* wsync-push - publish weight files as the next version of models; optionally wait. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define S_MAX_MODELS 64
#define S_CONNECT_MS 5000

static const char s_usage[] =
    "usage: wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] [-W ID,...]\n"
    "                  [--transfer MODE] [-q|--progress] -m MODEL FILE|-\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] [-W ID,...]\n"
    "                  [--transfer MODE] [-q|--progress] -m MODEL=FILE...\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] --wait-for VERSION -m MODEL\n"
    "       wsync-push [-e ENDPOINT] [-t SEC] [--transfer MODE] --batch\n";

static void
s_help(void)
{
	printf("%s\n"
	    "Publish a weight file (.wsync or safetensors) as the next version of a model.\n"
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

enum s_op { S_PUSH, S_SLOT, S_COMMIT, S_ABORT };

/* One push: from the command line, or from one line of --batch. */
struct s_push {
	enum s_op op;                   /* --batch only: a slot, its commit or abort */
	uint64_t upload;                /* S_COMMIT, S_ABORT */
	int trust;                      /* S_COMMIT: --trust-hashes */
	int next_slot;                  /* S_COMMIT: --next-slot */
	uint64_t sizes[S_MAX_MODELS];   /* S_SLOT: -m MODEL=SIZE */
	wsync_push_item_t items[S_MAX_MODELS];
	const char *models[S_MAX_MODELS];
	int n;
	const char *wait_mode;          /* NULL: no wait; "all", "count" or "ids" */
	unsigned wait_count;
	char **wait_ids, **targets;     /* cli_split arrays (caller frees) */
	int nwait_ids, ntargets;
	uint64_t wait_for;
	int timeout_ms;
	/* Command line only. */
	const char *endpoint;
	const char *key, *hub_key;
	int transfer;
	int batch;
};

static void
s_push_free(struct s_push *p)
{
	free(p->wait_ids);
	free(p->targets);
	p->wait_ids = p->targets = NULL;
}

__attribute__((format(printf, 3, 4)))
static int
s_bad(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -1;
}

/* Reads a --wait spec: all, a count, or worker ids. */
static int
s_wait_spec(struct s_push *p, char *spec, char *why, size_t size)
{
	uint64_t count;

	if (strcmp(spec, "all") == 0)
		p->wait_mode = "all";
	else if (strspn(spec, "0123456789") == strlen(spec)) {
		/* All digits: a count (ids may start with a digit, as 3090box). */
		if (cli_parse_number(spec, &count) < 0 || count > 1000000)
			return s_bad(why, size, "--wait wants all, a number of workers or worker "
			    "ids, not \"%s\"", spec);
		p->wait_mode = "count";
		p->wait_count = (unsigned)count;
	} else {
		p->wait_mode = "ids";
		free(p->wait_ids);
		p->wait_ids = cli_split(spec, &p->nwait_ids);
	}
	return 0;
}

/* Checks a --slot, --commit or --abort request of --batch, parsed into p. */
static int
s_check_request(struct s_push *p, int argc, char *why, size_t size)
{
	if ((p->trust || p->next_slot) && p->op != S_COMMIT)
		return s_bad(why, size, "%s goes with --commit", p->trust ? "--trust-hashes" :
		    "--next-slot");
	if (argc != 0)
		return s_bad(why, size, "a slot request takes no file");
	if (p->op == S_SLOT) {
		if (p->n == 0)
			return s_bad(why, size, "--slot wants -m MODEL=SIZE for each model");
		if (p->wait_mode != NULL || p->wait_for != 0)
			return s_bad(why, size, "--slot takes no wait: give -w with --commit");
		for (int i = 0; i < p->n; i++)
			if (p->items[i].path == NULL || cli_parse_number(p->items[i].path,
			    &p->sizes[i]) < 0 || p->sizes[i] == 0)
				return s_bad(why, size, "--slot wants -m MODEL=SIZE (bytes, 1 or more), "
				    "not -m %s%s%s", p->items[i].model, p->items[i].path ? "=" : "",
				    p->items[i].path ? p->items[i].path : "");
		return 0;
	}
	if (p->n != 0 || p->targets != NULL || p->wait_for != 0)
		return s_bad(why, size, "%s takes only the upload%s", p->op == S_COMMIT ?
		    "--commit" : "--abort", p->op == S_COMMIT ? ", -t, -w, --trust-hashes and "
		    "--next-slot" :
		    "");
	if (p->op == S_ABORT && p->wait_mode != NULL)
		return s_bad(why, size, "--abort takes only the upload");
	return 0;
}

/*
 * Parses a push's options and operands (argv[0] is the program). In a batch
 * line (batch set) the options of the whole coprocess are refused. 0, or -1
 * with why, a usage error.
 */
static int
s_parse(int argc, char **argv, int batch, struct s_push *p, char *why, size_t size)
{
	enum { OPT_WAIT_FOR = 256, OPT_TRANSFER, OPT_BATCH, OPT_PROGRESS, OPT_SLOT, OPT_COMMIT,
	    OPT_ABORT, OPT_TRUST, OPT_NEXT_SLOT };
	static const struct option opts[] = {
		{ "abort", required_argument, NULL, OPT_ABORT },
		{ "batch", no_argument, NULL, OPT_BATCH },
		{ "commit", required_argument, NULL, OPT_COMMIT },
		{ "endpoint", required_argument, NULL, 'e' },
		CLI_KEY_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ "model", required_argument, NULL, 'm' },
		{ "next-slot", no_argument, NULL, OPT_NEXT_SLOT },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "slot", no_argument, NULL, OPT_SLOT },
		{ "timeout", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "wait", required_argument, NULL, 'w' },
		{ "wait-for", required_argument, NULL, OPT_WAIT_FOR },
		{ "transfer", required_argument, NULL, OPT_TRANSFER },
		{ "trust-hashes", no_argument, NULL, OPT_TRUST },
		{ "workers", required_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 },
	};
	int c, with_files = 0;

	memset(p, 0, sizeof(*p));
	p->timeout_ms = 30000;
	opterr = 0;
	optind = 0;     /* GNU getopt starts afresh: each batch line is a new argv */
	while ((c = getopt_long(argc, argv, ":e:hm:qt:Vw:W:", opts, NULL)) != -1) {
		/* The option as written: before its value when that came as the next word. */
		const char *arg = optarg != NULL && optind >= 2 && argv[optind - 1] == optarg ?
		    argv[optind - 2] : argv[optind - 1];
		if (batch && (c == 'e' || c == 'h' || c == 'V' || c == OPT_BATCH ||
		    c == OPT_TRANSFER || c == 'q' || c == OPT_PROGRESS || c == CLI_OPT_KEY ||
		    c == CLI_OPT_HUB_KEY))
			return s_bad(why, size, "%s is an option of the wsync-push --batch command, "
			    "not of a request", arg);
		switch (c) {
		case 'e': p->endpoint = optarg; break;
		case CLI_OPT_KEY: p->key = optarg; break;
		case CLI_OPT_HUB_KEY: p->hub_key = optarg; break;
		case 'h': s_help(); break;
		case 'q': cli_quiet(); break;
		case 'm': {
			char *eq = strchr(optarg, '=');
			if (p->n == S_MAX_MODELS)
				return s_bad(why, size, "at most %d models in one push", S_MAX_MODELS);
			p->items[p->n] = (wsync_push_item_t){ .model = optarg, .path = NULL };
			if (eq != NULL) {
				*eq = '\0';
				p->items[p->n].path = eq + 1;
				with_files++;
			}
			if (wsync_model_id_check(optarg) < 0)
				return s_bad(why, size, "bad model id \"%s\": use 1 to %d of A-Z a-z "
				    "0-9 . _ - (not starting with '.')", optarg, WSYNC_MAX_MODEL);
			p->models[p->n] = p->items[p->n].model;
			p->n++;
			break;
		}
		case 't':
			if (cli_parse_seconds(optarg, &p->timeout_ms) < 0)
				return s_bad(why, size, "--timeout wants seconds (like 2.5), not \"%s\"",
				    optarg);
			break;
		case 'V': cli_version(); break;
		case 'w':
			if (s_wait_spec(p, optarg, why, size) < 0)
				return -1;
			break;
		case 'W':
			free(p->targets);
			p->targets = cli_split(optarg, &p->ntargets);
			break;
		case OPT_WAIT_FOR:
			if (cli_parse_number(optarg, &p->wait_for) < 0 || p->wait_for == 0)
				return s_bad(why, size, "--wait-for wants a version of 1 or more, not "
				    "\"%s\"", optarg);
			break;
		case OPT_TRANSFER:
			if ((p->transfer = wsync_transfer_parse(optarg)) < 0)
				return s_bad(why, size, "--transfer wants auto, link, copy or socket, "
				    "not \"%s\"", optarg);
			break;
		case OPT_BATCH: p->batch = 1; break;
		case OPT_SLOT:
		case OPT_COMMIT:
		case OPT_ABORT:
			if (!batch)
				return s_bad(why, size, "%s is a request of wsync-push --batch", arg);
			if (p->op != S_PUSH)
				return s_bad(why, size, "one of --slot, --commit and --abort a request");
			p->op = c == OPT_SLOT ? S_SLOT : c == OPT_COMMIT ? S_COMMIT : S_ABORT;
			if (c != OPT_SLOT && (cli_parse_number(optarg, &p->upload) < 0 ||
			    p->upload == 0))
				return s_bad(why, size, "%s wants the upload number a slot answer gave, "
				    "not \"%s\"", arg, optarg);
			break;
		case OPT_TRUST: p->trust = 1; break;
		case OPT_NEXT_SLOT: p->next_slot = 1; break;
		case OPT_PROGRESS: cli_progress_force(); break;
		case ':': return s_bad(why, size, "option '%s' needs a value", arg);
		default:
			if (optopt != 0)
				return s_bad(why, size, "unknown option '-%c'", optopt);
			return s_bad(why, size, "unknown option '%s'", arg);
		}
	}
	argc -= optind;
	argv += optind;
	if (p->op != S_PUSH || p->trust || p->next_slot)
		return s_check_request(p, argc, why, size);
	if (p->batch)
		return p->n == 0 && argc == 0 && p->wait_mode == NULL && p->targets == NULL &&
		    p->wait_for == 0 ? 0 : s_bad(why, size, "--batch takes its pushes on stdin, "
		    "not on the command line (only -e, -t, -q, --progress, --transfer and the "
		    "keys go with it)");
	if (p->n == 0)
		return s_bad(why, size, "no model given (-m MODEL)");
	if (p->wait_for != 0) {
		if (p->n != 1 || with_files || argc != 0)
			return s_bad(why, size, "--wait-for takes one -m MODEL and no file");
		if (p->wait_mode == NULL)
			p->wait_mode = "all";
	} else if (with_files == 0) {
		if (p->n != 1 || argc != 1)
			return s_bad(why, size, argc == 0 ? "no file given (use - for stdin)" :
			    "one file per push; for several models use -m MODEL=FILE");
		p->items[0].path = argv[0];
	} else if (with_files != p->n || argc != 0)
		return s_bad(why, size, "with several models, give each its file as -m MODEL=FILE");
	for (int i = 0; batch && i < p->n; i++)
		if (p->items[i].path != NULL && strcmp(p->items[i].path, "-") == 0)
			return s_bad(why, size, "- (stdin) carries the requests in --batch: give "
			    "a file");
	return 0;
}

/*
 * Commits slot p->upload, waiting as asked; with --next-slot (p->sizes and
 * p->targets are then the slot's), asks at once for a slot like it.
 */
static int
s_commit(wsync_client_t *c, struct s_push *p, char **missing, wsync_err_t *err)
{
	const wsync_wait_t wait = { .mode = p->wait_mode ? wsync_wait_parse(p->wait_mode) :
	    WSYNC_WAIT_ALL,
	    .count = p->wait_count, .ids = (const char *const *)p->wait_ids,
	    .nids = p->nwait_ids };
	const wsync_slot_ask_t next = { .models = p->models, .sizes = p->sizes, .n = p->n,
	    .workers = (const char *const *)p->targets, .nworkers = p->ntargets };
	const wsync_commit_t cm = { .upload = p->upload, .items = p->items, .n = p->n,
	    .trust = p->trust, .wait = p->wait_mode != NULL ? &wait : NULL,
	    .next = p->next_slot ? &next : NULL };

	return wsync_client_commit(c, &cm, p->timeout_ms, missing, err);
}

/*
 * Pushes (or, with --wait-for, takes the version given), prints the versions
 * on out (when not NULL), then waits as asked. -1 with err; for a wait that
 * timed out, *missing (caller frees) lists the workers missing, one a line.
 */
static int
s_run(wsync_client_t *c, struct s_push *p, FILE *out, char **missing, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + p->timeout_ms;
	const wsync_wait_t wait = { .mode = p->wait_mode ? wsync_wait_parse(p->wait_mode) :
	    WSYNC_WAIT_ALL,
	    .count = p->wait_count, .ids = (const char *const *)p->wait_ids,
	    .nids = p->nwait_ids };

	*missing = NULL;
	if (p->wait_for != 0)
		p->items[0].version = p->wait_for;
	else if (p->op == S_COMMIT)
		return s_commit(c, p, missing, err);
	else if (wsync_client_push(c, p->items, p->n, (const char *const *)p->targets,
	    p->ntargets, p->timeout_ms, err) < 0)
		return -1;
	cli_progress_end();
	for (int i = 0; out != NULL && p->wait_for == 0 && i < p->n; i++) {
		if (p->n == 1)
			fprintf(out, "%" PRIu64 "\n", p->items[i].version);
		else
			fprintf(out, "%s %" PRIu64 "\n", p->items[i].model, p->items[i].version);
	}
	if (out != NULL && fflush(out) != 0)
		return wsync_err_set(err, EX_IOERR, "cannot write to stdout");
	for (int i = 0; p->wait_mode != NULL && i < p->n; i++) {
		int64_t left = deadline - wsync_now_ms();
		if (wsync_client_wait(c, p->items[i].model, p->items[i].version, &wait,
		    left > 0 ? (int)left : 0, missing, err) < 0)
			return -1;
	}
	return 0;
}

/* Splits line in place at blanks into argv (argv[0] is the program); returns argc. */
static int
s_words(char *line, char **argv, int max)
{
	int argc = 0;

	argv[argc++] = (char *)"wsync-push";
	for (char *w = strtok(line, " \t\r\n"); w != NULL && argc < max - 1;
	    w = strtok(NULL, " \t\r\n"))
		argv[argc++] = w;
	argv[argc] = NULL;
	return argc;
}

/*
 * The slots a coprocess has open: their models, for the commit's answer and
 * wait, and their sizes and workers, for a next slot like them.
 */
struct s_slots {
	uint64_t upload[WSYNC_SLOTS_OPEN_MAX];
	int n[WSYNC_SLOTS_OPEN_MAX];
	char models[WSYNC_SLOTS_OPEN_MAX][S_MAX_MODELS][WSYNC_MAX_MODEL + 1];
	uint64_t sizes[WSYNC_SLOTS_OPEN_MAX][S_MAX_MODELS];
	char **targets[WSYNC_SLOTS_OPEN_MAX];    /* a cli_split array, or NULL */
	int ntargets[WSYNC_SLOTS_OPEN_MAX];
};

/* Forgets open slot at (committed, aborted or dropped by the hub). */
static void
s_slot_clear(struct s_slots *t, int at)
{
	t->upload[at] = 0;
	free(t->targets[at]);
	t->targets[at] = NULL;
}

/* How many slots are open. */
static int
s_slots_open(const struct s_slots *t)
{
	int n = 0;

	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++)
		n += t->upload[at] != 0;
	return n;
}

/* A copy of the n strings of v and their array, in one block (free frees it). */
static char **
s_strv_dup(char *const *v, int n)
{
	size_t len = (size_t)(n + 1) * sizeof(char *);
	char **out, *at;

	for (int i = 0; i < n; i++)
		len += strlen(v[i]) + 1;
	if ((out = malloc(len)) == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	at = (char *)(out + n + 1);
	for (int i = 0; i < n; i++) {
		size_t k = strlen(v[i]) + 1;
		out[i] = memcpy(at, v[i], k);
		at += k;
	}
	out[n] = NULL;
	return out;
}

/* Answers a slot request: "slot UPLOAD PATH...", remembering its models. */
static int
s_slot(wsync_client_t *c, struct s_slots *t, struct s_push *p, wsync_err_t *err)
{
	char *paths[S_MAX_MODELS] = { NULL };
	uint64_t upload;
	int at = 0;

	while (at < WSYNC_SLOTS_OPEN_MAX && t->upload[at] != 0)
		at++;
	if (at == WSYNC_SLOTS_OPEN_MAX)
		return wsync_err_set(err, EX_USAGE, "%d slots are open already: commit or abort "
		    "one first", WSYNC_SLOTS_OPEN_MAX);
	if (wsync_client_slot(c, &(wsync_slot_ask_t){ .models = p->models, .sizes = p->sizes,
	    .n = p->n, .workers = (const char *const *)p->targets, .nworkers = p->ntargets },
	    p->timeout_ms, &upload, paths, err) < 0)
		return -1;
	t->upload[at] = upload;
	t->n[at] = p->n;
	/* p's names are in the request's line, which the next one overwrites. */
	t->targets[at] = p->targets != NULL ? s_strv_dup(p->targets, p->ntargets) : NULL;
	t->ntargets[at] = p->ntargets;
	printf("slot %" PRIu64, upload);
	for (int i = 0; i < p->n; i++) {
		snprintf(t->models[at][i], sizeof(t->models[at][i]), "%s", p->models[i]);
		t->sizes[at][i] = p->sizes[i];
		printf(" %s", paths[i]);
		free(paths[i]);
	}
	printf("\n");
	return 0;
}

/* The index in t of the open slot p->upload, its models made p's items; -1 with err. */
static int
s_slot_find(struct s_slots *t, struct s_push *p, wsync_err_t *err)
{
	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++) {
		if (t->upload[at] != p->upload)
			continue;
		p->n = t->n[at];
		for (int i = 0; i < p->n; i++) {
			p->items[i] = (wsync_push_item_t){ .model = t->models[at][i] };
			p->models[i] = t->models[at][i];
			p->sizes[i] = t->sizes[at][i];
		}
		/* The slot's own, lent: s_request takes them back before p is freed. */
		p->targets = t->targets[at];
		p->ntargets = t->ntargets[at];
		return at;
	}
	return wsync_err_set(err, EX_NOINPUT, "no open slot %" PRIu64 " (committed, aborted "
	    "or never given)", p->upload);
}

/*
 * Serves one parsed request of the coprocess; its answer is printed on
 * success. A slot stays open until the hub has committed, aborted or
 * forgotten it (65, 66): after another error it can still be aborted.
 */
static int
s_request(wsync_client_t *c, struct s_slots *t, struct s_push *p, char **missing,
    wsync_err_t *err)
{
	int at = -1, rc;

	*missing = NULL;
	if (p->op == S_SLOT)
		return s_slot(c, t, p, err);
	if (p->op != S_PUSH && (at = s_slot_find(t, p, err)) < 0)
		return -1;
	/* A slot ahead as well would leave a push no upload of the 4 the hub allows. */
	if (p->next_slot && s_slots_open(t) == WSYNC_SLOTS_OPEN_MAX)
		p->next_slot = 0;
	if (p->op == S_ABORT)
		rc = wsync_client_abort(c, p->upload, p->timeout_ms, err);
	else
		rc = s_run(c, p, NULL, missing, err);
	if (at >= 0)
		p->targets = NULL;
	/* A commit whose wait timed out is committed all the same. */
	if (at >= 0 && (rc == 0 || err->code == EX_DATAERR || err->code == EX_NOINPUT ||
	    *missing != NULL))
		s_slot_clear(t, at);
	if (rc < 0)
		return -1;
	if (p->op == S_ABORT) {
		printf("ok\n");
		return 0;
	}
	printf("ok");
	for (int i = 0; i < p->n; i++)
		printf(" %s %" PRIu64, p->items[i].model, p->items[i].version);
	printf("\n");
	return 0;
}

/*
 * The coprocess: one request a line on stdin, one answer a line on stdout,
 * "ok MODEL VERSION..." or "error CODE MESSAGE", until end of input.
 */
static int
s_batch(wsync_client_t *c)
{
	char *line = NULL, *argv[4 * S_MAX_MODELS + 16], why[600];
	struct s_slots *slots = calloc(1, sizeof(*slots));
	size_t cap = 0;

	if (slots == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	while (getline(&line, &cap, stdin) >= 0 && !*cli_interrupt_flag()) {
		struct s_push p;
		char *missing = NULL;
		wsync_err_t err;
		int argc = s_words(line, argv, (int)(sizeof(argv) / sizeof(*argv)));

		if (argc == 1)
			continue;
		if (s_parse(argc, argv, 1, &p, why, sizeof(why)) < 0)
			printf("error %d %s\n", EX_USAGE, why);
		else if (s_request(c, slots, &p, &missing, &err) < 0) {
			wsync_err_t ignored;
			printf("error %d %s", err.code ? err.code : EX_SOFTWARE, err.msg);
			for (char *m = missing ? strtok(missing, "\n") : NULL; m != NULL;
			    m = strtok(NULL, "\n"))
				printf("; %s", m);
			printf("\n");
			/* The hub may have gone or restarted: say hello again for the next one. */
			if (err.code == EX_UNAVAILABLE || err.code == EX_PROTOCOL ||
			    (err.code == EX_TEMPFAIL && missing == NULL)) {
				wsync_client_reconnect(c, S_CONNECT_MS, &ignored);
				/* A new connection owns none of the old one's slots. */
				for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++)
					s_slot_clear(slots, at);
			}
		}
		free(missing);
		s_push_free(&p);
		if (*cli_interrupt_flag())
			break;
		if (fflush(stdout) != 0) {
			free(line);
			cli_die(EX_IOERR, "cannot write to stdout");
		}
	}
	free(line);
	/* Slots left open are the hub's to drop (it does after 60 s): say so now instead. */
	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++) {
		wsync_err_t ignored;
		if (slots->upload[at] != 0)
			wsync_client_abort(c, slots->upload[at], 1000, &ignored);
		s_slot_clear(slots, at);
	}
	free(slots);
	/* A signal ends the coprocess as it ends a single push: 128 + its number. */
	cli_exit_if_interrupted();
	return 0;
}

int
main(int argc, char **argv)
{
	struct s_push p;
	wsync_client_t *client;
	wsync_err_t err;
	char why[600], *missing = NULL;

	cli_init("wsync-push");
	if (s_parse(argc, argv, 0, &p, why, sizeof(why)) < 0)
		cli_usage_error("%s", why);
	cli_catch_interrupts();
	client = wsync_client_new(&(wsync_client_opts_t){ .endpoint = p.endpoint,
	    .role = "push", .models = p.models, .nmodels = p.n, .transfer = p.transfer,
	    .key = p.key, .hub_key = p.hub_key, .progress = cli_progress,
	    .stop = cli_interrupt_flag(),
	    .timeout_ms = p.timeout_ms < S_CONNECT_MS ? p.timeout_ms : S_CONNECT_MS }, &err);
	if (client == NULL)
		cli_die_err(&err);
	if (p.batch) {
		s_batch(client);
		wsync_client_destroy(&client);
		return 0;
	}
	if (s_run(client, &p, stdout, &missing, &err) < 0) {
		if (err.code == EX_TEMPFAIL && missing != NULL) {
			cli_warn("%s", err.msg);
			for (char *line = strtok(missing, "\n"); line; line = strtok(NULL, "\n"))
				fprintf(stderr, "  %s\n", line);
			exit(EX_TEMPFAIL);
		}
		cli_die_err(&err);
	}
	s_push_free(&p);
	wsync_client_destroy(&client);
	return 0;
}
