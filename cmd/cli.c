/* cli.c - messages and exits shared by the wsync programs. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *s_prog = "wsync";
static volatile sig_atomic_t s_signal;

void
cli_init(const char *prog)
{
	s_prog = prog;
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

static void
s_vwarn(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", s_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
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
	s_signal = sig;
}

void
cli_catch_interrupts(void)
{
	struct sigaction sa = { .sa_handler = s_on_signal };

	/* No SA_RESTART: a blocked wait must return, so the library can clean up. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

volatile sig_atomic_t *
cli_interrupt_flag(void)
{
	return &s_signal;
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
	const char *arg = argv[optind - 1];

	if (c == ':')
		cli_usage_error("option '%s' needs a value", arg);
	if (optopt != 0)
		cli_usage_error("unknown option '-%c'", optopt);
	cli_usage_error("unknown option '%s'", arg);
}

int
cli_parse_seconds(const char *sec, int *ms)
{
	char *end;
	double v = strtod(sec, &end);

	if (end == sec || *end != '\0' || !(v >= 0) || v > 86400.0 * 365)
		return -1;
	*ms = (int)(v * 1000 + 0.5);
	return 0;
}

int
cli_parse_number(const char *s, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return *end != '\0' || errno != 0 ? -1 : 0;
}

int
cli_seconds(const char *option, const char *sec)
{
	int ms;

	if (cli_parse_seconds(sec, &ms) < 0)
		cli_usage_error("%s wants seconds (like 2.5), not \"%s\"", option, sec);
	return ms;
}

uint64_t
cli_number(const char *option, const char *s)
{
	uint64_t v;

	if (cli_parse_number(s, &v) < 0)
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

char **
cli_split(char *s, int *n)
{
	char **v = calloc(strlen(s) / 2 + 2, sizeof(*v));

	if (v == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	*n = 0;
	for (char *tok = strtok(s, ","); tok != NULL; tok = strtok(NULL, ","))
		v[(*n)++] = tok;
	return v;
}

void
cli_version(void)
{
	printf("%s %s\n", s_prog, WSYNC_VERSION);
	exit(0);
}
