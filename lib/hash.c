/* hash.c - XXH3-64, the format's per-tensor hash: of a buffer, and while copying one. */
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
 * destination cost 1.9 times a memcpy.
 */
#define S_CHUNK (128u << 10)
/* Below this, a plain copy leaves the destination in the cache to hash there. */
#define S_STREAM_MIN (1u << 20)

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

uint64_t
wsync_copy_hash(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	XXH3_state_t state;
	size_t off = 0, c;

	if (n < S_STREAM_MIN) {
		if (n > 0)
			memcpy(d, s, n);
		return wsync_hash(d, n);
	}
	XXH3_64bits_reset(&state);
#ifdef __SSE2__
	/*
	 * The destination is not in the cache after streaming stores, so the
	 * chunk is hashed from the source, which is: the same bytes, unless the
	 * caller changes the source during the call.
	 */
	off = (size_t)(-(uintptr_t)d & 63);
	memcpy(d, s, off);
	wsync_hash_update(&state, s, off);
	for (; off < n; off += c) {
		size_t body;

		c = n - off < S_CHUNK ? n - off : S_CHUNK;
		body = c & ~(size_t)63;
		s_stream_copy(d + off, s + off, body);
		memcpy(d + off + body, s + off + body, c - body);
		wsync_hash_update(&state, s + off, c);
	}
	/* Streaming stores are weakly ordered: make them visible before returning. */
	_mm_sfence();
#else
	for (; off < n; off += c) {
		c = n - off < S_CHUNK ? n - off : S_CHUNK;
		memcpy(d + off, s + off, c);
		wsync_hash_update(&state, d + off, c);
	}
#endif
	return XXH3_64bits_digest(&state);
}
