/* batch.c - push requests and wsync-push's batch line protocol: quoting, options, open slots. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "batch_int.h"

/* How long a session waits to say hello again after the hub went away. */
#define S_CONNECT_MS 5000
/* Words one request line holds at most: four for each model, and a few more. */
#define S_MAX_WORDS (4 * WSYNC_PUSH_MAX_MODELS + 16)

__attribute__((format(printf, 3, 4)))
static int
s_bad(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -1;
}

int
wsync_parse_number(const char *s, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return *end != '\0' || errno != 0 ? -1 : 0;
}

int
wsync_parse_seconds(const char *sec, int *ms)
{
	char *end;
	double v = strtod(sec, &end);

	/* Its milliseconds must fit an int: a larger value used to wrap negative. */
	if (end == sec || *end != '\0' || !(v >= 0) || v > INT_MAX / 1000.0)
		return -1;
	*ms = (int)(v * 1000 + 0.5);
	return 0;
}

char **
wsync_split(char *s, int *n)
{
	char **v = calloc(strlen(s) / 2 + 2, sizeof(*v)), *save = NULL;

	*n = 0;
	if (v == NULL)
		return NULL;
	for (char *tok = strtok_r(s, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
		v[(*n)++] = tok;
	return v;
}

void
wsync_push_req_init(wsync_push_req_t *r)
{
	memset(r, 0, sizeof(*r));
	r->timeout_ms = 30000;
}

void
wsync_push_req_free(wsync_push_req_t *r)
{
	free(r->wait_ids);
	free(r->targets);
	r->wait_ids = r->targets = NULL;
	r->nwait_ids = r->ntargets = 0;
}

/* Reads a --wait spec: all, a count, or worker ids. */
static int
s_wait_spec(wsync_push_req_t *r, char *spec, char *why, size_t size)
{
	uint64_t count;

	r->waits = 1;
	if (strcmp(spec, "all") == 0)
		r->wait_mode = WSYNC_WAIT_ALL;
	else if (strspn(spec, "0123456789") == strlen(spec)) {
		/* All digits: a count (ids may start with a digit, as 3090box). */
		if (wsync_parse_number(spec, &count) < 0 || count > 1000000)
			return s_bad(why, size, "--wait wants all, a number of workers or worker "
			    "ids, not \"%s\"", spec);
		r->wait_mode = WSYNC_WAIT_COUNT;
		r->wait_count = (unsigned)count;
	} else {
		r->wait_mode = WSYNC_WAIT_IDS;
		free(r->wait_ids);
		if ((r->wait_ids = wsync_split(spec, &r->nwait_ids)) == NULL)
			return s_bad(why, size, "out of memory");
	}
	return 0;
}

/* Reads -m MODEL or -m MODEL=FILE (MODEL=SIZE for a slot) into the next item. */
static int
s_model(wsync_push_req_t *r, char *value, char *why, size_t size)
{
	char *eq = strchr(value, '=');

	if (r->n == WSYNC_PUSH_MAX_MODELS)
		return s_bad(why, size, "at most %d models in one push", WSYNC_PUSH_MAX_MODELS);
	r->items[r->n] = (wsync_push_item_t){ .model = value, .path = NULL };
	if (eq != NULL) {
		*eq = '\0';
		r->items[r->n].path = eq + 1;
		r->with_files++;
	}
	if (wsync_model_id_check(value) < 0)
		return s_bad(why, size, "bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 . _ - "
		    "(not starting with '.')", value, WSYNC_MAX_MODEL);
	r->models[r->n] = r->items[r->n].model;
	r->n++;
	return 0;
}

int
wsync_push_req_option(wsync_push_req_t *r, int opt, const char *as_written, char *value,
    char *why, size_t size)
{
	switch (opt) {
	case WSYNC_PUSH_OPT_MODEL:
		return s_model(r, value, why, size);
	case WSYNC_PUSH_OPT_TIMEOUT:
		if (wsync_parse_seconds(value, &r->timeout_ms) < 0)
			return s_bad(why, size, "--timeout wants seconds (like 2.5), not \"%s\"",
			    value);
		return 0;
	case WSYNC_PUSH_OPT_WAIT:
		return s_wait_spec(r, value, why, size);
	case WSYNC_PUSH_OPT_WORKERS:
		free(r->targets);
		if ((r->targets = wsync_split(value, &r->ntargets)) == NULL)
			return s_bad(why, size, "out of memory");
		return 0;
	case WSYNC_PUSH_OPT_WAIT_FOR:
		if (wsync_parse_number(value, &r->wait_for) < 0 || r->wait_for == 0)
			return s_bad(why, size, "--wait-for wants a version of 1 or more, not \"%s\"",
			    value);
		return 0;
	case WSYNC_PUSH_OPT_SLOT:
	case WSYNC_PUSH_OPT_COMMIT:
	case WSYNC_PUSH_OPT_ABORT:
		if (r->verb != WSYNC_PUSH_VERB_PUSH)
			return s_bad(why, size, "one of --slot, --commit and --abort a request");
		r->verb = opt == WSYNC_PUSH_OPT_SLOT ? WSYNC_PUSH_VERB_SLOT :
		    opt == WSYNC_PUSH_OPT_COMMIT ? WSYNC_PUSH_VERB_COMMIT : WSYNC_PUSH_VERB_ABORT;
		if (opt != WSYNC_PUSH_OPT_SLOT && (wsync_parse_number(value, &r->upload) < 0 ||
		    r->upload == 0))
			return s_bad(why, size, "%s wants the upload number a slot answer gave, "
			    "not \"%s\"", as_written, value);
		return 0;
	case WSYNC_PUSH_OPT_TRUST:
		r->trust = 1;
		return 0;
	case WSYNC_PUSH_OPT_NEXT_SLOT:
		r->next_slot = 1;
		return 0;
	case WSYNC_PUSH_OPT_BASE:
		r->base = value;
		return 0;
	case WSYNC_PUSH_OPT_SEQ:
		if (wsync_parse_number(value, &r->seq) < 0 || r->seq == 0)
			return s_bad(why, size, "--seq wants a sequence number of 1 or more, not "
			    "\"%s\"", value);
		return 0;
	}
	return s_bad(why, size, "unknown option '%s'", as_written);
}

/* Checks a --slot, --commit or --abort request (or a stray --trust-hashes or --next-slot). */
static int
s_check_slot_request(wsync_push_req_t *r, int nfiles, char *why, size_t size)
{
	if ((r->trust || r->next_slot) && r->verb != WSYNC_PUSH_VERB_COMMIT)
		return s_bad(why, size, "%s goes with --commit", r->trust ? "--trust-hashes" :
		    "--next-slot");
	if (nfiles != 0)
		return s_bad(why, size, "a slot request takes no file");
	if (r->verb == WSYNC_PUSH_VERB_SLOT) {
		if (r->seq != 0)
			return s_bad(why, size, "--seq goes with a push, not --slot");
		if (r->n == 0)
			return s_bad(why, size, "--slot wants -m MODEL=SIZE for each model");
		if (r->waits || r->wait_for != 0)
			return s_bad(why, size, "--slot takes no wait: give -w with --commit");
		for (int i = 0; i < r->n; i++)
			if (r->items[i].path == NULL || wsync_parse_number(r->items[i].path, &r->sizes[i]) < 0 ||
			    r->sizes[i] == 0)
				return s_bad(why, size, "--slot wants -m MODEL=SIZE (bytes, 1 or more), "
				    "not -m %s%s%s", r->items[i].model, r->items[i].path ? "=" : "",
				    r->items[i].path ? r->items[i].path : "");
		return 0;
	}
	if (r->n != 0 || r->targets != NULL || r->wait_for != 0 || r->seq != 0)
		return s_bad(why, size, "%s takes only the upload%s",
		    r->verb == WSYNC_PUSH_VERB_COMMIT ? "--commit" : "--abort",
		    r->verb == WSYNC_PUSH_VERB_COMMIT ? ", -t, -w, --trust-hashes and --next-slot" :
		    "");
	if (r->verb == WSYNC_PUSH_VERB_ABORT && r->waits)
		return s_bad(why, size, "--abort takes only the upload");
	return 0;
}

int
wsync_push_req_check(wsync_push_req_t *r, char *const *files, int n, int in_batch,
    char *why, size_t size)
{
	if (r->base != NULL && (r->verb != WSYNC_PUSH_VERB_PUSH || r->trust || r->next_slot))
		return s_bad(why, size, "--base goes with a push of a file, not a slot");
	if (r->verb != WSYNC_PUSH_VERB_PUSH || r->trust || r->next_slot)
		return s_check_slot_request(r, n, why, size);
	if (r->n == 0)
		return s_bad(why, size, "no model given (-m MODEL)");
	if (r->wait_for != 0) {
		if (r->seq != 0)
			return s_bad(why, size, "--seq goes with a push, not --wait-for");
		if (r->n != 1 || r->with_files || n != 0)
			return s_bad(why, size, "--wait-for takes one -m MODEL and no file");
		if (!r->waits)
			r->wait_mode = WSYNC_WAIT_ALL;
		r->waits = 1;
	} else if (r->with_files == 0) {
		if (r->n != 1 || n != 1)
			return s_bad(why, size, n == 0 ? "no file given (use - for stdin)" :
			    "one file per push; for several models use -m MODEL=FILE");
		r->items[0].path = files[0];
	} else if (r->with_files != r->n || n != 0)
		return s_bad(why, size, "with several models, give each its file as -m MODEL=FILE");
	for (int i = 0; in_batch && i < r->n; i++)
		if (r->items[i].path != NULL && strcmp(r->items[i].path, "-") == 0)
			return s_bad(why, size, "- (stdin) carries the requests in --batch: give "
			    "a file");
	if (r->base != NULL && (r->wait_for != 0 || r->n != 1))
		return s_bad(why, size, "--base names what was pushed before of the one model "
		    "pushed");
	if (r->base != NULL && strcmp(r->base, "-") == 0)
		return s_bad(why, size, "--base -: the base is a file or directory, not stdin");
	r->items[0].base = r->base;
	return 0;
}

int
wsync_push_req_push(wsync_client_t *client, wsync_push_req_t *r, wsync_err_t *err)
{
	if (r->wait_for != 0) {
		r->items[0].version = r->wait_for;
		return 0;
	}
	if (wsync_client_sign_seq(client, r->seq, err) < 0) {
		char why[sizeof(err->msg)];
		snprintf(why, sizeof(why), "%s", err->msg);
		return wsync_err_set(err, err->code, "--seq goes with --sign-key: %.900s", why);
	}
	return wsync_client_push(client, r->items, r->n, (const char *const *)r->targets,
	    r->ntargets, r->timeout_ms, err);
}

wsync_wait_t
wsync_push_req_wait_of(const wsync_push_req_t *r)
{
	return (wsync_wait_t){ .mode = r->wait_mode, .count = r->wait_count,
	    .ids = (const char *const *)r->wait_ids, .nids = r->nwait_ids };
}

char *
wsync_push_req_unseen(wsync_client_t *client, const wsync_push_req_t *r, int timeout_ms,
    wsync_err_t *err)
{
	char *status, *out = NULL;
	size_t len;
	json_t *root, *workers;
	FILE *f;

	if (!r->waits || r->wait_mode != WSYNC_WAIT_IDS)
		return strdup("");
	if ((status = wsync_client_status_json(client, timeout_ms, err)) == NULL)
		return NULL;
	root = json_loads(status, 0, NULL);
	free(status);
	workers = json_object_get(root, "workers");
	if ((f = open_memstream(&out, &len)) == NULL) {
		json_decref(root);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	for (int i = 0; i < r->nwait_ids; i++) {
		size_t j;
		json_t *w;
		json_array_foreach(workers, j, w) {
			const char *id = json_string_value(json_object_get(w, "worker"));
			if (id != NULL && strcmp(id, r->wait_ids[i]) == 0)
				break;
		}
		if (j == json_array_size(workers))
			fprintf(f, "%s%s", ftell(f) > 0 ? ", " : "", r->wait_ids[i]);
	}
	fclose(f);
	json_decref(root);
	return out;
}

int
wsync_push_req_wait(wsync_client_t *client, wsync_push_req_t *r, int64_t deadline_ms,
    char **missing, wsync_err_t *err)
{
	const wsync_wait_t wait = wsync_push_req_wait_of(r);

	*missing = NULL;
	for (int i = 0; r->waits && i < r->n; i++) {
		int64_t left = deadline_ms - wsync_now_ms();
		if (wsync_client_wait(client, r->items[i].model, r->items[i].version, &wait,
		    left > 0 ? (int)left : 0, missing, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- request lines ---- */

/*
 * Splits line in place into at most max words at blanks; a word that starts
 * with '"' runs to the closing '"' (\" and \\ inside stand for " and \) and
 * loses its quotes. The number of words, or -1 with why.
 */
static int
s_words(char *line, char **words, int max, char *why, size_t size)
{
	static const char blanks[] = " \t\r\n";
	char *in = line, *out;
	int n = 0;

	for (;;) {
		in += strspn(in, blanks);
		if (*in == '\0')
			return n;
		if (n == max)
			return s_bad(why, size, "more than %d words in a request", max);
		words[n++] = out = in;
		if (*in != '"') {
			in += strcspn(in, blanks);
			if (*in != '\0')
				*in++ = '\0';
			continue;
		}
		for (in++; *in != '"'; in++) {
			if (*in == '\0')
				return s_bad(why, size, "a quoted word has no closing quote");
			if (*in == '\\' && (in[1] == '"' || in[1] == '\\'))
				in++;
			*out++ = *in;
		}
		in++;
		if (*in != '\0' && strchr(blanks, *in) == NULL)
			return s_bad(why, size, "a closing quote must end its word");
		*out = '\0';
	}
}

/*
 * The options a request line may name; code 0 marks an option of the
 * wsync-push --batch command itself, refused in a request.
 */
static const struct s_opt {
	const char *name;
	char letter;
	int value;
	int code;
} s_opts[] = {
	{ "abort", 0, 1, WSYNC_PUSH_OPT_ABORT },
	{ "base", 0, 1, WSYNC_PUSH_OPT_BASE },
	{ "batch", 0, 0, 0 },
	{ "commit", 0, 1, WSYNC_PUSH_OPT_COMMIT },
	{ "endpoint", 'e', 1, 0 },
	{ "help", 'h', 0, 0 },
	{ "hub-key", 0, 1, 0 },
	{ "key", 0, 1, 0 },
	{ "model", 'm', 1, WSYNC_PUSH_OPT_MODEL },
	{ "next-slot", 0, 0, WSYNC_PUSH_OPT_NEXT_SLOT },
	{ "progress", 0, 0, 0 },
	{ "quiet", 'q', 0, 0 },
	{ "seq", 0, 1, WSYNC_PUSH_OPT_SEQ },
	{ "sign-key", 0, 1, 0 },
	{ "slot", 0, 0, WSYNC_PUSH_OPT_SLOT },
	{ "timeout", 't', 1, WSYNC_PUSH_OPT_TIMEOUT },
	{ "transfer", 0, 1, 0 },
	{ "trust-hashes", 0, 0, WSYNC_PUSH_OPT_TRUST },
	{ "version", 'V', 0, 0 },
	{ "wait", 'w', 1, WSYNC_PUSH_OPT_WAIT },
	{ "wait-for", 0, 1, WSYNC_PUSH_OPT_WAIT_FOR },
	{ "workers", 'W', 1, WSYNC_PUSH_OPT_WORKERS },
};
#define S_NOPTS ((int)(sizeof(s_opts) / sizeof(*s_opts)))

/* The long option named by the len bytes at name: exact, else a unique prefix; NULL. */
static const struct s_opt *
s_opt_long(const char *name, size_t len)
{
	const struct s_opt *found = NULL;

	for (int i = 0; i < S_NOPTS; i++)
		if (strncmp(s_opts[i].name, name, len) == 0 && s_opts[i].name[len] == '\0')
			return &s_opts[i];
	for (int i = 0; i < S_NOPTS; i++) {
		if (strncmp(s_opts[i].name, name, len) != 0)
			continue;
		if (found != NULL)
			return NULL;
		found = &s_opts[i];
	}
	return found;
}

static const struct s_opt *
s_opt_short(char letter)
{
	for (int i = 0; i < S_NOPTS; i++)
		if (letter != 0 && s_opts[i].letter == letter)
			return &s_opts[i];
	return NULL;
}

/*
 * Applies option o, written as as_written, with its value: inline (not NULL)
 * or the next word (*at moves past it).
 */
static int
s_apply(wsync_push_req_t *r, const struct s_opt *o, const char *as_written, char *inline_value,
    char **words, int n, int *at, char *why, size_t size)
{
	char *value = NULL;

	if (o->code == 0)
		return s_bad(why, size, "%s is an option of the wsync-push --batch command, not "
		    "of a request", as_written);
	if (o->value) {
		if ((value = inline_value) == NULL && *at + 1 < n)
			value = words[++*at];
		if (value == NULL)
			return s_bad(why, size, "option '%s' needs a value", as_written);
	} else if (inline_value != NULL)
		return s_bad(why, size, "option '%s' takes no value", as_written);
	return wsync_push_req_option(r, o->code, as_written, value, why, size);
}

/*
 * Parses words as getopt_long would (options and files in any order, "--"
 * ends the options, long options by a unique prefix, "--name=value", short
 * ones clustered, "-t5"), without its global state; files collects the
 * operands.
 */
static int
s_parse_words(wsync_push_req_t *r, char **words, int n, char **files, int *nfiles,
    char *why, size_t size)
{
	int options = 1;

	*nfiles = 0;
	for (int at = 0; at < n; at++) {
		char *w = words[at], written[3] = "-";

		if (!options || w[0] != '-' || w[1] == '\0') {
			files[(*nfiles)++] = w;
			continue;
		}
		if (strcmp(w, "--") == 0) {
			options = 0;
			continue;
		}
		if (w[1] == '-') {
			char *eq = strchr(w, '=');
			size_t len = eq != NULL ? (size_t)(eq - w) : strlen(w);
			const struct s_opt *o = s_opt_long(w + 2, len - 2);

			if (o == NULL)
				return s_bad(why, size, "unknown option '%.*s'", (int)len, w);
			if (eq != NULL)
				*eq++ = '\0';
			if (s_apply(r, o, w, eq, words, n, &at, why, size) < 0)
				return -1;
			continue;
		}
		for (char *c = w + 1; *c != '\0'; c++) {
			const struct s_opt *o = s_opt_short(*c);

			written[1] = *c;
			if (o == NULL)
				return s_bad(why, size, "unknown option '-%c'", *c);
			/* A value is the rest of the word ("-t5"), else the next word. */
			if (s_apply(r, o, written, o->value && c[1] != '\0' ? c + 1 : NULL, words, n,
			    &at, why, size) < 0)
				return -1;
			if (o->value)
				break;
		}
	}
	return 0;
}

int
wsync_batch_parse(char *line, wsync_push_req_t *r, char *why, size_t size)
{
	char *words[S_MAX_WORDS], *files[S_MAX_WORDS];
	int n, nfiles;

	wsync_push_req_init(r);
	if ((n = s_words(line, words, S_MAX_WORDS, why, size)) <= 0)
		return n < 0 ? -1 : 1;
	if (s_parse_words(r, words, n, files, &nfiles, why, size) < 0)
		return -1;
	return wsync_push_req_check(r, files, nfiles, 1, why, size);
}

/* ---- a session: the slots it has open ---- */

/*
 * A slot this session has open: its models, for the commit's answer and
 * wait, and its sizes and workers, for a next slot like it.
 */
struct s_slot {
	uint64_t upload;                /* 0: no slot open at this entry */
	int n;
	char models[WSYNC_PUSH_MAX_MODELS][WSYNC_MAX_MODEL + 1];
	uint64_t sizes[WSYNC_PUSH_MAX_MODELS];
	char **targets;                 /* a copy of the request's -W, or NULL */
	int ntargets;
};

struct wsync_batch {
	wsync_client_t *client;         /* borrowed */
	struct s_slot slots[WSYNC_SLOTS_OPEN_MAX];
};

wsync_batch_t *
wsync_batch_new(wsync_client_t *client, wsync_err_t *err)
{
	wsync_batch_t *b = calloc(1, sizeof(*b));

	if (b == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	b->client = client;
	return b;
}

/* Forgets open slot at (committed, aborted or dropped by the hub). */
static void
s_slot_clear(wsync_batch_t *b, int at)
{
	b->slots[at].upload = 0;
	free(b->slots[at].targets);
	b->slots[at].targets = NULL;
}

/* How many slots are open. */
static int
s_slots_open(const wsync_batch_t *b)
{
	int n = 0;

	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++)
		n += b->slots[at].upload != 0;
	return n;
}

/* A copy of the n strings of v and their array in one block (free frees it); NULL: no memory. */
static char **
s_strv_dup(char *const *v, int n)
{
	size_t len = (size_t)(n + 1) * sizeof(char *);
	char **out, *to;

	for (int i = 0; i < n; i++)
		len += strlen(v[i]) + 1;
	if ((out = malloc(len)) == NULL)
		return NULL;
	to = (char *)(out + n + 1);
	for (int i = 0; i < n; i++) {
		size_t k = strlen(v[i]) + 1;
		out[i] = memcpy(to, v[i], k);
		to += k;
	}
	out[n] = NULL;
	return out;
}

/* Serves a slot request: answers "slot UPLOAD PATH...", remembering its models. */
static int
s_slot(wsync_batch_t *b, wsync_push_req_t *r, FILE *answer, wsync_err_t *err)
{
	char *paths[WSYNC_PUSH_MAX_MODELS] = { NULL }, **targets = NULL;
	struct s_slot *s;
	uint64_t upload;
	int at = 0;

	while (at < WSYNC_SLOTS_OPEN_MAX && b->slots[at].upload != 0)
		at++;
	if (at == WSYNC_SLOTS_OPEN_MAX)
		return wsync_err_set(err, EX_USAGE, "%d slots are open already: commit or abort "
		    "one first", WSYNC_SLOTS_OPEN_MAX);
	/* r's names are in the request's line, which the next one overwrites. */
	if (r->targets != NULL && (targets = s_strv_dup(r->targets, r->ntargets)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (wsync_client_slot(b->client, &(wsync_slot_ask_t){ .models = r->models,
	    .sizes = r->sizes, .n = r->n, .workers = (const char *const *)r->targets,
	    .nworkers = r->ntargets }, r->timeout_ms, &upload, paths, err) < 0) {
		free(targets);
		return -1;
	}
	s = &b->slots[at];
	s->upload = upload;
	s->n = r->n;
	s->targets = targets;
	s->ntargets = r->ntargets;
	fprintf(answer, "slot %" PRIu64, upload);
	for (int i = 0; i < r->n; i++) {
		snprintf(s->models[i], sizeof(s->models[i]), "%s", r->models[i]);
		s->sizes[i] = r->sizes[i];
		fprintf(answer, " %s", paths[i]);
		free(paths[i]);
	}
	return 0;
}

/* The index of the open slot r->upload, its models made r's items; -1 with err. */
static int
s_slot_find(wsync_batch_t *b, wsync_push_req_t *r, wsync_err_t *err)
{
	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++) {
		const struct s_slot *s = &b->slots[at];
		if (s->upload != r->upload)
			continue;
		r->n = s->n;
		for (int i = 0; i < r->n; i++) {
			r->items[i] = (wsync_push_item_t){ .model = s->models[i] };
			r->models[i] = s->models[i];
			r->sizes[i] = s->sizes[i];
		}
		/* The slot's own, lent: s_request takes them back before r is freed. */
		r->targets = s->targets;
		r->ntargets = s->ntargets;
		return at;
	}
	return wsync_err_set(err, EX_NOINPUT, "no open slot %" PRIu64 " (committed, aborted "
	    "or never given)", r->upload);
}

/*
 * Commits slot r->upload, waiting as asked; with --next-slot (r's sizes and
 * targets are then the slot's), asks at once for a slot like it.
 */
static int
s_commit(wsync_batch_t *b, wsync_push_req_t *r, char **missing, wsync_err_t *err)
{
	const wsync_wait_t wait = wsync_push_req_wait_of(r);
	const wsync_slot_ask_t next = { .models = r->models, .sizes = r->sizes, .n = r->n,
	    .workers = (const char *const *)r->targets, .nworkers = r->ntargets };
	const wsync_commit_t cm = { .upload = r->upload, .items = r->items, .n = r->n,
	    .trust = r->trust, .wait = r->waits ? &wait : NULL,
	    .next = r->next_slot ? &next : NULL };

	return wsync_client_commit(b->client, &cm, r->timeout_ms, missing, err);
}

/* Pushes r, then waits as asked. */
static int
s_push(wsync_batch_t *b, wsync_push_req_t *r, char **missing, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + r->timeout_ms;

	*missing = NULL;
	if (wsync_push_req_push(b->client, r, err) < 0)
		return -1;
	return wsync_push_req_wait(b->client, r, deadline, missing, err);
}

/*
 * Serves one parsed request, its answer written on success. A slot stays
 * open until the hub has committed, aborted or forgotten it (65, 66): after
 * another error it can still be aborted.
 */
static int
s_request(wsync_batch_t *b, wsync_push_req_t *r, FILE *answer, char **missing,
    wsync_err_t *err)
{
	int at = -1, rc;

	*missing = NULL;
	if (r->verb == WSYNC_PUSH_VERB_SLOT)
		return s_slot(b, r, answer, err);
	if (r->verb != WSYNC_PUSH_VERB_PUSH && (at = s_slot_find(b, r, err)) < 0)
		return -1;
	/* A slot ahead as well would leave a push no upload of those the hub allows. */
	if (r->next_slot && s_slots_open(b) == WSYNC_SLOTS_OPEN_MAX)
		r->next_slot = 0;
	if (r->verb == WSYNC_PUSH_VERB_ABORT)
		rc = wsync_client_abort(b->client, r->upload, r->timeout_ms, err);
	else if (r->verb == WSYNC_PUSH_VERB_COMMIT)
		rc = s_commit(b, r, missing, err);
	else
		rc = s_push(b, r, missing, err);
	if (at >= 0)
		r->targets = NULL;
	/* A commit whose wait timed out is committed all the same. */
	if (at >= 0 && (rc == 0 || err->code == EX_DATAERR || err->code == EX_NOINPUT ||
	    *missing != NULL))
		s_slot_clear(b, at);
	if (rc < 0)
		return -1;
	fprintf(answer, "ok");
	for (int i = 0; r->verb != WSYNC_PUSH_VERB_ABORT && i < r->n; i++)
		fprintf(answer, " %s %" PRIu64, r->items[i].model, r->items[i].version);
	return 0;
}

int
wsync_batch_serve(wsync_batch_t *b, char *line, char **answer)
{
	wsync_push_req_t r;
	wsync_err_t err = { 0 };
	char why[600], *missing = NULL, *text = NULL, *save = NULL;
	size_t len;
	FILE *out;
	int parsed = wsync_batch_parse(line, &r, why, sizeof(why));

	*answer = NULL;
	if (parsed == 1)
		return 0;
	if ((out = open_memstream(&text, &len)) == NULL) {
		wsync_push_req_free(&r);
		return -1;
	}
	if (parsed < 0)
		fprintf(out, "error %d %s", EX_USAGE, why);
	else if (s_request(b, &r, out, &missing, &err) < 0) {
		wsync_err_t ignored;
		fprintf(out, "error %d %s", err.code ? err.code : EX_SOFTWARE, err.msg);
		for (char *m = missing ? strtok_r(missing, "\n", &save) : NULL; m != NULL;
		    m = strtok_r(NULL, "\n", &save))
			fprintf(out, "; %s", m);
		/* The hub may have gone or restarted: say hello again for the next one. */
		if (err.code == EX_UNAVAILABLE || err.code == EX_PROTOCOL ||
		    (err.code == EX_TEMPFAIL && missing == NULL)) {
			wsync_client_reconnect(b->client, S_CONNECT_MS, &ignored);
			/* A new connection owns none of the old one's slots. */
			for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++)
				s_slot_clear(b, at);
		}
	}
	free(missing);
	wsync_push_req_free(&r);
	if (fclose(out) != 0) {
		free(text);
		return -1;
	}
	*answer = text;
	return 0;
}

void
wsync_batch_destroy(wsync_batch_t **batch)
{
	wsync_batch_t *b = *batch;

	if (b == NULL)
		return;
	/* Slots left open are the hub's to drop (it does after 60 s): say so now instead. */
	for (int at = 0; at < WSYNC_SLOTS_OPEN_MAX; at++) {
		wsync_err_t ignored;
		if (b->slots[at].upload != 0)
			wsync_client_abort(b->client, b->slots[at].upload, 1000, &ignored);
		s_slot_clear(b, at);
	}
	free(b);
	*batch = NULL;
}
