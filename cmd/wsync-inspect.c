/* wsync-inspect - show a weight file, verify it, or diff two. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char s_usage[] =
    "usage: wsync-inspect [--json] [--verify] [--verify-key FILE]... FILE|DIR|-\n"
    "       wsync-inspect diff [--json] A B\n"
    "       wsync-inspect [--json | --prometheus] [-t SEC] -e ENDPOINT | --hub\n";

static void
s_help(void)
{
	printf("%s\n"
	    "Show a weight file (.wsync or safetensors), or a checkpoint directory as the\n"
	    "document a push of it makes: its header, then every tensor.\n"
	    "\n"
	    "With -e or --hub, show a live hub: models, versions, workers and what each\n"
	    "has applied.\n"
	    "\n"
	    "  -e, --endpoint ENDPOINT  the hub to show\n"
	    "      --hub                the hub at $WSYNC_ENDPOINT, else the local one\n"
	    "  -j, --json               print one JSON document instead of columns\n"
	    "      --prometheus         print a hub's metrics in Prometheus' text format\n"
	    "  -t, --timeout SEC        bound on reaching the hub (default 5)\n"
	    CLI_KEY_HELP
	    "      --verify             recompute every tensor's hash; print FILE: OK or FAILED\n"
	    "      --verify-key FILE    check the signature with this public key (repeatable):\n"
	    "                           does it hold, and are the bytes the signed ones\n"
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "diff compares the tensors of A and B (files or directories); exit 0 when\n"
	    "equal, 1 when not.\n"
	    "Exit status: 0 ok, 1 files differ, 64 usage, 65 bad file, 66 no input,\n"
	    "69 hub unavailable, 70 internal error, 74 I/O error, 75 timed out,\n"
	    "76 protocol error, 77 permission denied. See wsync-inspect(1).\n", s_usage);
	exit(0);
}

/*
 * Makes s safe for a terminal: control and non-ASCII bytes as \xNN. The result
 * lives in one of eight static buffers, so eight may be used in one printf.
 */
static const char *
s_safe(const char *s)
{
	static char bufs[8][4 * 1100];
	static unsigned which;
	char *buf = bufs[which++ % 8];
	size_t n = 0;

	for (; *s != '\0' && n < sizeof(bufs[0]) - 5; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c >= 0x7f || c == '\\')
			n += (size_t)snprintf(buf + n, 5, "\\x%02x", c);
		else
			buf[n++] = (char)c;
	}
	buf[n] = '\0';
	return buf;
}

/* A JSON string for s; invalid UTF-8 comes out escaped as s_safe does. */
static json_t *
s_jstr(const char *s)
{
	json_t *j = json_string(s);

	return j != NULL ? j : json_string(s_safe(s));
}

static void
s_shape(const wsync_tensor_t *t, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "[");

	for (int d = 0; d < t->ndim && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, d ? "," : "", t->shape[d]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
}

static json_t *
s_jshape(const wsync_tensor_t *t)
{
	json_t *a = json_array();

	for (int d = 0; d < t->ndim; d++)
		json_array_append_new(a, json_integer((json_int_t)t->shape[d]));
	return a;
}

static json_t *
s_jhex(uint64_t v)
{
	char hex[17];

	snprintf(hex, sizeof(hex), "%016" PRIx64, v);
	return json_string(hex);
}

static void
s_dump_json(json_t *doc)
{
	if (json_dumpf(doc, stdout, JSON_INDENT(2)) < 0)
		cli_die(EX_IOERR, "cannot write JSON output");
	putchar('\n');
	json_decref(doc);
}

/* ---- signatures ---- */

/* Who signed f, as read from its manifest (unchecked): 0, or -1 when it is not signed. */
struct s_signer {
	wsync_manifest_t m;
	char key[2 * WSYNC_KEYID + 1];
	char when[32];
	int checked;                    /* --verify-key given */
	int reason;                     /* WSYNC_VERIFY_*, when checked */
	wsync_err_t err;
};

