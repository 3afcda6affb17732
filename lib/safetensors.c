/*
 * safetensors.c - the safetensors format: an 8-byte little-endian header
 * length N, N bytes of JSON naming each tensor's dtype, shape and byte range
 * in the data buffer, then the data buffer. Reading fills a wsync_file_t;
 * writing streams a wsync_tree_t.
 */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "file_int.h"
#include "io_int.h"
#include "tree_int.h"

/* A header longer than this is refused: real ones are a few MiB at most. */
#define ST_MAX_HEADER (100ULL << 20)

/*
 * Bytes of a name or dtype quoted in a message, and of a name quoted because
 * it is too long; longer ones end in "...".
 */
#define ST_QUOTE 256
#define ST_QUOTE_LONG_NAME 64

static const char *const s_names[WSYNC_DTYPE_COUNT] = {
	[WSYNC_F64] = "F64",         [WSYNC_F32] = "F32",
	[WSYNC_F16] = "F16",         [WSYNC_BF16] = "BF16",
	[WSYNC_I64] = "I64",         [WSYNC_I32] = "I32",
	[WSYNC_I16] = "I16",         [WSYNC_I8] = "I8",
	[WSYNC_U8] = "U8",           [WSYNC_BOOL] = "BOOL",
	[WSYNC_F8E4M3] = "F8_E4M3",  [WSYNC_F8E5M2] = "F8_E5M2",
};

static uint64_t
s_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void
s_put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/*
 * Copies s into buf (size bytes) for a message: control bytes become \xNN,
 * so that a hostile name cannot drive the terminal, and a long s is cut at a
 * character boundary and ends in "...".
 */
static const char *
s_quote(const char *s, char *buf, size_t size)
{
	size_t o = 0;

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		if (o + 8 >= size) {
			if ((c & 0xc0) == 0x80) {
				/* Mid-character: drop the bytes of it already copied. */
				while (o > 0 && ((unsigned char)buf[o - 1] & 0xc0) == 0x80)
					o--;
				if (o > 0)
					o--;
			}
			strcpy(buf + o, "...");
			return buf;
		}
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

/* Writes "[64,8]" into buf. */
static const char *
s_shape_str(const wsync_tensor_t *t, char *buf, size_t size)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, size, "[");
	for (int i = 0; i < t->ndim && o < size; i++)
		o += (size_t)snprintf(buf + o, size - o, "%s%llu", i ? "," : "",
		    (unsigned long long)t->shape[i]);
	if (o < size)
		snprintf(buf + o, size - o, "]");
	return buf;
}

int
wsync_safetensors_sniff(const unsigned char *p, size_t len)
{
	uint64_t n;

	/*
	 * The header length need not fit the file: a truncated file is still a
	 * safetensors file, and the parser says what is missing. A .wsync file
	 * cannot pass, since its bytes 4 to 7 are never all NUL.
	 */
	if (len < 9)
		return 0;
	n = s_le64(p);
	return n >= 2 && n <= UINT32_MAX && p[8] == '{';
}

static int
s_dtype(const char *name, wsync_dtype_t *dtype)
{
	for (int i = 0; i < WSYNC_DTYPE_COUNT; i++) {
		if (strcmp(name, s_names[i]) == 0) {
			*dtype = (wsync_dtype_t)i;
			return 0;
		}
	}
	return -1;
}

