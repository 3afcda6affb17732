/* wsync-serve - the hub: keeps numbered versions of models, announces them, serves them. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define S_MAX_ENDPOINTS 16

static const char s_usage[] =
    "usage: wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--log-format text|json]\n";

static volatile int s_stop;

static void
s_help(void)
{
	printf("%s\n"
	    "Run a hub: take pushed versions of models, keep them in a store, announce\n"
	    "them to watchers and serve them. Log lines go to stderr.\n"
	    "\n"
	    "  -e, --endpoint ENDPOINT  listen on tcp://HOST:PORT or ipc://PATH; may be\n"
	    "                           repeated (default: $WSYNC_ENDPOINT, else\n"
	    "                           ipc://RUNDIR/hub)\n"
	    "      --store DIR          keep versions in DIR (default: RUNDIR/store)\n"
	    "      --keep N             versions kept per model (default 3)\n"
	    "      --log-format FORMAT  log lines as text (time=... event=... key=value)\n"
	    "                           or json (one object per line)\n"
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "SIGTERM or SIGINT stops the hub. Exit status: 0 stopped, 64 usage,\n"
	    "69 cannot listen, 70 internal error, 74 store error, 77 permission denied.\n"
	    "See wsync-serve(1).\n", s_usage);
	exit(0);
}

static void
s_on_signal(int sig)
{
	(void)sig;
	s_stop = 1;
}

static unsigned
s_keep(const char *arg)
{
	char *end;
	unsigned long n;

	n = strtoul(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || n < 1 || n > UINT_MAX)
		cli_usage_error("--keep wants a number of versions, at least 1, not \"%s\"", arg);
	return (unsigned)n;
}

int
main(int argc, char **argv)
{
	enum { OPT_KEEP = 256, OPT_STORE, OPT_LOG_FORMAT };
	static const struct option opts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ "keep", required_argument, NULL, OPT_KEEP },
		{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
		{ "store", required_argument, NULL, OPT_STORE },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *endpoints[S_MAX_ENDPOINTS];
	char fallback[512];
	wsync_hub_opts_t ho = { .keep = 3, .log = cli_log_kv };
	struct sigaction sa;
	wsync_hub_t *hub;
	wsync_err_t err;
	int c;

	cli_init("wsync-serve");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":e:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			if (ho.nendpoints == S_MAX_ENDPOINTS)
				cli_usage_error("at most %d endpoints", S_MAX_ENDPOINTS);
			endpoints[ho.nendpoints++] = optarg;
			break;
		case 'h': s_help(); break;
		case 'V': cli_version(); break;
		case OPT_KEEP: ho.keep = s_keep(optarg); break;
		case OPT_STORE: ho.store = optarg; break;
		case OPT_LOG_FORMAT: cli_log_format(optarg); break;
		default: cli_bad_option(argv, c);
		}
	}
	if (optind != argc)
		cli_usage_error("unexpected argument \"%s\"", argv[optind]);
	if (ho.nendpoints == 0) {
		if (wsync_endpoint_resolve(NULL, fallback, sizeof(fallback), &err) < 0)
			cli_die_err(&err);
		endpoints[ho.nendpoints++] = fallback;
	}
	ho.endpoints = endpoints;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = s_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);

	if ((hub = wsync_hub_new(&ho, &err)) == NULL)
		cli_die_err(&err);
	if (wsync_hub_run(hub, &s_stop, &err) < 0) {
		wsync_hub_destroy(&hub);
		cli_die_err(&err);
	}
	wsync_hub_destroy(&hub);
	return 0;
}
