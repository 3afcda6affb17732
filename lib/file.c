/* file.c - opening a weight file: mapping or buffering it, parsing .wsync, indexing. */
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "hash_int.h"
#include "io_int.h"
#include "mpcheck_int.h"
#include "pool_int.h"
#include "stream_hash_int.h"

/* Bytes of a mapped file hashed between mapping pages in and letting them go. */
#define S_HASH_WINDOW (8u << 20)
/* Bytes of a file read and hashed at a time when verifying through its descriptor. */
#define S_READ_PIECE (256u << 10)

/* Nesting allowed by the pre-check: root, tree, WSYNC_MAX_DEPTH levels, shape. */
#define S_MSGPACK_DEPTH (WSYNC_MAX_DEPTH + 4)
/* Objects allowed in one document: a tensor map holds at most 20 of them. */
#define S_MSGPACK_OBJECTS ((size_t)WSYNC_MAX_TENSORS * 24 + 4 * WSYNC_MAX_META + 64)
#define S_IMAGE_MIN (4u << 20)          /* a mapped file this large is parsed from an image */

static wsync_file_t *
s_new(const char *name, wsync_err_t *err)
{
	wsync_file_t *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->name = strdup(name)) == NULL) {
		free(f);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	f->fd = -1;
	return f;
}

void
wsync_file_close(wsync_file_t **fp)
{
	wsync_file_t *f = *fp;

	if (f == NULL)
		return;
	if (f->mem != WSYNC_MEM_BORROWED && f->base != NULL)
		munmap((void *)f->base, f->mapped);
	for (size_t i = 0; i < f->ntensors; i++)
		free((char *)f->tensors[i].path);
	for (size_t i = 0; i < f->nmeta; i++) {
		free((char *)f->meta[i].key);
		free((char *)f->meta[i].value);
	}
	free(f->tensors);
	free(f->by_path);
	free(f->meta);
	free(f->model);
	free(f->name);
	free(f);
	*fp = NULL;
}

int
wsync_file_push_tensor(wsync_file_t *f, const wsync_tensor_t *t, wsync_err_t *err)
{
	if (f->ntensors == WSYNC_MAX_TENSORS) {
		free((char *)t->path);
		return wsync_err_set(err, EX_DATAERR, "%s: more than %d tensors", f->name,
		    WSYNC_MAX_TENSORS);
	}
	if (f->ntensors == f->tensors_cap) {
		size_t cap = f->tensors_cap ? f->tensors_cap * 2 : 16;
		wsync_tensor_t *nt = realloc(f->tensors, cap * sizeof(*nt));
		if (nt == NULL) {
			free((char *)t->path);
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		}
		f->tensors = nt;
		f->tensors_cap = cap;
	}
	f->tensors[f->ntensors++] = *t;
	return 0;
}

int
wsync_file_push_meta(wsync_file_t *f, char *key, char *value, wsync_err_t *err)
{
	if (f->nmeta == WSYNC_MAX_META) {
		wsync_err_set(err, EX_DATAERR, "%s: meta has more than %d entries", f->name,
		    WSYNC_MAX_META);
		goto fail;
	}
	if (f->nmeta == f->meta_cap) {
		size_t cap = f->meta_cap ? f->meta_cap * 2 : 8;
		wsync_meta_t *nm = realloc(f->meta, cap * sizeof(*nm));
		if (nm == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
		f->meta = nm;
		f->meta_cap = cap;
	}
	f->meta[f->nmeta].key = key;
	f->meta[f->nmeta++].value = value;
	return 0;
fail:
	free(key);
	free(value);
	return -1;
}

static const wsync_file_t *s_sorting;

static int
s_cmp_index(const void *a, const void *b)
{
	return strcmp(s_sorting->tensors[*(const size_t *)a].path,
	    s_sorting->tensors[*(const size_t *)b].path);
}

/* XXH3-64 over each tensor's descriptor and hash, in path order. */
static uint64_t
s_content_id(const wsync_file_t *f)
{
	unsigned char desc[WSYNC_DESCRIBE_MAX + 8];
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < f->ntensors; i++) {
		const wsync_tensor_t *t = &f->tensors[f->by_path[i]];
		size_t n = wsync_tensor_describe(desc, t->path, t->dtype, t->ndim, t->shape);

		for (int b = 0; b < 8; b++)
			desc[n++] = (unsigned char)(t->hash >> (8 * b));
		XXH3_64bits_update(&st, desc, n);
	}
	return XXH3_64bits_digest(&st);
}

