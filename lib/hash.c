/* hash.c - XXH3-64, the format's per-tensor hash: of a buffer, and while copying one. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "hash_int.h"
#include "wsync.h"

/*
 * libxxhash's x86 build carries variants that pick SSE2, AVX2 or AVX-512 when
 * first called: with AVX2 they hash data in the cache about five times as
 * fast as the plain functions. Its static archive lacks them, so they are weak
 * references, and a program linked with it gets the plain functions.
 */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#pragma weak XXH3_64bits_dispatch
#pragma weak XXH3_64bits_update_dispatch
#define S_DISPATCH 1
#endif
#endif

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/*
 * wsync_copy_hash copies and hashes S_CHUNK bytes at a time: each chunk of
 * the source, just read by the copy, is hashed while it is still in the
 * cache. Measured on 1 GiB (bench/copyhash.c), chunks of 8 KiB to 1 MiB cost
 * alike within the noise, 1.35 to 1.45 times a memcpy; 128 KiB was among the
 * fastest every time. A plain copy of each chunk and a hash of the
 * destination cost 1.9 times a memcpy. From S_PIPE_MIN on, a second thread
 * hashes each chunk right behind the copy (from the shared cache): 1.05 to
 * 1.1 times a memcpy.
 */
#define S_CHUNK (128u << 10)
/* Below this, a plain copy leaves the destination in the cache to hash there. */
#define S_STREAM_MIN (1u << 20)
/* From this on, a second thread hashes what the copy has passed (s_hash_behind). */
#define S_PIPE_MIN (8u << 20)

size_t
wsync_tensor_describe(unsigned char *buf, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape)
{
	const char *name = wsync_dtype_name(dtype);
	size_t plen = strlen(path) + 1, dlen = strlen(name) + 1, n;

	memcpy(buf, path, plen);
	memcpy(buf + plen, name, dlen);
	n = plen + dlen;
	buf[n++] = (unsigned char)ndim;
	for (int d = 0; d < ndim; d++)
		for (int b = 0; b < 8; b++)
			buf[n++] = (unsigned char)(shape[d] >> (8 * b));
	return n;
}

uint64_t
wsync_hash(const void *data, size_t len)
{
#ifdef S_DISPATCH
	if (XXH3_64bits_dispatch != NULL)
		return XXH3_64bits_dispatch(data, len);
#endif
	return XXH3_64bits(data, len);
}

void
wsync_hash_update(XXH3_state_t *state, const void *data, size_t len)
{
#ifdef S_DISPATCH
	if (XXH3_64bits_update_dispatch != NULL) {
		XXH3_64bits_update_dispatch(state, data, len);
		return;
	}
#endif
	XXH3_64bits_update(state, data, len);
}

#ifdef __SSE2__
/*
 * Copies n bytes (a multiple of 64) to a 64-byte aligned dst with
 * non-temporal stores, which write memory without first reading each
 * destination line into the cache as ordinary stores do: a third less memory
 * traffic. glibc's memcpy streams only copies far larger than a chunk.
 */
static void
s_stream_copy(unsigned char *dst, const unsigned char *src, size_t n)
{
	for (size_t i = 0; i < n; i += 64) {
		const __m128i *s = (const __m128i *)(const void *)(src + i);
		__m128i *d = (__m128i *)(void *)(dst + i);
		__m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
		__m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);

		_mm_stream_si128(d, a);
		_mm_stream_si128(d + 1, b);
		_mm_stream_si128(d + 2, c);
		_mm_stream_si128(d + 3, e);
	}
}
#endif

#ifdef __SSE2__
/* A hash that follows a copy: the copier publishes how far it got. */
struct s_behind {
	const unsigned char *src;
	size_t n;
	atomic_size_t copied;           /* bytes of src copied so far */
	uint64_t hash;
};

/*
 * The hashing thread: hashes src up to where the copy got, chunk by chunk,
 * while those bytes are still in the shared cache. It is faster than the
 * copy, so it mostly waits for it.
 */
