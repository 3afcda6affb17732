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
/*
 * msg, a library message, with the options of the programs named again
 * where it speaks of what one sets (the base, the transfer, a key...), into
 * out; returns out, or msg itself when no option is named (a line of any
 * length then passes whole). Every message a program prints goes through it.
 */
const char *cli_options_named(const char *msg, char *out, size_t size);
/* Prints "PROG: message" on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: message" on stderr and exits with code. */
_Noreturn void cli_die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Signals a program catches beyond SIGINT and SIGTERM (flags of cli_catch_signals). */
enum {
	CLI_SIGNAL_HUP = 1,             /* SIGHUP sets the flag cli_reload_flag gives */
	CLI_SIGNAL_PIPE_IGNORE = 2,     /* SIGPIPE is ignored: a write to a gone reader fails */
	/*
	 * SIGINT and SIGTERM also turn standard input into /dev/null: a loop
	 * reading requests there ends even when the signal came just before
	 * its read began, which EINTR alone does not interrupt.
	 */
	CLI_SIGNAL_STDIN_EOF = 4,
};
/*
 * Installs the handlers a program needs: SIGINT and SIGTERM set the stop flag
 * it returns (to the signal's number), so that the library's waits return
 * early and clean up; cli_die_err then exits 128 + that number. No handler
 * restarts a call. flags: CLI_SIGNAL_* or 0.
 */
volatile sig_atomic_t *cli_catch_signals(int flags);
/* The flag SIGHUP sets (with CLI_SIGNAL_HUP), for the hub's reload field. */
volatile sig_atomic_t *cli_reload_flag(void);
/* Exits 128 + the signal's number, with a message, when a signal was caught. */
void cli_exit_if_interrupted(void);
/* Prints the library error on stderr and exits with its code (or as interrupted). */
_Noreturn void cli_die_err(const wsync_err_t *err);
/* Prints "PROG: message" and "Try 'PROG --help'." and exits 64. */
_Noreturn void cli_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/*
 * Refuses the option getopt_long just refused, the same way in every program
 * (call it with opterr = 0 and a ':' leading the option string, c being what
 * getopt_long returned): "option '-t' needs a value", "unknown option
 * '--bogus'", "option '--help' takes no value" or "unknown option '-x'",
 * then "Try 'PROG --help'.", and exits 64.
 */
_Noreturn void cli_bad_option(char *const *argv, int c);
/* Parses SEC (seconds, a decimal >= 0) as milliseconds; exits 64 naming option if bad. */
int cli_seconds(const char *option, const char *sec);
/* Parses SEC (seconds, up to a year) as whole seconds, rounded up; exits 64 naming option if bad. */
int cli_age_seconds(const char *option, const char *sec);
/* Parses a whole number for option; exits 64 if bad. */
uint64_t cli_number(const char *option, const char *s);
/* Parses a --transfer MODE (auto, link, copy, socket); exits 64 if bad. */
int cli_transfer(const char *mode);
/* Parses --format wsync|safetensors: 1 for safetensors; exits 64 if bad. */
int cli_format(const char *format);
/*
 * The symlink a safetensors output swaps for model (out itself, or
 * out/MODEL when out is a real directory) and the hidden .wsync file beside
 * it that a version is fetched into first; both malloc'd, dying on failure.
 */
void cli_ckpt_paths(const char *out, const char *model, char **link, char **staging);
/*
 * A model id from an input's file name: no directory, no extension, every byte
 * a model id may not hold turned into '_' ("model" for stdin).
 */
void cli_model_from_name(const char *path, char model[WSYNC_MAX_MODEL + 1]);
/* Appends the patterns of --select-from FILE (one a line, # comments) to *v. */
void cli_read_patterns(const char *path, char ***v, int *n);
/* wsync_split, dying when out of memory. */
char **cli_split(char *s, int *n);
/*
 * CURVE keys, the same in every client: --key FILE (its secret certificate)
 * and --hub-key FILE (the hub's public one), with their --help lines.
 */
enum { CLI_OPT_KEY = 1000, CLI_OPT_HUB_KEY };
#define CLI_KEY_OPTIONS \
	{ "hub-key", required_argument, NULL, CLI_OPT_HUB_KEY }, \
	{ "key", required_argument, NULL, CLI_OPT_KEY }
#define CLI_KEY_HELP \
	"      --key FILE           this client's secret key (default: $WSYNC_KEY)\n" \
	"      --hub-key FILE       the hub's public key (default: $WSYNC_HUB_KEY)\n"

/*
 * Sets how log lines and messages go to stderr: "text" (the default) or
 * "json", one object per line; exits 64 naming --log-format on anything else.
 */
void cli_log_format(const char *format);
/*
 * A log callback for lines of key=value pairs (the hub's): written after a
 * time=TIMESTAMP pair, or as one JSON object whose bare whole numbers are
 * numbers and whose quoted values are unescaped strings.
 */
void cli_log_kv(void *arg, const char *line);
/* A log callback for lines of prose: "PROG: line", or {"time","program","msg"}. */
void cli_log_msg(void *arg, const char *line);
/* --quiet: no progress line and no log message of prose; errors still print. */
void cli_quiet(void);
/* --progress: a progress line even when stderr is not a terminal or the transfer is short. */
void cli_progress_force(void);
/*
 * A progress callback (wsync_client_opts_t.progress): once the program has
 * run for a second (at once with --progress), and when stderr is a terminal
 * (or with --progress), redraws "PROG: DONE / TOTAL PCT% RATE/s ETA M:SS" at
 * most 5 times a second, and always for the last byte.
 */
void cli_progress(void *arg, uint64_t done, uint64_t total);
/* Ends a progress line drawn on a terminal, so that what follows starts a line. */
void cli_progress_end(void);
/* Prints "PROG VERSION" on stdout and exits 0. */
_Noreturn void cli_version(void);

/*
 * Signature checks, the same in pull and watch: --verify-key FILE (repeatable)
 * adds a public key, read at once (dies on a bad one); --max-age SEC.
 */
#define CLI_VERIFY_HELP \
	"      --verify-key FILE    apply only versions signed by this minisign or signify\n" \
	"                           public key (repeat for key rotation), newer than the one\n" \
	"                           in place\n" \
	"      --max-age SEC        with --verify-key, warn when the signed version is older\n"
/* Reads the public key at path and adds it to the keys cli_verify_keys returns. */
void cli_verify_key(const char *path);
/* The keys --verify-key gave, *n of them (0: none); borrowed until exit. */
const wsync_verifykey_t *cli_verify_keys(int *n);

/*
 * Casts on the way out, the same in pull, watch and convert (wsync-format(5),
 * CASTS): --cast PATTERN=DTYPE[:SCALING] (repeatable) adds a rule, checked at
 * once (a bad one is a usage error).
 */
#define CLI_CAST_HELP \
	"      --cast PATTERN=DTYPE[:SCALING]\n" \
	"                           write the tensors whose names match the glob as DTYPE\n" \
	"                           (bf16, f16, f32, or f8e4m3 with block128 or tensor\n" \
	"                           scaling); the first matching rule decides (repeatable)\n"
/* Parses spec and adds its rule to the cast cli_cast_rules returns. */
void cli_cast(const char *spec);
/* The cast --cast gave (n 0: none), checked as a whole; borrowed until exit. */
const wsync_cast_t *cli_cast_rules(void);

#endif
