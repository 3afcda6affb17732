/*
 * cast.c - weights cast on the way out (wsync-format(5), CASTS): the element
 * conversions and the FP8 quantization on buffers, and a version cast by a
 * list of rules into a new .wsync image, a file or a checkpoint directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "io_int.h"
#include "tempfile_int.h"
#include "wsync.h"

#define S_FILES_PREFIX WSYNC_CKPT_FILES "."
#define S_CONFIG "config.json"
/* The largest finite e4m3 value, and the floor of a scale (DeepSeek's and prime-rl's). */
#define S_E4M3_MAX 448.0f
#define S_SCALE_MIN 1e-12f

/* ---- elements ---- */

uint16_t
wsync_bf16_from_f32(float x)
{
	uint32_t u;

	if (isnan(x))
		return 0x7fc0;
	memcpy(&u, &x, sizeof(u));
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

int
wsync_f16_from_f32(float x, uint16_t *h)
{
	uint32_t u, a, m;
	uint16_t sign;

	memcpy(&u, &x, sizeof(u));
	sign = (uint16_t)((u >> 16) & 0x8000);
	a = u & 0x7fffffff;
	if (a > 0x7f800000)
		*h = sign | 0x7e00;
	else if (a == 0x7f800000)
		*h = sign | 0x7c00;
	else if (a >= 0x477ff000)       /* 65520 and above round to infinity */
		return -1;
	else if (a < 0x38800000) {      /* below 2^-14: a subnormal, or the smallest normal */
		float f;
		memcpy(&f, &a, sizeof(f));
		*h = sign | (uint16_t)nearbyintf(f * 16777216.0f);
	} else {
		m = a - 0x38000000;     /* the exponent's bias from 127 to 15 */
		m += 0xfff + ((m >> 13) & 1);
		*h = sign | (uint16_t)(m >> 13);
	}
	return 0;
}

uint8_t
wsync_e4m3_from_f32(float x)
{
	uint32_t u, a, m;
	uint8_t sign;

	memcpy(&u, &x, sizeof(u));
	sign = (uint8_t)((u >> 24) & 0x80);
	a = u & 0x7fffffff;
	if (a > 0x7f800000)
		return sign | 0x7f;
	if (a < 0x3c800000) {           /* below 2^-6: a subnormal, or the smallest normal */
		float f;
		memcpy(&f, &a, sizeof(f));
		return sign | (uint8_t)nearbyintf(f * 512.0f);
	}
	m = a - 0x3c000000;             /* the exponent's bias from 127 to 7 */
	m += 0x7ffff + ((m >> 20) & 1);
	m >>= 20;
	return sign | (uint8_t)(m > 0x7e ? 0x7f : m);
}

float
wsync_e4m3_to_f32(uint8_t b)
{
	int exp = (b >> 3) & 0xf, mant = b & 7;
	float v;

	if (exp == 15 && mant == 7)
		return NAN;
	v = exp == 0 ? ldexpf((float)mant, -9) : ldexpf((float)(mant + 8), exp - 10);
	return b & 0x80 ? -v : v;
}

/* IEEE half bits to float, exactly. */
static float
s_f16(uint16_t h)
{
	int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	float v;

	if (exp == 31)
		v = mant ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexpf((float)mant, -24);
	else
		v = ldexpf((float)(mant + 1024), exp - 25);
	return h & 0x8000 ? -v : v;
}

/* Element i of a float tensor as float32 (f64 rounded to nearest even). */
static float
s_load(wsync_dtype_t dtype, const void *data, uint64_t i)
{
	const unsigned char *p = data;
	float f;
	double d;
	uint16_t h;
	uint32_t u;

	switch (dtype) {
	case WSYNC_F32:
		memcpy(&f, p + 4 * i, 4);
		return f;
	case WSYNC_F64:
		memcpy(&d, p + 8 * i, 8);
		return (float)d;
	case WSYNC_BF16:
		memcpy(&h, p + 2 * i, 2);
		u = (uint32_t)h << 16;
		memcpy(&f, &u, 4);
		return f;
	default:
		memcpy(&h, p + 2 * i, 2);
		return s_f16(h);
	}
}

/* Elements [i, i + n) of a float tensor as float32 into out: s_load, the switch once a run. */
static void
s_load_run(wsync_dtype_t dtype, const void *data, uint64_t i, size_t n, float *out)
{
	const unsigned char *p = data;
	uint16_t h;
	uint32_t u;
	double d;

	switch (dtype) {
	case WSYNC_F32:
		memcpy(out, p + 4 * i, 4 * n);
		break;
	case WSYNC_F64:
		for (size_t k = 0; k < n; k++) {
			memcpy(&d, p + 8 * (i + k), 8);
			out[k] = (float)d;
		}
		break;
	case WSYNC_BF16:
		for (size_t k = 0; k < n; k++) {
			memcpy(&h, p + 2 * (i + k), 2);
			u = (uint32_t)h << 16;
			memcpy(&out[k], &u, 4);
		}
		break;
	default:
		for (size_t k = 0; k < n; k++) {
			memcpy(&h, p + 2 * (i + k), 2);
			out[k] = s_f16(h);
		}
	}
}

/* Elements a run converts at a time: 16 KiB of float32, in the L1 cache. */
#define S_RUN 4096

static int
s_is_float(wsync_dtype_t dtype)
{
	return dtype == WSYNC_F64 || dtype == WSYNC_F32 || dtype == WSYNC_F16 ||
	    dtype == WSYNC_BF16;
}

int
wsync_cast_convert(wsync_dtype_t from, const void *src, uint64_t count, wsync_dtype_t to,
    void *dst, uint64_t *bad)
{
	unsigned char *out = dst;
	float x[S_RUN];

	for (uint64_t i = 0; i < count; i += S_RUN) {
		size_t n = count - i < S_RUN ? (size_t)(count - i) : S_RUN;
		s_load_run(from, src, i, n, x);
		if (to == WSYNC_F32) {
			memcpy(out + 4 * i, x, 4 * n);
			continue;
		}
		for (size_t k = 0; k < n; k++) {
			uint16_t h;
			if (to == WSYNC_BF16)
				h = wsync_bf16_from_f32(x[k]);
			else if (wsync_f16_from_f32(x[k], &h) < 0) {
				*bad = i + k;
				return -1;
			}
			memcpy(out + 2 * (i + k), &h, 2);
		}
	}
	return 0;
}

int
wsync_fp8_quantize(wsync_dtype_t dtype, const void *x, uint64_t m, uint64_t n, uint64_t block,
    uint8_t *q, float *scales, uint64_t *bad)
{
	uint64_t bm = block ? block : (m > 0 ? m : 1), bn = block ? block : (n > 0 ? n : 1);
	uint64_t nbn = (n + bn - 1) / bn;
	float v[S_RUN];

	for (uint64_t r0 = 0; r0 < m; r0 += bm)
		for (uint64_t c0 = 0; c0 < n; c0 += bn) {
			uint64_t r1 = r0 + bm < m ? r0 + bm : m, c1 = c0 + bn < n ? c0 + bn : n;
			float amax = 0.0f, s;
			for (uint64_t r = r0; r < r1; r++)
				for (uint64_t c = c0; c < c1; c += S_RUN) {
					size_t len = c1 - c < S_RUN ? (size_t)(c1 - c) : S_RUN;
					s_load_run(dtype, x, r * n + c, len, v);
					for (size_t k = 0; k < len; k++) {
						if (!isfinite(v[k])) {
							*bad = r * n + c + k;
							return -1;
						}
						amax = fmaxf(amax, fabsf(v[k]));
					}
				}
			s = amax / S_E4M3_MAX;
			if (s < S_SCALE_MIN)
				s = S_SCALE_MIN;
			scales[(r0 / bm) * nbn + c0 / bn] = s;
			for (uint64_t r = r0; r < r1; r++)
				for (uint64_t c = c0; c < c1; c += S_RUN) {
					size_t len = c1 - c < S_RUN ? (size_t)(c1 - c) : S_RUN;
					s_load_run(dtype, x, r * n + c, len, v);
					for (size_t k = 0; k < len; k++) {
						/* A division, not a product with 1/s: the rule's rounding. */
						float y = v[k] / s;
						y = y > S_E4M3_MAX ? S_E4M3_MAX : y < -S_E4M3_MAX ?
						    -S_E4M3_MAX : y;
						q[r * n + c + k] = wsync_e4m3_from_f32(y);
					}
				}
		}
	/* A tensor of no elements still gets its one scale. */
	if (block == 0 && (m == 0 || n == 0))
		scales[0] = S_SCALE_MIN;
	return 0;
}

/* ---- rules ---- */

static const char *
s_scaling_name(wsync_scaling_t s)
{
	return s == WSYNC_SCALING_BLOCK128 ? "block128" : s == WSYNC_SCALING_TENSOR ? "tensor" : "";
}

void
wsync_cast_rule_text(const wsync_cast_rule_t *r, char *buf, size_t size)
{
	snprintf(buf, size, "%s=%s%s%s", r->pattern, wsync_dtype_name(r->dtype),
	    r->scaling != WSYNC_SCALING_NONE ? ":" : "", s_scaling_name(r->scaling));
}

int
wsync_cast_parse(const char *spec, wsync_cast_rule_t *rule, wsync_err_t *err)
{
	const char *eq = strrchr(spec, '='), *colon;
	char dtype[16];
	size_t plen;

	if (eq == NULL || eq == spec)
		return wsync_err_set(err, EX_USAGE, "\"%s\": want PATTERN=DTYPE[:SCALING]",
		    spec);
	if ((plen = (size_t)(eq - spec)) >= sizeof(rule->pattern))
		return wsync_err_set(err, EX_USAGE, "\"%.40s...\": a pattern of at most %zu "
		    "bytes", spec, sizeof(rule->pattern) - 1);
	memcpy(rule->pattern, spec, plen);
	rule->pattern[plen] = '\0';
	colon = strchr(eq + 1, ':');
	snprintf(dtype, sizeof(dtype), "%.*s", colon ? (int)(colon - eq - 1) : 15, eq + 1);
	if (wsync_dtype_from_name(dtype, &rule->dtype) < 0 || (rule->dtype != WSYNC_BF16 &&
	    rule->dtype != WSYNC_F16 && rule->dtype != WSYNC_F32 && rule->dtype != WSYNC_F8E4M3))
		return wsync_err_set(err, EX_USAGE, "\"%s\": cannot cast to \"%s\" (bf16, "
		    "f16, f32 or f8e4m3)", spec, dtype);
	rule->scaling = WSYNC_SCALING_NONE;
	if (colon != NULL && rule->dtype != WSYNC_F8E4M3)
		return wsync_err_set(err, EX_USAGE, "\"%s\": only f8e4m3 takes a scaling",
		    spec);
	if (colon != NULL && strcmp(colon + 1, "block128") == 0)
		rule->scaling = WSYNC_SCALING_BLOCK128;
	else if (colon != NULL && strcmp(colon + 1, "tensor") == 0)
		rule->scaling = WSYNC_SCALING_TENSOR;
	else if (colon != NULL)
		return wsync_err_set(err, EX_USAGE, "\"%s\": unknown scaling \"%s\" "
		    "(block128 or tensor)", spec, colon + 1);
	else if (rule->dtype == WSYNC_F8E4M3)
		return wsync_err_set(err, EX_USAGE, "\"%s\": f8e4m3 needs a scaling: "
		    "f8e4m3:block128 or f8e4m3:tensor", spec);
	return 0;
}

int
wsync_cast_check(const wsync_cast_t *c, wsync_err_t *err)
{
	int block = 0, tensor = 0;

	for (int i = 0; i < c->n; i++) {
		block |= c->rules[i].scaling == WSYNC_SCALING_BLOCK128;
		tensor |= c->rules[i].scaling == WSYNC_SCALING_TENSOR;
	}
	if (block && tensor)
		return wsync_err_set(err, EX_USAGE, "block128 and tensor scaling in one "
		    "cast: a checkpoint's quantization_config has one weight_block_size");
	return 0;
}

/* The first rule whose pattern matches name; NULL when none does. */
static const wsync_cast_rule_t *
s_rule_for(const wsync_cast_t *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (fnmatch(c->rules[i].pattern, name, 0) == 0)
			return &c->rules[i];
	return NULL;
}

/* ---- a version cast ---- */

wsync_file_t *
wsync_tree_image(wsync_tree_t *tree, const char *name, wsync_err_t *err)
{
	uint64_t size;
	void *buf;
	wsync_file_t *f;

	if (wsync_tree_size(tree, &size, err) < 0)
		return NULL;
	if ((buf = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
	    -1, 0)) == MAP_FAILED) {
		wsync_err_set(err, EX_SOFTWARE, "%s: out of memory for %" PRIu64 " bytes", name,
		    size);
		return NULL;
	}
	if (wsync_tree_write_into(tree, buf, size, err) < 0 ||
	    (f = wsync_file_open_buffer(buf, (size_t)size, name, err)) == NULL) {
		munmap(buf, (size_t)size);
		return NULL;
	}
	f->mem = WSYNC_MEM_ANON;
	f->mapped = (size_t)size;
	return f;
}

