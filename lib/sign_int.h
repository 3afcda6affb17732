/* sign_int.h - the pieces of signing: SHA-256 digests of tensors, minisign's framing. */
#ifndef WSYNC_SIGN_INT_H
#define WSYNC_SIGN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "wsync.h"

/* Bytes of a minisign signature's binary part: "ED", key id, ed25519 signature. */
#define WSYNC_MINISIG_BIN (2 + WSYNC_KEYID + 64)

/*
 * A signing or verifying job is about to digest this many bytes of tensor
 * data: from 1 MiB, OpenSSL's faster SHA-256 is loaded for it (digest.c).
 */
void wsync_digest_expect(uint64_t bytes);
/*
 * SHA-256 of n bytes at data into out (32 bytes), and their XXH3-64 into
 * *xxh3 in the same pass when xxh3 is not NULL.
 */
int wsync_data_digest(const void *data, size_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err);
/*
 * As wsync_data_digest, of the n bytes of fd at off, read (pread) a chunk at
 * a time, so that the holes of a sparse file are never filled.
 */
int wsync_read_digest(int fd, uint64_t off, uint64_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err);
/*
 * Copies n bytes from src to dst (not overlapping), puts their SHA-256 into
 * out and their XXH3-64 into *xxh3: one pass over src, chunk by chunk while
 * each is in the cache. What a receiver that verifies uses instead of
 * wsync_copy_hash.
 */
int wsync_copy_digest(void *dst, const void *src, size_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err);

/* One tensor as the model digest and the content id see it. */
typedef struct wsync_digest_item {
	const char *path;
	wsync_dtype_t dtype;
	int ndim;
	const uint64_t *shape;
	uint64_t hash;                  /* XXH3-64 of the data */
	uint8_t data[WSYNC_DIGEST];     /* SHA-256 of the data */
} wsync_digest_item_t;

/*
 * The model digest and the content id of n tensors (sorted here by path,
 * in place): SHA-256 and XXH3-64 over the same descriptors, the first with
 * each tensor's SHA-256, the second with its XXH3-64 (CONTENT IDENTITY).
 */
int wsync_model_digest(wsync_digest_item_t *items, size_t n, uint8_t *digest,
    uint64_t *content, wsync_err_t *err);
/* The value of meta key in file; NULL when absent. Borrowed from file. */
const char *wsync_meta_value(const wsync_file_t *file, const char *key);
/* The meta digest: SHA-256 over the entries sorted by key, but the two of a signature. */
int wsync_meta_digest(const char *const *keys, const char *const *values, size_t n,
    uint8_t *out, wsync_err_t *err);

/* The signing key's insides, for sign.c. */
struct wsync_signkey {
	uint8_t id[WSYNC_KEYID];
	uint8_t sk[64];                 /* libsodium's: seed, then public key */
};

/*
 * Signs msg in minisign's prehashed form: the text of a .minisig file
 * (untrusted comment, signature, trusted comment, global signature), into a
 * malloc'd *text.
 */
int wsync_minisig_sign(const wsync_signkey_t *key, const void *msg, size_t len,
    const char *trusted, char **text, wsync_err_t *err);
/*
 * Reads a .minisig text: its key id into id, the 64-byte signature into sig,
 * the trusted comment (borrowed from text, not NUL-terminated: *tlen bytes),
 * and the global signature into gsig. -1 with err when it is not one.
 */
int wsync_minisig_parse(const char *text, uint8_t *id, uint8_t *sig, const char **trusted,
    size_t *tlen, uint8_t *gsig, wsync_err_t *err);
/*
 * 0 when the parsed signature holds for msg under pk: the signature of its
 * BLAKE2b-512 and the global signature over it and the trusted comment.
 */
int wsync_minisig_check(const uint8_t *pk, const void *msg, size_t len, const uint8_t *sig,
    const char *trusted, size_t tlen, const uint8_t *gsig);

#endif
