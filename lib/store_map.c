/* store_map.c - a version's file mapped once and sent from in chunks without copies. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sysexits.h>

#include "io_int.h"
#include "proto_int.h"
#include "store_impl_int.h"

struct wsync_map {
	void *base;
	size_t len;
	atomic_int refs;
};

/* Drops one reference; the last one unmaps. Runs in ZeroMQ's I/O thread too. */
static void
s_map_release(void *data, void *hint)
{
	wsync_map_t *m = hint;
	const unsigned char *end = (const unsigned char *)m->base + m->len;

	/* A chunk sent: its pages stay in the file, not in the hub's memory. */
	if (data != NULL)
		wsync_pages_release(data, (size_t)(end - (const unsigned char *)data) <
		    WSYNC_CHUNK ? (size_t)(end - (const unsigned char *)data) : WSYNC_CHUNK);
	if (atomic_fetch_sub(&m->refs, 1) == 1) {
		munmap(m->base, m->len);
		free(m);
	}
}

const unsigned char *
wsync_version_bytes(wsync_version_t *v, wsync_err_t *err)
{
	wsync_map_t *m;

	if (v->map != NULL)
		return v->map->base;
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	m->len = (size_t)v->size;
	m->base = mmap(NULL, m->len, PROT_READ, MAP_SHARED, v->fd, 0);
	if (m->base == MAP_FAILED) {
		wsync_err_set(err, EX_IOERR, "version %" PRIu64 ": cannot map: %s", v->version,
		    strerror(errno));
		free(m);
		return NULL;
	}
	atomic_init(&m->refs, 1);
	v->map = m;
	return m->base;
}

int
wsync_version_msg(wsync_version_t *v, uint64_t off, uint64_t len, zmq_msg_t *msg,
    wsync_err_t *err)
{
	const unsigned char *base = wsync_version_bytes(v, err);

	if (base == NULL)
		return -1;
	atomic_fetch_add(&v->map->refs, 1);
	if (zmq_msg_init_data(msg, (void *)(base + off), (size_t)len, s_map_release,
	    v->map) < 0) {
		s_map_release(NULL, v->map);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
}

void
wsync_version_unmap(wsync_version_t *v)
{
	if (v->map != NULL)
		s_map_release(NULL, v->map);
	v->map = NULL;
}

int
wsync_version_sending(const wsync_version_t *v)
{
	return v->map != NULL && atomic_load(&v->map->refs) != 1;
}