/* What a cast in progress holds: the tree, the buffers it borrows, and what it did. */
struct s_cast {
	const wsync_file_t *in;
	const wsync_cast_t *c;
	wsync_tree_t *tree;
	void **bufs;
	size_t nbufs;
	int fp8;                        /* some tensor became f8e4m3 */
	wsync_scaling_t scaling;
	json_t *unquantized;            /* modules whose 2-D weight stayed as it was */
};

/* Takes buf (malloc'd) into the cast's keeping; frees it and fails when out of memory. */
static void *
s_keep(struct s_cast *s, size_t len, wsync_err_t *err)
{
	void *p = malloc(len > 0 ? len : 1);

	if (p == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	s->bufs[s->nbufs++] = p;
	return p;
}

/* Adds a tensor at path, split at '.' as the input's tree was, else whole. */
static int
s_add(struct s_cast *s, const char *path, wsync_dtype_t dtype, int ndim, const uint64_t *shape,
    const void *data, uint64_t nbytes, wsync_err_t *err)
{
	char why[sizeof(err->msg)];

	if (wsync_tree_add_split(s->tree, path, ".", dtype, ndim, shape, data, nbytes, err) == 0)
		return 0;
	if (wsync_tree_add_keys(s->tree, &path, 1, dtype, ndim, shape, data, nbytes, err) == 0)
		return 0;
	memcpy(why, err->msg, sizeof(why));
	return wsync_err_set(err, err->code, "%s: %s", wsync_file_name(s->in), why);
}

/* Records t as a linear layer left unquantized when it is a 2-D "*.weight". */
static int
s_note_unquantized(struct s_cast *s, const wsync_tensor_t *t, wsync_err_t *err)
{
	size_t len = strlen(t->path);

	if (t->ndim != 2 || len <= 7 || strcmp(t->path + len - 7, ".weight") != 0)
		return 0;
	if (json_array_append_new(s->unquantized, json_stringn(t->path, len - 7)) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	return 0;
}

/* One tensor of the input, cast by its rule (or as it is) into the tree. */
static int
s_cast_tensor(struct s_cast *s, const wsync_tensor_t *t, wsync_err_t *err)
{
	const wsync_cast_rule_t *r = s_rule_for(s->c, t->path);
	const char *in = wsync_file_name(s->in);
	uint64_t count = t->nbytes / wsync_dtype_size(t->dtype), bad = 0;
	char rule[300], name[WSYNC_MAX_PATH + 16];
	void *out;

	if (r == NULL || r->dtype == t->dtype)
		return s_note_unquantized(s, t, err) < 0 ? -1 :
		    s_add(s, t->path, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err);
	wsync_cast_rule_text(r, rule, sizeof(rule));
	if (!s_is_float(t->dtype))
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: cast %s: %s is not a float "
		    "dtype (f64, f32, f16 or bf16)", in, t->path, rule, wsync_dtype_name(t->dtype));
	if (r->scaling == WSYNC_SCALING_BLOCK128 && t->ndim != 2)
		return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: cast %s: block128 scaling "
		    "needs a 2-D tensor, this one is %d-D", in, t->path, rule, t->ndim);
	if (r->dtype != WSYNC_F8E4M3) {
		if ((out = s_keep(s, (size_t)(count * wsync_dtype_size(r->dtype)), err)) == NULL)
			return -1;
		if (wsync_cast_convert(t->dtype, t->data, count, r->dtype, out, &bad) < 0)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: cast %s: element %"
			    PRIu64 " (%g) is beyond f16's range (65504)", in, t->path, rule, bad,
			    (double)s_load(t->dtype, t->data, bad));
		if (s_note_unquantized(s, t, err) < 0)
			return -1;
		return s_add(s, t->path, r->dtype, t->ndim, t->shape, out, count *
		    wsync_dtype_size(r->dtype), err);
	}
	{
		int block = r->scaling == WSYNC_SCALING_BLOCK128;
		uint64_t m = block ? t->shape[0] : 1, n = block ? t->shape[1] : count;
		uint64_t sshape[2] = { (m + 127) / 128, (n + 127) / 128 };
		uint64_t nscales = block ? sshape[0] * sshape[1] : 1;
		float *scales;

		if ((out = s_keep(s, (size_t)count, err)) == NULL ||
		    (scales = s_keep(s, (size_t)nscales * sizeof(float), err)) == NULL)
			return -1;
		if (wsync_fp8_quantize(t->dtype, t->data, m, n, block ? 128 : 0, out, scales,
		    &bad) < 0)
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: cast %s: element %"
			    PRIu64 " is %s: no scale can be computed", in, t->path, rule, bad,
			    isnan(s_load(t->dtype, t->data, bad)) ? "NaN" : "infinite");
		s->fp8 = 1;
		s->scaling = r->scaling;
		if (s_add(s, t->path, WSYNC_F8E4M3, t->ndim, t->shape, out, count, err) < 0)
			return -1;
		snprintf(name, sizeof(name), "%s%s", t->path, block ? "_scale_inv" : "_scale");
		return s_add(s, name, WSYNC_F32, block ? 2 : 0, sshape, scales,
		    nscales * sizeof(float), err);
	}
}