int
wsync_file_index(wsync_file_t *f, wsync_err_t *err)
{
	if ((f->by_path = malloc((f->ntensors + 1) * sizeof(*f->by_path))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; i < f->ntensors; i++) {
		const wsync_tensor_t *t = &f->tensors[i];
		f->by_path[i] = i;
		f->data_bytes += t->nbytes;
		f->params += t->nbytes / wsync_dtype_size(t->dtype);
	}
	/* qsort has no context argument in C11; the index is built by one thread. */
	s_sorting = f;
	qsort(f->by_path, f->ntensors, sizeof(*f->by_path), s_cmp_index);
	s_sorting = NULL;
	for (size_t i = 1; i < f->ntensors; i++) {
		const char *p = f->tensors[f->by_path[i]].path;
		if (strcmp(f->tensors[f->by_path[i - 1]].path, p) == 0)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: two tensors have "
			    "this path", f->name, p);
	}
	if (f->kind == WSYNC_KIND_WSYNC)
		f->content_id = s_content_id(f);
	return 0;
}

/* ---- the .wsync parser: pure, over f->base and f->size ---- */

/* The kind of a msgpack object, with its article, for messages ("an integer"). */
static const char *
s_type_name(msgpack_object_type type)
{
	switch (type) {
	case MSGPACK_OBJECT_NIL: return "nil";
	case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "an integer";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return "a float";
	case MSGPACK_OBJECT_STR: return "a string";
	case MSGPACK_OBJECT_ARRAY: return "an array";
	case MSGPACK_OBJECT_MAP: return "a map";
	case MSGPACK_OBJECT_BIN: return "a bin";
	case MSGPACK_OBJECT_EXT: return "an ext";
	default: return "an unknown object";
	}
}

/* A msgpack str as a NUL-terminated copy; NULL when it holds a NUL byte or no memory. */
static char *
s_strdup(const msgpack_object *o)
{
	char *s;

	if (memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL ||
	    (s = malloc(o->via.str.size + 1)) == NULL)
		return NULL;
	memcpy(s, o->via.str.ptr, o->via.str.size);
	s[o->via.str.size] = '\0';
	return s;
}

static int
s_str_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	    memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* The map qsort's comparator sorts: per thread, as a hub's loop and its relay's thread check files at once. */
static _Thread_local const msgpack_object_kv *s_dup_sorting;

static int
s_cmp_kv(const void *a, const void *b)
{
	const msgpack_object_str *x = &s_dup_sorting[*(const uint32_t *)a].key.via.str;
	const msgpack_object_str *y = &s_dup_sorting[*(const uint32_t *)b].key.via.str;
	int c = memcmp(x->ptr, y->ptr, x->size < y->size ? x->size : y->size);

	return c ? c : (x->size > y->size) - (x->size < y->size);
}

/*
 * Checks that a map's keys are strings of 1..WSYNC_MAX_KEY bytes without NUL,
 * none twice. where names the map for the message ("tree.actor", "meta").
 */
