/*
 * digest.c - the digests a signature covers: SHA-256 of each tensor's data
 * (with XXH3-64 in the same pass, or while copying), a model digest over
 * every tensor's descriptor and data digest, and a meta digest.
 *
 * SHA-256 of a large job is OpenSSL's, which runs on the CPU's SHA
 * extensions: 2.1 GB/s over 1 GiB where libsodium's BLAKE2b does 0.8 and its
 * own SHA-256 0.5 (bench/digest, bench/results.md). OpenSSL's libcrypto is
 * loaded when such a job first comes, not when a program starts: mapping and
 * linking it cost every wsync process about 0.5 ms of its start, and
 * starting it another 0.2. A small job (a 256 KiB push) is done by
 * libsodium's SHA-256 sooner than OpenSSL could be loaded; so is every job
 * when libcrypto cannot be loaded. The digests are the same either way.
 */
#include <dlfcn.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "hash_int.h"
#include "io_int.h"
#include "sign_int.h"

/* Data is hashed in chunks this size, each by both hashes while it is in the cache. */
#define S_CHUNK (128u << 10)
/* A job of this many bytes or more loads OpenSSL: at 0.5 GB/s, 2 ms of libsodium. */
#define S_OPENSSL_MIN (1u << 20)

#define S_STR_(x) #x
#define S_STR(x) S_STR_(x)
/* The libcrypto whose headers this is built with (its ABI: OpenSSL 3). */
#define S_LIBCRYPTO "libcrypto.so." S_STR(OPENSSL_SHLIB_VERSION)

/* OpenSSL's functions used, looked up once. */
static struct {
	int (*init)(uint64_t, const OPENSSL_INIT_SETTINGS *);
	EVP_MD *(*fetch)(OSSL_LIB_CTX *, const char *, const char *);
	EVP_MD_CTX *(*ctx_new)(void);
	void (*ctx_free)(EVP_MD_CTX *);
	int (*start)(EVP_MD_CTX *, const EVP_MD *, ENGINE *);
	int (*update)(EVP_MD_CTX *, const void *, size_t);
	int (*end)(EVP_MD_CTX *, unsigned char *, unsigned int *);
} s_ssl;

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static EVP_MD *s_sha256;
static atomic_int s_openssl;            /* 1 once OpenSSL's SHA-256 is ready */

/* Looks up name in lib into *fn (a function pointer, as POSIX allows); 0 or -1. */
static int
s_sym(void *lib, const char *name, void *fn)
{
	void *p = dlsym(lib, name);

	if (p == NULL)
		return -1;
	memcpy(fn, &p, sizeof(p));
	return 0;
}

/*
 * OpenSSL without its configuration file and without its tables of every
 * cipher and digest by name (nothing of them is used here, and building them
 * was most of its start-up), and SHA-256 fetched from its provider once, not
 * once a tensor. Nothing when it cannot be loaded: libsodium does the work.
 */
static void
s_load(void)
{
	void *lib = dlopen(S_LIBCRYPTO, RTLD_NOW | RTLD_LOCAL);

	if (lib == NULL || s_sym(lib, "OPENSSL_init_crypto", &s_ssl.init) < 0 ||
	    s_sym(lib, "EVP_MD_fetch", &s_ssl.fetch) < 0 ||
	    s_sym(lib, "EVP_MD_CTX_new", &s_ssl.ctx_new) < 0 ||
	    s_sym(lib, "EVP_MD_CTX_free", &s_ssl.ctx_free) < 0 ||
	    s_sym(lib, "EVP_DigestInit_ex", &s_ssl.start) < 0 ||
	    s_sym(lib, "EVP_DigestUpdate", &s_ssl.update) < 0 ||
	    s_sym(lib, "EVP_DigestFinal_ex", &s_ssl.end) < 0)
		return;
	s_ssl.init(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ADD_ALL_CIPHERS |
	    OPENSSL_INIT_NO_ADD_ALL_DIGESTS, NULL);
	if ((s_sha256 = s_ssl.fetch(NULL, "SHA256", NULL)) != NULL)
		atomic_store(&s_openssl, 1);
}

void
wsync_digest_expect(uint64_t bytes)
{
	if (bytes >= S_OPENSSL_MIN)
		pthread_once(&s_once, s_load);
}

/* A SHA-256 in progress: OpenSSL's (evp) once it is loaded, else libsodium's. */
typedef struct s_sha {
	EVP_MD_CTX *evp;
	crypto_hash_sha256_state st;
} s_sha_t;

static int
s_sha_start(s_sha_t *c, wsync_err_t *err)
{
	c->evp = NULL;
	if (!atomic_load(&s_openssl))
		return crypto_hash_sha256_init(&c->st) == 0 ? 0 :
		    wsync_err_set(err, EX_SOFTWARE, "cannot start a SHA-256 digest (libsodium)");
	c->evp = s_ssl.ctx_new();
	if (c->evp == NULL || s_ssl.start(c->evp, s_sha256, NULL) != 1) {
		s_ssl.ctx_free(c->evp);
		return wsync_err_set(err, EX_SOFTWARE, "cannot start a SHA-256 digest (OpenSSL)");
	}
	return 0;
}

static void
s_sha_update(s_sha_t *c, const void *p, size_t n)
{
	if (c->evp != NULL)
		s_ssl.update(c->evp, p, n);
	else
		crypto_hash_sha256_update(&c->st, p, n);
}

