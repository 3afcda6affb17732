/*
 * sign - what signing and verifying a version cost against one SHA-256 pass
 * over its tensors (OpenSSL's, as bench/digest measures it), RUNS times after
 * one untimed pass, one line a run: "SHA256_S SIGN_S VERIFY_S":
 *
 *   sign FILE KEY OUT RUNS
 *
 * Signing is wsync_sign_trees of FILE's tensors as one tree (the model
 * digest, one pass, and the signature); OUT gets the signed file once, and
 * verifying is wsync_verify_file of it, mapped (the digest of its tensors
 * and its meta, the signature).
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "wsync.h"

static void
s_die(const wsync_err_t *err)
{
	fprintf(stderr, "sign: %s\n", err->msg);
	exit(err->code ? err->code : 70);
}

/* One SHA-256 pass over every tensor of f: the baseline. */
static unsigned
s_sha256(const wsync_file_t *f)
{
	unsigned char out[32];
	unsigned len, keep = 0;

	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		EVP_Digest(t->data, t->nbytes, out, &len, EVP_sha256(), NULL);
		keep += out[0];
	}
	return keep;
}

int
main(int argc, char **argv)
{
	wsync_verifykey_t pub;
	wsync_signkey_t *key;
	wsync_file_t *in, *out;
	wsync_tree_t *tree;
	wsync_err_t err;
	unsigned keep = 0;
	int runs;

	if (argc != 5 || (runs = atoi(argv[4])) < 1) {
		fputs("usage: sign FILE KEY OUT RUNS\n", stderr);
		return 64;
	}
	if ((in = wsync_file_open(argv[1], &err)) == NULL ||
	    (key = wsync_signkey_load(argv[2], &err)) == NULL ||
	    (tree = wsync_tree_new(wsync_file_model(in), &err)) == NULL)
		s_die(&err);
	wsync_signkey_public(key, &pub);
	for (size_t i = 0; i < wsync_file_count(in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(in, i);
		if (wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, &err) < 0)
			s_die(&err);
	}
	if (wsync_sign_trees(&tree, 1, key, 1, NULL, &err) < 0 ||
	    wsync_tree_write_file(tree, argv[3], &err) < 0 ||
	    (out = wsync_file_open(argv[3], &err)) == NULL)
		s_die(&err);
	keep += s_sha256(in);
	if (wsync_verify_file(out, &pub, 1, NULL, &err) != WSYNC_VERIFY_OK)
		s_die(&err);
	for (int r = 0; r < runs; r++) {
		double t0 = bench_now(), t1, t2;
		keep += s_sha256(in);
		t1 = bench_now();
		if (wsync_sign_trees(&tree, 1, key, (uint64_t)r + 2, NULL, &err) < 0)
			s_die(&err);
		t2 = bench_now();
		if (wsync_verify_file(out, &pub, 1, NULL, &err) != WSYNC_VERIFY_OK)
			s_die(&err);
		printf("%.9f %.9f %.9f\n", t1 - t0, t2 - t1, bench_now() - t2);
	}
	wsync_file_close(&out);
	wsync_file_close(&in);
	wsync_tree_destroy(&tree);
	wsync_signkey_destroy(&key);
	return keep == 42 ? 1 : 0;
}