static int
s_check_keys(const wsync_file_t *f, const msgpack_object_map *m, const char *where,
    wsync_err_t *err)
{
	uint32_t *idx;
	int rc = 0;

	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key;
		if (k->type != MSGPACK_OBJECT_STR)
			return wsync_err_set(err, EX_DATAERR, "%s: %s: a key is %s, not a string",
			    f->name, where, s_type_name(k->type));
		if (k->via.str.size == 0 || k->via.str.size > WSYNC_MAX_KEY ||
		    memchr(k->via.str.ptr, '\0', k->via.str.size) != NULL)
			return wsync_err_set(err, EX_DATAERR, "%s: %s: key \"%.*s\" is empty, "
			    "longer than %d bytes or holds a NUL byte", f->name, where,
			    (int)(k->via.str.size > 40 ? 40 : k->via.str.size), k->via.str.ptr,
			    WSYNC_MAX_KEY);
	}
	if (m->size < 2)
		return 0;
	if ((idx = malloc(m->size * sizeof(*idx))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (uint32_t i = 0; i < m->size; i++)
		idx[i] = i;
	s_dup_sorting = m->ptr;
	qsort(idx, m->size, sizeof(*idx), s_cmp_kv);
	for (uint32_t i = 1; i < m->size && rc == 0; i++) {
		if (s_cmp_kv(&idx[i - 1], &idx[i]) == 0) {
			const msgpack_object_str *k = &m->ptr[idx[i]].key.via.str;
			rc = wsync_err_set(err, EX_DATAERR, "%s: %s: duplicate key \"%.*s\"",
			    f->name, where, (int)k->size, k->ptr);
		}
	}
	s_dup_sorting = NULL;
	free(idx);
	return rc;
}

/* Decodes the tensor map m found at path. */
static int
s_parse_tensor(wsync_file_t *f, const msgpack_object_map *m, const char *path,
    wsync_err_t *err)
{
	const msgpack_object *dtype = NULL, *shape = NULL, *hash = NULL, *data = NULL;
	wsync_tensor_t t = { 0 };
	char name[16];
	uint64_t want;

	if (s_check_keys(f, m, path, err) < 0)
		return -1;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
		if (s_str_is(k, "dtype"))
			dtype = v;
		else if (s_str_is(k, "shape"))
			shape = v;
		else if (s_str_is(k, "hash"))
			hash = v;
		else if (s_str_is(k, "data"))
			data = v;
		else if (s_str_is(k, "pad")) {
			if (v->type != MSGPACK_OBJECT_BIN)
				return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: pad is %s, "
				    "not a bin", f->name, path, s_type_name(v->type));
		} else
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: unknown field \"%.*s\"",
			    f->name, path, (int)k->via.str.size, k->via.str.ptr);
	}
	if (dtype == NULL || shape == NULL || hash == NULL)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: missing field %s", f->name,
		    path, dtype == NULL ? "dtype" : shape == NULL ? "shape" : "hash");
	if (dtype->type != MSGPACK_OBJECT_STR)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: dtype is %s, not a string",
		    f->name, path, s_type_name(dtype->type));
	snprintf(name, sizeof(name), "%.*s", (int)(dtype->via.str.size < 15 ?
	    dtype->via.str.size : 15), dtype->via.str.ptr);
	if (dtype->via.str.size > 15 || wsync_dtype_from_name(name, &t.dtype) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: unknown dtype \"%s%s\"",
		    f->name, path, name, dtype->via.str.size > 15 ? "..." : "");
	if (shape->type != MSGPACK_OBJECT_ARRAY || shape->via.array.size > WSYNC_MAX_DIMS)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape is not an array of "
		    "at most %d sizes", f->name, path, WSYNC_MAX_DIMS);
	t.ndim = (int)shape->via.array.size;
	for (int d = 0; d < t.ndim; d++) {
		const msgpack_object *dim = &shape->via.array.ptr[d];
		if (dim->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape[%d] is not a "
			    "non-negative integer", f->name, path, d);
		t.shape[d] = dim->via.u64;
	}
	if (hash->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: hash is %s, not an "
		    "unsigned integer", f->name, path, s_type_name(hash->type));
	t.hash = hash->via.u64;
	if (wsync_tensor_nbytes(t.dtype, t.ndim, t.shape, &want) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape overflows 64 bits",
		    f->name, path);
	if (want != data->via.bin.size)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: shape needs %llu bytes of "
		    "%s, data has %u", f->name, path, (unsigned long long)want, name,
		    data->via.bin.size);
	t.nbytes = want;
	/* A zero-size tensor has no data to place: it reports offset 0. */
	t.data = want ? (const unsigned char *)data->via.bin.ptr : f->base;
	t.offset = (uint64_t)((const unsigned char *)t.data - f->base);
	if (t.offset % WSYNC_ALIGN != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data at offset %llu is not "
		    "%d-byte aligned", f->name, path, (unsigned long long)t.offset, WSYNC_ALIGN);
	if ((t.path = strdup(path)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	return wsync_file_push_tensor(f, &t, err);
}

/* A tensor is a map whose "data" is a bin; anything else that is a map is a subtree. */
static const msgpack_object *
s_tensor_data(const msgpack_object_map *m)
{
	for (uint32_t i = 0; i < m->size; i++)
		if (s_str_is(&m->ptr[i].key, "data") && m->ptr[i].val.type == MSGPACK_OBJECT_BIN)
			return &m->ptr[i].val;
	return NULL;
}

/* Walks the subtree m whose path is path[0..plen), at depth (1 = below "tree"). */
static int
s_parse_tree(wsync_file_t *f, const msgpack_object_map *m, char *path, size_t plen,
    int depth, wsync_err_t *err)
{
	if (s_check_keys(f, m, plen ? path : "tree", err) < 0)
		return -1;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object_str *k = &m->ptr[i].key.via.str;
		const msgpack_object *v = &m->ptr[i].val;
		size_t n = plen + (plen > 0) + k->size;

		if (n > WSYNC_MAX_PATH)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %.*s...: path longer than "
			    "%d bytes", f->name, (int)(plen > 60 ? 60 : plen), path, WSYNC_MAX_PATH);
		if (plen > 0)
			path[plen] = '.';
		memcpy(path + plen + (plen > 0), k->ptr, k->size);
		path[n] = '\0';
		if (v->type != MSGPACK_OBJECT_MAP)
			return wsync_err_set(err, EX_DATAERR, "%s: %s: %s, not a tensor or a "
			    "subtree", f->name, path, s_type_name(v->type));
		if (depth > WSYNC_MAX_DEPTH)
			return wsync_err_set(err, EX_DATAERR, "%s: %s: nested deeper than %d levels",
			    f->name, path, WSYNC_MAX_DEPTH);
		if (s_tensor_data(&v->via.map) != NULL) {
			if (s_parse_tensor(f, &v->via.map, path, err) < 0)
				return -1;
		} else if (s_parse_tree(f, &v->via.map, path, n, depth + 1, err) < 0)
			return -1;
		path[plen] = '\0';
	}
	return 0;
}