static int
s_signer(const wsync_file_t *f, struct s_signer *s)
{
	const wsync_verifykey_t *keys;
	struct tm *tm;
	time_t t;
	int nkeys;

	memset(s, 0, sizeof(*s));
	keys = cli_verify_keys(&nkeys);
	if (wsync_file_kind(f) != WSYNC_KIND_WSYNC)
		return -1;
	if (nkeys > 0) {
		s->checked = 1;
		s->reason = wsync_verify_file(f, keys, nkeys, NULL, &s->err);
		if (s->reason < 0)
			cli_die_err(&s->err);
	}
	if (wsync_manifest_of(f, &s->m) < 0)
		return -1;
	wsync_keyid_hex(s->m.key, s->key);
	/* The manifest is not checked yet: a time past any calendar (gmtime NULL) is shown raw. */
	t = (time_t)s->m.time;
	if ((tm = s->m.time <= INT64_MAX ? gmtime(&t) : NULL) == NULL ||
	    strftime(s->when, sizeof(s->when), "%Y-%m-%dT%H:%M:%SZ", tm) == 0)
		snprintf(s->when, sizeof(s->when), "%" PRIu64 " s", s->m.time);
	return 0;
}

/* The signature's lines of the text view; 77 when --verify-key found it does not hold. */
static int
s_signer_text(const wsync_file_t *f)
{
	struct s_signer s;
	int is_signed = s_signer(f, &s) == 0;

	if (is_signed) {
		printf("signed    key %s seq %" PRIu64 " at %s, %zu model%s\n", s.key, s.m.seq,
		    s.when, s.m.nmodels, s.m.nmodels == 1 ? "" : "s");
		wsync_manifest_free(&s.m);
	}
	if (!s.checked)
		return 0;
	if (s.reason == WSYNC_VERIFY_OK) {
		printf("signature holds\n");
		return 0;
	}
	printf("signature FAILED (%s)\n", wsync_verify_reason(s.reason));
	cli_warn("%s", s_safe(s.err.msg));
	return EX_NOPERM;
}

/* The "signed" member of the JSON view; 77 when --verify-key found it does not hold. */
static int
s_signer_json(const wsync_file_t *f, json_t *doc)
{
	struct s_signer s;
	json_t *o;

	if (s_signer(f, &s) == 0) {
		json_t *models = json_array();
		for (size_t i = 0; i < s.m.nmodels; i++)
			json_array_append_new(models, json_string(s.m.models[i].model));
		o = json_pack("{s:s, s:I, s:I, s:s, s:o}", "key", s.key,
		    "seq", (json_int_t)s.m.seq, "time", (json_int_t)s.m.time, "at", s.when,
		    "models", models);
		wsync_manifest_free(&s.m);
		json_object_set_new(doc, "signed", o);
	}
	if (s.checked) {
		json_object_set_new(doc, "signature", json_pack("{s:b, s:s}", "holds",
		    s.reason == WSYNC_VERIFY_OK, "reason", wsync_verify_reason(s.reason)));
		if (s.reason != WSYNC_VERIFY_OK)
			cli_warn("%s", s_safe(s.err.msg));
	}
	return s.checked && s.reason != WSYNC_VERIFY_OK ? EX_NOPERM : 0;
}

static int
s_show_json(const wsync_file_t *f)
{
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;
	json_t *doc = json_object(), *meta = json_object(), *tree = json_array();
	int rc;

	json_object_set_new(doc, "file", s_jstr(wsync_file_name(f)));
	json_object_set_new(doc, "kind", json_string(wsync ? "wsync" : "safetensors"));
	json_object_set_new(doc, "model", wsync ? json_string(wsync_file_model(f)) : json_null());
	json_object_set_new(doc, "version", json_integer((json_int_t)wsync_file_version(f)));
	json_object_set_new(doc, "format", json_integer(wsync_file_format(f)));
	json_object_set_new(doc, "content_id", wsync ? s_jhex(wsync_file_content_id(f)) :
	    json_null());
	json_object_set_new(doc, "tensors", json_integer((json_int_t)wsync_file_count(f)));
	json_object_set_new(doc, "params", json_integer((json_int_t)wsync_file_params(f)));
	json_object_set_new(doc, "bytes", json_integer((json_int_t)wsync_file_data_bytes(f)));
	json_object_set_new(doc, "file_bytes", json_integer((json_int_t)wsync_file_size(f)));
	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		json_object_set_new(meta, s_safe(m->key), s_jstr(m->value));
	}
	json_object_set_new(doc, "meta", meta);
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		json_array_append_new(tree, json_pack("{s:o, s:s, s:o, s:I, s:I, s:o}",
		    "path", s_jstr(t->path), "dtype", wsync_dtype_name(t->dtype),
		    "shape", s_jshape(t), "bytes", (json_int_t)t->nbytes,
		    "offset", (json_int_t)t->offset, "hash", wsync ? s_jhex(t->hash) : json_null()));
	}
	json_object_set_new(doc, "tree", tree);
	rc = s_signer_json(f, doc);
	s_dump_json(doc);
	return rc;
}

