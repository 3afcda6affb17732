/* wsync-watch - follow a hub: initial weights at once, then every new version. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define S_MAX_ENDPOINTS 16

static const char s_usage[] =
    "usage: wsync-watch [-e ENDPOINT]... [--id ID] [-x CMD] [--exec-timeout SEC] [--once]\n"
    "                   [--ack stdin] [--ack-timeout SEC]\n"
    "                   [--max-lag N] [--keep N] [--recycle] [--transfer MODE] [--no-delta]\n"
    "                   [-t SEC] [-q]\n"
    "                   [--log-format text|json] [--verify-key FILE]... [--max-age SEC]\n"
    "                   [--format wsync|safetensors]\n"
    "                   [--shard-size BYTES] [--select PATTERN]... [--select-from FILE]\n"
    "                   [--cast PATTERN=DTYPE[:SCALING]]...\n"
    "                   -m MODEL[,MODEL...] -o PATH|DIR\n";


static void
s_help(void)
{
	printf("%s\n"
	    "Stay connected to a hub: write the current version of each model at once, then\n"
	    "every newer one (skipping to the newest when behind), each atomically; run the\n"
	    "hook; tell the hub it was applied; print \"MODEL VERSION PATH\" per update.\n"
	    "\n"
	    "  -e, --endpoint ENDPOINT  the hub (default: $WSYNC_ENDPOINT, else the local hub);\n"
	    "                           repeated: hubs of one tree, the next one used when\n"
	    "                           one is unreachable or lost (failover), the first\n"
	    "                           again once it is back\n"
	    "  -m, --model MODEL,...    the models to follow (applied together when pushed\n"
	    "                           together)\n"
	    "  -o, --output PATH|DIR    the file (one model) or directory (DIR/MODEL.wsync)\n"
	    "      --format FORMAT      wsync (default) or safetensors: each version a checkpoint\n"
	    "                           directory PATH.vN (shards, index, small files), PATH a\n"
	    "                           symlink swapped onto it (DIR/MODEL for a directory)\n"
	    "      --shard-size BYTES   safetensors: tensor bytes per shard (default 2 GiB)\n"
	    "      --select PATTERN     safetensors: only the tensors whose names match this\n"
	    "                           glob (repeatable)\n"
	    "      --select-from FILE   safetensors: the patterns of FILE, one a line\n"
	    CLI_CAST_HELP
	    "                           (each version received and verified as pushed, then\n"
	    "                           cast; .MODEL.wsync beside the output keeps it)\n"
	    "      --id ID              this worker's id (default HOST:PID)\n"
	    "  -x, --exec CMD           run CMD with sh after each update, with WSYNC_MODEL,\n"
	    "                           WSYNC_VERSION, WSYNC_PATH, WSYNC_WORKER set; a non-zero\n"
	    "                           exit is reported to the hub as a failure, not applied\n"
	    "      --exec-timeout SEC   stop a hook that runs longer (SIGTERM, SIGKILL 5 s\n"
	    "                           later) and report it failed (default: no limit)\n"
	    "      --ack stdin          print each update, then acknowledge it only when a line\n"
	    "                           on stdin answers \"ok\" (\"fail REASON\": report a failure)\n"
	    "      --ack-timeout SEC    report an update failed when stdin has not answered\n"
	    "                           within SEC (default 60)\n"
	    "      --once               exit 0 after the first update of every model\n"
	    "      --max-lag N          exit 75 when a model is more than N versions behind\n"
	    "      --keep N             hold leases on the N versions before the current one,\n"
	    "                           so a hub that recycles leaves them to their readers;\n"
	    "                           safetensors: keep N older directories (and any leased)\n"
	    "      --recycle            write a version sent over the socket into a replaced\n"
	    "                           output no reader leases (its readers must take leases)\n"
	    "      --transfer MODE      auto (default), link (each file a hard link to the\n"
	    "                           hub's, read-only), copy, or socket; link and copy need\n"
	    "                           the hub's store on this host\n"
	    "      --no-delta           over the socket, fetch every version whole, never as\n"
	    "                           a delta from the version the output holds\n"
	    "  -t, --timeout SEC        exit 69 if no hub answers within SEC (default: wait);\n"
	    "                           with --once, exit within SEC: 75 when nothing was\n"
	    "                           applied by then\n"
	    "  -q, --quiet              no messages on stderr but errors and failed hooks\n"
	    "      --log-format FORMAT  messages on stderr as text (PROG: ...) or json\n"
	    CLI_VERIFY_HELP
	    "                           than SEC (once a version)\n"
	    CLI_KEY_HELP
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "Exit status: 0 stopped (SIGTERM, SIGINT, --once), 1 --once: the hook or reader\n"
	    "refused the version, 64 usage, 65 --once: bad data from the hub, 66 no output\n"
	    "directory, 69 hub unavailable, 70 internal error, 74 I/O error (--once: the\n"
	    "version cannot be written), 75 too far behind, or --once -t: nothing applied\n"
	    "in time, 76 protocol error, 77 permission denied.\n"
	    "See wsync-watch(1).\n", s_usage);
	exit(0);
}

static volatile sig_atomic_t *s_stop;    /* cli_catch_signals's flag */

