/* stream_hash.c - a fetched version's tensors hashed as its chunks arrive, where its output had them. */
#include <stdlib.h>
#include <sys/stat.h>

#include "hash_int.h"
#include "stream_hash_int.h"

struct wsync_stream_hash {
	wsync_known_hash_t *t;      /* sorted by at, not overlapping */
	size_t n;
	size_t cur;                 /* the tensor the next byte may belong to */
	uint64_t expect;            /* the offset the next chunk must start at */
	int broken;                 /* a chunk came out of order: nothing more is hashed */
	XXH3_state_t state;         /* of t[cur], while its bytes go by */
};

static int
s_by_at(const void *a, const void *b)
{
	const wsync_known_hash_t *x = a, *y = b;

	return x->at < y->at ? -1 : x->at > y->at;
}

wsync_stream_hash_t *
wsync_stream_hash_of(const wsync_known_hash_t *data, size_t n)
{
	wsync_stream_hash_t *s = NULL;

	if (n == 0 || (s = aligned_alloc(64, sizeof(*s))) == NULL ||
	    (s->t = calloc(n, sizeof(*s->t))) == NULL) {
		free(s);
		return NULL;
	}
	s->n = n;
	for (size_t i = 0; i < n; i++)
		s->t[i] = (wsync_known_hash_t){ .at = data[i].at, .nbytes = data[i].nbytes };
	s->cur = 0;
	s->expect = 0;
	s->broken = 0;
	qsort(s->t, n, sizeof(*s->t), s_by_at);
	for (size_t i = 1; i < n; i++)
		if (s->t[i].at < s->t[i - 1].at + s->t[i - 1].nbytes)
			s->broken = 1;
	XXH3_64bits_reset(&s->state);
	return s;
}

wsync_stream_hash_t *
wsync_stream_hash_new(const char *path)
{
	wsync_err_t err;
	struct stat st;
	/* Only a regular file: opening a FIFO someone named as the output would block. */
	wsync_file_t *f = stat(path, &st) == 0 && S_ISREG(st.st_mode) ?
	    wsync_file_open(path, &err) : NULL;
	size_t n = f != NULL ? wsync_file_count(f) : 0;
	wsync_known_hash_t *data = n > 0 ? calloc(n, sizeof(*data)) : NULL;
	wsync_stream_hash_t *s = NULL;

	if (data != NULL) {
		for (size_t i = 0; i < n; i++)
			data[i] = (wsync_known_hash_t){ .at = wsync_file_tensor(f, i)->offset,
			    .nbytes = wsync_file_tensor(f, i)->nbytes };
		s = wsync_stream_hash_of(data, n);
	}
	free(data);
	wsync_file_close(&f);
	return s;
}

void
wsync_stream_hash_destroy(wsync_stream_hash_t **p)
{
	if (*p == NULL)
		return;
	free((*p)->t);
	free(*p);
	*p = NULL;
}

void
wsync_stream_hash_chunk(wsync_stream_hash_t *s, uint64_t off, const void *data, size_t len)
{
	uint64_t end = off + len;

	if (s == NULL || s->broken)
		return;
	if (off != s->expect) {
		s->broken = 1;
		return;
	}
	s->expect = end;
	while (s->cur < s->n) {
		wsync_known_hash_t *t = &s->t[s->cur];
		uint64_t from = t->at > off ? t->at : off, to = t->at + t->nbytes;
		if (t->at >= end && t->nbytes > 0)
			return;
		if (to > end)
			to = end;
		if (to > from)
			wsync_hash_update(&s->state, (const unsigned char *)data + (from - off),
			    (size_t)(to - from));
		if (to < t->at + t->nbytes)
			return;
		t->hash = XXH3_64bits_digest(&s->state);
		t->done = 1;
		XXH3_64bits_reset(&s->state);
		s->cur++;
	}
}

const wsync_known_hash_t *
wsync_stream_hash_known(const wsync_stream_hash_t *s, size_t *n)
{
	*n = s != NULL ? s->n : 0;
	return s != NULL ? s->t : NULL;
}
