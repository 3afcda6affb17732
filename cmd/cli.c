/* cli.c - messages and exits shared by the wsync programs. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch_int.h"
#include "cli.h"

static const char *s_prog = "wsync";
static volatile sig_atomic_t s_signal, s_reload;
/* CLI_SIGNAL_STDIN_EOF: /dev/null, put on standard input by a stop signal; else -1. */
static int s_devnull = -1;
static int s_json;
static int s_quiet, s_progress_forced, s_progress_shown;
static int64_t s_start_ms, s_progress_ms;

void
cli_init(const char *prog)
{
	s_prog = prog;
	s_start_ms = wsync_now_ms();
	/*
	 * ZeroMQ allocates every 4 MiB chunk it receives. glibc would map and
	 * unmap each one, and fresh pages cost more than the copy into them:
	 * keep chunk-sized blocks on the heap and let freed ones be reused.
	 */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

const char *
cli_prog(void)
{
	return s_prog;
}

/* The time now as an ISO 8601 UTC timestamp with milliseconds. */
static void
s_stamp(char *buf, size_t size)
{
	struct timespec ts;
	struct tm tm;
	char secs[24];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(secs, sizeof(secs), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, size, "%s.%03ldZ", secs, ts.tv_nsec / 1000000);
}

/* Writes obj as one line on stderr and frees it. */
static void
s_json_line(json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (text != NULL)
		fprintf(stderr, "%s\n", text);
	free(text);
	json_decref(obj);
}

/* A JSON object with the time and the program, for a line of stderr. */
static json_t *
s_json_head(void)
{
	char stamp[40];
	json_t *obj = json_object();

	s_stamp(stamp, sizeof(stamp));
	json_object_set_new(obj, "time", json_string(stamp));
	json_object_set_new(obj, "program", json_string(s_prog));
	return obj;
}

/*
 * The library says what is wrong in words every user of it reads (a Python
 * caller never typed a flag); a program's user did type one, so its messages
 * name the option again. Each rule replaces old with new where the message
 * holds when (NULL: always), in this order; tests/ checks every resulting text.
 */
static const struct s_flag_rule {
	const char *when, *old, *new;
} s_flag_rules[] = {
	{ "not a version of model", "base ", "--base " },
	{ " is not above ", "sequence number ", "--seq " },
	{ "the hub's store is not visible", "transfer by ", "--transfer " },
	{ NULL, "; socket or auto works", "; use socket or auto" },
	{ "(a copy works across file systems)", "cannot link ", "--transfer link: cannot link " },
	{ NULL, "(a copy works across file systems)", "(--transfer copy works across file systems)" },
	{ NULL, "hub's push list", "hub's --allow-push list" },
	{ NULL, "hub's allow lists", "hub's --allow-push or --allow-pull lists" },
	{ NULL, "keys: this client has none (its secret key and the hub's public key, as "
	    "$WSYNC_KEY and $WSYNC_HUB_KEY give them)",
	    "keys: give --key and --hub-key (or $WSYNC_KEY and $WSYNC_HUB_KEY)" },
	{ NULL, "a secret key without the hub's public key ($WSYNC_HUB_KEY)",
	    "--key without --hub-key (or $WSYNC_HUB_KEY)" },
	{ NULL, "the hub's public key without a secret key ($WSYNC_KEY)",
	    "--hub-key without --key (or $WSYNC_KEY)" },
	{ NULL, "runs without a secret key), but", "runs without --secret-key), but" },
	{ "CURVE handshake", " failed: is ", " failed: is --hub-key (" },
	{ "failed: is --hub-key (", " the hub's public key?", ") the hub's public key?" },
	{ NULL, "bytes): to sign, push files", "bytes): with --sign-key, push files" },
	{ NULL, "or a signing pair from wsync-keygen)", "or wsync-keygen --sign)" },
	{ NULL, " more than the maximum age of ", " more than --max-age " },
	{ "more than --max-age ", " s: is the trainer or the hub stuck?",
	    ": is the trainer or the hub stuck?" },
	{ " behind the head ", " (more than ", " (--max-lag " },
};

const char *
cli_options_named(const char *msg, char *out, size_t size)
{
	char tmp[4096];
	const char *text = msg, *at;

	for (size_t i = 0; i < sizeof(s_flag_rules) / sizeof(s_flag_rules[0]); i++) {
		const struct s_flag_rule *r = &s_flag_rules[i];
		if ((r->when != NULL && strstr(text, r->when) == NULL) ||
		    (at = strstr(text, r->old)) == NULL)
			continue;
		snprintf(tmp, sizeof(tmp), "%.*s%s%s", (int)(at - text), text, r->new,
		    at + strlen(r->old));
		snprintf(out, size, "%s", tmp);
		text = out;
	}
	return text;
}

/* Writes msg as the line "PROG: msg", or as a JSON object in json mode. */
static void
s_message(const char *msg)
{
	char named[4096];
	json_t *obj;

	msg = cli_options_named(msg, named, sizeof(named));
	cli_progress_end();
	if (!s_json) {
		fprintf(stderr, "%s: %s\n", s_prog, msg);
		return;
	}
	obj = s_json_head();
	/* A message may hold bytes that are not UTF-8 (a file name): keep them readable. */
	if (json_object_set_new(obj, "msg", json_string(msg)) < 0)
		json_object_set_new(obj, "msg", json_string("(message not in UTF-8)"));
	s_json_line(obj);
}

static void
s_vwarn(const char *fmt, va_list ap)
{
	char msg[4096];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	s_message(msg);
}

void
cli_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	s_vwarn(fmt, ap);
	va_end(ap);
}