static int
s_show_text(const wsync_file_t *f)
{
	int wsync = wsync_file_kind(f) == WSYNC_KIND_WSYNC;
	size_t n = wsync_file_count(f), wpath = 4, wdtype = 5, wshape = 5, wbytes = 5;
	char shape[256], num[32];
	int rc = 0;

	printf("file      %s\n", s_safe(wsync_file_name(f)));
	printf("kind      %s\n", wsync ? "wsync" : "safetensors");
	if (wsync) {
		printf("model     %s\n", wsync_file_model(f));
		printf("version   %" PRIu64 "\n", wsync_file_version(f));
		printf("format    %u\n", wsync_file_format(f));
		printf("content   %016" PRIx64 "\n", wsync_file_content_id(f));
		rc = s_signer_text(f);
	}
	printf("tensors   %zu\n", n);
	printf("params    %" PRIu64 "\n", wsync_file_params(f));
	printf("bytes     %" PRIu64 "\n", wsync_file_data_bytes(f));
	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		printf("%-10s%s=", i == 0 ? "meta" : "", s_safe(m->key));
		printf("%s\n", s_safe(m->value));
	}
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		size_t w = strlen(s_safe(t->path));
		wpath = w > wpath ? w : wpath;
		w = strlen(wsync_dtype_name(t->dtype));
		wdtype = w > wdtype ? w : wdtype;
		s_shape(t, shape, sizeof(shape));
		wshape = strlen(shape) > wshape ? strlen(shape) : wshape;
		w = (size_t)snprintf(num, sizeof(num), "%" PRIu64, t->nbytes);
		wbytes = w > wbytes ? w : wbytes;
	}
	if (n == 0)
		return rc;
	printf("\n%-*s  %-*s  %-*s  %*s  %s\n", (int)wpath, "PATH", (int)wdtype, "DTYPE",
	    (int)wshape, "SHAPE", (int)wbytes, "BYTES", "HASH");
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		s_shape(t, shape, sizeof(shape));
		printf("%-*s  %-*s  %-*s  %*" PRIu64 "  ", (int)wpath, s_safe(t->path),
		    (int)wdtype, wsync_dtype_name(t->dtype), (int)wshape, shape, (int)wbytes,
		    t->nbytes);
		if (wsync)
			printf("%016" PRIx64 "\n", t->hash);
		else
			printf("-\n");
	}
	return rc;
}

static void
s_report_bad(const wsync_tensor_t *t, uint64_t computed, void *arg)
{
	cli_warn("%s: tensor %s: hash mismatch: stored %016" PRIx64 ", computed %016" PRIx64,
	    s_safe((const char *)arg), s_safe(t->path), t->hash, computed);
}

static int
s_verify(const wsync_file_t *f)
{
	int nkeys, reason;
	const wsync_verifykey_t *keys = cli_verify_keys(&nkeys);
	wsync_err_t err;
	const char *name = wsync_file_name(f);

	if (wsync_file_kind(f) != WSYNC_KIND_WSYNC)
		cli_die(EX_DATAERR, "%s: a safetensors file has no hashes to verify (convert it "
		    "with wsync-convert)", s_safe(name));
	if (wsync_file_verify(f, s_report_bad, (void *)name, &err) < 0) {
		printf("%s: FAILED\n", s_safe(name));
		return EX_DATAERR;
	}
	/* With --verify-key, OK also means signed by one of the keys, its bytes the signed ones. */
	if (nkeys > 0 && (reason = wsync_verify_file(f, keys, nkeys, NULL, &err)) != 0) {
		if (reason < 0)
			cli_die_err(&err);
		printf("%s: FAILED\n", s_safe(name));
		cli_warn("%s", s_safe(err.msg));
		return EX_NOPERM;
	}
	printf("%s: OK\n", s_safe(name));
	return 0;
}

/* ---- diff ---- */

static int
s_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Largest |a - b| over the elements of two tensors of one dtype and shape; NaN if any
 * element is NaN on one side only. */
static double
s_max_abs_diff(const wsync_tensor_t *a, const wsync_tensor_t *b)
{
	uint64_t n = a->nbytes / wsync_dtype_size(a->dtype);
	double max = 0;

	for (uint64_t i = 0; i < n; i++) {
		double x = wsync_dtype_get(a->dtype, a->data, i);
		double y = wsync_dtype_get(b->dtype, b->data, i);
		if (isnan(x) || isnan(y)) {
			if (!(isnan(x) && isnan(y)))
				return NAN;
			continue;
		}
		if (fabs(x - y) > max || isinf(x - y))
			max = fabs(x - y);
	}
	return max;
}

