/* index.c - binary search by name (see index_int.h). */
#include <string.h>

#include "index_int.h"

size_t
wsync_index_find(const void *base, size_t n,
    const char *(*name)(const void *base, size_t i), const char *id, int *found)
{
	size_t lo = 0, hi = n;

	*found = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(id, name(base, mid));
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}
