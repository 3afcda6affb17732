/*
 * delta_models.h - the base model fuzz_delta applies every input to, and the
 * heads mkdelta makes its seed deltas from: each head changes the base one
 * way, so that the seeds hold every encoding.
 */
#ifndef FUZZ_DELTA_MODELS_H
#define FUZZ_DELTA_MODELS_H

#include <stdio.h>
#include <string.h>

#include "wsync.h"

/*
 * Heads: 1 a few elements changed (sparse), 2 one tensor redrawn (sparse or
 * raw), 3 a tensor added and one removed (whole), 4 one reshaped, 5 none
 * changed, 6 most bytes of a u8 tensor changed (xor).
 */
#define DELTA_MODEL_HEADS 6

/* Writes the base (which 0) or head which to fd; 0 or -1 with err. */
static int
delta_model_write(int fd, int which, wsync_err_t *err)
{
	static unsigned char a[1024], b[256], d[4], e[200], f[512];
	uint64_t a_shape[2] = { 32, 16 }, a_flat[2] = { 16, 32 }, b_shape[1] = { 64 };
	uint64_t c_shape[1] = { 0 }, e_shape[1] = { 200 }, f_shape[1] = { 512 };
	wsync_tree_t *t = wsync_tree_new("fuzz", err);
	int rc = -1;

	if (t == NULL)
		return -1;
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (unsigned char)(i % 2 ? 0x3c + i / 256 : i / 4);
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (unsigned char)(which == 2 ? i * 131 + 7 : i * 7);
	memset(d, which == 0 ? 1 : 2, sizeof(d));
	for (size_t i = 0; i < sizeof(f); i++)
		f[i] = (unsigned char)(i / 3 ^ (which == 6 && i % 4 != 0));
	if (which == 1) {
		a[10] ^= 1;
		a[500] ^= 2;
		a[1000] ^= 4;
	}
	wsync_tree_set_version(t, which == 0 ? 1 : 2);
	if (wsync_tree_add(t, "a", WSYNC_BF16, 2, which == 4 ? a_flat : a_shape, a,
	    sizeof(a), err) < 0 ||
	    wsync_tree_add(t, "b", WSYNC_F32, 1, b_shape, b, sizeof(b), err) < 0 ||
	    wsync_tree_add(t, "c", WSYNC_I8, 1, c_shape, e, 0, err) < 0 ||
	    (which != 3 && wsync_tree_add(t, "d", WSYNC_F32, 0, NULL, d, sizeof(d), err) < 0) ||
	    (which == 3 && wsync_tree_add(t, "e", WSYNC_U8, 1, e_shape, e, sizeof(e), err) < 0) ||
	    wsync_tree_add(t, "f", WSYNC_U8, 1, f_shape, f, sizeof(f), err) < 0)
		goto out;
	rc = wsync_tree_write_fd(t, fd, "model", err);
out:
	wsync_tree_destroy(&t);
	return rc;
}

#endif