/* A JSON integer in [0, INT64_MAX] into *v; -1 for anything else. */
static int
s_uint(const json_t *j, uint64_t *v)
{
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return -1;
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

/*
 * Reads one header entry into t (path not set): dtype, shape and the byte
 * range, checked against the data buffer [data, data + datalen).
 */
static int
s_parse_tensor(const wsync_file_t *f, const char *name, const json_t *info,
    const unsigned char *data, uint64_t datalen, wsync_tensor_t *t, wsync_err_t *err)
{
	char q[ST_QUOTE], qd[ST_QUOTE], shape[WSYNC_MAX_DIMS * 21 + 3];
	const json_t *dtype, *dims, *offsets;
	uint64_t begin, end, want;
	size_t i;

	s_quote(name, q, sizeof(q));
	if (!json_is_object(info))
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: not a JSON object",
		    f->name, q);
	dtype = json_object_get(info, "dtype");
	if (!json_is_string(dtype))
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: dtype %s",
		    f->name, q, dtype ? "is not a string" : "missing");
	if (s_dtype(json_string_value(dtype), &t->dtype) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: unsupported dtype \"%s\"",
		    f->name, q, s_quote(json_string_value(dtype), qd, sizeof(qd)));

	dims = json_object_get(info, "shape");
	if (!json_is_array(dims))
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape %s",
		    f->name, q, dims ? "is not an array" : "missing");
	if (json_array_size(dims) > WSYNC_MAX_DIMS)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape has %zu dims "
		    "(at most %d)", f->name, q, json_array_size(dims), WSYNC_MAX_DIMS);
	t->ndim = (int)json_array_size(dims);
	for (i = 0; i < json_array_size(dims); i++)
		if (s_uint(json_array_get(dims, i), &t->shape[i]) < 0)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape "
			    "must be an array of non-negative integers", f->name, q);

	offsets = json_object_get(info, "data_offsets");
	if (offsets == NULL)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data_offsets missing",
		    f->name, q);
	if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
	    s_uint(json_array_get(offsets, 0), &begin) < 0 ||
	    s_uint(json_array_get(offsets, 1), &end) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data_offsets must be "
		    "2 non-negative integers", f->name, q);
	if (end < begin)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data_offsets "
		    "[%llu,%llu] end before begin", f->name, q,
		    (unsigned long long)begin, (unsigned long long)end);
	if (end > datalen)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data_offsets "
		    "[%llu,%llu] beyond the data buffer of %llu bytes", f->name, q,
		    (unsigned long long)begin, (unsigned long long)end,
		    (unsigned long long)datalen);

	s_shape_str(t, shape, sizeof(shape));
	if (wsync_tensor_nbytes(t->dtype, t->ndim, t->shape, &want) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape %s of %s "
		    "is too large", f->name, q, shape, wsync_dtype_name(t->dtype));
	if (want != end - begin)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape %s of %s needs "
		    "%llu bytes, data_offsets give %llu", f->name, q, shape,
		    wsync_dtype_name(t->dtype), (unsigned long long)want,
		    (unsigned long long)(end - begin));
	t->nbytes = want;
	t->hash = 0;
	t->offset = (uint64_t)(data - f->base) + begin;
	t->data = data + begin;
	return 0;
}

/* Pushes __metadata__'s entries, in their order in the header. */
static int
s_parse_meta(wsync_file_t *f, json_t *meta, wsync_err_t *err)
{
	char q[ST_QUOTE];
	const char *key;
	json_t *value;

	if (!json_is_object(meta))
		return wsync_err_set(err, EX_DATAERR, "%s: __metadata__ is not a JSON object",
		    f->name);
	json_object_foreach(meta, key, value) {
		char *k, *v;

		if (!json_is_string(value))
			return wsync_err_set(err, EX_DATAERR, "%s: __metadata__ %s: value is "
			    "not a string", f->name, s_quote(key, q, sizeof(q)));
		k = strdup(key);
		v = strdup(json_string_value(value));
		if (k == NULL || v == NULL) {
			free(k);
			free(v);
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		}
		if (wsync_file_push_meta(f, k, v, err) < 0)
			return -1;
	}
	return 0;
}

