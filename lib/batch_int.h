/*
 * batch_int.h - wsync-push's requests: its options as codes, the request they
 * make, and the batch line protocol (batch.c). Private to libwsync and its
 * programs, not installed: the grammar of a command line is the programs'
 * business, not the API's.
 */
#ifndef WSYNC_BATCH_INT_H
#define WSYNC_BATCH_INT_H

#include "wsync.h"

/* Models one push names at most. */
#define WSYNC_PUSH_MAX_MODELS 64

/* Parses a whole decimal number into *v; -1 when it is not one. */
int wsync_parse_number(const char *s, uint64_t *v);
/* Parses SEC (seconds, a decimal from 0 to 2147483, 24 days) into *ms; -1 when it is not one. */
int wsync_parse_seconds(const char *sec, int *ms);
/*
 * Splits s in place at commas into a NULL-terminated array of its n parts
 * (caller frees the array; the parts are s's); NULL when out of memory.
 */
char **wsync_split(char *s, int *n);

/*
 * The options of a push request, as codes: the short option's letter where
 * there is one. A program's getopt_long table can use them as its values.
 */
enum {
	WSYNC_PUSH_OPT_MODEL = 'm',     /* -m MODEL[=FILE] (--slot: MODEL=SIZE) */
	WSYNC_PUSH_OPT_TIMEOUT = 't',   /* -t SEC */
	WSYNC_PUSH_OPT_WAIT = 'w',      /* -w all|N|ID,... */
	WSYNC_PUSH_OPT_WORKERS = 'W',   /* -W ID,... */
	WSYNC_PUSH_OPT_WAIT_FOR = 300,  /* --wait-for VERSION */
	WSYNC_PUSH_OPT_SLOT,            /* --slot (a batch request only) */
	WSYNC_PUSH_OPT_COMMIT,          /* --commit UPLOAD (a batch request only) */
	WSYNC_PUSH_OPT_ABORT,           /* --abort UPLOAD (a batch request only) */
	WSYNC_PUSH_OPT_TRUST,           /* --trust-hashes (with --commit) */
	WSYNC_PUSH_OPT_NEXT_SLOT,       /* --next-slot (with --commit) */
	WSYNC_PUSH_OPT_SEQ,             /* --seq N (a push signed with --sign-key) */
	WSYNC_PUSH_OPT_BASE,            /* --base FILE (a push of one model) */
};

/* What a request asks for: a push, or (batch only) a slot, its commit or its abort. */
typedef enum wsync_push_verb {
	WSYNC_PUSH_VERB_PUSH, WSYNC_PUSH_VERB_SLOT, WSYNC_PUSH_VERB_COMMIT, WSYNC_PUSH_VERB_ABORT
} wsync_push_verb_t;

/*
 * One push request, from a command line or from a line of wsync-push --batch.
 * Its strings are borrowed from the words it was parsed from; wait_ids and
 * targets are its own (wsync_push_req_free frees them).
 */
typedef struct wsync_push_req {
	wsync_push_verb_t verb;
	uint64_t upload;                /* COMMIT, ABORT: the slot's upload */
	int trust;                      /* COMMIT: --trust-hashes */
	int next_slot;                  /* COMMIT: --next-slot */
	wsync_push_item_t items[WSYNC_PUSH_MAX_MODELS];
	const char *models[WSYNC_PUSH_MAX_MODELS];
	uint64_t sizes[WSYNC_PUSH_MAX_MODELS];  /* SLOT: -m MODEL=SIZE */
	int n;
	int with_files;                 /* how many -m came as MODEL=FILE */
	int waits;                      /* -w or --wait-for given */
	wsync_wait_mode_t wait_mode;
	unsigned wait_count;
	char **wait_ids, **targets;     /* -w ID,... and -W ID,...; NULL when not given */
	int nwait_ids, ntargets;
	uint64_t wait_for;              /* --wait-for: no push, a wait for this version */
	int timeout_ms;                 /* -t; 30 s when not given */
	uint64_t seq;                   /* --seq: the signed push's sequence number; 0: none */
	const char *base;               /* --base: what was pushed before, to send a delta from */
} wsync_push_req_t;

