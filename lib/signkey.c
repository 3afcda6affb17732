/*
 * signkey.c - ed25519 signing keys in the files minisign and signify write:
 * two lines, an "untrusted comment:" and the base64 of the key.
 *
 *   public key (both):  "Ed", key id (8), public key (32)
 *   minisign secret:    "Ed", KDF ("Sc" scrypt, or two zero bytes: none),
 *                       "B2", salt (32), opslimit (8), memlimit (8), key id (8),
 *                       secret key (64: seed, public key), checksum (32)
 *   signify secret:     "Ed", "BK", KDF rounds (4, 0: none), salt (16),
 *                       checksum (8: of SHA-512 of the secret key), key id (8),
 *                       secret key (64)
 *
 * Only keys without a password are read: a trainer signs unattended.
 */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "keys_int.h"
#include "sign_int.h"
#include "tempfile_int.h"

#define S_MAX_FILE 4096                 /* bytes in a key file */
#define S_PUB_BIN (2 + WSYNC_KEYID + 32)
#define S_MINISIGN_SEC_BIN (2 + 2 + 2 + 32 + 8 + 8 + WSYNC_KEYID + 64 + 32)
#define S_SIGNIFY_SEC_BIN (2 + 2 + 4 + 16 + 8 + WSYNC_KEYID + 64)
#define S_COMMENT "untrusted comment: "

/* libsodium must be initialised once before use; it is safe to call again. */
static int
s_sodium(wsync_err_t *err)
{
	if (sodium_init() < 0)
		return wsync_err_set(err, EX_SOFTWARE, "cannot initialise libsodium");
	return 0;
}

/*
 * Reads a key file's second line and decodes its base64 into bin (up to
 * size bytes); *n gets the length. secret: the file must be private.
 */