/* Orders tensors by where their data is; names break ties (zero-size tensors). */
static int
s_cmp_offset(const void *a, const void *b)
{
	const wsync_tensor_t *x = a, *y = b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return strcmp(x->path, y->path);
}

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 when it is not one. */
static size_t
s_utf8_len(const unsigned char *p, size_t n)
{
	size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 :
	    p[0] >= 0xe0 && p[0] < 0xf0 ? 3 : p[0] >= 0xf0 && p[0] < 0xf5 ? 4 : 0;

	if (len == 0 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return len;
}

/*
 * Refuses a header with bytes that are not UTF-8, naming the JSON string that
 * holds them (a tensor's name, quoted with \xNN escapes) rather than a column.
 */
static int
s_utf8_check(const wsync_file_t *f, const char *h, size_t n, wsync_err_t *err)
{
	const unsigned char *p = (const unsigned char *)h;
	char name[ST_QUOTE], q[ST_QUOTE] = "";
	size_t i = 0, start = 0, end;
	int in_str = 0;

	while (i < n) {
		size_t len = s_utf8_len(p + i, n - i);
		if (len == 0)
			break;
		if (p[i] == '"') {
			in_str = !in_str;
			start = i + 1;
		} else if (p[i] == '\\' && in_str) {
			i++;
		}
		i += len;
	}
	if (i >= n)
		return 0;
	if (!in_str)
		return wsync_err_set(err, EX_DATAERR, "%s: the header is not UTF-8 at byte %zu",
		    f->name, 8 + i);
	for (end = i; end < n && p[end] != '"'; end++)
		;
	snprintf(name, sizeof(name), "%.*s", (int)(end - start), h + start);
	/* Bytes at 0x80 and above become \xNN too: the name cannot be printed as it is. */
	for (size_t o = 0, k = 0; name[k] != '\0' && o + 5 < sizeof(q); k++)
		o += (size_t)snprintf(q + o, sizeof(q) - o, (unsigned char)name[k] >= 0x80 ||
		    (unsigned char)name[k] < 0x20 ? "\\x%02x" : "%c", (unsigned char)name[k]);
	return wsync_err_set(err, EX_DATAERR, "%s: tensor \"%s\": the name is not UTF-8",
	    f->name, q);
}

int
wsync_safetensors_parse(wsync_file_t *f, wsync_err_t *err)
{
	char q[ST_QUOTE_LONG_NAME];
	json_error_t jerr;
	json_t *root = NULL, *info;
	wsync_tensor_t *t = NULL;
	const unsigned char *data;
	const char *name;
	size_t n = 0, pushed = 0, cap;
	uint64_t hlen;
	int rc = -1;

	if (f->size < 8)
		return wsync_err_set(err, EX_DATAERR, "%s: truncated: needs 8 bytes, "
		    "file has %zu", f->name, f->size);
	hlen = s_le64(f->base);
	if (hlen > f->size - 8)
		return wsync_err_set(err, EX_DATAERR, "%s: truncated: header needs %llu "
		    "bytes, file has %zu", f->name, (unsigned long long)hlen + 8, f->size);
	if (hlen > ST_MAX_HEADER)
		return wsync_err_set(err, EX_DATAERR, "%s: header of %llu bytes is over "
		    "the limit of %llu", f->name, (unsigned long long)hlen, ST_MAX_HEADER);
	data = f->base + 8 + hlen;

	if (s_utf8_check(f, (const char *)f->base + 8, (size_t)hlen, err) < 0)
		return -1;
	root = json_loadb((const char *)f->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES,
	    &jerr);
	if (root == NULL)
		return wsync_err_set(err, EX_DATAERR, "%s: bad JSON header: line %d, "
		    "column %d: %s", f->name, jerr.line, jerr.column, jerr.text);
	if (!json_is_object(root)) {
		wsync_err_set(err, EX_DATAERR, "%s: JSON header is not an object", f->name);
		goto out;
	}
	cap = json_object_size(root);
	if (json_object_get(root, "__metadata__") != NULL)
		cap--;
	if (cap > WSYNC_MAX_TENSORS) {
		wsync_err_set(err, EX_DATAERR, "%s: %zu tensors (at most %d)", f->name, cap,
		    WSYNC_MAX_TENSORS);
		goto out;
	}
	if (cap > 0 && (t = calloc(cap, sizeof(*t))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}

	json_object_foreach(root, name, info) {
		size_t len = strlen(name);

		if (strcmp(name, "__metadata__") == 0) {
			if (s_parse_meta(f, info, err) < 0)
				goto out;
			continue;
		}
		if (len == 0) {
			wsync_err_set(err, EX_DATAERR, "%s: a tensor name is empty", f->name);
			goto out;
		}
		if (len > WSYNC_MAX_PATH) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: name longer than %d bytes",
			    f->name, s_quote(name, q, sizeof(q)), WSYNC_MAX_PATH);
			goto out;
		}
		if (s_parse_tensor(f, name, info, data, f->size - 8 - hlen, &t[n], err) < 0)
			goto out;
		if ((t[n].path = strdup(name)) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
		n++;
	}

	if (n > 1)
		qsort(t, n, sizeof(*t), s_cmp_offset);
	while (pushed < n)
		if (wsync_file_push_tensor(f, &t[pushed++], err) < 0)
			goto out;
	f->kind = WSYNC_KIND_SAFETENSORS;
	rc = 0;
out:
	for (size_t i = pushed; i < n; i++)
		free((char *)t[i].path);
	free(t);
	json_decref(root);
	return rc;
}

/* The header: __metadata__ when there is meta, then every tensor in tree order. */
static json_t *
s_header(const wsync_tree_t *tree, const char *name, wsync_err_t *err)
{
	char q[ST_QUOTE];
	json_t *root, *meta, *shape, *info;
	uint64_t off = 0;

	if ((root = json_object()) == NULL)
		goto nomem;
	if (tree->nmeta > 0) {
		if ((meta = json_object()) == NULL ||
		    json_object_set_new(root, "__metadata__", meta) < 0)
			goto nomem;
		for (size_t i = 0; i < tree->nmeta; i++) {
			const struct wsync_tree_meta *m = &tree->meta[i];
			json_t *v = json_string(m->value);

			if (v == NULL || json_object_set_new(meta, m->key, v) < 0) {
				wsync_err_set(err, EX_DATAERR, "%s: meta %s: key or value is "
				    "not UTF-8, which safetensors needs", name,
				    s_quote(m->key, q, sizeof(q)));
				goto fail;
			}
		}
	}
	for (size_t i = 0; i < tree->n; i++) {
		const struct wsync_tree_tensor *t = &tree->t[i];

		if (strcmp(t->path, "__metadata__") == 0) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor __metadata__: the name is "
			    "reserved in safetensors", name);
			goto fail;
		}
		if (t->nbytes > (uint64_t)INT64_MAX - off) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data ends beyond "
			    "2^63 bytes", name, s_quote(t->path, q, sizeof(q)));
			goto fail;
		}
		if ((shape = json_array()) == NULL)
			goto nomem;
		for (int d = 0; d < t->ndim; d++) {
			if (json_array_append_new(shape,
			    json_integer((json_int_t)t->shape[d])) < 0) {
				json_decref(shape);
				goto nomem;
			}
		}
		/* "o" takes shape's reference, on failure too. */
		info = json_pack("{s:s, s:o, s:[I, I]}", "dtype", s_names[t->dtype],
		    "shape", shape, "data_offsets", (json_int_t)off,
		    (json_int_t)(off + t->nbytes));
		if (info == NULL)
			goto nomem;
		if (json_object_set_new(root, t->path, info) < 0) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: name is not UTF-8, "
			    "which safetensors needs", name, s_quote(t->path, q, sizeof(q)));
			goto fail;
		}
		off += t->nbytes;
	}
	return root;
