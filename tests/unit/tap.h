/* tap.h - a minimal TAP producer for the C unit tests: ok/not ok lines, then a plan. */
#ifndef WSYNC_TAP_H
#define WSYNC_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

/* Records one check; prints "ok N - name" or "not ok N - name" with where it failed. */
#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 4, 5)))
static void
tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d - ", pass ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!pass) {
		printf("#   failed at %s:%d\n", file, line);
		tap_failed++;
	}
}

/* Prints the plan; the exit status for main. */
static int
tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