static int
s_parse_meta(wsync_file_t *f, const msgpack_object *o, wsync_err_t *err)
{
	const msgpack_object_map *m = &o->via.map;

	if (o->type != MSGPACK_OBJECT_MAP)
		return wsync_err_set(err, EX_DATAERR, "%s: meta is %s, not a map", f->name,
		    s_type_name(o->type));
	if (s_check_keys(f, m, "meta", err) < 0)
		return -1;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *v = &m->ptr[i].val;
		char *key, *value;
		if (v->type != MSGPACK_OBJECT_STR || v->via.str.size > WSYNC_MAX_META_VALUE)
			return wsync_err_set(err, EX_DATAERR, "%s: meta %.*s: value is not a string "
			    "of at most %d bytes", f->name, (int)m->ptr[i].key.via.str.size,
			    m->ptr[i].key.via.str.ptr, WSYNC_MAX_META_VALUE);
		key = s_strdup(&m->ptr[i].key);
		value = s_strdup(v);
		if (key == NULL || value == NULL) {
			free(key);
			free(value);
			return wsync_err_set(err, EX_DATAERR, "%s: meta %.*s: value holds a NUL byte",
			    f->name, (int)m->ptr[i].key.via.str.size, m->ptr[i].key.via.str.ptr);
		}
		if (wsync_file_push_meta(f, key, value, err) < 0)
			return -1;
	}
	return 0;
}