void
cli_die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	s_vwarn(fmt, ap);
	va_end(ap);
	exit(code);
}

static void
s_on_signal(int sig)
{
	int saved = errno;

	if (sig == SIGHUP)
		s_reload = 1;
	else {
		s_signal = sig;
		/* A read of stdin about to start ends at once (one under way gets EINTR). */
		if (s_devnull >= 0)
			dup2(s_devnull, STDIN_FILENO);
	}
	errno = saved;
}

volatile sig_atomic_t *
cli_catch_signals(int flags)
{
	struct sigaction sa = { .sa_handler = s_on_signal };

	if ((flags & CLI_SIGNAL_STDIN_EOF) && s_devnull < 0)
		s_devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* No SA_RESTART: a blocked wait must return, so the library can clean up. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (flags & CLI_SIGNAL_HUP)
		sigaction(SIGHUP, &sa, NULL);
	if (flags & CLI_SIGNAL_PIPE_IGNORE) {
		sa.sa_handler = SIG_IGN;
		sigaction(SIGPIPE, &sa, NULL);
	}
	return &s_signal;
}

volatile sig_atomic_t *
cli_reload_flag(void)
{
	return &s_reload;
}

void
cli_exit_if_interrupted(void)
{
	if (s_signal != 0)
		cli_die(128 + s_signal, "interrupted by signal %d", (int)s_signal);
}

void
cli_die_err(const wsync_err_t *err)
{
	/* What the library adds to its "interrupted" (a commit already sent) is for the user. */
	if (s_signal != 0 && strncmp(err->msg, "interrupted ", 12) == 0)
		cli_die(128 + s_signal, "interrupted by signal %d %s", (int)s_signal,
		    err->msg + 12);
	cli_exit_if_interrupted();
	cli_die(err->code ? err->code : EX_SOFTWARE, "%s", err->msg);
}

void
cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	s_vwarn(fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try '%s --help'.\n", s_prog);
	exit(EX_USAGE);
}

void
cli_bad_option(char *const *argv, int c)
{
	/* What getopt_long consumed last: the refused word, or one before it in a cluster. */
	const char *arg = argv[optind - 1];
	int n = (int)strcspn(arg, "="), is_long = strncmp(arg, "--", 2) == 0;

	if (c == ':' && is_long)
		cli_usage_error("option '%.*s' needs a value", n, arg);
	if (c == ':')
		cli_usage_error("option '-%c' needs a value", optopt);
	/* getopt_long leaves optopt 0 for a long option it does not know (or not uniquely). */
	if (optopt == 0)
		cli_usage_error("unknown option '%.*s'", n, arg);
	if (is_long && arg[n] == '=')
		cli_usage_error("option '%.*s' takes no value", n, arg);
	cli_usage_error("unknown option '-%c'", optopt);
}

int
cli_seconds(const char *option, const char *sec)
{
	int ms;

	if (wsync_parse_seconds(sec, &ms) < 0)
		cli_usage_error("%s wants seconds (like 2.5), not \"%s\"", option, sec);
	return ms;
}

int
cli_age_seconds(const char *option, const char *sec)
{
	char *end;
	double v = strtod(sec, &end);

	/* An age may be longer than the 24 days a timeout's milliseconds allow. */
	if (end == sec || *end != '\0' || !(v >= 0) || v > 86400.0 * 365)
		cli_usage_error("%s wants seconds (like 2.5), not \"%s\"", option, sec);
	return (int)v + (v > (int)v);
}

uint64_t
cli_number(const char *option, const char *s)
{
	uint64_t v;

	if (wsync_parse_number(s, &v) < 0)
		cli_usage_error("%s wants a whole number, not \"%s\"", option, s);
	return v;
}

int
cli_transfer(const char *mode)
{
	int t = wsync_transfer_parse(mode);

	if (t < 0)
		cli_usage_error("--transfer wants auto, link, copy or socket, not \"%s\"", mode);
	return t;
}