/*
 * config.json with the quantization_config an engine reads spliced in before
 * its closing brace, the rest byte for byte; NULL with err.
 */
static char *
s_config(struct s_cast *s, const wsync_tensor_t *t, wsync_err_t *err)
{
	const char *in = wsync_file_name(s->in), *text = t->data;
	size_t len = (size_t)t->nbytes, end = len, last;
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, 0, &jerr), *qc;
	char *qtext = NULL, *out = NULL;

	if (doc == NULL || !json_is_object(doc)) {
		wsync_err_set(err, EX_DATAERR, "%s: %s: not a JSON object: cannot add its "
		    "quantization_config", in, S_CONFIG);
		goto done;
	}
	if (json_object_get(doc, "quantization_config") != NULL) {
		wsync_err_set(err, EX_DATAERR, "%s: %s has a quantization_config already: its "
		    "weights are quantized, cast the original instead", in, S_CONFIG);
		goto done;
	}
	qc = json_pack("{s:s, s:s, s:s}", "quant_method", "fp8", "fmt", "e4m3",
	    "activation_scheme", "dynamic");
	if (qc != NULL && s->scaling == WSYNC_SCALING_BLOCK128)
		json_object_set_new(qc, "weight_block_size", json_pack("[i, i]", 128, 128));
	if (qc != NULL)
		json_object_set(qc, "modules_to_not_convert", s->unquantized);
	if (qc == NULL || (qtext = json_dumps(qc, 0)) == NULL) {
		json_decref(qc);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	json_decref(qc);
	while (end > 0 && text[end - 1] != '}')
		end--;
	last = end - 1;
	while (last > 0 && strchr(" \t\r\n", text[last - 1]) != NULL)
		last--;
	/* A valid object ends in '}'; its members, if any, end just before the spaces. */
	if (asprintf(&out, "%.*s%s\n  \"quantization_config\": %s\n%.*s", (int)last, text,
	    text[last - 1] == '{' ? "" : ",", qtext, (int)(len - end + 1), text + end - 1) < 0) {
		out = NULL;
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
done:
	free(qtext);
	json_decref(doc);
	return out;
}

/* Meta of the cast: the input's, less its signature (it vouches for the input), plus what it is. */
static int
s_meta(struct s_cast *s, wsync_err_t *err)
{
	const wsync_file_t *f = s->in;
	json_t *of, *rules = json_array();
	char content[17], rule[300], *t1 = NULL, *t2 = NULL;
	int rc = -1;

	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		if (wsync_meta_is_signature(m->key))
			continue;
		if (wsync_tree_set_meta(s->tree, m->key, m->value, err) < 0)
			goto out;
	}
	snprintf(content, sizeof(content), "%016" PRIx64, wsync_file_content_id(f));
	of = json_pack("{s:s, s:I, s:s}", "model", wsync_file_model(f) ? wsync_file_model(f) : "",
	    "version", (json_int_t)wsync_file_version(f), "content", content);
	for (int i = 0; rules != NULL && i < s->c->n; i++) {
		wsync_cast_rule_text(&s->c->rules[i], rule, sizeof(rule));
		json_array_append_new(rules, json_string(rule));
	}
	if (of == NULL || rules == NULL || (t1 = json_dumps(of, JSON_COMPACT)) == NULL ||
	    (t2 = json_dumps(rules, JSON_COMPACT)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		json_decref(of);
		goto out;
	}
	json_decref(of);
	if (wsync_tree_set_meta(s->tree, WSYNC_META_CAST_OF, t1, err) < 0 ||
	    wsync_tree_set_meta(s->tree, WSYNC_META_CAST, t2, err) < 0)
		goto out;
	rc = 0;
out:
	free(t1);
	free(t2);
	json_decref(rules);
	return rc;
}

wsync_file_t *
wsync_cast_file(const wsync_file_t *f, const wsync_cast_t *c, const wsync_ckpt_out_t *select,
    wsync_err_t *err)
{
	struct s_cast s = { .in = f, .c = c };
	size_t n = wsync_file_count(f);
	const char *model = wsync_file_model(f);
	char name[300];
	wsync_file_t *out = NULL;

	s.tree = wsync_tree_new(model != NULL && model[0] != '\0' ? model : "model", err);
	s.bufs = calloc(2 * n + 2, sizeof(*s.bufs));
	s.unquantized = json_array();
	if (s.tree == NULL || s.bufs == NULL || s.unquantized == NULL) {
		if (s.tree != NULL)
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	wsync_tree_set_version(s.tree, wsync_file_version(f));
	if (s_meta(&s, err) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		if (strncmp(t->path, S_FILES_PREFIX, sizeof(S_FILES_PREFIX) - 1) == 0 ||
		    !wsync_ckpt_selected(select, t->path))
			continue;
		if (s_cast_tensor(&s, t, err) < 0)
			goto out;
	}
	/* The small files last: config.json needs to know what became FP8. */
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		const char *file = t->path + sizeof(S_FILES_PREFIX) - 1;
		const char *keys[2] = { WSYNC_CKPT_FILES, file };
		const void *data = t->data;
		uint64_t len = t->nbytes;
		if (strncmp(t->path, S_FILES_PREFIX, sizeof(S_FILES_PREFIX) - 1) != 0)
			continue;
		if (s.fp8 && strcmp(file, S_CONFIG) == 0) {
			char *text = s_config(&s, t, err);
			if (text == NULL)
				goto out;
			s.bufs[s.nbufs++] = text;
			data = text;
			len = strlen(text);
		}
		if (wsync_tree_add_keys(s.tree, keys, 2, WSYNC_U8, 1, &len, data, len, err) < 0)
			goto out;
	}
	snprintf(name, sizeof(name), "%s (cast)", wsync_file_name(f));
	out = wsync_tree_image(s.tree, name, err);
out:
	wsync_tree_destroy(&s.tree);
	for (size_t i = 0; i < s.nbufs; i++)
		free(s.bufs[i]);
	free(s.bufs);
	json_decref(s.unquantized);
	return out;
}

int
wsync_cast_write(const wsync_file_t *cast, const char *path, wsync_err_t *err)
{
	char tmp[4096];
	int fd;

	if ((fd = wsync_temp_open(path, tmp, sizeof(tmp), err)) < 0)
		return -1;
	if (wsync_write_all(fd, wsync_file_bytes(cast), (size_t)wsync_file_size(cast)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	return wsync_temp_commit(fd, tmp, path, 0644 & ~wsync_umask(), err);
}

int
wsync_cast_publish(const wsync_file_t *cast, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err)
{
	/* The selection made the cast; its scales need not match the patterns. */
	wsync_ckpt_out_t whole = { .shard_size = o != NULL ? o->shard_size : 0 };

	return wsync_ckpt_publish(cast, link, version, &whole, keep, real, size, err);
}

int
wsync_cast_output_path(const char *path, const wsync_cast_t *c, const char *out, int dir,
    uint64_t version, const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size,
    wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open(path, err), *cast = NULL;
	int rc = -1;

	if (f == NULL || (cast = wsync_cast_file(f, c, dir ? o : NULL, err)) == NULL)
		goto out;
	if (dir)
		rc = wsync_cast_publish(cast, out, version, o, keep, real, size, err);
	else if ((rc = wsync_cast_write(cast, out, err)) == 0 &&
	    (size_t)snprintf(real, size, "%s", out) >= size)
		rc = wsync_err_set(err, EX_USAGE, "%s: path too long", out);
out:
	wsync_file_close(&cast);
	wsync_file_close(&f);
	return rc;
}
