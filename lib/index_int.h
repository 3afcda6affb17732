/* index_int.h - finding a record by its name in an array sorted by name. */
#ifndef WSYNC_INDEX_INT_H
#define WSYNC_INDEX_INT_H

#include <stddef.h>

/*
 * Binary search of an array of n records sorted by name (strcmp), name(base, i)
 * giving record i's. Returns the index of the record named id (*found 1), or
 * where one would be inserted (*found 0).
 */
size_t wsync_index_find(const void *base, size_t n,
    const char *(*name)(const void *base, size_t i), const char *id, int *found);

#endif