struct s_hook {
	const char *cmd;
	const char *worker;
	int timeout_ms;         /* 0: the hook may run as long as it likes */
	int ack_stdin;          /* --ack stdin: the reader on stdin answers each update */
	int ack_timeout_ms;
	unsigned owed;          /* answers still due for updates that timed out */
	char in[WSYNC_MAX_REASON + 64];  /* stdin read but not used yet */
	size_t nin;
	/* --format safetensors: each model's symlink, and how its directories are written. */
	char **links;
	const char *const *models;
	int nmodels;
	wsync_ckpt_out_t out;
	unsigned keep;
	/* --cast: the rules, and with --format wsync each model's cast output. */
	const wsync_cast_t *cast;
	char **outs;
};

/* Bounds on --ack-timeout: its default, and the longest. */
#define S_ACK_TIMEOUT_MS 60000

/* How long a hook that was sent SIGTERM has before SIGKILL. */
#define S_KILL_GRACE_MS 5000

/*
 * Runs the hook for u and waits for it, beating for the worker meanwhile and
 * passing a SIGTERM or SIGINT of ours on to it. 0 when it exited 0.
 */
static int
s_run_hook(const struct s_hook *h, wsync_update_t *u, const char *path)
{
	char v[32];
	int status, pidfd, forwarded = 0, timed_out = 0;
	int64_t start, last_beat;
	pid_t pid;

	snprintf(v, sizeof(v), "%" PRIu64, u->version);
	fflush(stdout);
	if ((pid = fork()) < 0) {
		snprintf(u->reason, sizeof(u->reason), "cannot run the hook: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		/* The hook's own output must not mix with our lines on stdout. */
		dup2(STDERR_FILENO, STDOUT_FILENO);
		signal(SIGPIPE, SIG_DFL);
		setenv("WSYNC_MODEL", u->model, 1);
		setenv("WSYNC_VERSION", v, 1);
		setenv("WSYNC_PATH", path, 1);
		setenv("WSYNC_WORKER", h->worker, 1);
		execl("/bin/sh", "sh", "-c", h->cmd, (char *)NULL);
		_exit(127);
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	start = last_beat = wsync_now_ms();
	for (;;) {
		struct pollfd p = { pidfd, POLLIN, 0 };
		pid_t done = waitpid(pid, &status, WNOHANG);
		int64_t ran = wsync_now_ms() - start;
		if (done == pid)
			break;
		if (h->timeout_ms > 0 && ran >= h->timeout_ms && !timed_out++)
			kill(pid, SIGTERM);
		if (timed_out && ran >= h->timeout_ms + S_KILL_GRACE_MS)
			kill(pid, SIGKILL);
		if (done < 0 && errno != EINTR) {
			snprintf(u->reason, sizeof(u->reason), "cannot wait for the hook: %s",
			    strerror(errno));
			if (pidfd >= 0)
				close(pidfd);
			return -1;
		}
		if (*s_stop && !forwarded++)
			kill(pid, SIGTERM);
		/* Without a pidfd (old kernels), poll(NULL, 0, ms) just paces the beat. */
		if (poll(pidfd >= 0 ? &p : NULL, pidfd >= 0 ? 1 : 0,
		    h->timeout_ms > 0 && u->beat_ms > 100 ? 100 : u->beat_ms) == 0 &&
		    wsync_now_ms() - last_beat >= u->beat_ms) {
			u->beat(u->beat_ctx);
			last_beat = wsync_now_ms();
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	if (timed_out)
		snprintf(u->reason, sizeof(u->reason), "hook timed out after %.1f s",
		    h->timeout_ms / 1000.0);
	else if (WIFSIGNALED(status))
		snprintf(u->reason, sizeof(u->reason), "hook killed by signal %d",
		    WTERMSIG(status));
	else if (WEXITSTATUS(status) != 0)
		snprintf(u->reason, sizeof(u->reason), "hook exited with status %d",
		    WEXITSTATUS(status));
	else
		return 0;
	cli_warn("%s version %" PRIu64 ": %s", u->model, u->version, u->reason);
	return -1;
}

/*
 * Takes the next line of stdin into line (without its newline), waiting until
 * deadline (monotonic ms) and beating for the worker meanwhile. 1 with a line,
 * 0 at the deadline or on a signal, -1 at end of input or on an error. A line
 * longer than the buffer is cut, the rest of it skipped.
 */
static int
s_read_line(struct s_hook *h, wsync_update_t *u, int64_t deadline, char *line, size_t len)
{
	int64_t last_beat = wsync_now_ms();
	int skipping = 0;

	for (;;) {
		char *nl = memchr(h->in, '\n', h->nin);
		struct pollfd p = { STDIN_FILENO, POLLIN, 0 };
		int64_t now = wsync_now_ms(), wait;
		ssize_t n;

		if (nl != NULL || h->nin == sizeof(h->in)) {
			size_t used = nl != NULL ? (size_t)(nl - h->in) + 1 : h->nin;
			size_t keep = used - (nl != NULL) < len - 1 ? used - (nl != NULL) : len - 1;
			if (!skipping) {
				memcpy(line, h->in, keep);
				line[keep] = '\0';
			}
			memmove(h->in, h->in + used, h->nin - used);
			h->nin -= used;
			if (nl != NULL)
				return 1;
			skipping = 1;
			continue;
		}
		if (*s_stop || now >= deadline)
			return 0;
		if (now - last_beat >= u->beat_ms) {
			u->beat(u->beat_ctx);
			last_beat = now;
		}
		wait = deadline - now < u->beat_ms ? deadline - now : u->beat_ms;
		if (poll(&p, 1, (int)wait) <= 0)
			continue;
		n = read(STDIN_FILENO, h->in + h->nin, sizeof(h->in) - h->nin);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		h->nin += (size_t)n;
	}
}

/*
 * --ack stdin: the update is announced on stdout and applied when the reader
 * answers "ok"; "fail REASON", any other line, silence until the bound, or
 * the end of stdin report it failed. The answer to an update that timed out
 * is still owed, and skipped when it comes.
 */
static int
s_ask_reader(struct s_hook *h, wsync_update_t *u)
{
	char line[WSYNC_MAX_REASON + 64];
	int64_t deadline = wsync_now_ms() + h->ack_timeout_ms;
	int got;

	for (;;) {
		got = s_read_line(h, u, deadline, line, sizeof(line));
		if (got != 1 || h->owed == 0)
			break;
		h->owed--;
	}
	if (got == 1 && strcmp(line, "ok") == 0)
		return 0;
	if (got == 1 && strncmp(line, "fail ", 5) == 0 && line[5] != '\0')
		snprintf(u->reason, sizeof(u->reason), "%.*s", (int)sizeof(u->reason) - 1,
		    line + 5);
	else if (got == 1)
		snprintf(u->reason, sizeof(u->reason), "the reader answered \"%.400s\", not ok or "
		    "fail REASON", line);
	else if (got < 0) {
		snprintf(u->reason, sizeof(u->reason), "the reader closed stdin");
		*s_stop = SIGTERM;      /* the reader is gone: stop as on SIGTERM */
	} else if (*s_stop)
		snprintf(u->reason, sizeof(u->reason), "stopped before the reader answered");
	else {
		snprintf(u->reason, sizeof(u->reason), "the reader did not answer within %.1f s",
		    h->ack_timeout_ms / 1000.0);
		h->owed++;
	}
	return -1;
}

/* Runs the hook when there is one, then prints the update; with --ack stdin, asks. */
static int
s_apply(void *arg, wsync_update_t *u)
{
	struct s_hook *h = arg;
	char real[PATH_MAX];
	const char *path = u->path;

	if (h->links != NULL || h->outs != NULL) {
		wsync_err_t err;
		int i = 0, rc;
		while (i < h->nmodels - 1 && strcmp(h->models[i], u->model) != 0)
			i++;
		if (h->cast->n > 0)
			rc = wsync_cast_output_path(u->path, h->cast, h->outs ? h->outs[i] :
			    h->links[i], h->outs == NULL, u->version, &h->out, h->keep, real,
			    sizeof(real), &err);
		else
			rc = wsync_ckpt_publish_path(u->path, h->links[i], u->version, &h->out,
			    h->keep, real, sizeof(real), &err);
		if (rc < 0) {
			snprintf(u->reason, sizeof(u->reason), "%.500s", err.msg);
			cli_warn("%s version %" PRIu64 ": %s", u->model, u->version, err.msg);
			return -1;
		}
		path = real;
	}
	if (h->cmd != NULL && s_run_hook(h, u, path) < 0)
		return -1;
	printf("%s %" PRIu64 " %s\n", u->model, u->version, path);
	if (fflush(stdout) != 0)
		cli_die(EX_IOERR, "cannot write to stdout");
	return h->ack_stdin ? s_ask_reader(h, u) : 0;
}

/*
 * A watcher whose output cannot be written would look alive with nothing
 * applied: its directory must exist and take files from the start.
 */
static void
s_check_output_dir(const char *out)
{
	const char *slash = strrchr(out, '/');
	char dir[PATH_MAX];
	struct stat st;

	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else
		snprintf(dir, sizeof(dir), "%.*s", slash == out ? 1 : (int)(slash - out), out);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		cli_die(EX_NOINPUT, "%s: no such directory for the output %s", dir, out);
	if (access(dir, W_OK) < 0)
		cli_die(EX_IOERR, "%s: cannot write the output %s there: %s", dir, out,
		    strerror(errno));
}

int
main(int argc, char **argv)
{
	enum {
		OPT_ID = 256, OPT_ONCE, OPT_MAX_LAG, OPT_KEEP, OPT_RECYCLE, OPT_EXEC_TIMEOUT,
		OPT_TRANSFER, OPT_LOG_FORMAT, OPT_ACK, OPT_ACK_TIMEOUT, OPT_VERIFY_KEY, OPT_MAX_AGE,
		OPT_FORMAT, OPT_SHARD_SIZE, OPT_SELECT, OPT_SELECT_FROM, OPT_NO_DELTA, OPT_CAST
	};
	static const struct option opts[] = {
		{ "ack", required_argument, NULL, OPT_ACK },
		{ "ack-timeout", required_argument, NULL, OPT_ACK_TIMEOUT },
		{ "cast", required_argument, NULL, OPT_CAST },
		{ "endpoint", required_argument, NULL, 'e' },
		CLI_KEY_OPTIONS,
		{ "exec", required_argument, NULL, 'x' },
		{ "exec-timeout", required_argument, NULL, OPT_EXEC_TIMEOUT },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "help", no_argument, NULL, 'h' },
		{ "id", required_argument, NULL, OPT_ID },
		{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
		{ "max-age", required_argument, NULL, OPT_MAX_AGE },
		{ "max-lag", required_argument, NULL, OPT_MAX_LAG },
		{ "keep", required_argument, NULL, OPT_KEEP },
		{ "model", required_argument, NULL, 'm' },
		{ "no-delta", no_argument, NULL, OPT_NO_DELTA },
		{ "once", no_argument, NULL, OPT_ONCE },
		{ "transfer", required_argument, NULL, OPT_TRANSFER },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "recycle", no_argument, NULL, OPT_RECYCLE },
		{ "select", required_argument, NULL, OPT_SELECT },
		{ "select-from", required_argument, NULL, OPT_SELECT_FROM },
		{ "shard-size", required_argument, NULL, OPT_SHARD_SIZE },
		{ "timeout", required_argument, NULL, 't' },
		{ "verify-key", required_argument, NULL, OPT_VERIFY_KEY },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	wsync_watch_opts_t w = { .apply = s_apply, .log = cli_log_msg };
	struct s_hook hook = { .ack_timeout_ms = S_ACK_TIMEOUT_MS };
	char worker[WSYNC_MAX_ID + 1], host[100] = "localhost", **models = NULL, **paths;
	const char *out = NULL;
	struct stat st;
	char **select = NULL;
	int nmodels = 0, nendpoints = 0, c, is_dir, safetensors = 0, nselect = 0;
	const char *endpoints[S_MAX_ENDPOINTS];
	wsync_err_t err;

	cli_init("wsync-watch");
	gethostname(host, sizeof(host) - 1);
	snprintf(worker, sizeof(worker), "%s:%ld", host, (long)getpid());
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":e:hm:o:qt:Vx:", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			if (nendpoints == S_MAX_ENDPOINTS)
				cli_usage_error("at most %d endpoints", S_MAX_ENDPOINTS);
			endpoints[nendpoints++] = optarg;
			break;
		case CLI_OPT_KEY: w.key = optarg; break;
		case CLI_OPT_HUB_KEY: w.hub_key = optarg; break;
		case 'h': s_help(); break;
		case 'm': models = cli_split(optarg, &nmodels); break;
		case 'o': out = optarg; break;
		case 'q': cli_quiet(); break;
		case 't': w.connect_timeout_ms = cli_seconds("--timeout", optarg); break;
		case 'V': cli_version(); break;
		case 'x': hook.cmd = optarg; break;
		case OPT_ID: snprintf(worker, sizeof(worker), "%s", optarg); break;
		case OPT_LOG_FORMAT: cli_log_format(optarg); break;
		case OPT_ONCE: w.once = 1; break;
		case OPT_NO_DELTA: w.no_delta = 1; break;
		case OPT_MAX_LAG: w.max_lag = cli_number("--max-lag", optarg); break;
		case OPT_KEEP: {
			uint64_t keep = cli_number("--keep", optarg);
			if (keep > 16)
				cli_usage_error("--keep wants 0 to 16 versions, not \"%s\"", optarg);
			w.keep = (unsigned)keep;
			break;
		}
		case OPT_RECYCLE: w.recycle = 1; break;
		case OPT_TRANSFER: w.transfer = cli_transfer(optarg); break;
		case OPT_ACK:
			if (strcmp(optarg, "stdin") != 0)
				cli_usage_error("--ack wants stdin, not \"%s\"", optarg);
			hook.ack_stdin = 1;
			break;
		case OPT_ACK_TIMEOUT:
			hook.ack_timeout_ms = cli_seconds("--ack-timeout", optarg);
			break;
		case OPT_VERIFY_KEY: cli_verify_key(optarg); break;
		case OPT_MAX_AGE: w.max_age_s = cli_age_seconds("--max-age", optarg); break;
		case OPT_FORMAT: safetensors = cli_format(optarg); break;
		case OPT_SHARD_SIZE:
			if ((hook.out.shard_size = cli_number("--shard-size", optarg)) == 0)
				cli_usage_error("--shard-size wants 1 byte or more");
			break;
		case OPT_SELECT:
			if ((select = realloc(select, (size_t)(nselect + 1) * sizeof(*select))) ==
			    NULL || (select[nselect++] = strdup(optarg)) == NULL)
				cli_die(EX_SOFTWARE, "out of memory");
			break;
		case OPT_SELECT_FROM: cli_read_patterns(optarg, &select, &nselect); break;
		case OPT_CAST: cli_cast(optarg); break;
		case OPT_EXEC_TIMEOUT:
			hook.timeout_ms = cli_seconds("--exec-timeout", optarg);
			break;
		default: cli_bad_option(argv, c);
		}
	}
	if (optind != argc)
		cli_usage_error("unexpected argument \"%s\"", argv[optind]);
	w.verify = cli_verify_keys(&w.nverify);
	hook.cast = cli_cast_rules();
	if (w.max_age_s > 0 && w.nverify == 0)
		cli_usage_error("--max-age goes with --verify-key: only a signed version has an age");
	if (nmodels == 0)
		cli_usage_error("no model given (-m MODEL)");
	if (out == NULL)
		cli_usage_error("no output given (-o PATH or DIR)");
	if (hook.ack_stdin && hook.cmd != NULL)
		cli_usage_error("--ack stdin or -x CMD: one says when an update is applied");
	if (hook.ack_timeout_ms <= 0)
		cli_usage_error("--ack-timeout wants more than 0 seconds");
	if (wsync_id_check(worker) < 0)
		cli_usage_error("bad worker id \"%s\": use 1 to %d printable characters, no "
		    "spaces", worker, WSYNC_MAX_ID);
	for (int i = 0; i < nmodels; i++)
		if (wsync_model_id_check(models[i]) < 0)
			cli_usage_error("bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 . _ - (not "
			    "starting with '.')", models[i], WSYNC_MAX_MODEL);
	if (!safetensors && (nselect > 0 || hook.out.shard_size > 0))
		cli_usage_error("--select and --shard-size need --format safetensors");
	/*
	 * A signature covers every tensor's bytes; over the socket a selection
	 * brings only its own, so only a whole file (a link or copy) verifies.
	 */
	if (nselect > 0 && w.nverify > 0 && w.transfer != WSYNC_TRANSFER_LINK &&
	    w.transfer != WSYNC_TRANSFER_COPY)
		cli_usage_error("--select with --verify-key needs --transfer link or copy: a "
		    "signature covers every tensor, and over the socket only the selected ones come");
	is_dir = stat(out, &st) == 0 && S_ISDIR(st.st_mode);
	if (nmodels > 1 && !is_dir)
		cli_die(EX_NOINPUT, "%s: not a directory (several models need one)", out);
	if (!is_dir)
		s_check_output_dir(out);
	if ((paths = calloc((size_t)nmodels, sizeof(*paths))) == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	if (safetensors) {
		if ((hook.links = calloc((size_t)nmodels, sizeof(*hook.links))) == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
		for (int i = 0; i < nmodels; i++)
			cli_ckpt_paths(out, models[i], &hook.links[i], &paths[i]);
		hook.models = (const char *const *)models;
		hook.nmodels = nmodels;
		hook.out.select = (const char *const *)select;
		hook.out.nselect = nselect;
		hook.keep = w.keep;
		w.select = &hook.out;
	}
	if (!safetensors && hook.cast->n > 0) {
		/* The version as pushed stays beside the cast: the base of the next delta. */
		if ((hook.outs = calloc((size_t)nmodels, sizeof(*hook.outs))) == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
		for (int i = 0; i < nmodels; i++) {
			cli_ckpt_paths(out, models[i], &hook.outs[i], &paths[i]);
			if (is_dir && (hook.outs[i] = realloc(hook.outs[i], strlen(hook.outs[i]) + 7)) ==
			    NULL)
				cli_die(EX_SOFTWARE, "out of memory");
			if (is_dir)
				strcat(hook.outs[i], ".wsync");
		}
		hook.models = (const char *const *)models;
		hook.nmodels = nmodels;
	}
	for (int i = 0; i < nmodels && !safetensors && hook.outs == NULL; i++) {
		if (!is_dir) {
			paths[i] = strdup(out);
		} else if (asprintf(&paths[i], "%s/%s.wsync", out, models[i]) < 0)
			paths[i] = NULL;
		if (paths[i] == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
	}
	w.endpoints = endpoints;
	w.nendpoints = nendpoints;
	hook.worker = worker;
	w.worker = worker;
	w.models = (const char *const *)models;
	w.paths = (const char *const *)paths;
	w.nmodels = nmodels;
	w.arg = &hook;
	w.stop = s_stop = cli_catch_signals(CLI_SIGNAL_PIPE_IGNORE);
	if (wsync_watch_run(&w, &err) < 0)
		cli_die_err(&err);
	for (int i = 0; i < nmodels; i++) {
		free(paths[i]);
		if (hook.links != NULL)
			free(hook.links[i]);
		if (hook.outs != NULL)
			free(hook.outs[i]);
	}
	for (int i = 0; i < nselect; i++)
		free(select[i]);
	free(select);
	free(hook.links);
	free(hook.outs);
	free(paths);
	free(models);
	return 0;
}