/* Reads the top-level fields of the root map. */
static int
s_parse_root(wsync_file_t *f, const msgpack_object *root, wsync_err_t *err)
{
	static const char *const names[] = { "wsync", "model", "version", "meta", "tree" };
	const msgpack_object *field[5] = { NULL };
	const msgpack_object_map *m = &root->via.map;
	char path[WSYNC_MAX_PATH + 1] = "";

	if (s_check_keys(f, m, "top level", err) < 0)
		return -1;
	for (uint32_t i = 0; i < m->size; i++) {
		int j;
		for (j = 0; j < 5 && !s_str_is(&m->ptr[i].key, names[j]); j++)
			;
		if (j == 5)
			return wsync_err_set(err, EX_DATAERR, "%s: unknown top-level field \"%.*s\"",
			    f->name, (int)m->ptr[i].key.via.str.size, m->ptr[i].key.via.str.ptr);
		field[j] = &m->ptr[i].val;
		if (j == 2) {
			/* The value follows its key's bytes: that is where a hub stamps it. */
			const unsigned char *at = (const unsigned char *)m->ptr[i].key.via.str.ptr + 7;
			if (*at == 0xcf)
				f->version_offset = (uint64_t)(at + 1 - f->base);
		}
	}
	for (int j = 0; j < 5; j++)
		if (field[j] == NULL)
			return wsync_err_set(err, EX_DATAERR, "%s: missing top-level field \"%s\"",
			    f->name, names[j]);
	if (field[0]->type != MSGPACK_OBJECT_POSITIVE_INTEGER || field[0]->via.u64 == 0)
		return wsync_err_set(err, EX_DATAERR, "%s: field \"wsync\" is not a format version",
		    f->name);
	if (field[0]->via.u64 != WSYNC_FORMAT_VERSION)
		return wsync_err_set(err, EX_DATAERR, "%s: format version %llu is not supported "
		    "(this wsync reads version %d)", f->name,
		    (unsigned long long)field[0]->via.u64, WSYNC_FORMAT_VERSION);
	f->format = WSYNC_FORMAT_VERSION;
	if (field[1]->type != MSGPACK_OBJECT_STR || field[1]->via.str.size > WSYNC_MAX_MODEL ||
	    (f->model = s_strdup(field[1])) == NULL || wsync_model_id_check(f->model) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: model is not a valid model id (1 to %d "
		    "of A-Z a-z 0-9 . _ -)", f->name, WSYNC_MAX_MODEL);
	if (field[2]->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return wsync_err_set(err, EX_DATAERR, "%s: version is %s, not an unsigned "
		    "integer", f->name, s_type_name(field[2]->type));
	f->version = field[2]->via.u64;
	if (s_parse_meta(f, field[3], err) < 0)
		return -1;
	if (field[4]->type != MSGPACK_OBJECT_MAP)
		return wsync_err_set(err, EX_DATAERR, "%s: tree is %s, not a map", f->name,
		    s_type_name(field[4]->type));
	return s_parse_tree(f, &field[4]->via.map, path, 0, 1, err);
}

static int
s_is_map_header(unsigned char b)
{
	return (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
}

static int
s_parse_wsync(wsync_file_t *f, wsync_err_t *err)
{
	msgpack_unpacked doc;
	const unsigned char *map = f->base;
	unsigned char *image = NULL;
	int use_image = f->mem == WSYNC_MEM_MMAP && f->fd >= 0 && f->size >= S_IMAGE_MIN;
	char why[256];
	size_t end = 0, off = 0;
	int rc;

	if (f->size == 0 || !s_is_map_header(f->base[0]))
		return wsync_err_set(err, EX_DATAERR, "%s: not a .wsync file (%s)", f->name,
		    f->size == 0 ? "it is empty" : "it does not start with a msgpack map");
	/* A large mapped file: parsed from an image of its headers (mpcheck_int.h says why). */
	if (use_image)
		image = wsync_msgpack_image(f->fd, f->size, &end, S_MSGPACK_DEPTH,
		    S_MSGPACK_OBJECTS, why, sizeof(why));
	if (use_image ? image == NULL : wsync_msgpack_check(f->base, f->size, &end,
	    S_MSGPACK_DEPTH, S_MSGPACK_OBJECTS, why, sizeof(why)) < 0)
		return wsync_err_set(err, EX_DATAERR, "%s: %s", f->name, why);
	if (end != f->size) {
		rc = wsync_err_set(err, EX_DATAERR, "%s: trailing data after the document (%zu "
		    "bytes)", f->name, f->size - end);
		goto out;
	}
	if (image != NULL)
		f->base = image;
	msgpack_unpacked_init(&doc);
	if (msgpack_unpack_next(&doc, (const char *)f->base, f->size, &off) !=
	    MSGPACK_UNPACK_SUCCESS)
		rc = wsync_err_set(err, EX_DATAERR, "%s: not a valid msgpack document", f->name);
	else
		rc = s_parse_root(f, &doc.data, err);
	msgpack_unpacked_destroy(&doc);
	/* The tensors' data is the file's: offsets are the same in both. */
	f->base = map;
	for (size_t i = 0; i < f->ntensors; i++)
		f->tensors[i].data = map + f->tensors[i].offset;
out:
	if (image != NULL)
		munmap(image, f->size);
	return rc;
}

/* ---- loading ---- */

/* Reads all of a non-seekable fd into an anonymous mapping, which stays page aligned. */
static int
s_slurp(wsync_file_t *f, int fd, wsync_err_t *err)
{
	size_t cap = 1 << 20, len = 0;
	unsigned char *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (buf == MAP_FAILED)
		return wsync_err_set(err, EX_SOFTWARE, "%s: out of memory", f->name);
	for (;;) {
		ssize_t n;
		if (len == cap) {
			unsigned char *nb = mremap(buf, cap, cap * 2, MREMAP_MAYMOVE);
			if (nb == MAP_FAILED) {
				munmap(buf, cap);
				return wsync_err_set(err, EX_SOFTWARE, "%s: out of memory after %zu "
				    "bytes", f->name, len);
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			munmap(buf, cap);
			return wsync_err_set(err, EX_IOERR, "%s: read failed: %s", f->name,
			    strerror(errno));
		}
		len += (size_t)n;
	}
	f->base = buf;
	f->size = len;
	f->mapped = cap;
	f->mem = WSYNC_MEM_ANON;
	return 0;
}

static int
s_load(wsync_file_t *f, int fd, wsync_err_t *err)
{
	struct stat st;
	void *p;

	if (fstat(fd, &st) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: %s", f->name, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return wsync_err_set(err, EX_NOINPUT, "%s: is a directory", f->name);
	if (!S_ISREG(st.st_mode))
		return s_slurp(f, fd, err);
	if (st.st_size == 0)
		return wsync_err_set(err, EX_DATAERR, "%s: not a weight file (it is empty)",
		    f->name);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return wsync_err_set(err, EX_IOERR, "%s: cannot map: %s", f->name,
		    strerror(errno));
	f->base = p;
	f->size = f->mapped = (size_t)st.st_size;
	f->mem = WSYNC_MEM_MMAP;
	return 0;
}

/* Parses a loaded file; safetensors only when any_kind. */
static int
s_parse(wsync_file_t *f, int any_kind, wsync_err_t *err)
{
	if (f->size == 0)
		return wsync_err_set(err, EX_DATAERR, "%s: not a weight file (it is empty)",
		    f->name);
	/* A .wsync file cannot pass the sniff: bytes 4 to 7 would have to be NUL. */
	if (wsync_safetensors_sniff(f->base, f->size)) {
		if (!any_kind)
			return wsync_err_set(err, EX_DATAERR, "%s: a safetensors file, not .wsync "
			    "(convert it with wsync-convert)", f->name);
		f->kind = WSYNC_KIND_SAFETENSORS;
		if (wsync_safetensors_parse(f, err) < 0)
			return -1;
	} else if (any_kind && !s_is_map_header(f->base[0])) {
		return wsync_err_set(err, EX_DATAERR, "%s: not a weight file (neither .wsync nor "
		    "safetensors)", f->name);
	} else if (s_parse_wsync(f, err) < 0)
		return -1;
	return wsync_file_index(f, err);
}

static wsync_file_t *
s_open_fd(int fd, const char *name, int any_kind, wsync_err_t *err)
{
	wsync_file_t *f = s_new(name, err);

	if (f == NULL)
		return NULL;
	f->fd = fd;
	if (s_load(f, fd, err) < 0 || s_parse(f, any_kind, err) < 0)
		wsync_file_close(&f);
	else
		f->fd = -1;
	return f;
}

static wsync_file_t *
s_open(const char *path, int any_kind, wsync_err_t *err)
{
	wsync_file_t *f;
	int fd;

	if (strcmp(path, "-") == 0)
		return s_open_fd(STDIN_FILENO, "stdin", any_kind, err);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		wsync_err_set(err, errno == ENOENT || errno == EACCES || errno == ENOTDIR ?
		    EX_NOINPUT : EX_IOERR, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	f = s_open_fd(fd, path, any_kind, err);
	close(fd);
	return f;
}

wsync_file_t *
wsync_file_open(const char *path, wsync_err_t *err)
{
	return s_open(path, 0, err);
}

wsync_file_t *
wsync_input_open(const char *path, wsync_err_t *err)
{
	return s_open(path, 1, err);
}

wsync_file_t *
wsync_file_open_fd(int fd, const char *name, wsync_err_t *err)
{
	return s_open_fd(fd, name, 0, err);
}

/* A caller's buffer parsed as .wsync (or any input, with input). */
static wsync_file_t *
s_open_buffer(const void *buf, size_t len, const char *name, int input, wsync_err_t *err)
{
	wsync_file_t *f = s_new(name, err);

	if (f == NULL)
		return NULL;
	f->base = buf;
	f->size = len;
	f->mem = WSYNC_MEM_BORROWED;
	if (s_parse(f, input, err) < 0)
		wsync_file_close(&f);
	return f;
}

wsync_file_t *
wsync_file_open_buffer(const void *buf, size_t len, const char *name, wsync_err_t *err)
{
	return s_open_buffer(buf, len, name, 0, err);
}

wsync_file_t *
wsync_input_open_buffer(const void *buf, size_t len, const char *name, wsync_err_t *err)
{
	return s_open_buffer(buf, len, name, 1, err);
}

wsync_file_t *
wsync_safetensors_open_head(const void *head, size_t len, const char *name,
    wsync_err_t *err)
{
	wsync_file_t *f = s_new(name, err);

	if (f == NULL)
		return NULL;
	f->base = head;
	/* The data is still to come: every offset fits, until the stream says otherwise. */
	f->size = SIZE_MAX / 2 > len ? SIZE_MAX / 2 : len;
	f->mem = WSYNC_MEM_BORROWED;
	if (!wsync_safetensors_sniff(head, len)) {
		wsync_err_set(err, EX_DATAERR, "%s: not a safetensors header", name);
		wsync_file_close(&f);
	} else if (wsync_safetensors_parse(f, err) < 0 || wsync_file_index(f, err) < 0)
		wsync_file_close(&f);
	return f;
}

/* ---- accessors ---- */

const char *wsync_file_name(const wsync_file_t *f) { return f->name; }
wsync_kind_t wsync_file_kind(const wsync_file_t *f) { return f->kind; }
unsigned wsync_file_format(const wsync_file_t *f) { return f->format; }
const char *wsync_file_model(const wsync_file_t *f) { return f->model; }
uint64_t wsync_file_version(const wsync_file_t *f) { return f->version; }
uint64_t wsync_file_version_offset(const wsync_file_t *f) { return f->version_offset; }
uint64_t wsync_file_content_id(const wsync_file_t *f) { return f->content_id; }
uint64_t wsync_file_size(const wsync_file_t *f) { return f->size; }
const void *wsync_file_bytes(const wsync_file_t *f) { return f->base; }
size_t wsync_file_count(const wsync_file_t *f) { return f->ntensors; }
size_t wsync_file_meta_count(const wsync_file_t *f) { return f->nmeta; }
uint64_t wsync_file_params(const wsync_file_t *f) { return f->params; }
uint64_t wsync_file_data_bytes(const wsync_file_t *f) { return f->data_bytes; }

const wsync_tensor_t *
wsync_file_tensor(const wsync_file_t *f, size_t i)
{
	return i < f->ntensors ? &f->tensors[i] : NULL;
}

const wsync_meta_t *
wsync_file_meta(const wsync_file_t *f, size_t i)
{
	return i < f->nmeta ? &f->meta[i] : NULL;
}

/* Binary search of the path index. */
static const wsync_tensor_t *
s_find(const wsync_file_t *f, const char *want)
{
	size_t lo = 0, hi = f->ntensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const wsync_tensor_t *t = &f->tensors[f->by_path[mid]];
		int c = strcmp(want, t->path);
		if (c == 0)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const wsync_tensor_t *
wsync_file_find(const wsync_file_t *f, const char *path)
{
	char want[WSYNC_MAX_PATH + 1];
	const wsync_tensor_t *t = s_find(f, path);

	if (t != NULL || strchr(path, '/') == NULL || strlen(path) > WSYNC_MAX_PATH)
		return t;
	strcpy(want, path);
	for (char *p = want; (p = strchr(p, '/')) != NULL; p++)
		*p = '.';
	return s_find(f, want);
}

/*
 * A tensor's hash. From a mapped file, a window at a time: its pages mapped in
 * at once (cheaper than a fault each), hashed, then let go, so that verifying
 * a file of any size holds a window of it, not all of it.
 */
static uint64_t
s_tensor_hash(const wsync_file_t *f, const wsync_tensor_t *t, XXH3_state_t *state)
{
	const unsigned char *p = t->data;

	if (f->mem != WSYNC_MEM_MMAP || state == NULL || t->nbytes <= S_HASH_WINDOW) {
		uint64_t h;
		if (f->mem == WSYNC_MEM_MMAP)
			wsync_pages_populate(p, t->nbytes);
		h = wsync_hash(p, t->nbytes);
		if (f->mem == WSYNC_MEM_MMAP)
			wsync_pages_release(p, t->nbytes);
		return h;
	}
	XXH3_64bits_reset(state);
	for (uint64_t off = 0; off < t->nbytes; off += S_HASH_WINDOW) {
		size_t n = t->nbytes - off < S_HASH_WINDOW ? (size_t)(t->nbytes - off) :
		    S_HASH_WINDOW;
		wsync_pages_populate(p + off, n);
		wsync_hash_update(state, p + off, n);
		wsync_pages_release(p + off, n);
	}
	return XXH3_64bits_digest(state);
}

/*
 * A tensor's hash read from fd, the file it is in, a piece at a time into buf
 * (S_READ_PIECE bytes): 0, or -1 when a read fails. Reading costs less than
 * mapping the same pages in and out, and each piece is hashed in the cache.
 */
static int
s_tensor_hash_read(const wsync_tensor_t *t, int fd, unsigned char *buf, XXH3_state_t *state,
    uint64_t *h)
{
	XXH3_64bits_reset(state);
	for (uint64_t off = 0; off < t->nbytes; off += S_READ_PIECE) {
		size_t n = t->nbytes - off < S_READ_PIECE ? (size_t)(t->nbytes - off) :
		    S_READ_PIECE;
		if (wsync_read_at(fd, buf, n, t->offset + off) < 0)
			return -1;
		wsync_hash_update(state, buf, n);
	}
	*h = XXH3_64bits_digest(state);
	return 0;
}

/* The hash of [at, at + nbytes) among the nknown sorted by at, or NULL. */
static const wsync_known_hash_t *
s_known(const wsync_known_hash_t *known, size_t nknown, uint64_t at, uint64_t nbytes)
{
	size_t lo = 0, hi = nknown;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (known[mid].at < at || (known[mid].at == at && known[mid].nbytes < nbytes))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nknown && known[lo].at == at && known[lo].nbytes == nbytes &&
	    known[lo].done ? &known[lo] : NULL;
}

/* A verification: the file, what it is read from, each tensor's hash found. */
typedef struct s_check {
	const wsync_file_t *f;
	int fd;
	const wsync_known_hash_t *known;
	size_t nknown;
	uint64_t *hashes;               /* per tensor */
	XXH3_state_t **states;          /* per thread; NULL: each tensor in one go */
	unsigned char **bufs;           /* per thread: S_READ_PIECE bytes, or NULL */
} s_check_t;

/* Hashes tensor i on the worker's state and buffer; a wsync_pool_fn. */
static int
s_check_tensor(void *arg, size_t i, unsigned worker)
{
	s_check_t *c = arg;
	const wsync_tensor_t *t = &c->f->tensors[i];
	const wsync_known_hash_t *k = s_known(c->known, c->nknown, t->offset, t->nbytes);
	unsigned char *buf = c->bufs[worker];

	if (k != NULL)
		c->hashes[i] = k->hash;
	/* A failed read falls back to the mapping, which holds the same bytes. */
	else if (buf == NULL || s_tensor_hash_read(t, c->fd, buf, c->states[worker],
	    &c->hashes[i]) < 0)
		c->hashes[i] = s_tensor_hash(c->f, t, c->states[worker]);
	return 0;
}

/* Tensor i's bytes, for the pool to hand out the largest first; a wsync_pool_size_fn. */
static uint64_t
s_check_size(void *arg, size_t i)
{
	return ((s_check_t *)arg)->f->tensors[i].nbytes;
}

/*
 * Verifies f; its data read from fd when fd >= 0 and f is that file, mapped;
 * a tensor among the nknown hashed already is not read again. The tensors
 * are hashed on all threads (a tensor's XXH3-64 is one stream: one thread
 * each), then judged in file order.
 */
static int
s_verify(const wsync_file_t *f, int fd, const wsync_known_hash_t *known, size_t nknown,
    wsync_bad_tensor_fn bad, void *arg, wsync_err_t *err)
{
	s_check_t c = { .f = f, .fd = fd, .known = known, .nknown = nknown };
	unsigned n = wsync_threads_for(f->size);
	const wsync_tensor_t *first = NULL;
	size_t nbad = 0;
	int rc = -1;

	if (n > f->ntensors)
		n = f->ntensors > 0 ? (unsigned)f->ntensors : 1;
	c.hashes = malloc((f->ntensors + 1) * sizeof(*c.hashes));
	c.states = calloc(n, sizeof(*c.states));
	c.bufs = calloc(n, sizeof(*c.bufs));
	if (c.hashes == NULL || c.states == NULL || c.bufs == NULL) {
		wsync_err_set(err, EX_OSERR, "%s: out of memory", f->name);
		goto out;
	}
	for (unsigned k = 0; k < n; k++) {
		c.states[k] = XXH3_createState();
		c.bufs[k] = fd >= 0 && f->mem == WSYNC_MEM_MMAP && c.states[k] != NULL ?
		    wsync_io_buffer(S_READ_PIECE) : NULL;
	}
	wsync_pool_run_sized(f->ntensors, n, s_check_tensor, s_check_size, &c, NULL);
	for (size_t i = 0; i < f->ntensors; i++) {
		if (c.hashes[i] == f->tensors[i].hash)
			continue;
		if (nbad++ == 0)
			first = &f->tensors[i];
		if (bad != NULL)
			bad(&f->tensors[i], c.hashes[i], arg);
	}
	rc = nbad == 0 ? 0 : wsync_err_set(err, EX_DATAERR, "%s: tensor %s: data does not "
	    "match its hash%s", f->name, first->path, nbad > 1 ? " (and more tensors)" : "");
out:
	for (unsigned k = 0; c.states != NULL && k < n; k++) {
		XXH3_freeState(c.states[k]);
		if (c.bufs != NULL)
			free(c.bufs[k]);
	}
	free(c.states);
	free(c.bufs);
	free(c.hashes);
	return rc;
}

int
wsync_file_verify(const wsync_file_t *f, wsync_bad_tensor_fn bad, void *arg,
    wsync_err_t *err)
{
	return s_verify(f, -1, NULL, 0, bad, arg, err);
}

int
wsync_file_verify_fd(const wsync_file_t *f, int fd, const wsync_known_hash_t *known,
    size_t nknown, wsync_err_t *err)
{
	return s_verify(f, fd, known, nknown, NULL, NULL, err);
}
