/* hash_int.h - XXH3-64 in pieces, on the fastest code the CPU runs. */
#ifndef WSYNC_HASH_INT_H
#define WSYNC_HASH_INT_H

#include <stddef.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "wsync.h"

/* XXH3_64bits_update, through libxxhash's AVX2 variant when the CPU has it. */
void wsync_hash_update(XXH3_state_t *state, const void *data, size_t len);

/* Bytes of the longest tensor descriptor wsync_tensor_describe writes. */
#define WSYNC_DESCRIBE_MAX (WSYNC_MAX_PATH + 1 + 8 + 1 + 1 + 8 * WSYNC_MAX_DIMS)

/*
 * Writes a tensor's descriptor into buf (WSYNC_DESCRIBE_MAX bytes): path,
 * 0x00, dtype name, 0x00, the number of dimensions (1 byte), each dimension
 * (8 bytes little-endian); the content id and the model digest hash a
 * descriptor, then the data's hash. Returns its length.
 */
size_t wsync_tensor_describe(unsigned char *buf, const char *path, wsync_dtype_t dtype,
    int ndim, const uint64_t *shape);

#endif
