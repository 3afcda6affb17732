/*
 * delta_impl_int.h - what the delta writer (delta_make.c) and the reader and
 * applier (delta.c) share: limits, the buffered output, page release.
 */
#ifndef WSYNC_DELTA_IMPL_INT_H
#define WSYNC_DELTA_IMPL_INT_H

#include <msgpack.h>
#include <stdint.h>
#include <sys/types.h>

#include "delta_int.h"
#include "file_int.h"

#define CHUNK (1u << 20)                /* bytes of a tensor encoded or decoded at once */
#define OUT_BUF (1u << 20)              /* the output buffer */
#define LEVEL 3                         /* zstd level of every encoded form but xor, sparse */
/*
 * Sparse's planes at level 1 where under an eighth of the bytes changed: a 1%
 * bf16 step of 512 MiB was 3,660,680 bytes against 3,656,704 at level 3 (0.1%
 * more), where zstd took an eighth of the pusher's time at level 3. Denser,
 * level 1 makes them larger than xor's (a step changing every element of 4 MiB:
 * 3,375,221 bytes against xor's 3,369,248), level 3 smaller.
 */
#define SPARSE_LEVEL 1
#define XOR_LEVEL 1                     /* xor's: level 3 is larger on dense xors */
#define WINDOW_LOG 22                   /* zstd window the writer uses (4 MiB) */
#define WINDOW_LOG_MAX 23               /* and the largest the applier accepts */
#define GROUP_MAX 65536                 /* changed elements in one sparse group */
/* The most a head's header can take: the top level and meta, then per tensor. */
#define SKELETON_FIXED_MAX ((uint64_t)WSYNC_MAX_META * \
	(WSYNC_MAX_KEY + WSYNC_MAX_META_VALUE + 16) + 4096)
#define SKELETON_TENSOR_MAX ((uint64_t)WSYNC_MAX_PATH + WSYNC_MAX_DEPTH * 8 + \
	WSYNC_MAX_DIMS * 9 + 256)
#define PATH_KEYS 7                     /* keys a tensor entry may hold */

/* A buffered writer. */
typedef struct delta_out {
	int fd;
	const char *name;
	wsync_err_t *err;               /* where msgpack-c's write callback reports */
	uint64_t pos;                   /* bytes emitted */
	uint64_t flushed;               /* of which written to fd */
	unsigned char *buf;
	size_t n;
	int positioned;                 /* written at file offset flushed, not fd's own */
} delta_out_t;

/* Writes out what is buffered. */
int delta_out_flush(delta_out_t *o, wsync_err_t *err);
/* Emits len bytes. */
int delta_out_put(delta_out_t *o, const void *p, size_t len, wsync_err_t *err);

/* msgpack-c's write callback: the packer's bytes go to the delta_out_t in data. */
int delta_pk_write(void *data, const char *buf, size_t len);
/* Packs a string. */
int delta_pk_str(msgpack_packer *pk, const char *s);
/* Packs a key and its unsigned value. */
int delta_pk_kv(msgpack_packer *pk, const char *key, uint64_t v);

#endif
