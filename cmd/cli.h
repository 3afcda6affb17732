/* cli.h - what every wsync program does the same way: messages, exits, --version. */
#ifndef WSYNC_CLI_H
#define WSYNC_CLI_H

#include <stdint.h>
#include <sysexits.h>
#include "wsync.h"

/* Sets the program name used as the prefix of every message. */
void cli_init(const char *prog);
/* The program name given to cli_init. */
const char *cli_prog(void);
/* Prints "PROG: message" on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: message" on stderr and exits with code. */
_Noreturn void cli_die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * Turns SIGINT and SIGTERM into an interruption the library sees (a wait
 * returns early, temporary files are removed): cli_die_err then exits
 * 128 + the signal's number.
 */
void cli_catch_interrupts(void);
/* The flag the signal handler sets (the signal's number), for the library's stop fields. */
volatile sig_atomic_t *cli_interrupt_flag(void);
/* Exits 128 + the signal's number, with a message, when a signal was caught. */
void cli_exit_if_interrupted(void);
/* Prints the library error on stderr and exits with its code (or as interrupted). */
_Noreturn void cli_die_err(const wsync_err_t *err);
/* Prints "PROG: message" and "Try 'PROG --help'." and exits 64. */
_Noreturn void cli_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/*
 * Reports the option getopt_long just refused (called with opterr = 0 and a
 * ':' in the option string, c being what it returned) and exits 64.
 */
_Noreturn void cli_bad_option(char *const *argv, int c);
/* Parses SEC (seconds, a decimal >= 0) into *ms; -1 when it is not one. */
int cli_parse_seconds(const char *sec, int *ms);
/* Parses a whole decimal number into *v; -1 when it is not one. */
int cli_parse_number(const char *s, uint64_t *v);
/* Parses SEC (seconds, a decimal >= 0) as milliseconds; exits 64 naming option if bad. */
int cli_seconds(const char *option, const char *sec);
/* Parses a whole number for option; exits 64 if bad. */
uint64_t cli_number(const char *option, const char *s);
/* Parses a --transfer MODE (auto, link, copy, socket); exits 64 if bad. */
int cli_transfer(const char *mode);
/* Splits s in place at commas into a NULL-terminated array (caller frees the array). */
char **cli_split(char *s, int *n);
/* Prints "PROG VERSION" on stdout and exits 0. */
_Noreturn void cli_version(void);

#endif
