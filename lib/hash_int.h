/* hash_int.h - XXH3-64 in pieces, on the fastest code the CPU runs. */
#ifndef WSYNC_HASH_INT_H
#define WSYNC_HASH_INT_H

#include <stddef.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* XXH3_64bits_update, through libxxhash's AVX2 variant when the CPU has it. */
void wsync_hash_update(XXH3_state_t *state, const void *data, size_t len);

#endif