static void
s_diff_entry(json_t *list, int json, char sign, const wsync_tensor_t *t)
{
	char shape[256];

	s_shape(t, shape, sizeof(shape));
	if (json)
		json_array_append_new(list, json_pack("{s:o, s:s, s:o}", "path", s_jstr(t->path),
		    "dtype", wsync_dtype_name(t->dtype), "shape", s_jshape(t)));
	else
		printf("%c %s %s %s\n", sign, s_safe(t->path), wsync_dtype_name(t->dtype), shape);
}

/*
 * Opens a weight file, or a checkpoint directory as the .wsync document a push
 * of it makes (every tensor read and hashed into an unlinked temporary file),
 * saying what the directory leaves out.
 */
static wsync_file_t *
s_open(const char *path, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	const char *tmp = getenv("TMPDIR");
	wsync_file_t *f = NULL;
	wsync_tree_t *tree;
	wsync_ckpt_t *ck;
	int fd;

	if (!wsync_is_dir(path))
		return wsync_input_open(path, err);
	if ((ck = wsync_ckpt_open(path, err)) == NULL)
		return NULL;
	if (wsync_ckpt_left_out(ck)[0] != '\0')
		cli_warn("%s: left out: %s", path, wsync_ckpt_left_out(ck));
	cli_model_from_name(path, model);
	if ((fd = open(tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", O_TMPFILE | O_RDWR |
	    O_CLOEXEC, 0600)) < 0)
		wsync_err_set(err, EX_IOERR, "%s: cannot make a temporary file: %s",
		    tmp != NULL ? tmp : "/tmp", strerror(errno));
	else if ((tree = wsync_ckpt_tree(ck, model, 0, err)) != NULL) {
		if (wsync_tree_write_fd(tree, fd, path, err) == 0)
			f = wsync_file_open_fd(fd, path, err);
		wsync_tree_destroy(&tree);
	}
	/* The file is mapped: its descriptor may go. */
	if (fd >= 0)
		close(fd);
	wsync_ckpt_close(&ck);
	return f;
}

static int
s_diff(const char *pa, const char *pb, int json)
{
	wsync_err_t err;
	wsync_file_t *a = s_open(pa, &err), *b;
	json_t *added = json_array(), *removed = json_array(), *changed = json_array();
	size_t na, nb, npaths = 0, unchanged = 0, differ = 0;
	const char **paths;

	if (a == NULL)
		cli_die_err(&err);
	if ((b = s_open(pb, &err)) == NULL)
		cli_die_err(&err);
	na = wsync_file_count(a);
	nb = wsync_file_count(b);
	if ((paths = calloc(na + nb + 1, sizeof(*paths))) == NULL)
		cli_die(EX_SOFTWARE, "out of memory");
	for (size_t i = 0; i < na; i++)
		paths[npaths++] = wsync_file_tensor(a, i)->path;
	for (size_t i = 0; i < nb; i++)
		if (wsync_file_find(a, wsync_file_tensor(b, i)->path) == NULL)
			paths[npaths++] = wsync_file_tensor(b, i)->path;
	qsort(paths, npaths, sizeof(*paths), s_cmp_str);

	for (size_t i = 0; i < npaths; i++) {
		const wsync_tensor_t *x = wsync_file_find(a, paths[i]);
		const wsync_tensor_t *y = wsync_file_find(b, paths[i]);
		char sx[256], sy[256];
		json_t *c;

		if (y == NULL || x == NULL) {
			s_diff_entry(y == NULL ? removed : added, json, y == NULL ? '-' : '+',
			    y == NULL ? x : y);
			differ++;
			continue;
		}
		s_shape(x, sx, sizeof(sx));
		s_shape(y, sy, sizeof(sy));
		if (x->dtype == y->dtype && strcmp(sx, sy) == 0 &&
		    memcmp(x->data, y->data, x->nbytes) == 0) {
			unchanged++;
			continue;
		}
		differ++;
		c = json_pack("{s:o}", "path", s_jstr(x->path));
		if (x->dtype != y->dtype) {
			json_object_set_new(c, "dtype", json_pack("[s,s]",
			    wsync_dtype_name(x->dtype), wsync_dtype_name(y->dtype)));
			if (!json)
				printf("~ %s dtype %s -> %s\n", s_safe(x->path),
				    wsync_dtype_name(x->dtype), wsync_dtype_name(y->dtype));
		}
		if (strcmp(sx, sy) != 0) {
			json_object_set_new(c, "shape", json_pack("[o,o]", s_jshape(x), s_jshape(y)));
			if (!json)
				printf("~ %s shape %s -> %s\n", s_safe(x->path), sx, sy);
		}
		if (x->dtype == y->dtype && strcmp(sx, sy) == 0) {
			double d = s_max_abs_diff(x, y);
			json_object_set_new(c, "max_abs_diff", isnan(d) ? json_string("nan") :
			    json_real(d));
			if (!json)
				printf("~ %s values max_abs_diff=%.9g\n", s_safe(x->path), d);
		}
		json_array_append_new(changed, c);
	}
	if (json)
		s_dump_json(json_pack("{s:b, s:o, s:o, s:o, s:I}", "equal", differ == 0,
		    "added", added, "removed", removed, "changed", changed,
		    "unchanged", (json_int_t)unchanged));
	else {
		printf("= %zu unchanged\n", unchanged);
		json_decref(added);
		json_decref(removed);
		json_decref(changed);
	}
	free(paths);
	wsync_file_close(&a);
	wsync_file_close(&b);
	return differ ? 1 : 0;
}