static int
s_read_key(const char *path, int secret, uint8_t *bin, size_t size, size_t *n,
    wsync_err_t *err)
{
	char text[S_MAX_FILE + 1], *line, *end;
	int rc = -1;

	if (wsync_key_file_read(path, secret, text, sizeof(text), err) < 0)
		return -1;
	if (strncmp(text, S_COMMENT, strlen(S_COMMENT)) != 0 ||
	    (line = strchr(text, '\n')) == NULL) {
		wsync_err_set(err, EX_DATAERR, "%s: not a minisign or signify key file (no "
		    "\"untrusted comment:\" line)", path);
		goto out;
	}
	line++;
	end = line + strcspn(line, "\r\n");
	if (sodium_base642bin(bin, size, line, (size_t)(end - line), NULL, n, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0) {
		wsync_err_set(err, EX_DATAERR, "%s: its key line is not base64 of a key", path);
		goto out;
	}
	rc = 0;
out:
	sodium_memzero(text, sizeof(text));
	return rc;
}

int
wsync_verifykey_load(const char *path, wsync_verifykey_t *key, wsync_err_t *err)
{
	uint8_t bin[S_PUB_BIN + 1];
	size_t n;

	if (s_read_key(path, 0, bin, sizeof(bin), &n, err) < 0)
		return -1;
	if (n != S_PUB_BIN || memcmp(bin, "Ed", 2) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: not an ed25519 public key (minisign "
		    "or signify: %d bytes starting \"Ed\")", path, S_PUB_BIN);
	memcpy(key->id, bin + 2, WSYNC_KEYID);
	memcpy(key->pk, bin + 2 + WSYNC_KEYID, 32);
	return 0;
}

/* 0 when sk's public half is the public key its seed makes: not a damaged key. */
static int
s_sk_check(const uint8_t *sk)
{
	uint8_t pk[32], full[64];
	int rc;

	crypto_sign_seed_keypair(pk, full, sk);
	rc = sodium_memcmp(pk, sk + 32, 32);
	sodium_memzero(full, sizeof(full));
	return rc;
}

/* The key id and secret key of a minisign secret key image. */
static int
s_minisign_secret(const char *path, const uint8_t *bin, wsync_signkey_t *key,
    wsync_err_t *err)
{
	const uint8_t *id = bin + 54, *sk = id + WSYNC_KEYID, *chk = sk + 64;
	static const uint8_t zero[32];
	uint8_t sum[32];
	crypto_generichash_state st;

	if (memcmp(bin + 2, "Sc", 2) == 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the secret key is encrypted with a "
		    "password, which an unattended signer cannot type: make one without (minisign "
		    "-G -W, or a signing pair from wsync-keygen), or remove it (minisign -C -W)", path);
	if (memcmp(bin + 2, "\0\0", 2) != 0 || memcmp(bin + 4, "B2", 2) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: unknown key derivation or checksum "
		    "in the secret key", path);
	/* minisign -W leaves the checksum zero; a key it encrypted had one: check that. */
	crypto_generichash_init(&st, NULL, 0, sizeof(sum));
	crypto_generichash_update(&st, bin, 2);
	crypto_generichash_update(&st, id, WSYNC_KEYID + 64);
	crypto_generichash_final(&st, sum, sizeof(sum));
	if ((memcmp(chk, zero, 32) != 0 && sodium_memcmp(chk, sum, 32) != 0) ||
	    s_sk_check(sk) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the secret key is damaged (its "
		    "checksum or public half does not match)", path);
	memcpy(key->id, id, WSYNC_KEYID);
	memcpy(key->sk, sk, 64);
	return 0;
}

/* The key id and secret key of a signify secret key image. */
static int
s_signify_secret(const char *path, const uint8_t *bin, wsync_signkey_t *key,
    wsync_err_t *err)
{
	const uint8_t *rounds = bin + 4, *chk = bin + 24, *id = bin + 32, *sk = id + WSYNC_KEYID;
	uint8_t sum[crypto_hash_sha512_BYTES];

	if (memcmp(rounds, "\0\0\0\0", 4) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the secret key is encrypted with a "
		    "passphrase, which an unattended signer cannot type: make one without "
		    "(signify -G -n, or a signing pair from wsync-keygen)", path);
	crypto_hash_sha512(sum, sk, 64);
	if (sodium_memcmp(chk, sum, 8) != 0 || s_sk_check(sk) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: the secret key is damaged (its "
		    "checksum or public half does not match)", path);
	memcpy(key->id, id, WSYNC_KEYID);
	memcpy(key->sk, sk, 64);
	return 0;
}

wsync_signkey_t *
wsync_signkey_load(const char *path, wsync_err_t *err)
{
	uint8_t bin[S_MINISIGN_SEC_BIN + 1];
	wsync_signkey_t *key = NULL;
	size_t n;
	int rc = -1;

	if (s_sodium(err) < 0 || s_read_key(path, 1, bin, sizeof(bin), &n, err) < 0)
		goto out;
	if ((key = sodium_malloc(sizeof(*key))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	if (n == S_MINISIGN_SEC_BIN && memcmp(bin, "Ed", 2) == 0)
		rc = s_minisign_secret(path, bin, key, err);
	else if (n == S_SIGNIFY_SEC_BIN && memcmp(bin, "EdBK", 4) == 0)
		rc = s_signify_secret(path, bin, key, err);
	else
		wsync_err_set(err, EX_DATAERR, "%s: not an ed25519 secret key (minisign's or "
		    "signify's)", path);
out:
	sodium_memzero(bin, sizeof(bin));
	if (rc < 0)
		wsync_signkey_destroy(&key);
	return key;
}

void
wsync_signkey_destroy(wsync_signkey_t **key)
{
	if (*key == NULL)
		return;
	sodium_free(*key);      /* wipes it */
	*key = NULL;
}

void
wsync_signkey_public(const wsync_signkey_t *key, wsync_verifykey_t *pub)
{
	memcpy(pub->id, key->id, WSYNC_KEYID);
	memcpy(pub->pk, key->sk + 32, 32);
}

void
wsync_keyid_hex(const uint8_t *id, char *hex)
{
	uint64_t v = 0;

	/* As minisign prints it: the little-endian number, without leading zeros. */
	for (int i = WSYNC_KEYID - 1; i >= 0; i--)
		v = v << 8 | id[i];
	snprintf(hex, 2 * WSYNC_KEYID + 1, "%" PRIX64, v);
}

/* "untrusted comment: comment\n" and the base64 of bin, into text (size bytes). */
static void
s_key_text(char *text, size_t size, const char *comment, const uint8_t *bin, size_t n)
{
	size_t len = (size_t)snprintf(text, size, S_COMMENT "%s\n", comment);

	sodium_bin2base64(text + len, size - len - 1, bin, n, sodium_base64_VARIANT_ORIGINAL);
	strcat(text, "\n");
}

int
wsync_signkey_generate(const char *base, int force, char *public, wsync_err_t *err)
{
	char pub_path[4096], sec_path[4096], text[512], comment[64], id[2 * WSYNC_KEYID + 1];
	uint8_t sec[S_MINISIGN_SEC_BIN], pub[S_PUB_BIN], pk[32], *keyid, *sk;
	int rc = -1;

	if (s_sodium(err) < 0)
		return -1;
	if (snprintf(pub_path, sizeof(pub_path), "%s.pub", base) >= (int)sizeof(pub_path) ||
	    snprintf(sec_path, sizeof(sec_path), "%s.key", base) >= (int)sizeof(sec_path))
		return wsync_err_set(err, EX_USAGE, "%s: path too long", base);
	if (!force && (access(pub_path, F_OK) == 0 || access(sec_path, F_OK) == 0))
		return wsync_err_set(err, EX_IOERR, "%s exists: keys are not replaced unless "
		    "forced", access(pub_path, F_OK) == 0 ? pub_path : sec_path);
	/* As minisign -G -W writes it: no KDF, zero salt, limits and checksum. */
	memset(sec, 0, sizeof(sec));
	memcpy(sec, "Ed\0\0B2", 6);
	keyid = sec + 54;
	sk = keyid + WSYNC_KEYID;
	randombytes_buf(keyid, WSYNC_KEYID);
	crypto_sign_keypair(pk, sk);
	memcpy(pub, "Ed", 2);
	memcpy(pub + 2, keyid, WSYNC_KEYID);
	memcpy(pub + 2 + WSYNC_KEYID, pk, 32);
	wsync_keyid_hex(keyid, id);
	/* The secret goes first: a public key without its secret would be useless. */
	s_key_text(text, sizeof(text), "minisign secret key (wsync-keygen, unencrypted)", sec,
	    sizeof(sec));
	if (wsync_temp_write_text(sec_path, text, 0600, err) < 0)
		goto out;
	snprintf(comment, sizeof(comment), "minisign public key %s", id);
	s_key_text(text, sizeof(text), comment, pub, sizeof(pub));
	rc = wsync_temp_write_text(pub_path, text, 0644, err);
	sodium_bin2base64(public, WSYNC_SIGN_PUBLIC, pub, sizeof(pub),
	    sodium_base64_VARIANT_ORIGINAL);
out:
	sodium_memzero(sec, sizeof(sec));
	sodium_memzero(text, sizeof(text));
	return rc;
}
