/* wsync-serve - the hub: keeps numbered versions of models, announces them, serves them. */
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define S_MAX_ENDPOINTS 16
#define S_MAX_LISTS 64

static const char s_usage[] =
    "usage: wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--recycle N] [--log-format text|json]\n"
    "       wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--recycle N] [--log-format text|json]\n"
    "           --secret-key FILE [--allow-push DIR|FILE]... [--allow-pull DIR|FILE]...\n"
    "       wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--log-format text|json]\n"
    "           --upstream ENDPOINT... [--model MODEL[,MODEL...]] [--key FILE] [--hub-key FILE]\n"
    "           [--advertise ENDPOINT]\n";

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
	    "      --recycle N          keep up to N retired version files to be written\n"
	    "                           again by pushes from this host (default 0: none);\n"
	    "                           readers must lease what they hold open (wsync(7))\n"
	    "      --log-format FORMAT  log lines as text (time=... event=... key=value)\n"
	    "                           or json (one object per line)\n"
	    "      --secret-key FILE    the hub's secret key (wsync-keygen): CURVE on every\n"
	    "                           socket, only clients on the allow lists get in\n"
	    "      --allow-push DIR|FILE\n"
	    "                           public keys that may push and pull: a key file or a\n"
	    "                           directory of them; may be repeated\n"
	    "      --allow-pull DIR|FILE\n"
	    "                           public keys that may only pull and watch\n"
	    "      --insecure           listen on non-loopback tcp without keys (warns)\n"
	    "      --upstream ENDPOINT  be a relay: mirror the versions of the hub at ENDPOINT,\n"
	    "                           keeping its numbers; repeated: the next one is used\n"
	    "                           when one is unreachable (failover)\n"
	    "      --model MODEL,...    mirror only these models (default: all); pushes of a\n"
	    "                           mirrored model here are refused (77)\n"
	    "      --key FILE           the relay's secret key for its upstream\n"
	    "      --hub-key FILE       the upstream's public key\n"
	    "      --advertise ENDPOINT where other relays reach this one, told to the\n"
	    "                           upstream, which places relays in a chain (default:\n"
	    "                           the first -e naming a host, else an ipc one)\n"
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "SIGTERM or SIGINT stops the hub; SIGHUP rereads the allow lists. Exit status:\n"
	    "0 stopped, 64 usage, 65 bad key file, 66 key file missing, 69 cannot listen,\n"
	    "70 internal error, 74 store error, 77 permission denied. See wsync-serve(1).\n",
	    s_usage);
	exit(0);
}

/* A count option's value, from min to max; what wants says it counts. */
static unsigned
s_count(const char *opt, const char *arg, unsigned long min, unsigned long max,
    const char *wants)
{
	char *end;
	unsigned long n;

	n = strtoul(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || n < min || n > max)
		cli_usage_error("%s wants %s, not \"%s\"", opt, wants, arg);
	return (unsigned)n;
}

/*
 * The key options together, refused here in their own words (wsync_hub_new
 * refuses the same in the words of its options structure).
 */
static void
s_check_keys(const wsync_hub_opts_t *o)
{
	if (o->secret_key == NULL && o->nallow_push + o->nallow_pull > 0)
		cli_die(EX_USAGE, "--allow-push and --allow-pull need --secret-key (the hub's own "
		    "key)");
	if (o->secret_key != NULL && o->nallow_push + o->nallow_pull == 0)
		cli_die(EX_USAGE, "--secret-key without --allow-push or --allow-pull would let no "
		    "client in");
	for (int i = 0; i < o->nendpoints && o->secret_key == NULL && !o->insecure; i++)
		if (!wsync_endpoint_local(o->endpoints[i]))
			cli_die(EX_USAGE, "%s is reachable from other hosts: give --secret-key and "
			    "--allow-push/--allow-pull, or --insecure to serve it unauthenticated and "
			    "unencrypted", o->endpoints[i]);
}

