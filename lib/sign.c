/*
 * sign.c - signing a push and verifying one file of it (wsync-format(5),
 * SIGNATURES). Every file of a signed push carries, in its meta, the
 * manifest of the whole push (base64) and a minisign signature of it: the
 * text of a .minisig file, so minisign -V checks the manifest's bytes too.
 */
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "pool_int.h"
#include "sign_int.h"
#include "tree_int.h"

#define S_TRUSTED "trusted comment: "
#define S_UNTRUSTED "untrusted comment: "

/* BLAKE2b-512 of msg: what minisign's prehashed ("ED") signatures sign. */
static void
s_prehash(uint8_t *h, const void *msg, size_t len)
{
	crypto_generichash(h, crypto_generichash_BYTES_MAX, msg, len, NULL, 0);
}

int
wsync_minisig_sign(const wsync_signkey_t *key, const void *msg, size_t len,
    const char *trusted, char **text, wsync_err_t *err)
{
	uint8_t h[crypto_generichash_BYTES_MAX], bin[WSYNC_MINISIG_BIN], gsig[64], *both;
	char id[2 * WSYNC_KEYID + 1], b64[2][128];
	size_t tlen = strlen(trusted), size;

	if (sodium_init() < 0)
		return wsync_err_set(err, EX_SOFTWARE, "cannot initialise libsodium");
	if ((both = malloc(64 + tlen)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	s_prehash(h, msg, len);
	memcpy(bin, "ED", 2);
	memcpy(bin + 2, key->id, WSYNC_KEYID);
	crypto_sign_detached(bin + 2 + WSYNC_KEYID, NULL, h, sizeof(h), key->sk);
	/* The global signature covers the signature and the trusted comment. */
	memcpy(both, bin + 2 + WSYNC_KEYID, 64);
	memcpy(both + 64, trusted, tlen);
	crypto_sign_detached(gsig, NULL, both, 64 + tlen, key->sk);
	free(both);
	sodium_bin2base64(b64[0], sizeof(b64[0]), bin, sizeof(bin),
	    sodium_base64_VARIANT_ORIGINAL);
	sodium_bin2base64(b64[1], sizeof(b64[1]), gsig, sizeof(gsig),
	    sodium_base64_VARIANT_ORIGINAL);
	wsync_keyid_hex(key->id, id);
	size = 512 + tlen;
	if ((*text = malloc(size)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	snprintf(*text, size, S_UNTRUSTED "signature from minisign secret key %s\n%s\n"
	    S_TRUSTED "%s\n%s\n", id, b64[0], trusted, b64[1]);
	return 0;
}

/* Decodes line (up to '\n' or the end) as base64 of exactly n bytes; the next line. */
static const char *
s_line_bin(const char *line, uint8_t *out, size_t n)
{
	size_t len = strcspn(line, "\n"), got;

	if (sodium_base642bin(out, n, line, len, NULL, &got, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0 || got != n)
		return NULL;
	return line[len] == '\n' ? line + len + 1 : line + len;
}

int
wsync_minisig_parse(const char *text, uint8_t *id, uint8_t *sig, const char **trusted,
    size_t *tlen, uint8_t *gsig, wsync_err_t *err)
{
	uint8_t bin[WSYNC_MINISIG_BIN];
	const char *p = text;

	if (strncmp(p, S_UNTRUSTED, strlen(S_UNTRUSTED)) != 0 || (p = strchr(p, '\n')) == NULL ||
	    (p = s_line_bin(p + 1, bin, sizeof(bin))) == NULL)
		return wsync_err_set(err, EX_NOPERM, "not a minisign signature (an untrusted "
		    "comment, then the base64 of 74 bytes)");
	if (memcmp(bin, "ED", 2) != 0)
		return wsync_err_set(err, EX_NOPERM, "a signature of algorithm \"%.2s\": only "
		    "minisign's prehashed \"ED\" is taken", (const char *)bin);
	if (strncmp(p, S_TRUSTED, strlen(S_TRUSTED)) != 0)
		return wsync_err_set(err, EX_NOPERM, "a minisign signature without its trusted "
		    "comment");
	p += strlen(S_TRUSTED);
	*trusted = p;
	*tlen = strcspn(p, "\n");
	if (p[*tlen] != '\n' || s_line_bin(p + *tlen + 1, gsig, 64) == NULL)
		return wsync_err_set(err, EX_NOPERM, "a minisign signature without its global "
		    "signature (the base64 of 64 bytes after the trusted comment)");
	memcpy(id, bin + 2, WSYNC_KEYID);
	memcpy(sig, bin + 2 + WSYNC_KEYID, 64);
	return 0;
}

int
wsync_minisig_check(const uint8_t *pk, const void *msg, size_t len, const uint8_t *sig,
    const char *trusted, size_t tlen, const uint8_t *gsig)
{
	uint8_t h[crypto_generichash_BYTES_MAX], *both;
	int rc;

	if (sodium_init() < 0 || (both = malloc(64 + tlen)) == NULL)
		return -1;
	s_prehash(h, msg, len);
	memcpy(both, sig, 64);
	memcpy(both + 64, trusted, tlen);
	rc = crypto_sign_verify_detached(sig, h, sizeof(h), pk) == 0 &&
	    crypto_sign_verify_detached(gsig, both, 64 + tlen, pk) == 0 ? 0 : -1;
	free(both);
	return rc;
}

/* What a model's digests are computed from: its tensors and its meta. */
struct s_parts {
	wsync_digest_item_t *items;
	const void **data;              /* per item, its tensor's bytes */
	uint64_t *nbytes;
	size_t nitems;
	int xxh3;                       /* the items' XXH3-64 is computed too */
	const wsync_tree_t *tree;       /* where data can be read at offsets (locate); may be NULL */
	const char **keys, **values;
	size_t nmeta;
};

static void
s_parts_free(struct s_parts *p)
{
	free(p->items);
	free(p->data);
	free(p->nbytes);
	free(p->keys);
	free(p->values);
}

/* Room for nitems tensors and nmeta meta entries; -1 with err. */
static int
s_parts_new(struct s_parts *p, size_t nitems, size_t nmeta, wsync_err_t *err)
{
	p->items = calloc(nitems + 1, sizeof(*p->items));
	p->data = calloc(nitems + 1, sizeof(*p->data));
	p->nbytes = calloc(nitems + 1, sizeof(*p->nbytes));
	p->keys = calloc(nmeta + 1, sizeof(*p->keys));
	p->values = calloc(nmeta + 1, sizeof(*p->values));
	p->nitems = nitems;
	p->nmeta = nmeta;
	p->tree = NULL;
	if (p->items != NULL && p->data != NULL && p->nbytes != NULL && p->keys != NULL &&
	    p->values != NULL)
		return 0;
	s_parts_free(p);
	return wsync_err_set(err, EX_SOFTWARE, "out of memory");
}

/* What the threads digesting parts share: the parts, and an error per thread. */
struct s_share {
	const struct s_parts *p;
	wsync_err_t *errs;
};

/* Digests item i of the parts; a wsync_pool_fn. */
static int
s_share_run(void *arg, size_t i, unsigned worker)
{
	struct s_share *sh = arg;
	const struct s_parts *p = sh->p;
	uint64_t off;
	int fd;

	if (p->tree != NULL && p->tree->locate != NULL && p->tree->locate(p->tree->locate_arg,
	    p->data[i], p->nbytes[i], &fd, &off) == 0)
		return wsync_read_digest(fd, off, p->nbytes[i], p->items[i].data,
		    p->xxh3 ? &p->items[i].hash : NULL, &sh->errs[worker]) < 0 ? -1 : 0;
	return wsync_data_digest(p->data[i], p->nbytes[i], p->items[i].data,
	    p->xxh3 ? &p->items[i].hash : NULL, &sh->errs[worker]) < 0 ? -1 : 0;
}

/*
 * Every item's data digest, the items on all threads from S_THREADS_MIN
 * bytes and two tensors (a 256 KiB push signed: 0.25 ms of its 5); below,
 * on this one, which starts no thread.
 */
#define S_THREADS_MIN (64u << 10)
static int
s_parts_digest(const struct s_parts *p, wsync_err_t *err)
{
	struct s_share sh = { p, NULL };
	uint64_t total = 0;
	unsigned n = 1, failed = 0;
	int rc;

	for (size_t i = 0; i < p->nitems; i++)
		total += p->nbytes[i];
	wsync_digest_expect(total);
	if (p->nitems >= 2 && total >= S_THREADS_MIN)
		n = wsync_threads();
	if (n > p->nitems)
		n = p->nitems > 0 ? (unsigned)p->nitems : 1;
	if ((sh.errs = calloc(n, sizeof(*sh.errs))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((rc = wsync_pool_run(p->nitems, n, s_share_run, &sh, &failed)) != 0)
		*err = sh.errs[failed];
	free(sh.errs);
	return rc != 0 ? -1 : 0;
}

/* The model and meta digests of the parts into out (when ok), and frees them. */
static int
s_parts_end(struct s_parts *p, int ok, wsync_signed_model_t *out, wsync_err_t *err)
{
	int rc = ok == 0 &&
	    wsync_model_digest(p->items, p->nitems, out->digest, &out->content, err) == 0 &&
	    wsync_meta_digest(p->keys, p->values, p->nmeta, out->meta, err) == 0 ? 0 : -1;

	s_parts_free(p);
	return rc;
}

int
wsync_tree_digest(wsync_tree_t *tree, wsync_signed_model_t *out, wsync_err_t *err)
{
	struct s_parts p;

	if (s_parts_new(&p, tree->n, tree->nmeta, err) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	strcpy(out->model, tree->model);
	for (size_t i = 0; i < tree->n; i++) {
		const struct wsync_tree_tensor *t = &tree->t[i];
		p.items[i] = (wsync_digest_item_t){ t->path, t->dtype, t->ndim, t->shape, 0, { 0 } };
		p.data[i] = t->data;
		p.nbytes[i] = t->nbytes;
	}
	p.xxh3 = 1;
	p.tree = tree;
	for (size_t i = 0; i < tree->nmeta; i++) {
		p.keys[i] = tree->meta[i].key;
		p.values[i] = tree->meta[i].value;
	}
	return s_parts_end(&p, s_parts_digest(&p, err), out, err);
}

/* Room for file's tensors and meta in p, filled but for the tensors' digests; -1 with err. */
static int
s_file_items(const wsync_file_t *file, struct s_parts *p, wsync_err_t *err)
{
	if (s_parts_new(p, wsync_file_count(file), wsync_file_meta_count(file), err) < 0)
		return -1;
	for (size_t i = 0; i < p->nitems; i++) {
		const wsync_tensor_t *t = wsync_file_tensor(file, i);
		p->items[i] = (wsync_digest_item_t){ t->path, t->dtype, t->ndim, t->shape, t->hash,
		    { 0 } };
		p->data[i] = t->data;
		p->nbytes[i] = t->nbytes;
	}
	p->xxh3 = 0;
	for (size_t i = 0; i < p->nmeta; i++) {
		p->keys[i] = wsync_file_meta(file, i)->key;
		p->values[i] = wsync_file_meta(file, i)->value;
	}
	return 0;
}

int
wsync_file_digest(const wsync_file_t *file, wsync_signed_model_t *out, wsync_err_t *err)
{
	struct s_parts p;

	if (s_file_items(file, &p, err) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	snprintf(out->model, sizeof(out->model), "%s", wsync_file_model(file));
	return s_parts_end(&p, s_parts_digest(&p, err), out, err);
}

static int
s_cmp_signed(const void *a, const void *b)
{
	return strcmp(((const wsync_signed_model_t *)a)->model,
	    ((const wsync_signed_model_t *)b)->model);
}

/*
 * Seals manifest m: its canonical bytes signed with key, both set in the meta
 * of the n trees under the keys mkey and skey.
 */
static int
s_seal(const wsync_manifest_t *m, wsync_tree_t *const *trees, int n,
    const wsync_signkey_t *key, const char *mkey, const char *skey, wsync_err_t *err)
{
	unsigned char *bytes = NULL;
	char *b64 = NULL, *sig = NULL, trusted[128];
	size_t len, b64len;
	int rc = -1;

	if (wsync_manifest_encode(m, &bytes, &len, err) < 0)
		goto out;
	b64len = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	/* Only a part's names can make it that long: 256 models stay below. */
	if (b64len - 1 > WSYNC_MAX_META_VALUE) {
		wsync_err_set(err, EX_DATAERR, "part %" PRIu32 " of %" PRIu32 ": its manifest, "
		    "naming %zu tensors, is %zu bytes in base64, over the %d of a meta value; "
		    "push the model in more parts", m->part, m->parts, m->ntensors, b64len - 1,
		    WSYNC_MAX_META_VALUE);
		goto out;
	}
	if ((b64 = malloc(b64len)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	sodium_bin2base64(b64, b64len, bytes, len, sodium_base64_VARIANT_ORIGINAL);
	snprintf(trusted, sizeof(trusted), "timestamp:%llu\tfile:wsync-manifest\tseq:%llu",
	    (unsigned long long)m->time, (unsigned long long)m->seq);
	if (wsync_minisig_sign(key, bytes, len, trusted, &sig, err) < 0)
		goto out;
	for (int i = 0; i < n; i++)
		if (wsync_tree_set_meta(trees[i], mkey, b64, err) < 0 ||
		    wsync_tree_set_meta(trees[i], skey, sig, err) < 0)
			goto out;
	rc = 0;
out:
	free(bytes);
	free(b64);
	free(sig);
	return rc;
}

int
wsync_sign_trees(wsync_tree_t *const *trees, int n, const wsync_signkey_t *key,
    uint64_t seq, wsync_manifest_t *out, wsync_err_t *err)
{
	wsync_manifest_t m = { .seq = seq, .time = (uint64_t)time(NULL) };
	int rc = -1;

	if (n < 1 || n > WSYNC_MAX_SIGNED)
		return wsync_err_set(err, EX_USAGE, "cannot sign %d models in one push (1 to %d)",
		    n, WSYNC_MAX_SIGNED);
	if ((m.models = calloc((size_t)n, sizeof(*m.models))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	m.nmodels = (size_t)n;
	memcpy(m.key, key->id, WSYNC_KEYID);
	for (int i = 0; i < n; i++)
		if (wsync_tree_digest(trees[i], &m.models[i], err) < 0)
			goto out;
	qsort(m.models, m.nmodels, sizeof(*m.models), s_cmp_signed);
	rc = s_seal(&m, trees, n, key, WSYNC_META_MANIFEST, WSYNC_META_SIGNATURE, err);
out:
	if (rc == 0 && out != NULL)
		*out = m;
	else
		wsync_manifest_free(&m);
	return rc;
}

/*
 * Drops every signature a part's tree carries from its input (a whole push's,
 * or the parts' of a version in parts): the version the parts make carries
 * one signature per part and no other.
 */
static void
s_drop_signatures(wsync_tree_t *tree)
{
	size_t kept = 0;

	for (size_t i = 0; i < tree->nmeta; i++) {
		if (wsync_meta_is_signature(tree->meta[i].key)) {
			free(tree->meta[i].key);
			free(tree->meta[i].value);
			continue;
		}
		tree->meta[kept++] = tree->meta[i];
	}
	tree->nmeta = kept;
}

int
wsync_sign_part(wsync_tree_t *tree, const wsync_signkey_t *key, uint64_t group,
    uint32_t part, uint32_t parts, wsync_manifest_t *out, wsync_err_t *err)
{
	wsync_manifest_t m = { .seq = group, .time = (uint64_t)time(NULL), .part = part,
	    .parts = parts, .nmodels = 1 };
	char mkey[sizeof(WSYNC_META_MANIFEST) + 12], skey[sizeof(WSYNC_META_SIGNATURE) + 12];
	const char **paths = calloc(tree->n + 1, sizeof(*paths));
	const char **keys = calloc(tree->nmeta + 1, sizeof(*keys));
	size_t nkeys = 0;
	int rc = -1;

	s_drop_signatures(tree);
	memcpy(m.key, key->id, WSYNC_KEYID);
	if (paths == NULL || keys == NULL || (m.models = calloc(1, sizeof(*m.models))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < tree->n; i++)
		paths[i] = tree->t[i].path;
	for (size_t i = 0; i < tree->nmeta; i++)
		keys[nkeys++] = tree->meta[i].key;
	snprintf(mkey, sizeof(mkey), "%s.%" PRIu32, WSYNC_META_MANIFEST, part);
	snprintf(skey, sizeof(skey), "%s.%" PRIu32, WSYNC_META_SIGNATURE, part);
	if (wsync_manifest_set_names(&m, paths, tree->n, keys, nkeys, err) < 0 ||
	    wsync_tree_digest(tree, &m.models[0], err) < 0)
		goto out;
	rc = s_seal(&m, &tree, 1, key, mkey, skey, err);
out:
	free(paths);
	free(keys);
	if (rc == 0 && out != NULL)
		*out = m;
	else
		wsync_manifest_free(&m);
	return rc;
}

const char *
wsync_verify_reason(wsync_verify_t reason)
{
	static const char *const names[] = {
		"ok", "unsigned", "malformed", "unknown-key", "bad-signature", "not-listed",
		"content-mismatch", "meta-mismatch", "digest-mismatch", "rollback", "mixed",
		"not-one-group",
	};

	return (unsigned)reason < sizeof(names) / sizeof(names[0]) ? names[reason] : "unknown";
}

const char *
wsync_meta_value(const wsync_file_t *file, const char *key)
{
	for (size_t i = 0; i < wsync_file_meta_count(file); i++)
		if (strcmp(wsync_file_meta(file, i)->key, key) == 0)
			return wsync_file_meta(file, i)->value;
	return NULL;
}

/* Sets err (77) with the file's name before msg, and returns reason. */
__attribute__((format(printf, 4, 5)))
static int
s_refuse(wsync_err_t *err, const wsync_file_t *file, wsync_verify_t reason,
    const char *fmt, ...)
{
	char msg[sizeof(err->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wsync_err_set(err, EX_NOPERM, "%s: %s", wsync_file_name(file), msg);
	return (int)reason;
}

/* "0a1b2c3d..." of n bytes: the first 8 of a digest, enough to tell two apart in a message. */
static void
s_short_hex(const uint8_t *b, char *hex)
{
	for (int i = 0; i < 8; i++)
		snprintf(hex + 2 * i, 3, "%02x", b[i]);
}

/*
 * Opens a signed manifest: the signature sig by one of the keys, holding for
 * the manifest b64, which names that key; into *m (wsync_manifest_free it).
 * WSYNC_VERIFY_OK, a reason with err (what, before each message: "" or
 * "part 1: "), or -1. skey and mkey name the meta keys in messages.
 */
static int
s_open_signed(const wsync_file_t *file, const char *what, const char *b64, const char *sig,
    const char *mkey, const char *skey, const wsync_verifykey_t *keys, int nkeys,
    wsync_manifest_t *m, wsync_err_t *err)
{
	const char *trusted;
	uint8_t id[WSYNC_KEYID], s[64], gsig[64], *bytes = NULL;
	char hex[2 * WSYNC_KEYID + 1];
	const wsync_verifykey_t *key = NULL;
	size_t tlen, len, cap;
	int rc;

	memset(m, 0, sizeof(*m));
	if (wsync_minisig_parse(sig, id, s, &trusted, &tlen, gsig, err) < 0)
		return s_refuse(err, file, WSYNC_VERIFY_MALFORMED, "%s%s: %s", what, skey, err->msg);
	wsync_keyid_hex(id, hex);
	for (int i = 0; i < nkeys && key == NULL; i++)
		if (memcmp(keys[i].id, id, WSYNC_KEYID) == 0)
			key = &keys[i];
	if (key == NULL)
		return nkeys == 1 ? s_refuse(err, file, WSYNC_VERIFY_UNKNOWN_KEY, "%ssigned by key "
		    "%s, which is not the verify key", what, hex) : s_refuse(err, file,
		    WSYNC_VERIFY_UNKNOWN_KEY, "%ssigned by key %s, which is none of the %d verify "
		    "keys", what, hex, nkeys);
	cap = strlen(b64) / 4 * 3 + 3;
	if ((bytes = malloc(cap)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (sodium_base642bin(bytes, cap, b64, strlen(b64), NULL, &len, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0)
		rc = s_refuse(err, file, WSYNC_VERIFY_MALFORMED, "%s%s: not base64", what, mkey);
	else if (wsync_minisig_check(key->pk, bytes, len, s, trusted, tlen, gsig) < 0)
		rc = s_refuse(err, file, WSYNC_VERIFY_BAD_SIGNATURE, "%sthe signature by key %s "
		    "does not hold for its manifest", what, hex);
	else if (wsync_manifest_decode(bytes, len, m, err) < 0)
		rc = s_refuse(err, file, WSYNC_VERIFY_MALFORMED, "%s%s", what, err->msg);
	else if (memcmp(m->key, id, WSYNC_KEYID) != 0)
		rc = s_refuse(err, file, WSYNC_VERIFY_BAD_SIGNATURE, "%sthe manifest names another "
		    "key than key %s, which signed it", what, hex);
	else
		rc = WSYNC_VERIFY_OK;
	free(bytes);
	if (rc != WSYNC_VERIFY_OK)
		wsync_manifest_free(m);
	return rc;
}

/* Checks entry, what the manifest m signs of file, against mine, what file holds. */
static int
s_check_entry(const wsync_file_t *file, const char *what, const wsync_manifest_t *m,
    const wsync_signed_model_t *entry, const wsync_signed_model_t *mine, wsync_err_t *err)
{
	char want[17], got[17];

	if (entry->content != mine->content)
		return s_refuse(err, file, WSYNC_VERIFY_CONTENT, "%scontent id %016llx, but the "
		    "manifest (seq %llu) signs %016llx", what, (unsigned long long)mine->content,
		    (unsigned long long)m->seq, (unsigned long long)entry->content);
	if (sodium_memcmp(mine->meta, entry->meta, WSYNC_DIGEST) != 0)
		return s_refuse(err, file, WSYNC_VERIFY_META, "%sits meta is not the meta the "
		    "manifest (seq %llu) signs", what, (unsigned long long)m->seq);
	if (sodium_memcmp(mine->digest, entry->digest, WSYNC_DIGEST) != 0) {
		s_short_hex(mine->digest, got);
		s_short_hex(entry->digest, want);
		return s_refuse(err, file, WSYNC_VERIFY_DIGEST, "%sits tensors' digest %s... is not "
		    "the signed %s... (manifest seq %llu): the data was changed after signing",
		    what, got, want, (unsigned long long)m->seq);
	}
	return WSYNC_VERIFY_OK;
}

/* Whether key is among the n sorted keys. */
static int
s_listed(char *const *keys, size_t n, const char *key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(key, keys[mid]);
		if (c == 0)
			return 1;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* The manifests of the n parts in file's meta, opened and checked to be one group's. */
static int
s_open_parts(const wsync_file_t *file, uint32_t n, const wsync_verifykey_t *keys, int nkeys,
    wsync_manifest_t *ms, wsync_err_t *err)
{
	char mkey[sizeof(WSYNC_META_MANIFEST) + 12], skey[sizeof(WSYNC_META_SIGNATURE) + 12];
	char what[32];
	int rc;

	for (uint32_t r = 0; r < n; r++) {
		const wsync_manifest_t *m = &ms[r];
		snprintf(mkey, sizeof(mkey), "%s.%" PRIu32, WSYNC_META_MANIFEST, r);
		snprintf(skey, sizeof(skey), "%s.%" PRIu32, WSYNC_META_SIGNATURE, r);
		snprintf(what, sizeof(what), "part %" PRIu32 ": ", r);
		if (wsync_meta_value(file, mkey) == NULL || wsync_meta_value(file, skey) == NULL)
			return s_refuse(err, file, WSYNC_VERIFY_GROUP, "a version of %" PRIu32 " parts "
			    "without %s in its meta: its parts are not one signed group", n,
			    wsync_meta_value(file, mkey) == NULL ? mkey : skey);
		if ((rc = s_open_signed(file, what, wsync_meta_value(file, mkey), wsync_meta_value(file, skey), mkey,
		    skey, keys, nkeys, &ms[r], err)) != WSYNC_VERIFY_OK)
			return rc;
		if (m->parts == 0 || m->part != r || m->parts != n)
			return s_refuse(err, file, WSYNC_VERIFY_GROUP, "%s%s holds the manifest of %s "
			    "%" PRIu32 " of %" PRIu32 ", in a version of %" PRIu32 " parts: its parts "
			    "are not one signed group", what, mkey, m->parts == 0 ? "a whole push, not "
			    "a part;" : "part", m->part, m->parts, n);
		if (m->seq != ms[0].seq)
			return s_refuse(err, file, WSYNC_VERIFY_GROUP, "part %" PRIu32 " is signed for "
			    "group %llu, part 0 for group %llu: its parts are not one signed group", r,
			    (unsigned long long)m->seq, (unsigned long long)ms[0].seq);
		if (strcmp(m->models[0].model, wsync_file_model(file)) != 0)
			return s_refuse(err, file, WSYNC_VERIFY_NOT_LISTED, "%smodel %s is not in the "
			    "signed manifest (seq %llu)", what, wsync_file_model(file),
			    (unsigned long long)m->seq);
	}
	return WSYNC_VERIFY_OK;
}

/*
 * Which part each tensor of file is in (owner[i]: the part's number + 1),
 * from the parts' names: every tensor in one part, every meta entry in one
 * at least.
 */
static int
s_owners(const wsync_file_t *file, uint32_t n, const wsync_manifest_t *ms, uint32_t *owner,
    wsync_err_t *err)
{
	const wsync_tensor_t *first = wsync_file_tensor(file, 0);

	for (uint32_t r = 0; r < n; r++)
		for (size_t j = 0; j < ms[r].ntensors; j++) {
			const char *path = ms[r].tensors[j];
			const wsync_tensor_t *t = wsync_file_find(file, path);
			if (t == NULL || strcmp(t->path, path) != 0)
				return s_refuse(err, file, WSYNC_VERIFY_DIGEST, "part %" PRIu32 " signs "
				    "tensor \"%s\", which the version does not hold", r, path);
			if (owner[t - first] != 0)
				return s_refuse(err, file, WSYNC_VERIFY_GROUP, "tensor \"%s\" is signed "
				    "by parts %" PRIu32 " and %" PRIu32 ": its parts are not one signed "
				    "group", path, owner[t - first] - 1, r);
			owner[t - first] = r + 1;
		}
	for (size_t i = 0; i < wsync_file_count(file); i++)
		if (owner[i] == 0)
			return s_refuse(err, file, WSYNC_VERIFY_DIGEST, "tensor \"%s\" is in none of "
			    "its %" PRIu32 " signed parts", wsync_file_tensor(file, i)->path, n);
	for (size_t i = 0; i < wsync_file_meta_count(file); i++) {
		const char *key = wsync_file_meta(file, i)->key;
		uint32_t r = 0;
		while (r < n && !s_listed(ms[r].metakeys, ms[r].nmetakeys, key))
			r++;
		if (r == n && !wsync_meta_is_signature(key))
			return s_refuse(err, file, WSYNC_VERIFY_META, "meta \"%s\" is in none of its "
			    "%" PRIu32 " signed parts", key, n);
	}
	return WSYNC_VERIFY_OK;
}

/* Part r's digests, out of every tensor's (p) and file's meta, checked against its manifest. */
static int
s_check_part(const wsync_file_t *file, uint32_t r, const wsync_manifest_t *m,
    const struct s_parts *p, const uint32_t *owner, wsync_digest_item_t *items,
    const char **values, wsync_err_t *err)
{
	wsync_signed_model_t mine;
	char what[32];
	size_t k = 0;

	snprintf(what, sizeof(what), "part %" PRIu32 ": ", r);
	for (size_t i = 0; i < p->nitems; i++)
		if (owner[i] == r + 1)
			items[k++] = p->items[i];
	for (size_t j = 0; j < m->nmetakeys; j++)
		if ((values[j] = wsync_meta_value(file, m->metakeys[j])) == NULL)
			return s_refuse(err, file, WSYNC_VERIFY_META, "%sits meta is not the meta the "
			    "manifest (seq %llu) signs", what, (unsigned long long)m->seq);
	if (wsync_model_digest(items, k, mine.digest, &mine.content, err) < 0 ||
	    wsync_meta_digest((const char *const *)m->metakeys, values, m->nmetakeys, mine.meta,
	    err) < 0)
		return -1;
	return s_check_entry(file, what, m, &m->models[0], &mine, err);
}

/*
 * wsync_verify_file of a version in parts: each part's manifest opened, the
 * parts one group, each tensor and meta entry in a part, each part's digests
 * over its own; the tensors' data digested once, on all threads.
 */
static int
s_verify_parts(const wsync_file_t *file, const wsync_verifykey_t *keys, int nkeys,
    wsync_manifest_t *manifest, wsync_err_t *err)
{
	size_t nmeta = wsync_file_meta_count(file);
	wsync_manifest_t *ms = NULL;
	wsync_digest_item_t *items = NULL;
	const char **values = NULL;
	uint32_t *owner = NULL, n = 0;
	struct s_parts p;
	int rc = -1;

	for (size_t i = 0; i < nmeta; i++) {
		const char *key = wsync_file_meta(file, i)->key;
		n += wsync_meta_is_signature(key) && strncmp(key, WSYNC_META_MANIFEST ".",
		    sizeof(WSYNC_META_MANIFEST)) == 0;
	}
	if (s_file_items(file, &p, err) < 0)
		return -1;
	ms = calloc(n, sizeof(*ms));
	owner = calloc(p.nitems + 1, sizeof(*owner));
	items = calloc(p.nitems + 1, sizeof(*items));
	values = calloc(nmeta + 1, sizeof(*values));
	if (ms == NULL || owner == NULL || items == NULL || values == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	if ((rc = s_open_parts(file, n, keys, nkeys, ms, err)) != WSYNC_VERIFY_OK ||
	    (rc = s_owners(file, n, ms, owner, err)) != WSYNC_VERIFY_OK)
		goto out;
	if ((rc = s_parts_digest(&p, err)) < 0)
		goto out;
	for (uint32_t r = 0; r < n && rc == WSYNC_VERIFY_OK; r++)
		rc = s_check_part(file, r, &ms[r], &p, owner, items, values, err);
	if (rc == WSYNC_VERIFY_OK && manifest != NULL) {
		*manifest = ms[0];
		memset(&ms[0], 0, sizeof(ms[0]));
	}
out:
	for (uint32_t r = 0; ms != NULL && r < n; r++)
		wsync_manifest_free(&ms[r]);
	free(ms);
	free(owner);
	free(items);
	free(values);
	s_parts_free(&p);
	return rc;
}

int
wsync_verify_file(const wsync_file_t *file, const wsync_verifykey_t *keys, int nkeys,
    wsync_manifest_t *manifest, wsync_err_t *err)
{
	const char *b64 = wsync_meta_value(file, WSYNC_META_MANIFEST), *sig = wsync_meta_value(file, WSYNC_META_SIGNATURE);
	const char *model = wsync_file_model(file);
	const wsync_signed_model_t *entry;
	wsync_signed_model_t mine;
	wsync_manifest_t m = { 0 };
	int rc;

	if (manifest != NULL)
		memset(manifest, 0, sizeof(*manifest));
	if (b64 == NULL && sig == NULL && wsync_meta_value(file, WSYNC_META_MANIFEST ".0") != NULL)
		return s_verify_parts(file, keys, nkeys, manifest, err);
	if (sig == NULL || b64 == NULL)
		return s_refuse(err, file, WSYNC_VERIFY_UNSIGNED, "not signed (no %s in its meta)",
		    sig == NULL ? WSYNC_META_SIGNATURE : WSYNC_META_MANIFEST);
	if ((rc = s_open_signed(file, "", b64, sig, WSYNC_META_MANIFEST, WSYNC_META_SIGNATURE,
	    keys, nkeys, &m, err)) != WSYNC_VERIFY_OK)
		return rc;
	if ((entry = wsync_manifest_find(&m, model)) == NULL) {
		rc = s_refuse(err, file, WSYNC_VERIFY_NOT_LISTED, "model %s is not in the signed "
		    "manifest (seq %llu)", model, (unsigned long long)m.seq);
		goto out;
	}
	if (entry->content != wsync_file_content_id(file)) {
		mine.content = wsync_file_content_id(file);
		rc = s_check_entry(file, "", &m, entry, &mine, err);
		goto out;
	}
	if (wsync_file_digest(file, &mine, err) < 0) {
		rc = -1;
		goto out;
	}
	if ((rc = s_check_entry(file, "", &m, entry, &mine, err)) != WSYNC_VERIFY_OK)
		goto out;
	if (manifest != NULL) {
		*manifest = m;
		m.models = NULL;
	}
out:
	wsync_manifest_free(&m);
	return rc;
}