int
cli_format(const char *format)
{
	if (strcmp(format, "safetensors") == 0)
		return 1;
	if (strcmp(format, "wsync") != 0)
		cli_usage_error("--format wants wsync or safetensors, not \"%s\"", format);
	return 0;
}

void
cli_ckpt_paths(const char *out, const char *model, char **link, char **staging)
{
	struct stat st;
	const char *base;
	int n;

	if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode))
		n = asprintf(link, "%s/%s", out, model);
	else
		n = (*link = strdup(out)) == NULL ? -1 : 0;
	if (n < 0)
		cli_die(EX_SOFTWARE, "out of memory");
	base = strrchr(*link, '/');
	if (base == NULL)
		n = asprintf(staging, ".%s.wsync", *link);
	else
		n = asprintf(staging, "%.*s/.%s.wsync", (int)(base - *link), *link, base + 1);
	if (n < 0)
		cli_die(EX_SOFTWARE, "out of memory");
	if (base != NULL && base != *link) {
		char *parent = strndup(*link, (size_t)(base - *link));
		if (parent == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
		if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
			cli_die(EX_NOINPUT, "%s: no such directory", parent);
		free(parent);
	}
}

void
cli_read_patterns(const char *path, char ***v, int *n)
{
	FILE *f = fopen(path, "r");
	char line[4096];

	if (f == NULL)
		cli_die(EX_NOINPUT, "%s: cannot open: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strcspn(line, "\r\n");
		char **nv;
		line[len] = '\0';
		if (len == 0 || line[0] == '#')
			continue;
		if ((nv = realloc(*v, (size_t)(*n + 1) * sizeof(*nv))) == NULL ||
		    (nv[*n] = strdup(line)) == NULL)
			cli_die(EX_SOFTWARE, "out of memory");
		*v = nv;
		(*n)++;
	}
	if (ferror(f))
		cli_die(EX_IOERR, "%s: cannot read: %s", path, strerror(errno));
	fclose(f);
}

char **
cli_split(char *s, int *n)
{
	char **v = wsync_split(s, n);

	if (v == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	return v;
}

void
cli_log_format(const char *format)
{
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
		cli_usage_error("--log-format wants text or json, not \"%s\"", format);
	s_json = strcmp(format, "json") == 0;
}

/*
 * Decodes the quoted value that starts after the '"' at *p, as the library's
 * log quoting wrote it (\" \\ and \xNN), into buf; bytes from 0x80 stay
 * written as \xNN, so that the value is valid UTF-8. Moves *p past the
 * closing quote. -1 when the quote is not closed.
 */
static int
s_unquote(const char **p, char *buf, size_t size)
{
	const char *s = *p;
	size_t n = 0;

	for (; *s != '"'; s++) {
		unsigned v;
		if (*s == '\0' || n + 5 >= size)
			return -1;
		if (*s == '\\' && s[1] == 'x' && isxdigit((unsigned char)s[2]) &&
		    isxdigit((unsigned char)s[3]) && sscanf(s + 2, "%2x", &v) == 1 && v < 0x80) {
			buf[n++] = (char)v;
			s += 3;
		} else if (*s == '\\' && (s[1] == '"' || s[1] == '\\'))
			buf[n++] = *++s;
		else
			buf[n++] = *s;
	}
	buf[n] = '\0';
	*p = s + 1;
	return 0;
}

/* Adds line's key=value pairs to obj; -1 when line is not such pairs. */
static int
s_kv_parse(const char *line, json_t *obj)
{
	char key[64], value[4096];

	while (*line != '\0') {
		size_t klen = strcspn(line, "= ");
		char *end;
		long long num;

		if (line[klen] != '=' || klen == 0 || klen >= sizeof(key))
			return -1;
		memcpy(key, line, klen);
		key[klen] = '\0';
		line += klen + 1;
		if (*line == '"') {
			line++;
			if (s_unquote(&line, value, sizeof(value)) < 0)
				return -1;
			json_object_set_new(obj, key, json_string(value));
		} else {
			size_t vlen = strcspn(line, " ");
			if (vlen >= sizeof(value))
				return -1;
			memcpy(value, line, vlen);
			value[vlen] = '\0';
			line += vlen;
			num = strtoll(value, &end, 10);
			/*
			 * Counts, sizes and versions are numbers; a 16-digit content
			 * id that happens to hold no letter stays a string.
			 */
			if (vlen > 0 && vlen <= 15 && isdigit((unsigned char)value[0]) &&
			    (value[0] != '0' || vlen == 1) && *end == '\0')
				json_object_set_new(obj, key, json_integer(num));
			else
				json_object_set_new(obj, key, json_string(value));
		}
		if (*line != ' ' && *line != '\0')
			return -1;
		line += *line == ' ';
	}
	return 0;
}

void
cli_log_kv(void *arg, const char *line)
{
	char stamp[40], named[4096];
	json_t *obj;

	(void)arg;
	line = cli_options_named(line, named, sizeof(named));
	if (!s_json) {
		s_stamp(stamp, sizeof(stamp));
		fprintf(stderr, "time=%s %s\n", stamp, line);
		return;
	}
	obj = s_json_head();
	if (s_kv_parse(line, obj) < 0) {
		json_decref(obj);
		s_message(line);
		return;
	}
	s_json_line(obj);
}

void
cli_log_msg(void *arg, const char *line)
{
	(void)arg;
	if (!s_quiet)
		s_message(line);
}

void
cli_quiet(void)
{
	s_quiet = 1;
}

void
cli_progress_force(void)
{
	s_progress_forced = 1;
}

/* n bytes in binary units with one decimal ("12.5 MiB"), into buf. */
static const char *
s_bytes(double n, char *buf, size_t size)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (n >= 1024 && u < 4) {
		n /= 1024;
		u++;
	}
	snprintf(buf, size, u == 0 ? "%.0f %s" : "%.1f %s", n, unit[u]);
	return buf;
}