/* ---- a live hub ---- */

/* A string member of o, "" when absent. */
static const char *
s_jraw(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "";
}

static const char *
s_jtext(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s_safe(s) : "-";
}

static void
s_time(double t, char *buf, size_t len)
{
	time_t secs = (time_t)t;
	struct tm tm;

	if (t <= 0 || gmtime_r(&secs, &tm) == NULL)
		snprintf(buf, len, "-");
	else
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The hub's head of model, from the status document. */
static json_int_t
s_head_of(json_t *models, const char *model)
{
	size_t i;
	json_t *m;

	json_array_foreach(models, i, m)
		if (strcmp(s_jraw(m, "model"), model) == 0)
			return json_integer_value(json_object_get(m, "head"));
	return 0;
}

static void
s_show_hub_text(json_t *st, const char *endpoint)
{
	json_t *models = json_object_get(st, "models"), *workers = json_object_get(st, "workers");
	json_t *m, *v, *w, *name;
	size_t i, j;
	char when[32];

	printf("hub %s at %s\n\n", s_jtext(st, "hub"), s_safe(endpoint));
	printf("%-20s %9s %12s  %-20s  %-16s  %s\n", "MODEL", "VERSION", "BYTES", "COMMITTED",
	    "CONTENT", "PUSHER");
	json_array_foreach(models, i, m) {
		json_int_t head = json_integer_value(json_object_get(m, "head"));
		json_array_foreach(json_object_get(m, "versions"), j, v) {
			json_int_t version = json_integer_value(json_object_get(v, "version"));
			s_time(json_number_value(json_object_get(v, "time")), when, sizeof(when));
			printf("%-20s %8lld%s %12lld  %-20s  %-16s  %s\n", s_jtext(m, "model"),
			    (long long)version, version == head ? "*" : " ",
			    (long long)json_integer_value(json_object_get(v, "size")), when,
			    s_jtext(v, "content"), s_jtext(v, "pusher"));
		}
	}
	printf("\n%-24s %-20s %9s %5s %8s  %-5s  %-8s %12s  %-24s  %s\n", "WORKER", "MODEL",
	    "APPLIED", "LAG", "SEEN", "STATE", "TRANSFER", "WIRE", "VIA", "LAST FAILURE");
	json_array_foreach(workers, i, w) {
		json_t *applied = json_object_get(w, "applied"), *fail = json_object_get(w, "failure");
		json_array_foreach(json_object_get(w, "models"), j, name) {
			const char *model = json_is_string(name) ? json_string_value(name) : "";
			json_int_t a = json_integer_value(json_object_get(applied, model));
			json_int_t head = s_head_of(models, model);
			char failure[700] = "-", wire[24] = "-";
			json_int_t bytes = json_integer_value(json_object_get(w, "wire"));
			if (json_is_object(fail) && strcmp(s_jraw(fail, "model"), model) == 0)
				snprintf(failure, sizeof(failure), "version %lld: %s",
				    (long long)json_integer_value(json_object_get(fail, "version")),
				    s_jtext(fail, "reason"));
			const char *via = s_jtext(w, "via");
			if (bytes > 0)
				snprintf(wire, sizeof(wire), "%lld", (long long)bytes);
			printf("%-24s %-20s %9lld %5lld %7.1fs  %-5s  %-8s %12s  %-24s  %s\n",
			    s_jtext(w, "worker"), s_safe(model), (long long)a,
			    (long long)(head > a ? head - a : 0),
			    json_number_value(json_object_get(w, "seen")),
			    json_is_true(json_object_get(w, "alive")) ? "alive" : "gone",
			    s_jtext(w, "transfer"), wire, via[0] ? via : "-", failure);
		}
	}
	/* A root that places relays: who feeds whom, in the order versions flow. */
	if (json_array_size(json_object_get(st, "relays")) > 0)
		printf("\n%-24s %-8s %-40s  %s\n", "RELAY", "STATE", "ENDPOINT", "PARENT");
	json_array_foreach(json_object_get(st, "relays"), i, w) {
		const char *parent = s_jtext(w, "parent");
		printf("%-24s %-8s %-40s  %s\n", s_jtext(w, "relay"),
		    json_is_true(json_object_get(w, "bad")) ? "dropped" :
		    json_is_true(json_object_get(w, "slow")) ? "slow" : "placed",
		    s_jtext(w, "endpoint"), parent[0] ? parent : "-");
	}
	/* A worker that fetches only some tensors (wsync-watch --select) says which. */
	json_array_foreach(workers, i, w) {
		json_t *sel = json_object_get(w, "select"), *pat;
		if (json_array_size(sel) == 0)
			continue;
		printf("\nworker %s selects:", s_jtext(w, "worker"));
		json_array_foreach(sel, j, pat)
			printf(" %s", json_is_string(pat) ? s_safe(json_string_value(pat)) : "?");
		printf("\n");
	}
}

/* s_show_hub's output: columns, JSON (1), or Prometheus' text format. */
#define S_PROMETHEUS 2

/* ---- a hub's metrics, in Prometheus' text exposition format ---- */

/* A label value: backslash, double quote and newline escaped. */
static const char *
s_label(const char *s)
{
	static char bufs[2][2 * 300];
	static unsigned which;
	char *buf = bufs[which++ % 2];
	size_t n = 0;

	for (; *s != '\0' && n < sizeof(bufs[0]) - 3; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			buf[n++] = '\\';
		buf[n++] = *s == '\n' ? 'n' : *s;
	}
	buf[n] = '\0';
	return buf;
}

static void
s_family(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The hub's counters (the status's "counters"): key, metric, type, help. */
static const struct {
	const char *key, *name, *type, *help;
} s_counters[] = {
	{ "uploads", "wsync_hub_uploads_total", "counter",
	    "Uploads begun (pushes, puts and slots) since the hub started." },
	{ "uploads_open", "wsync_hub_uploads_open", "gauge", "Uploads in flight now." },
	{ "commits", "wsync_hub_commits_total", "counter",
	    "Versions committed since the hub started." },
	{ "waits", "wsync_hub_waits_total", "counter",
	    "Waits for workers begun since the hub started." },
	{ "waits_pending", "wsync_hub_waits_pending", "gauge",
	    "Waits for workers not answered yet." },
	{ "waits_timed_out", "wsync_hub_waits_timed_out_total", "counter",
	    "Waits that ran out of time since the hub started." },
	{ "bytes_served", "wsync_hub_served_bytes_total", "counter",
	    "Bytes of versions sent to clients through the socket." },
	{ "bytes_received", "wsync_hub_received_bytes_total", "counter",
	    "Bytes of versions received from pushers through the socket." },
	{ "refused", "wsync_hub_refused_requests_total", "counter",
	    "Requests the hub answered with an error since it started." },
	{ "dropped", "wsync_hub_dropped_messages_total", "counter",
	    "Messages the hub dropped unanswered (malformed, or from a blocked connection)." },
};

/* The sample name{model} of model m's newest version: its size, or its commit time. */
static void
s_head_sample(json_t *m, const char *name, int time)
{
	json_int_t head = json_integer_value(json_object_get(m, "head"));
	size_t j;
	json_t *v;

	json_array_foreach(json_object_get(m, "versions"), j, v) {
		if (json_integer_value(json_object_get(v, "version")) != head)
			continue;
		printf("%s{model=\"%s\"} ", name, s_label(s_jraw(m, "model")));
		if (time)
			printf("%.3f\n", json_number_value(json_object_get(v, "time")));
		else
			printf("%lld\n", (long long)json_integer_value(json_object_get(v, "size")));
	}
}

enum s_worker_value { S_APPLIED, S_LAG, S_FAILURES };

/* The samples name{worker,model} of worker w, one per model it follows. */
static void
s_worker_samples(json_t *w, json_t *models, const char *name, enum s_worker_value what)
{
	json_t *applied = json_object_get(w, "applied"), *model_name;
	size_t j;

	json_array_foreach(json_object_get(w, "models"), j, model_name) {
		const char *model = json_is_string(model_name) ? json_string_value(model_name) : "";
		json_int_t a = json_integer_value(json_object_get(applied, model)), value = a;
		json_int_t head = s_head_of(models, model);
		if (what == S_LAG)
			value = head > a ? head - a : 0;
		else if (what == S_FAILURES)
			value = json_integer_value(json_object_get(json_object_get(w, "failures"),
			    model));
		printf("%s{worker=\"%s\",model=\"%s\"} %lld\n", name, s_label(s_jraw(w, "worker")),
		    s_label(model), (long long)value);
	}
}

static void
s_show_hub_prometheus(json_t *st)
{
	json_t *models = json_object_get(st, "models"), *workers = json_object_get(st, "workers");
	json_t *counters = json_object_get(st, "counters"), *m, *w;
	size_t i;

	s_family("wsync_hub_info", "gauge", "The hub answering, by its name (host:pid); always 1.");
	printf("wsync_hub_info{hub=\"%s\"} 1\n", s_label(s_jraw(st, "hub")));
	s_family("wsync_model_head_version", "gauge", "The newest version of each model.");
	json_array_foreach(models, i, m)
		printf("wsync_model_head_version{model=\"%s\"} %lld\n", s_label(s_jraw(m, "model")),
		    (long long)json_integer_value(json_object_get(m, "head")));
	s_family("wsync_model_versions_kept", "gauge", "Versions of each model the hub keeps.");
	json_array_foreach(models, i, m)
		printf("wsync_model_versions_kept{model=\"%s\"} %zu\n", s_label(s_jraw(m, "model")),
		    json_array_size(json_object_get(m, "versions")));
	s_family("wsync_model_head_bytes", "gauge", "Size of the newest version's file.");
	json_array_foreach(models, i, m)
		s_head_sample(m, "wsync_model_head_bytes", 0);
	s_family("wsync_model_head_commit_time_seconds", "gauge",
	    "When the newest version was committed, in Unix seconds.");
	json_array_foreach(models, i, m)
		s_head_sample(m, "wsync_model_head_commit_time_seconds", 1);
	s_family("wsync_worker_applied_version", "gauge",
	    "The version of each model a worker last applied (0: none yet).");
	json_array_foreach(workers, i, w)
		s_worker_samples(w, models, "wsync_worker_applied_version", S_APPLIED);
	s_family("wsync_worker_lag_versions", "gauge",
	    "How many versions a worker is behind the newest of each model it follows.");
	json_array_foreach(workers, i, w)
		s_worker_samples(w, models, "wsync_worker_lag_versions", S_LAG);
	s_family("wsync_worker_failures_total", "counter",
	    "Versions of each model a worker reported it failed to apply.");
	json_array_foreach(workers, i, w)
		s_worker_samples(w, models, "wsync_worker_failures_total", S_FAILURES);
	s_family("wsync_worker_last_seen_age_seconds", "gauge",
	    "Seconds since the hub last heard from a worker.");
	json_array_foreach(workers, i, w)
		printf("wsync_worker_last_seen_age_seconds{worker=\"%s\"} %.3f\n",
		    s_label(s_jraw(w, "worker")), json_number_value(json_object_get(w, "seen")));
	s_family("wsync_worker_alive", "gauge",
	    "1 when the hub heard from a worker in the last 5 seconds and it did not leave.");
	json_array_foreach(workers, i, w)
		printf("wsync_worker_alive{worker=\"%s\"} %d\n", s_label(s_jraw(w, "worker")),
		    json_is_true(json_object_get(w, "alive")));
	/* A hub older than the counters has none: their families are left out. */
	for (i = 0; i < sizeof(s_counters) / sizeof(s_counters[0]); i++) {
		json_t *v = json_object_get(counters, s_counters[i].key);
		if (!json_is_integer(v))
			continue;
		s_family(s_counters[i].name, s_counters[i].type, s_counters[i].help);
		printf("%s %lld\n", s_counters[i].name, (long long)json_integer_value(v));
	}
}

static int
s_show_hub(const wsync_client_opts_t *o, int json)
{
	int timeout_ms = o->timeout_ms;
	wsync_err_t err;
	wsync_client_t *c = wsync_client_new(o, &err);
	json_error_t jerr;
	json_t *st;
	char *text;

	if (c == NULL)
		cli_die_err(&err);
	if ((text = wsync_client_status_json(c, timeout_ms, &err)) == NULL)
		cli_die_err(&err);
	if ((st = json_loads(text, 0, &jerr)) == NULL)
		cli_die(EX_PROTOCOL, "%s: unreadable status: %s", wsync_client_endpoint(c),
		    jerr.text);
	free(text);
	if (json == S_PROMETHEUS) {
		s_show_hub_prometheus(st);
		json_decref(st);
	} else if (json) {
		json_object_set_new(st, "endpoint", json_string(wsync_client_endpoint(c)));
		s_dump_json(st);
	} else {
		s_show_hub_text(st, wsync_client_endpoint(c));
		json_decref(st);
	}
	wsync_client_destroy(&c);
	return 0;
}

int
main(int argc, char **argv)
{
	enum { OPT_HUB = 256, OPT_PROMETHEUS, OPT_VERIFY_KEY };
	static const struct option opts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		CLI_KEY_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ "hub", no_argument, NULL, OPT_HUB },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
		{ "timeout", required_argument, NULL, 't' },
		{ "verify", no_argument, NULL, 'v' },
		{ "verify-key", required_argument, NULL, OPT_VERIFY_KEY },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int json = 0, verify = 0, verify_key = 0, hub = 0, prometheus = 0, timeout_ms = 5000, c, rc;
	const char *endpoint = NULL, *key = NULL, *hub_key = NULL;
	wsync_err_t err;
	wsync_file_t *f;

	cli_init("wsync-inspect");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:e:hjt:V", opts, NULL)) != -1) {
		switch (c) {
		case 'e': endpoint = optarg; hub = 1; break;
		case OPT_HUB: hub = 1; break;
		case OPT_PROMETHEUS: prometheus = 1; break;
		case CLI_OPT_KEY: key = optarg; break;
		case CLI_OPT_HUB_KEY: hub_key = optarg; break;
		case 't': timeout_ms = cli_seconds("--timeout", optarg); break;
		case 'h': s_help(); break;
		case 'j': json = 1; break;
		case 'v': verify = 1; break;
		case OPT_VERIFY_KEY: cli_verify_key(optarg); verify_key = 1; break;
		case 'V': cli_version(); break;
		default: cli_bad_option(argv, c);
		}
	}
	argc -= optind;
	argv += optind;
	if (prometheus && !hub)
		cli_usage_error("--prometheus shows a hub's metrics: give -e or --hub");
	if (prometheus && json)
		cli_usage_error("--json or --prometheus, not both");
	if (hub) {
		if (argc != 0 || verify || verify_key)
			cli_usage_error("a hub is shown alone: no file, no --verify");
		return s_show_hub(&(wsync_client_opts_t){ .endpoint = endpoint, .role = "inspect",
		    .timeout_ms = timeout_ms, .key = key, .hub_key = hub_key },
		    prometheus ? S_PROMETHEUS : json);
	}
	if (key != NULL || hub_key != NULL)
		cli_usage_error("--key and --hub-key are for a hub (-e or --hub)");
	if (argc >= 1 && strcmp(argv[0], "diff") == 0) {
		if (verify || verify_key)
			cli_usage_error("diff takes no --verify");
		optind = 1;
		while ((c = getopt_long(argc, argv, ":j", opts, NULL)) != -1) {
			if (c == 'j')
				json = 1;
			else if (c == ':' || c == '?')
				cli_bad_option(argv, c);
			else
				cli_usage_error("diff takes only --json");
		}
		if (argc - optind != 2)
			cli_usage_error("diff needs two files");
		return s_diff(argv[optind], argv[optind + 1], json);
	}
	if (argc != 1)
		cli_usage_error(argc == 0 ? "no file given (use - for stdin)" :
		    "one file at a time (or: wsync-inspect diff A B)");
	if ((f = s_open(argv[0], &err)) == NULL)
		cli_die_err(&err);
	rc = verify ? s_verify(f) : json ? s_show_json(f) : s_show_text(f);
	wsync_file_close(&f);
	if (fflush(stdout) != 0)
		cli_die(EX_IOERR, "cannot write output");
	return rc;
}