nomem:
	wsync_err_set(err, EX_SOFTWARE, "out of memory");
fail:
	json_decref(root);
	return NULL;
}

int
wsync_tree_write_safetensors_fd(wsync_tree_t *tree, int fd, const char *name,
    wsync_err_t *err)
{
	json_t *root;
	char *json = NULL;
	unsigned char *head = NULL;
	size_t len, padded;
	int rc = -1;

	if (wsync_tree_sort(tree, err) < 0)
		return -1;
	if ((root = s_header(tree, name, err)) == NULL)
		return -1;
	if ((json = json_dumps(root, JSON_COMPACT)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	/* Spaces pad the header so that the data buffer starts 8-aligned. */
	len = strlen(json);
	padded = (len + 7) & ~(size_t)7;
	if ((head = malloc(8 + padded)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	s_put_le64(head, padded);
	memcpy(head + 8, json, len);
	memset(head + 8 + len, ' ', padded - len);
	if (wsync_write_all(fd, head, 8 + padded) < 0)
		goto ioerr;
	for (size_t i = 0; i < tree->n; i++)
		if (wsync_write_all(fd, tree->t[i].data, (size_t)tree->t[i].nbytes) < 0)
			goto ioerr;
	rc = 0;
	goto out;
ioerr:
	wsync_err_set(err, EX_IOERR, "%s: write failed: %s", name, strerror(errno));
out:
	free(head);
	free(json);
	json_decref(root);
	return rc;
}

int
wsync_tree_write_safetensors_file(wsync_tree_t *tree, const char *path,
    wsync_err_t *err)
{
	return wsync_write_atomic(path, wsync_tree_write_safetensors_fd, tree, err);
}