/* Sets r to an empty push request (no models, a 30 s timeout). */
void wsync_push_req_init(wsync_push_req_t *r);
/* Frees what r owns (wait_ids, targets); r stays valid and empty of them. */
void wsync_push_req_free(wsync_push_req_t *r);
/*
 * Applies one option (a WSYNC_PUSH_OPT_* code) to r; value (NULL for a flag)
 * is borrowed and may be cut in place (-m MODEL=FILE). as_written is the
 * option as the user wrote it, for the message. 0, or -1 with a usage error
 * in why.
 */
int wsync_push_req_option(wsync_push_req_t *r, int opt, const char *as_written, char *value,
    char *why, size_t size);
/*
 * Checks r once all its options are applied, with the n operands (files)
 * given beside them (borrowed): a push takes one file, or none with
 * -m MODEL=FILE or --wait-for; a slot, commit or abort none. in_batch: a
 * request line, where "-" cannot be a file (stdin carries the requests).
 * 0, or -1 with a usage error in why.
 */
int wsync_push_req_check(wsync_push_req_t *r, char *const *files, int n, int in_batch,
    char *why, size_t size);
/*
 * Pushes r's files (a WSYNC_PUSH_VERB_PUSH request) and fills its items'
 * versions; with --wait-for, pushes nothing and takes that version.
 */
int wsync_push_req_push(wsync_client_t *client, wsync_push_req_t *r, wsync_err_t *err);
/* The wait r asks for (-w), its ids borrowed from r. */
wsync_wait_t wsync_push_req_wait_of(const wsync_push_req_t *r);
/*
 * Waits as r asks (-w) for its items' versions, all within deadline_ms (a
 * wsync_now_ms time); nothing to do without -w. On timeout (75), or when
 * every worker waited for answered and some could not apply it (65):
 * *missing as for wsync_client_wait (caller frees); NULL otherwise.
 */
int wsync_push_req_wait(wsync_client_t *client, wsync_push_req_t *r, int64_t deadline_ms,
    char **missing, wsync_err_t *err);
/*
 * The ids r waits for (-w ID,...) that the hub has never heard from, as
 * "ID, ID" (caller frees; "" when none, or r waits for no ids); NULL with err.
 */
char *wsync_push_req_unseen(wsync_client_t *client, const wsync_push_req_t *r,
    int timeout_ms, wsync_err_t *err);

/*
 * The batch line protocol (wsync-push(1) BATCH): one request a line, its
 * words split at blanks; a word that starts with a double quote runs to the
 * closing one, inside which \" is a quote and \\ a backslash. Parses line
 * (cut and unquoted in place; r borrows from it until the next parse) into r.
 * 1 for a line of no words; 0; or -1 with a usage error in why.
 */
int wsync_batch_parse(char *line, wsync_push_req_t *r, char *why, size_t size);

/* A batch coprocess's session: its client and the slots it has open. */
typedef struct wsync_batch wsync_batch_t;
/* A session on client (borrowed until wsync_batch_destroy); NULL with err. */
wsync_batch_t *wsync_batch_new(wsync_client_t *client, wsync_err_t *err);
/*
 * Serves one request line (cut in place) and sets *answer (caller frees) to
 * its answer without the newline: "ok MODEL VERSION...", "ok", "slot UPLOAD
 * PATH..." or "error CODE MESSAGE"; *answer is NULL for a line of no words.
 * -1 (errno ENOMEM) only when no answer could be made.
 */
int wsync_batch_serve(wsync_batch_t *batch, char *line, char **answer);
/* Aborts the slots still open, frees the session and sets *batch to NULL. */
void wsync_batch_destroy(wsync_batch_t **batch);

#endif