/* Ends c into out (32 bytes). */
static int
s_sha_end(s_sha_t *c, uint8_t *out, wsync_err_t *err)
{
	unsigned len = 0;
	int rc;

	if (c->evp == NULL)
		return crypto_hash_sha256_final(&c->st, out) == 0 ? 0 :
		    wsync_err_set(err, EX_SOFTWARE, "cannot end a SHA-256 digest (libsodium)");
	rc = s_ssl.end(c->evp, out, &len);
	s_ssl.ctx_free(c->evp);
	if (rc != 1 || len != WSYNC_DIGEST)
		return wsync_err_set(err, EX_SOFTWARE, "cannot end a SHA-256 digest (OpenSSL)");
	return 0;
}

/* Both hashes over n bytes, copied first to dst when it is not NULL. */
static int
s_digest(void *dst, const void *src, size_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	s_sha_t ctx;
	XXH3_state_t state;

	if (s_sha_start(&ctx, err) < 0)
		return -1;
	XXH3_64bits_reset(&state);
	for (size_t off = 0, c; off < n; off += c) {
		c = n - off < S_CHUNK ? n - off : S_CHUNK;
		if (d != NULL)
			memcpy(d + off, s + off, c);
		s_sha_update(&ctx, s + off, c);
		if (xxh3 != NULL)
			wsync_hash_update(&state, s + off, c);
	}
	if (xxh3 != NULL)
		*xxh3 = XXH3_64bits_digest(&state);
	return s_sha_end(&ctx, out, err);
}

int
wsync_data_digest(const void *data, size_t n, uint8_t *out, uint64_t *xxh3, wsync_err_t *err)
{
	return s_digest(NULL, data, n, out, xxh3, err);
}

int
wsync_read_digest(int fd, uint64_t off, uint64_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err)
{
	unsigned char *buf = wsync_io_buffer(S_CHUNK);
	XXH3_state_t state;
	wsync_err_t ended;
	s_sha_t ctx;

	if (buf == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (s_sha_start(&ctx, err) < 0) {
		free(buf);
		return -1;
	}
	XXH3_64bits_reset(&state);
	for (uint64_t at = 0; at < n;) {
		size_t c = n - at < S_CHUNK ? (size_t)(n - at) : S_CHUNK;
		ssize_t got = pread(fd, buf, c, (off_t)(off + at));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			wsync_err_set(err, got < 0 ? EX_IOERR : EX_DATAERR, "cannot read a tensor "
			    "to sign it: %s", got < 0 ? strerror(errno) : "the file is shorter");
			s_sha_end(&ctx, out, &ended);
			free(buf);
			return -1;
		}
		s_sha_update(&ctx, buf, (size_t)got);
		if (xxh3 != NULL)
			wsync_hash_update(&state, buf, (size_t)got);
		at += (uint64_t)got;
	}
	free(buf);
	if (xxh3 != NULL)
		*xxh3 = XXH3_64bits_digest(&state);
	return s_sha_end(&ctx, out, err);
}

int
wsync_copy_digest(void *dst, const void *src, size_t n, uint8_t *out, uint64_t *xxh3,
    wsync_err_t *err)
{
	return s_digest(dst, src, n, out, xxh3, err);
}

static int
s_cmp_items(const void *a, const void *b)
{
	return strcmp(((const wsync_digest_item_t *)a)->path,
	    ((const wsync_digest_item_t *)b)->path);
}

int
wsync_model_digest(wsync_digest_item_t *items, size_t n, uint8_t *digest, uint64_t *content,
    wsync_err_t *err)
{
	unsigned char desc[WSYNC_DESCRIBE_MAX + 8];
	s_sha_t ctx;
	XXH3_state_t state;

	if (s_sha_start(&ctx, err) < 0)
		return -1;
	XXH3_64bits_reset(&state);
	if (n > 1)
		qsort(items, n, sizeof(*items), s_cmp_items);
	for (size_t i = 0; i < n; i++) {
		const wsync_digest_item_t *t = &items[i];
		size_t len = wsync_tensor_describe(desc, t->path, t->dtype, t->ndim, t->shape);
		s_sha_update(&ctx, desc, len);
		s_sha_update(&ctx, t->data, WSYNC_DIGEST);
		for (int b = 0; b < 8; b++)
			desc[len + (size_t)b] = (unsigned char)(t->hash >> (8 * b));
		XXH3_64bits_update(&state, desc, len + 8);
	}
	*content = XXH3_64bits_digest(&state);
	return s_sha_end(&ctx, digest, err);
}

struct s_entry {
	const char *key, *value;
};

static int
s_cmp_entries(const void *a, const void *b)
{
	return strcmp(((const struct s_entry *)a)->key, ((const struct s_entry *)b)->key);
}

int
wsync_meta_digest(const char *const *keys, const char *const *values, size_t n,
    uint8_t *out, wsync_err_t *err)
{
	struct s_entry *e = malloc((n + 1) * sizeof(*e));
	s_sha_t ctx;

	if (e == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (s_sha_start(&ctx, err) < 0) {
		free(e);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		e[i] = (struct s_entry){ keys[i], values[i] };
	qsort(e, n, sizeof(*e), s_cmp_entries);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(e[i].key, WSYNC_META_MANIFEST) == 0 ||
		    strcmp(e[i].key, WSYNC_META_SIGNATURE) == 0)
			continue;
		s_sha_update(&ctx, e[i].key, strlen(e[i].key) + 1);
		s_sha_update(&ctx, e[i].value, strlen(e[i].value) + 1);
	}
	free(e);
	return s_sha_end(&ctx, out, err);
}