static void *
s_hash_behind(void *arg)
{
	struct s_behind *b = arg;
	XXH3_state_t state;
	size_t done = 0;

	XXH3_64bits_reset(&state);
	for (unsigned spins = 0; done < b->n; spins++) {
		size_t ready = atomic_load_explicit(&b->copied, memory_order_acquire);
		if (ready == done) {
			/* A chunk takes ~10 us to copy; longer means the copier lost its CPU. */
			if (spins % 4096 == 4095)
				sched_yield();
			else
				_mm_pause();
			continue;
		}
		wsync_hash_update(&state, b->src + done, ready - done);
		done = ready;
	}
	b->hash = XXH3_64bits_digest(&state);
	return NULL;
}

/* Told, after each chunk of a copy, the chunk's source and how much is copied. */
typedef void (*s_chunk_fn)(void *arg, const unsigned char *chunk, size_t len, size_t copied);

/*
 * Copies n bytes (at least 64) in chunks with streaming stores, the first up
 * to dst's 64-byte boundary, calling fn after each.
 */
static void
s_stream_chunks(unsigned char *d, const unsigned char *s, size_t n, s_chunk_fn fn, void *arg)
{
	size_t off = (size_t)(-(uintptr_t)d & 63), c;

	memcpy(d, s, off);
	fn(arg, s, off, off);
	for (; off < n; off += c) {
		size_t body;

		c = n - off < S_CHUNK ? n - off : S_CHUNK;
		body = c & ~(size_t)63;
		s_stream_copy(d + off, s + off, body);
		memcpy(d + off + body, s + off + body, c - body);
		fn(arg, s + off, c, off + c);
	}
	/* Streaming stores are weakly ordered: make them visible before returning. */
	_mm_sfence();
}

/* s_chunk_fn of the one-thread copy: hashes the chunk while it is in the cache. */
static void
s_hash_chunk(void *arg, const unsigned char *chunk, size_t len, size_t copied)
{
	(void)copied;
	wsync_hash_update(arg, chunk, len);
}

/* s_chunk_fn of the pipelined copy: tells the hashing thread how far it got. */
static void
s_tell_hasher(void *arg, const unsigned char *chunk, size_t len, size_t copied)
{
	(void)chunk;
	(void)len;
	atomic_store_explicit(&((struct s_behind *)arg)->copied, copied, memory_order_release);
}

/*
 * wsync_copy_hash for large n: this thread copies with streaming stores while
 * another hashes the source just behind it, so the whole costs about one copy
 * instead of a copy plus a hash. -1 (nothing done) when no thread can start.
 */
static int
s_copy_hash_pipelined(unsigned char *d, const unsigned char *s, size_t n, uint64_t *hash)
{
	struct s_behind b = { .src = s, .n = n };
	pthread_t hasher;
	cpu_set_t cpus;

	/* On one CPU the two would only take turns. */
	if (sched_getaffinity(0, sizeof(cpus), &cpus) < 0 || CPU_COUNT(&cpus) < 2)
		return -1;
	atomic_init(&b.copied, 0);
	if (pthread_create(&hasher, NULL, s_hash_behind, &b) != 0)
		return -1;
	s_stream_chunks(d, s, n, s_tell_hasher, &b);
	pthread_join(hasher, NULL);
	*hash = b.hash;
	return 0;
}
#endif

uint64_t
wsync_copy_hash(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	XXH3_state_t state;

	if (n < S_STREAM_MIN) {
		if (n > 0)
			memcpy(d, s, n);
		return wsync_hash(d, n);
	}
#ifdef __SSE2__
	uint64_t hash;

	if (n >= S_PIPE_MIN && s_copy_hash_pipelined(d, s, n, &hash) == 0)
		return hash;
#endif
	XXH3_64bits_reset(&state);
#ifdef __SSE2__
	/*
	 * The destination is not in the cache after streaming stores, so the
	 * chunk is hashed from the source, which is: the same bytes, unless the
	 * caller changes the source during the call.
	 */
	s_stream_chunks(d, s, n, s_hash_chunk, &state);
#else
	for (size_t off = 0, c; off < n; off += c) {
		c = n - off < S_CHUNK ? n - off : S_CHUNK;
		memcpy(d + off, s + off, c);
		wsync_hash_update(&state, d + off, c);
	}
#endif
	return XXH3_64bits_digest(&state);
}
