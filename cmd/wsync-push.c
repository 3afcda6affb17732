/* wsync-push - publish weight files as the next version of models; optionally wait. */
#include <getopt.h>
#include <inttypes.h>
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
    "       wsync-push [-e ENDPOINT] [-t SEC] [-w all|N|ID,...] --wait-for VERSION -m MODEL\n";

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
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "Exit status: 0 ok, 64 usage, 65 bad weight file, 66 no input or no such model,\n"
	    "69 hub unavailable, 70 internal error, 74 I/O error, 75 timed out,\n"
	    "76 protocol error, 77 permission denied. See wsync-push(1).\n", s_usage);
	exit(0);
}

/* Waits for version of model per the --wait spec; exits 75 with the missing workers. */
static void
s_wait(wsync_client_t *c, const char *model, uint64_t version, char *spec, int timeout_ms)
{
	const char *mode = "all";
	unsigned count = 0;
	char **ids = NULL, *missing = NULL;
	int nids = 0;
	wsync_err_t err;

	if (strcmp(spec, "all") != 0) {
		if (spec[0] >= '0' && spec[0] <= '9' && strspn(spec, "0123456789") ==
		    strlen(spec)) {
			mode = "count";
			count = (unsigned)cli_number("--wait", spec);
		} else {
			mode = "ids";
			ids = cli_split(spec, &nids);
		}
	}
	if (wsync_client_wait(c, model, version, mode, count, (const char *const *)ids, nids,
	    timeout_ms, &missing, &err) < 0) {
		if (err.code == EX_TEMPFAIL && missing != NULL) {
			cli_warn("%s", err.msg);
			for (char *line = strtok(missing, "\n"); line; line = strtok(NULL, "\n"))
				fprintf(stderr, "  %s\n", line);
			exit(EX_TEMPFAIL);
		}
		cli_die_err(&err);
	}
	free(ids);
	free(missing);
}

int
main(int argc, char **argv)
{
	enum { OPT_WAIT_FOR = 256, OPT_TRANSFER, OPT_PROGRESS };
	static const struct option opts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ "model", required_argument, NULL, 'm' },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "timeout", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "wait", required_argument, NULL, 'w' },
		{ "wait-for", required_argument, NULL, OPT_WAIT_FOR },
		{ "transfer", required_argument, NULL, OPT_TRANSFER },
		{ "workers", required_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 },
	};
	wsync_push_item_t items[S_MAX_MODELS];
	const char *models[S_MAX_MODELS];
	const char *endpoint = NULL;
	char *wait = NULL, *workers = NULL, **targets = NULL;
	int n = 0, ntargets = 0, timeout_ms = 30000, c, with_files = 0;
	int transfer = WSYNC_TRANSFER_AUTO;
	uint64_t wait_for = 0;
	int64_t deadline;
	wsync_client_t *client;
	wsync_err_t err;

	cli_init("wsync-push");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":e:hm:qt:Vw:W:", opts, NULL)) != -1) {
		switch (c) {
		case 'e': endpoint = optarg; break;
		case 'h': s_help(); break;
		case 'm': {
			char *eq = strchr(optarg, '=');
			if (n == S_MAX_MODELS)
				cli_usage_error("at most %d models in one push", S_MAX_MODELS);
			items[n] = (wsync_push_item_t){ .model = optarg, .path = NULL };
			if (eq != NULL) {
				*eq = '\0';
				items[n].path = eq + 1;
				with_files++;
			}
			if (wsync_model_id_check(optarg) < 0)
				cli_usage_error("bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 . _ - "
				    "(not starting with '.')", optarg, WSYNC_MAX_MODEL);
			models[n] = items[n].model;
			n++;
			break;
		}
		case 'q': cli_quiet(); break;
		case 't': timeout_ms = cli_seconds("--timeout", optarg); break;
		case 'V': cli_version(); break;
		case 'w': wait = optarg; break;
		case 'W': workers = optarg; break;
		case OPT_WAIT_FOR:
			wait_for = cli_number("--wait-for", optarg);
			if (wait_for == 0)
				cli_usage_error("--wait-for wants a version of 1 or more");
			break;
		case OPT_TRANSFER: transfer = cli_transfer(optarg); break;
		case OPT_PROGRESS: cli_progress_force(); break;
		default: cli_bad_option(argv, c);
		}
	}
	argc -= optind;
	argv += optind;
	if (n == 0)
		cli_usage_error("no model given (-m MODEL)");
	if (wait_for != 0) {
		if (n != 1 || with_files || argc != 0)
			cli_usage_error("--wait-for takes one -m MODEL and no file");
		if (wait == NULL)
			wait = "all";
	} else if (with_files == 0) {
		if (n != 1 || argc != 1)
			cli_usage_error(argc == 0 ? "no file given (use - for stdin)" :
			    "one file per push; for several models use -m MODEL=FILE");
		items[0].path = argv[0];
	} else if (with_files != n || argc != 0)
		cli_usage_error("with several models, give each its file as -m MODEL=FILE");
	if (workers != NULL)
		targets = cli_split(workers, &ntargets);

	cli_catch_interrupts();
	deadline = wsync_now_ms() + timeout_ms;
	client = wsync_client_new(&(wsync_client_opts_t){ .endpoint = endpoint, .role = "push",
	    .models = models, .nmodels = n, .transfer = transfer, .progress = cli_progress,
	    .timeout_ms = timeout_ms < S_CONNECT_MS ? timeout_ms : S_CONNECT_MS }, &err);
	if (client == NULL)
		cli_die_err(&err);
	if (wait_for != 0) {
		items[0].version = wait_for;
	} else {
		if (wsync_client_push(client, items, n, (const char *const *)targets, ntargets,
		    timeout_ms, &err) < 0)
			cli_die_err(&err);
		cli_progress_end();
		for (int i = 0; i < n; i++) {
			if (n == 1)
				printf("%" PRIu64 "\n", items[i].version);
			else
				printf("%s %" PRIu64 "\n", items[i].model, items[i].version);
		}
		if (fflush(stdout) != 0)
			cli_die(EX_IOERR, "cannot write to stdout");
	}
	for (int i = 0; wait != NULL && i < n; i++) {
		int64_t left = deadline - wsync_now_ms();
		s_wait(client, items[i].model, items[i].version, wait, left > 0 ? (int)left : 0);
	}
	free(targets);
	wsync_client_destroy(&client);
	return 0;
}