void
cli_progress(void *arg, uint64_t done, uint64_t total)
{
	int64_t now = wsync_now_ms(), ms = now - s_start_ms;
	int tty = isatty(STDERR_FILENO);
	char d[32], t[32], r[32];
	double rate, eta;

	(void)arg;
	if (s_quiet || total == 0 || (!s_progress_forced && (!tty || ms < 1000)))
		return;
	if (done < total && s_progress_ms != 0 && now - s_progress_ms < 200)
		return;
	s_progress_ms = now;
	rate = ms > 0 ? (double)done * 1000.0 / (double)ms : 0;
	eta = rate > 0 ? (double)(total - done) / rate : 0;
	fprintf(stderr, "%s%s: %s / %s %3d%% %s/s ETA %d:%02d%s", tty ? "\r" : "", s_prog,
	    s_bytes((double)done, d, sizeof(d)), s_bytes((double)total, t, sizeof(t)),
	    (int)(done * 100 / total), s_bytes(rate, r, sizeof(r)), (int)eta / 60,
	    (int)eta % 60, tty ? "\033[K" : "\n");
	fflush(stderr);
	s_progress_shown = tty;
}

void
cli_progress_end(void)
{
	if (s_progress_shown)
		fputc('\n', stderr);
	s_progress_shown = 0;
}

void
cli_version(void)
{
	printf("%s %s\n", s_prog, WSYNC_VERSION);
	exit(0);
}

/* The --verify-key keys, as many as a rotation needs. */
#define S_MAX_VERIFY 8
static wsync_verifykey_t s_verify[S_MAX_VERIFY];
static int s_nverify;

void
cli_verify_key(const char *path)
{
	wsync_err_t err;

	if (s_nverify == S_MAX_VERIFY)
		cli_usage_error("at most %d --verify-key", S_MAX_VERIFY);
	if (wsync_verifykey_load(path, &s_verify[s_nverify], &err) < 0)
		cli_die_err(&err);
	s_nverify++;
}

const wsync_verifykey_t *
cli_verify_keys(int *n)
{
	*n = s_nverify;
	return s_verify;
}

/* The --cast rules, in the order given. */
static wsync_cast_rule_t *s_cast_rules;
static wsync_cast_t s_cast;

void
cli_cast(const char *spec)
{
	wsync_err_t err;

	if ((s_cast_rules = realloc(s_cast_rules, (size_t)(s_cast.n + 1) *
	    sizeof(*s_cast_rules))) == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	if (wsync_cast_parse(spec, &s_cast_rules[s_cast.n], &err) < 0)
		cli_usage_error("--cast %s", err.msg);
	s_cast.rules = s_cast_rules;
	s_cast.n++;
}

const wsync_cast_t *
cli_cast_rules(void)
{
	wsync_err_t err;

	if (wsync_cast_check(&s_cast, &err) < 0)
		cli_usage_error("--cast: %s", err.msg);
	return &s_cast;
}

/*
 * A model id from the input's file name: no directory, no extension, every
 * byte a model id may not hold turned into '_'.
 */
void
cli_model_from_name(const char *path, char model[WSYNC_MAX_MODEL + 1])
{
	const char *base = strrchr(path, '/'), *dot;
	size_t n;

	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
	if (strcmp(path, "-") == 0 || n == 0) {
		strcpy(model, "model");
		return;
	}
	if (n > WSYNC_MAX_MODEL)
		n = WSYNC_MAX_MODEL;
	for (size_t i = 0; i < n; i++)
		model[i] = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789._-", base[i]) ? base[i] : '_';
	if (model[0] == '.')
		model[0] = '_';
	model[n] = '\0';
}
