/* wsync-pull - fetch a version of a model, verified, written atomically. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

#define S_CONNECT_MS 5000

static const char s_usage[] =
    "usage: wsync-pull [-e ENDPOINT] [-o FILE|-] [-v VERSION] [--if-newer V]\n"
    "                  [--transfer MODE] [--base FILE|--no-delta] [-t SEC]\n"
    "                  [-q|--progress] [--verify-key FILE]... [--max-age SEC]\n"
    "                  [--format wsync|safetensors] [--shard-size BYTES]\n"
    "                  [--cast PATTERN=DTYPE[:SCALING]]... -m MODEL\n"
    "       wsync-pull [options] [-o DIR] -m MODEL -m MODEL...\n";

static void
s_help(void)
{
	printf("%s\n"
	    "Fetch a version of a model from the hub (the newest by default), verify every\n"
	    "tensor's hash, write it atomically, and print its version number. Several\n"
	    "models are fetched at the heads of one instant, all verified before any is\n"
	    "written, each into DIR/MODEL.wsync; a line \"MODEL VERSION\" each.\n"
	    "\n"
	    "  -e, --endpoint ENDPOINT  the hub (default: $WSYNC_ENDPOINT, else the local hub)\n"
	    "  -m, --model MODEL        the model to fetch (repeatable)\n"
	    "  -o, --output FILE|-      where to write it (default MODEL.wsync; - is stdout,\n"
	    "                           written only once verified, and no number is printed);\n"
	    "                           with several models a directory (default .)\n"
	    "      --format FORMAT      wsync (default) or safetensors: the version as a\n"
	    "                           checkpoint directory FILE.vN (shards, index, small\n"
	    "                           files), FILE a symlink swapped onto it\n"
	    "      --shard-size BYTES   safetensors: tensor bytes per shard (default 2 GiB)\n"
	    CLI_CAST_HELP
	    "                           (the version verified as pushed, then cast; .FILE.wsync\n"
	    "                           beside the output keeps it, the next pull's base)\n"
	    "  -v, --pull-version V     fetch version V instead of the newest\n"
	    "      --if-newer V         exit 1 without fetching unless the newest is above V\n"
	    "      --transfer MODE      auto (default), link (FILE becomes a hard link to the\n"
	    "                           hub's file), copy, or socket; link and copy need the\n"
	    "                           hub's store on this host\n"
	    "      --base FILE          over the socket, fetch the version as a delta from\n"
	    "                           the older version FILE holds (default: FILE of -o,\n"
	    "                           when it holds one)\n"
	    "      --no-delta           over the socket, fetch the version whole\n"
	    "  -t, --timeout SEC        bound on the whole pull (default 30)\n"
	    "      --progress           show the download's progress on stderr even when it\n"
	    "                           is not a terminal or the pull is short\n"
	    "  -q, --quiet              no progress line; only errors on stderr\n"
	    CLI_VERIFY_HELP
	    "                           than SEC\n"
	    CLI_KEY_HELP
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "Exit status: 0 ok, 1 nothing newer, 64 usage, 65 bad data, 66 no such model or\n"
	    "version, 69 hub unavailable, 70 internal error, 74 I/O error, 75 timed out,\n"
	    "76 protocol error, 77 permission denied. See wsync-pull(1).\n", s_usage);
	exit(0);
}

/* --max-age: warns when the signed version just written is older than max_age_s. */
static void
s_check_age(const char *path, const char *model, uint64_t version, int max_age_s)
{
	wsync_applied_t a;
	uint64_t age;

	wsync_applied_read(path, &a);
	if ((age = wsync_applied_age_over(&a, max_age_s)) > 0)
		cli_warn("%s version %" PRIu64 " (seq %" PRIu64 ") was signed %" PRIu64 " s ago, "
		    "more than --max-age %d: is the trainer or the hub stuck?", model, version,
		    a.seq, age, max_age_s);
}

/* Options that name one version or one file do not go with several models. */
static void
s_check_several(const char *out, uint64_t version, int have_if_newer, const char *base)
{
	struct stat st;

	if (version != 0 || have_if_newer || base != NULL)
		cli_usage_error("%s names one model's version: pull several models one by one",
		    version != 0 ? "-v" : have_if_newer ? "--if-newer" : "--base");
	if (out != NULL && strcmp(out, "-") == 0)
		cli_usage_error("several models are written into a directory, not stdout");
	if (out != NULL && (stat(out, &st) < 0 || !S_ISDIR(st.st_mode)))
		cli_die(EX_NOINPUT, "%s: no such directory (with several models, -o names one)",
		    out);
}