int
main(int argc, char **argv)
{
	enum { OPT_KEEP = 256, OPT_STORE, OPT_LOG_FORMAT, OPT_SECRET_KEY, OPT_ALLOW_PUSH,
	    OPT_ALLOW_PULL, OPT_INSECURE, OPT_RECYCLE, OPT_UPSTREAM, OPT_MODEL, OPT_ADVERTISE };
	static const struct option opts[] = {
		{ "advertise", required_argument, NULL, OPT_ADVERTISE },
		{ "allow-pull", required_argument, NULL, OPT_ALLOW_PULL },
		{ "allow-push", required_argument, NULL, OPT_ALLOW_PUSH },
		{ "endpoint", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		CLI_KEY_OPTIONS,
		{ "insecure", no_argument, NULL, OPT_INSECURE },
		{ "keep", required_argument, NULL, OPT_KEEP },
		{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
		{ "model", required_argument, NULL, OPT_MODEL },
		{ "recycle", required_argument, NULL, OPT_RECYCLE },
		{ "secret-key", required_argument, NULL, OPT_SECRET_KEY },
		{ "store", required_argument, NULL, OPT_STORE },
		{ "upstream", required_argument, NULL, OPT_UPSTREAM },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *endpoints[S_MAX_ENDPOINTS], *allow_push[S_MAX_LISTS], *allow_pull[S_MAX_LISTS];
	const char *upstreams[S_MAX_ENDPOINTS];
	char **models = NULL;
	char fallback[512];
	wsync_hub_opts_t ho = { .keep = 3, .log = cli_log_kv, .allow_push = allow_push,
	    .allow_pull = allow_pull, .reload = cli_reload_flag() };
	volatile sig_atomic_t *stop;
	wsync_hub_t *hub;
	wsync_err_t err;
	int c;

	cli_init("wsync-serve");
	/*
	 * Chunks (4 MiB) in their own mappings, given back once freed: with
	 * glibc's moving threshold they would come from the heap after the first,
	 * and a hub that took two uploads at once would keep their queue's pages
	 * for good.
	 */
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
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
		case OPT_KEEP:
			ho.keep = s_count("--keep", optarg, 1, UINT_MAX, "a number of versions, at "
			    "least 1");
			break;
		case OPT_RECYCLE:
			ho.recycle = s_count("--recycle", optarg, 0, 64, "a number of files from 0 "
			    "to 64");
			break;
		case OPT_STORE: ho.store = optarg; break;
		case OPT_LOG_FORMAT: cli_log_format(optarg); break;
		case OPT_SECRET_KEY: ho.secret_key = optarg; break;
		case OPT_INSECURE: ho.insecure = 1; break;
		case OPT_UPSTREAM:
			if (ho.nupstreams == S_MAX_ENDPOINTS)
				cli_usage_error("at most %d upstreams", S_MAX_ENDPOINTS);
			upstreams[ho.nupstreams++] = optarg;
			break;
		case OPT_ADVERTISE: ho.advertise = optarg; break;
		case OPT_MODEL:
			free(models);
			models = cli_split(optarg, &ho.nupstream_models);
			break;
		case CLI_OPT_KEY: ho.upstream_key = optarg; break;
		case CLI_OPT_HUB_KEY: ho.upstream_hub_key = optarg; break;
		case OPT_ALLOW_PUSH:
		case OPT_ALLOW_PULL:
			if (ho.nallow_push + ho.nallow_pull == S_MAX_LISTS)
				cli_usage_error("at most %d allow lists", S_MAX_LISTS);
			if (c == OPT_ALLOW_PUSH)
				allow_push[ho.nallow_push++] = optarg;
			else
				allow_pull[ho.nallow_pull++] = optarg;
			break;
		default: cli_bad_option(argv, c);
		}
	}
	if (optind != argc)
		cli_usage_error("unexpected argument \"%s\"", argv[optind]);
	if (ho.nupstreams == 0 && (models != NULL || ho.upstream_key || ho.upstream_hub_key ||
	    ho.advertise))
		cli_usage_error("--model, --key, --hub-key and --advertise are for a relay "
		    "(--upstream)");
	for (int i = 0; i < ho.nupstream_models; i++)
		if (wsync_model_id_check(models[i]) < 0)
			cli_usage_error("bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 . _ - (not "
			    "starting with '.')", models[i], WSYNC_MAX_MODEL);
	ho.upstreams = upstreams;
	ho.upstream_models = (const char *const *)models;
	if (ho.nendpoints == 0) {
		if (wsync_endpoint_resolve(NULL, fallback, sizeof(fallback), &err) < 0)
			cli_die_err(&err);
		endpoints[ho.nendpoints++] = fallback;
	}
	ho.endpoints = endpoints;

	s_check_keys(&ho);
	stop = cli_catch_signals(CLI_SIGNAL_HUP | CLI_SIGNAL_PIPE_IGNORE);
	if ((hub = wsync_hub_new(&ho, &err)) == NULL)
		cli_die_err(&err);
	if (wsync_hub_run(hub, stop, &err) < 0) {
		wsync_hub_destroy(&hub);
		cli_die_err(&err);
	}
	wsync_hub_destroy(&hub);
	free(models);
	return 0;
}
