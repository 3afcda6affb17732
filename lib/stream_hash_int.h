/* stream_hash_int.h - a fetched version's tensors hashed as its chunks arrive. */
#ifndef WSYNC_STREAM_HASH_INT_H
#define WSYNC_STREAM_HASH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "wsync.h"

/* One tensor's data, [at, at + nbytes) of the file, and its hash once all of it went by. */
typedef struct wsync_known_hash {
	uint64_t at;
	uint64_t nbytes;
	uint64_t hash;
	int done;
} wsync_known_hash_t;

typedef struct wsync_stream_hash wsync_stream_hash_t;

/*
 * A hasher expecting the tensors of the file at path, where they lie there
 * (a version of the same model, as a watcher's or pull's output holds): the
 * next version usually has the same layout. NULL when path is no weight file
 * or holds no tensor (nothing is hashed then). Caller destroys.
 */
wsync_stream_hash_t *wsync_stream_hash_new(const char *path);
/*
 * A hasher expecting the n tensors whose data lie where the entries of data
 * say (at and nbytes); NULL when n is 0.
 */
wsync_stream_hash_t *wsync_stream_hash_of(const wsync_known_hash_t *data, size_t n);
/* Frees it and sets *p to NULL. */
void wsync_stream_hash_destroy(wsync_stream_hash_t **p);
/*
 * Bytes [off, off + len) of the file, as they arrive. Chunks must come in
 * order from 0; after one that does not, nothing more is hashed.
 */
void wsync_stream_hash_chunk(wsync_stream_hash_t *s, uint64_t off, const void *data,
    size_t len);
/*
 * The tensors hashed whole, sorted by at, *n of them (borrowed until
 * destroyed); a reader matches them to the file's own tensors by at and
 * nbytes, and hashes any other itself.
 */
const wsync_known_hash_t *wsync_stream_hash_known(const wsync_stream_hash_t *s, size_t *n);

#endif