/* What a pull of several models writes, and how. */
struct s_several {
	const char **models;
	int n;
	const char *dir;
	int safetensors;
	const wsync_ckpt_out_t *ckpt;
	const wsync_cast_t *cast;
	const wsync_verifykey_t *keys;
	int nkeys, no_delta, max_age_s;
};

/* Pulls several models as one round and prints "MODEL VERSION" for each. */
static void
s_pull_several(wsync_client_t *client, const struct s_several *p, int64_t deadline)
{
	wsync_fetch_t *f = calloc((size_t)p->n, sizeof(*f));
	wsync_file_t **cast = calloc((size_t)p->n, sizeof(*cast));
	wsync_head_t *got = calloc((size_t)p->n, sizeof(*got));
	char **path = calloc((size_t)p->n, sizeof(*path)), **link = calloc((size_t)p->n,
	    sizeof(*link));
	int64_t left;
	wsync_err_t err;

	if (f == NULL || got == NULL || path == NULL || link == NULL || cast == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	for (int i = 0; i < p->n; i++) {
		if (p->safetensors || p->cast->n > 0)
			cli_ckpt_paths(p->dir, p->models[i], &link[i], &path[i]);
		else if (asprintf(&path[i], "%s/%s.wsync", p->dir, p->models[i]) < 0)
			cli_die(EX_SOFTWARE, "out of memory");
		/* A cast .wsync goes to DIR/MODEL.wsync, the version as pushed beside it. */
		if (!p->safetensors && p->cast->n > 0 && (link[i] = realloc(link[i],
		    strlen(link[i]) + 7)) == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
		if (!p->safetensors && p->cast->n > 0)
			strcat(link[i], ".wsync");
		f[i] = (wsync_fetch_t){ .model = p->models[i], .keys = p->keys, .nkeys = p->nkeys,
		    .base = p->no_delta || p->safetensors ? NULL : path[i] };
	}
	left = deadline - wsync_now_ms();
	if (wsync_client_pull_models(client, f, p->n, (const char *const *)path, got,
	    left > 0 ? (int)left : 0, &err) < 0)
		cli_die_err(&err);
	cli_progress_end();
	/* Every cast made before any is written: a refused one leaves every output as it was. */
	for (int i = 0; i < p->n && p->cast->n > 0; i++) {
		wsync_file_t *file = wsync_file_open(path[i], &err);
		if (file == NULL || (cast[i] = wsync_cast_file(file, p->cast, NULL, &err)) == NULL)
			cli_die_err(&err);
		wsync_file_close(&file);
	}
	for (int i = 0; i < p->n; i++) {
		char real[PATH_MAX];
		if (cast[i] != NULL && !p->safetensors && wsync_cast_write(cast[i], link[i], &err) < 0)
			cli_die_err(&err);
		if (cast[i] != NULL && p->safetensors && wsync_cast_publish(cast[i], link[i],
		    got[i].version, p->ckpt, 0, real, sizeof(real), &err) < 0)
			cli_die_err(&err);
		wsync_file_close(&cast[i]);
		if (p->safetensors && p->cast->n == 0 && wsync_ckpt_publish_path(path[i], link[i],
		    got[i].version, p->ckpt, 0, real, sizeof(real), &err) < 0)
			cli_die_err(&err);
		if (p->max_age_s > 0)
			s_check_age(path[i], p->models[i], got[i].version, p->max_age_s);
		printf("%s %" PRIu64 "\n", p->models[i], got[i].version);
		free(path[i]);
		free(link[i]);
	}
	free(f);
	free(got);
	free(path);
	free(link);
	free(cast);
}

int
main(int argc, char **argv)
{
	enum { OPT_IF_NEWER = 256, OPT_TRANSFER, OPT_PROGRESS, OPT_VERIFY_KEY, OPT_MAX_AGE,
	    OPT_FORMAT, OPT_SHARD_SIZE, OPT_BASE, OPT_NO_DELTA, OPT_CAST };
	static const struct option opts[] = {
		{ "base", required_argument, NULL, OPT_BASE },
		{ "cast", required_argument, NULL, OPT_CAST },
		{ "endpoint", required_argument, NULL, 'e' },
		CLI_KEY_OPTIONS,
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "help", no_argument, NULL, 'h' },
		{ "if-newer", required_argument, NULL, OPT_IF_NEWER },
		{ "max-age", required_argument, NULL, OPT_MAX_AGE },
		{ "model", required_argument, NULL, 'm' },
		{ "no-delta", no_argument, NULL, OPT_NO_DELTA },
		{ "output", required_argument, NULL, 'o' },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "pull-version", required_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "shard-size", required_argument, NULL, OPT_SHARD_SIZE },
		{ "timeout", required_argument, NULL, 't' },
		{ "transfer", required_argument, NULL, OPT_TRANSFER },
		{ "verify-key", required_argument, NULL, OPT_VERIFY_KEY },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *endpoint = NULL, *model = NULL, *out = NULL, *key = NULL, *hub_key = NULL;
	const char **models = calloc((size_t)argc, sizeof(*models));
	int nmodels = 0;
	const char *base = NULL;
	char defout[WSYNC_MAX_MODEL + 8];
	uint64_t version = 0, if_newer = 0;
	int have_if_newer = 0, no_delta = 0, timeout_ms = 30000, transfer = WSYNC_TRANSFER_AUTO, c;
	int max_age_s = 0, nkeys;
	const wsync_verifykey_t *keys;
	const wsync_cast_t *cast;
	int safetensors = 0;
	wsync_ckpt_out_t ckpt = { 0 };
	char *link = NULL, *staging = NULL;
	int64_t deadline;
	volatile sig_atomic_t *stop;
	wsync_client_t *client;
	wsync_head_t got;
	wsync_fetched_t fetched;
	wsync_err_t err;

	cli_init("wsync-pull");
	if (models == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":e:hm:o:qt:v:V", opts, NULL)) != -1) {
		switch (c) {
		case 'e': endpoint = optarg; break;
		case CLI_OPT_KEY: key = optarg; break;
		case CLI_OPT_HUB_KEY: hub_key = optarg; break;
		case 'h': s_help(); break;
		case 'm': models[nmodels++] = model = optarg; break;
		case 'o': out = optarg; break;
		case 'q': cli_quiet(); break;
		case 't': timeout_ms = cli_seconds("--timeout", optarg); break;
		case 'v':
			if ((version = cli_number("-v", optarg)) == 0)
				cli_usage_error("-v wants a version of 1 or more");
			break;
		case 'V': cli_version(); break;
		case OPT_IF_NEWER:
			if_newer = cli_number("--if-newer", optarg);
			have_if_newer = 1;
			break;
		case OPT_TRANSFER: transfer = cli_transfer(optarg); break;
		case OPT_PROGRESS: cli_progress_force(); break;
		case OPT_VERIFY_KEY: cli_verify_key(optarg); break;
		case OPT_MAX_AGE: max_age_s = cli_age_seconds("--max-age", optarg); break;
		case OPT_FORMAT: safetensors = cli_format(optarg); break;
		case OPT_SHARD_SIZE:
			if ((ckpt.shard_size = cli_number("--shard-size", optarg)) == 0)
				cli_usage_error("--shard-size wants 1 byte or more");
			break;
		case OPT_BASE: base = optarg; break;
		case OPT_NO_DELTA: no_delta = 1; break;
		case OPT_CAST: cli_cast(optarg); break;
		default: cli_bad_option(argv, c);
		}
	}
	if (optind != argc)
		cli_usage_error("unexpected argument \"%s\"", argv[optind]);
	if (model == NULL)
		cli_usage_error("no model given (-m MODEL)");
	keys = cli_verify_keys(&nkeys);
	if (max_age_s > 0 && nkeys == 0)
		cli_usage_error("--max-age goes with --verify-key: only a signed version has an age");
	for (int i = 0; i < nmodels; i++) {
		if (wsync_model_id_check(models[i]) < 0)
			cli_usage_error("bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 . _ - (not "
			    "starting with '.')", models[i], WSYNC_MAX_MODEL);
		for (int j = 0; j < i; j++)
			if (strcmp(models[i], models[j]) == 0)
				cli_usage_error("model \"%s\" given twice", models[i]);
	}
	if (base != NULL && no_delta)
		cli_usage_error("--base and --no-delta exclude each other");
	if (nmodels > 1)
		s_check_several(out, version, have_if_newer, base);
	if (!safetensors && ckpt.shard_size > 0)
		cli_usage_error("--shard-size needs --format safetensors");
	if (nmodels == 1 && out == NULL) {
		snprintf(defout, sizeof(defout), safetensors ? "%s" : "%s.wsync", model);
		out = defout;
	}
	cast = cli_cast_rules();
	if (nmodels == 1 && (safetensors || cast->n > 0)) {
		if (strcmp(out, "-") == 0)
			cli_usage_error("%s writes a %s, not stdout", safetensors ?
			    "--format safetensors" : "--cast", safetensors ? "directory" : "file");
		cli_ckpt_paths(out, model, &link, &staging);
		out = staging;
	}
	/* The file a pull replaces holds an older version, most often: the delta's base. */
	if (nmodels == 1 && base == NULL && !no_delta && strcmp(out, "-") != 0 && !safetensors)
		base = out;

	stop = cli_catch_signals(0);
	deadline = wsync_now_ms() + timeout_ms;
	client = wsync_client_new(&(wsync_client_opts_t){ .endpoint = endpoint, .role = "pull",
	    .key = key, .hub_key = hub_key,
	    .models = models, .nmodels = nmodels, .transfer = transfer, .progress = cli_progress,
	    .stop = stop,
	    .timeout_ms = timeout_ms < S_CONNECT_MS ? timeout_ms : S_CONNECT_MS }, &err);
	if (client == NULL)
		cli_die_err(&err);
	if (nmodels > 1) {
		s_pull_several(client, &(struct s_several){ .models = models, .n = nmodels,
		    .dir = out != NULL ? out : ".", .safetensors = safetensors, .ckpt = &ckpt,
		    .cast = cast,
		    .keys = keys, .nkeys = nkeys, .no_delta = no_delta, .max_age_s = max_age_s },
		    deadline);
		goto done;
	}
	if (have_if_newer) {
		wsync_head_t head;
		int64_t left = deadline - wsync_now_ms();
		if (wsync_client_heads(client, &(wsync_heads_ask_t){ .models = &model, .n = 1 },
		    &head, NULL, left > 0 ? (int)left : 0, &err) < 0)
			cli_die_err(&err);
		if (head.version == 0)
			cli_die(EX_NOINPUT, "model \"%s\" has no version", model);
		if (head.version <= if_newer) {
			wsync_client_destroy(&client);
			free(models);
			return 1;
		}
	}
	int64_t left = deadline - wsync_now_ms();
	if (wsync_client_pull(client, &(wsync_fetch_t){ .model = model, .version = version,
	    .keys = keys, .nkeys = nkeys, .base = base }, out, &fetched, left > 0 ? (int)left : 0,
	    &err) < 0)
		cli_die_err(&err);
	cli_progress_end();
	got = fetched.head;
	if (fetched.delta_note[0] != '\0') {
		char line[WSYNC_MAX_REASON + 100];
		snprintf(line, sizeof(line), "%s version %" PRIu64 " fetched whole: %s", model,
		    got.version, fetched.delta_note);
		cli_log_msg(NULL, line);
	}
	char real[PATH_MAX];
	if (cast->n > 0 && wsync_cast_output_path(staging, cast, link, safetensors, got.version,
	    &ckpt, 0, real, sizeof(real), &err) < 0)
		cli_die_err(&err);
	if (cast->n == 0 && safetensors && wsync_ckpt_publish_path(staging, link, got.version,
	    &ckpt, 0, real, sizeof(real), &err) < 0)
		cli_die_err(&err);
	if (max_age_s > 0 && strcmp(out, "-") != 0)
		s_check_age(out, model, got.version, max_age_s);
	if (strcmp(out, "-") != 0)
		printf("%" PRIu64 "\n", got.version);
done:
	wsync_client_destroy(&client);
	free(models);
	free(link);
	free(staging);
	if (fflush(stdout) != 0)
		cli_die(EX_IOERR, "cannot write to stdout");
	return 0;
}
