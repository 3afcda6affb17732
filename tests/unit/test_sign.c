/* test_sign.c - signed pushes: keys, manifests, and each reason a verifier refuses a file. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "sign_int.h"
#include "tap.h"

#define S_N 4096                        /* floats in a test tensor */

static char s_dir[64];
static wsync_signkey_t *s_key, *s_other;
static wsync_verifykey_t s_pub, s_other_pub;
static float s_actor[S_N], s_critic[S_N];

/* Makes a key pair DIR/name.{pub,key}; the secret key, or NULL. */
static wsync_signkey_t *
s_keypair(const char *name, wsync_verifykey_t *pub)
{
	char base[128], path[160], line[WSYNC_SIGN_PUBLIC];
	wsync_err_t err;

	snprintf(base, sizeof(base), "%s/%s", s_dir, name);
	if (wsync_signkey_generate(base, 0, line, &err) < 0) {
		printf("# keygen: %s\n", err.msg);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s.pub", base);
	if (wsync_verifykey_load(path, pub, &err) < 0)
		printf("# %s\n", err.msg);
	snprintf(path, sizeof(path), "%s.key", base);
	return wsync_signkey_load(path, &err);
}

/* A tree of model with one tensor of S_N floats at data and meta step=7. */
static wsync_tree_t *
s_tree(const char *model, const float *data)
{
	uint64_t shape[1] = { S_N };
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new(model, &err);

	wsync_tree_set_meta(tree, "step", "7", &err);
	wsync_tree_add(tree, "layer.weight", WSYNC_F32, 1, shape, data, sizeof(float) * S_N, &err);
	return tree;
}

/* The tree written into memory and opened; the caller closes it and frees *image. */
static wsync_file_t *
s_open(wsync_tree_t *tree, void **image)
{
	wsync_err_t err;
	uint64_t size;
	wsync_file_t *f = NULL;

	*image = NULL;
	if (wsync_tree_size(tree, &size, &err) < 0 ||
	    (*image = aligned_alloc(64, (size + 63) / 64 * 64)) == NULL ||
	    wsync_tree_write_into(tree, *image, size, &err) < 0 ||
	    (f = wsync_file_open_buffer(*image, size, "v.wsync", &err)) == NULL)
		printf("# open: %s\n", err.msg);
	return f;
}

/* The meta value of key in tree as written (copied into buf). */
static void
s_meta_of(wsync_tree_t *tree, const char *key, char *buf, size_t size)
{
	void *image;
	wsync_file_t *f = s_open(tree, &image);

	buf[0] = '\0';
	for (size_t i = 0; f != NULL && i < wsync_file_meta_count(f); i++)
		if (strcmp(wsync_file_meta(f, i)->key, key) == 0)
			snprintf(buf, size, "%s", wsync_file_meta(f, i)->value);
	wsync_file_close(&f);
	free(image);
}

/* Verifies tree as written with keys; the reason, err.msg into msg. */
static int
s_verify(wsync_tree_t *tree, const wsync_verifykey_t *keys, int nkeys, wsync_manifest_t *m,
    char *msg, size_t size)
{
	void *image;
	wsync_file_t *f = s_open(tree, &image);
	wsync_err_t err = { 0 };
	int rc = wsync_verify_file(f, keys, nkeys, m, &err);

	snprintf(msg, size, "%s", rc == WSYNC_VERIFY_OK ? "" : err.msg);
	wsync_file_close(&f);
	free(image);
	return rc;
}

static void
test_sign_and_verify(void)
{
	wsync_tree_t *tree = s_tree("actor", s_actor);
	wsync_manifest_t m, got;
	wsync_err_t err;
	char msg[1024];
	int rc;

	ok(wsync_sign_trees(&tree, 1, s_key, 42, &m, &err) == 0, "signs one tree: %s", err.msg);
	rc = s_verify(tree, &s_pub, 1, &got, msg, sizeof(msg));
	ok(rc == WSYNC_VERIFY_OK, "the signature holds: %s", msg);
	ok(got.seq == 42 && got.nmodels == 1 && strcmp(got.models[0].model, "actor") == 0 &&
	    memcmp(got.key, s_pub.id, WSYNC_KEYID) == 0 && got.time == m.time,
	    "the verifier gets the manifest: seq, time, key and models");
	wsync_manifest_free(&m);
	wsync_manifest_free(&got);
	wsync_tree_destroy(&tree);
}

static void
test_two_models(void)
{
	wsync_tree_t *trees[2] = { s_tree("critic", s_critic), s_tree("actor", s_actor) };
	wsync_manifest_t m;
	wsync_err_t err;
	char msg[1024];

	ok(wsync_sign_trees(trees, 2, s_key, 5, &m, &err) == 0, "signs a push of two models");
	ok(m.nmodels == 2 && strcmp(m.models[0].model, "actor") == 0 &&
	    strcmp(m.models[1].model, "critic") == 0, "its manifest lists both, sorted by id");
	ok(s_verify(trees[0], &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_OK &&
	    s_verify(trees[1], &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_OK,
	    "each file of the push verifies");
	wsync_manifest_free(&m);
	wsync_tree_destroy(&trees[0]);
	wsync_tree_destroy(&trees[1]);
}

static void
test_unsigned(void)
{
	wsync_tree_t *tree = s_tree("actor", s_actor);
	wsync_err_t err;
	char msg[1024];

	ok(s_verify(tree, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_UNSIGNED &&
	    strcmp(msg, "v.wsync: not signed (no wsync.signature in its meta)") == 0,
	    "an unsigned file is refused: %s", msg);
	wsync_sign_trees(&tree, 1, s_key, 1, NULL, &err);
	wsync_tree_set_meta(tree, WSYNC_META_SIGNATURE, "", &err);
	ok(s_verify(tree, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_MALFORMED &&
	    strcmp(msg, "v.wsync: wsync.signature: not a minisign signature (an untrusted "
	    "comment, then the base64 of 74 bytes)") == 0,
	    "a stripped signature is refused: %s", msg);
	wsync_tree_destroy(&tree);
}

static void
test_keys_and_rotation(void)
{
	wsync_tree_t *tree = s_tree("actor", s_actor);
	wsync_verifykey_t both[2] = { s_other_pub, s_pub };
	wsync_err_t err;
	char msg[1024], want[256], hex[17];

	wsync_sign_trees(&tree, 1, s_key, 1, NULL, &err);
	wsync_keyid_hex(s_pub.id, hex);
	snprintf(want, sizeof(want), "v.wsync: signed by key %s, which is not the verify key",
	    hex);
	ok(s_verify(tree, &s_other_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_UNKNOWN_KEY &&
	    strcmp(msg, want) == 0, "a file signed by another key is refused: %s", msg);
	ok(s_verify(tree, both, 2, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_OK,
	    "a second verify key is taken (rotation): %s", msg);
	wsync_tree_destroy(&tree);
}

static void
test_bad_signature(void)
{
	wsync_tree_t *a = s_tree("actor", s_actor), *b = s_tree("actor", s_critic);
	static char manifest[WSYNC_MAX_META_VALUE + 1];
	wsync_err_t err;
	char msg[1024], want[256], hex[17];

	wsync_sign_trees(&a, 1, s_key, 1, NULL, &err);
	wsync_sign_trees(&b, 1, s_key, 2, NULL, &err);
	/* b's manifest under a's signature: the same key, but not what it signed. */
	s_meta_of(b, WSYNC_META_MANIFEST, manifest, sizeof(manifest));
	wsync_tree_set_meta(a, WSYNC_META_MANIFEST, manifest, &err);
	wsync_keyid_hex(s_pub.id, hex);
	snprintf(want, sizeof(want), "v.wsync: the signature by key %s does not hold for its "
	    "manifest", hex);
	ok(s_verify(a, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_BAD_SIGNATURE &&
	    strcmp(msg, want) == 0, "another manifest under a signature is refused: %s", msg);
	wsync_tree_destroy(&a);
	wsync_tree_destroy(&b);
}

/* A tree of model over data carrying the signature and manifest of signed. */
static wsync_tree_t *
s_forged(wsync_tree_t *signed_tree, const char *model, const float *data)
{
	static char value[WSYNC_MAX_META_VALUE + 1];
	wsync_tree_t *t = s_tree(model, data);
	wsync_err_t err;

	s_meta_of(signed_tree, WSYNC_META_MANIFEST, value, sizeof(value));
	wsync_tree_set_meta(t, WSYNC_META_MANIFEST, value, &err);
	s_meta_of(signed_tree, WSYNC_META_SIGNATURE, value, sizeof(value));
	wsync_tree_set_meta(t, WSYNC_META_SIGNATURE, value, &err);
	return t;
}

static void
test_forgeries(void)
{
	static float flipped[S_N];
	wsync_tree_t *tree = s_tree("actor", s_actor), *f;
	wsync_signed_model_t mine;
	wsync_err_t err;
	char msg[1024], want[256];
	void *image;
	wsync_file_t *file;

	wsync_sign_trees(&tree, 1, s_key, 3, NULL, &err);
	memcpy(flipped, s_actor, sizeof(flipped));
	((unsigned char *)flipped)[100] ^= 1;

	/* A flipped byte in a file written anew: its XXH3 hashes and content id recomputed. */
	f = s_forged(tree, "actor", flipped);
	file = s_open(f, &image);
	wsync_file_digest(file, &mine, &err);
	snprintf(want, sizeof(want), "v.wsync: content id %016llx, but the manifest (seq 3) "
	    "signs ", (unsigned long long)wsync_file_content_id(file));
	wsync_file_close(&file);
	free(image);
	ok(s_verify(f, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_CONTENT &&
	    strncmp(msg, want, strlen(want)) == 0,
	    "a flipped byte with recomputed hashes and content id is refused: %s", msg);
	wsync_tree_destroy(&f);

	/* The same byte flipped under the old hashes: what an XXH3 collision would give. */
	f = s_forged(tree, "actor", s_actor);
	file = s_open(f, &image);
	((unsigned char *)image)[wsync_file_tensor(file, 0)->offset + 100] ^= 1;
	ok(wsync_file_verify(file, NULL, NULL, &err) < 0, "(its XXH3 hash no longer holds)");
	ok(wsync_verify_file(file, &s_pub, 1, NULL, &err) == WSYNC_VERIFY_DIGEST &&
	    strstr(err.msg, "is not the signed") != NULL && strstr(err.msg, "(manifest seq 3): "
	    "the data was changed after signing") != NULL,
	    "a flipped byte under the same content id is refused by its digest: %s", err.msg);
	wsync_file_close(&file);
	free(image);
	wsync_tree_destroy(&f);

	f = s_forged(tree, "actor", s_actor);
	wsync_tree_set_meta(f, "step", "8", &err);
	ok(s_verify(f, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_META &&
	    strcmp(msg, "v.wsync: its meta is not the meta the manifest (seq 3) signs") == 0,
	    "changed meta is refused: %s", msg);
	wsync_tree_destroy(&f);

	f = s_forged(tree, "critic", s_actor);
	ok(s_verify(f, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_NOT_LISTED &&
	    strcmp(msg, "v.wsync: model critic is not in the signed manifest (seq 3)") == 0,
	    "a model the manifest does not list is refused: %s", msg);
	wsync_tree_destroy(&f);
	wsync_tree_destroy(&tree);
}

static void
test_manifest_encoding(void)
{
	wsync_signed_model_t models[2] = { { .model = "a", .content = 1 },
	    { .model = "b", .content = 300 } };
	wsync_manifest_t m = { .seq = 7, .time = 1700000000, .nmodels = 2, .models = models };
	wsync_manifest_t back;
	unsigned char *buf;
	size_t len;
	wsync_err_t err;

	ok(wsync_manifest_encode(&m, &buf, &len, &err) == 0 && buf[0] == 0x85 &&
	    memcmp(buf + 1, "\xa8manifest\x01\xa3seq\x07\xa4time\xce", 20) == 0,
	    "a manifest encodes as a map of five, shortest forms first");
	ok(wsync_manifest_decode(buf, len, &back, &err) == 0 && back.seq == 7 &&
	    back.nmodels == 2 && back.models[1].content == 300, "and decodes back: %s", err.msg);
	wsync_manifest_free(&back);
	/* seq 7 as uint8 (0xcc 0x07) instead of a fixint: the same value, another encoding. */
	{
		unsigned char *long_form = malloc(len + 1);
		memcpy(long_form, buf, 15);
		long_form[15] = 0xcc;
		memcpy(long_form + 16, buf + 15, len - 15);
		ok(wsync_manifest_decode(long_form, len + 1, &back, &err) < 0 &&
		    strcmp(err.msg, "manifest: not in its canonical encoding (fields in order, "
		    "shortest forms)") == 0, "a non-canonical encoding is refused: %s", err.msg);
		free(long_form);
	}
	/* Its models as an array that declares 2^32-1 entries: bounded before unpacking. */
	{
		unsigned char *huge = malloc(len + 5);
		size_t at = len - 1;
		while (at > 0 && memcmp(buf + at, "\xa6models", 7) != 0)
			at--;
		memcpy(huge, buf, at + 7);
		memcpy(huge + at + 7, "\xdd\xff\xff\xff\xff", 5);
		ok(at > 0 && wsync_manifest_decode(huge, at + 12, &back, &err) < 0 &&
		    strstr(err.msg, "declares 4294967295 objects") != NULL,
		    "a container declaring more than its bytes hold is refused unallocated: %s",
		    err.msg);
		free(huge);
	}
	free(buf);
	memcpy(models[1].model, "a", 2);
	ok(wsync_manifest_encode(&m, &buf, &len, &err) < 0 &&
	    strcmp(err.msg, "manifest: model a twice") == 0, "a model twice is refused");
}

/*
 * Part r of 2 of model policy: tensor "pR" of data, meta step=7, and a stale
 * whole push's manifest that signing drops; signed for group.
 */
static wsync_tree_t *
s_part(uint32_t r, const float *data, uint64_t group)
{
	uint64_t shape[1] = { S_N };
	char path[8];
	wsync_err_t err;
	wsync_tree_t *tree = wsync_tree_new("policy", &err);

	snprintf(path, sizeof(path), "p%u", r);
	wsync_tree_set_meta(tree, "step", "7", &err);
	wsync_tree_set_meta(tree, WSYNC_META_MANIFEST, "stale", &err);
	wsync_tree_add(tree, path, WSYNC_F32, 1, shape, data, sizeof(float) * S_N, &err);
	if (wsync_sign_part(tree, s_key, group, r, 2, NULL, &err) < 0)
		printf("# sign part: %s\n", err.msg);
	return tree;
}

/* The union of two parts, as a hub makes it: every tensor, every meta entry; extra adds "x". */
static wsync_tree_t *
s_union(wsync_tree_t *a, wsync_tree_t *b, int extra)
{
	uint64_t shape[1] = { S_N };
	wsync_err_t err;
	wsync_tree_t *u = wsync_tree_new("policy", &err);
	wsync_tree_t *parts[2] = { a, b };

	for (int i = 0; i < 2; i++) {
		void *image;
		wsync_file_t *f = s_open(parts[i], &image);
		for (size_t j = 0; f != NULL && j < wsync_file_meta_count(f); j++)
			wsync_tree_set_meta(u, wsync_file_meta(f, j)->key, wsync_file_meta(f, j)->value,
			    &err);
		wsync_file_close(&f);
		free(image);
	}
	wsync_tree_add(u, "p0", WSYNC_F32, 1, shape, s_actor, sizeof(float) * S_N, &err);
	wsync_tree_add(u, "p1", WSYNC_F32, 1, shape, s_critic, sizeof(float) * S_N, &err);
	if (extra)
		wsync_tree_add(u, "x", WSYNC_F32, 1, shape, s_critic, sizeof(float) * S_N, &err);
	return u;
}

static void
test_parts(void)
{
	wsync_tree_t *a = s_part(0, s_actor, 5), *b = s_part(1, s_critic, 5);
	wsync_tree_t *late = s_part(1, s_critic, 6), *u;
	wsync_manifest_t got;
	wsync_err_t err;
	char msg[1024];

	u = s_union(a, b, 0);
	ok(s_verify(u, &s_pub, 1, &got, msg, sizeof(msg)) == WSYNC_VERIFY_OK && got.seq == 5 &&
	    got.part == 0 && got.parts == 2 && got.ntensors == 1 &&
	    strcmp(got.tensors[0], "p0") == 0, "the union of two signed parts holds: %s", msg);
	wsync_manifest_free(&got);
	wsync_tree_destroy(&u);
	u = s_union(a, late, 0);
	ok(s_verify(u, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_GROUP &&
	    strcmp(msg, "v.wsync: part 1 is signed for group 6, part 0 for group 5: its parts "
	    "are not one signed group") == 0, "a part of another group is refused: %s", msg);
	wsync_tree_destroy(&u);
	u = s_union(a, b, 1);
	ok(s_verify(u, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_DIGEST &&
	    strcmp(msg, "v.wsync: tensor \"x\" is in none of its 2 signed parts") == 0,
	    "a tensor no part signed is refused: %s", msg);
	wsync_tree_destroy(&u);
	u = s_union(a, b, 0);
	wsync_tree_set_meta(u, "step", "8", &err);
	ok(s_verify(u, &s_pub, 1, NULL, msg, sizeof(msg)) == WSYNC_VERIFY_META &&
	    strcmp(msg, "v.wsync: part 0: its meta is not the meta the manifest (seq 5) signs") == 0,
	    "a meta value changed after signing is refused: %s", msg);
	wsync_tree_destroy(&u);
	wsync_tree_destroy(&a);
	wsync_tree_destroy(&b);
	wsync_tree_destroy(&late);
	ok(wsync_meta_is_signature("wsync.manifest") && wsync_meta_is_signature("wsync.signature.12") &&
	    !wsync_meta_is_signature("wsync.manifest.01") && !wsync_meta_is_signature("wsync.manifests") &&
	    !wsync_meta_is_signature("wsync.signature.") && !wsync_meta_is_signature("step"),
	    "the keys a signature is carried in: the two, and a part's by its number");
}

static void
test_part_manifest_encoding(void)
{
	wsync_signed_model_t model = { .model = "policy", .content = 9 };
	const char *paths[2] = { "b", "a" }, *keys[1] = { "step" };
	wsync_manifest_t m = { .seq = 4, .time = 1700000000, .nmodels = 1, .models = &model,
	    .part = 1, .parts = 3 }, back;
	unsigned char *buf;
	size_t len;
	wsync_err_t err;

	ok(wsync_manifest_set_names(&m, paths, 2, keys, 1, &err) == 0 &&
	    strcmp(m.tensors[0], "a") == 0, "a part's names are kept sorted");
	ok(wsync_manifest_encode(&m, &buf, &len, &err) == 0 && buf[0] == 0x89 &&
	    memcmp(buf + 1, "\xa8manifest\x02", 10) == 0,
	    "a part's manifest encodes as a map of nine, format 2");
	ok(wsync_manifest_decode(buf, len, &back, &err) == 0 && back.part == 1 &&
	    back.parts == 3 && back.ntensors == 2 && strcmp(back.tensors[1], "b") == 0 &&
	    back.nmetakeys == 1 && strcmp(back.metakeys[0], "step") == 0,
	    "and decodes back: %s", err.msg);
	wsync_manifest_free(&back);
	free(buf);
	/* The names out of order: not the canonical form. */
	{
		char *t = m.tensors[0];
		m.tensors[0] = m.tensors[1];
		m.tensors[1] = t;
	}
	ok(wsync_manifest_encode(&m, &buf, &len, &err) < 0 &&
	    strcmp(err.msg, "manifest: tensor \"a\" twice or out of order (sorted bytewise)") == 0,
	    "names out of order are refused: %s", err.msg);
	m.models = NULL;
	wsync_manifest_free(&m);
}

static void
test_key_files(void)
{
	char path[128], text[512], line[WSYNC_SIGN_PUBLIC];
	uint8_t bin[200];
	size_t n;
	wsync_err_t err;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/k.key", s_dir);
	fp = fopen(path, "r");
	fgets(text, sizeof(text), fp);
	fgets(text, sizeof(text), fp);
	fclose(fp);
	sodium_base642bin(bin, sizeof(bin), text, strcspn(text, "\n"), NULL, &n, NULL,
	    sodium_base64_VARIANT_ORIGINAL);
	memcpy(bin + 2, "Sc", 2);
	sodium_bin2base64(line, sizeof(line), bin, 1, sodium_base64_VARIANT_ORIGINAL);
	snprintf(path, sizeof(path), "%s/enc.key", s_dir);
	fp = fopen(path, "w");
	fputs("untrusted comment: minisign encrypted secret key\n", fp);
	{
		char b64[300];
		sodium_bin2base64(b64, sizeof(b64), bin, n, sodium_base64_VARIANT_ORIGINAL);
		fprintf(fp, "%s\n", b64);
	}
	fclose(fp);
	chmod(path, 0600);
	ok(wsync_signkey_load(path, &err) == NULL && err.code == EX_DATAERR &&
	    strstr(err.msg, "enc.key: the secret key is encrypted with a password, which an "
	    "unattended signer cannot type: make one without (minisign -G -W, or a signing "
	    "pair from wsync-keygen), or remove it (minisign -C -W)") != NULL,
	    "an encrypted minisign key is refused, saying how to make one: %s", err.msg);
	snprintf(path, sizeof(path), "%s/k.key", s_dir);
	chmod(path, 0644);
	ok(wsync_signkey_load(path, &err) == NULL && err.code == EX_NOPERM,
	    "a secret key others can read is refused: %s", err.msg);
	chmod(path, 0600);
	snprintf(path, sizeof(path), "%s/k", s_dir);
	ok(wsync_signkey_generate(path, 0, line, &err) < 0 && err.code == EX_IOERR,
	    "keygen does not replace keys without force: %s", err.msg);
}

int
main(void)
{
	char cmd[128];
	int status;

	snprintf(s_dir, sizeof(s_dir), "/tmp/test_sign.XXXXXX");
	if (mkdtemp(s_dir) == NULL)
		return 1;
	for (int i = 0; i < S_N; i++) {
		s_actor[i] = (float)i;
		s_critic[i] = (float)-i;
	}
	s_key = s_keypair("k", &s_pub);
	s_other = s_keypair("other", &s_other_pub);
	ok(s_key != NULL && s_other != NULL, "makes two key pairs");
	test_sign_and_verify();
	test_two_models();
	test_unsigned();
	test_keys_and_rotation();
	test_bad_signature();
	test_forgeries();
	test_manifest_encoding();
	test_parts();
	test_part_manifest_encoding();
	test_key_files();
	wsync_signkey_destroy(&s_key);
	wsync_signkey_destroy(&s_other);
	status = tap_done();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
	if (system(cmd) != 0)
		return 1;
	return status;
}
