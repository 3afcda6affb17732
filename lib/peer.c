/*
 * peer.c - the hub's defences against a peer that sends garbage or hoards:
 * who counts as one peer, which connections it stopped serving, and whether
 * the store has room for what uploads announce.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sysexits.h>
#include <errno.h>

#include "peer_int.h"

void
wsync_conn_name(wsync_parts_t *p, char *buf)
{
	const unsigned char *id = wsync_part_data(p, 0);
	size_t len = wsync_part_size(p, 0), n;

	n = (size_t)snprintf(buf, WSYNC_PEER_NAME, "conn:");
	for (size_t i = 0; i < len && n + 3 <= WSYNC_PEER_NAME; i++)
		n += (size_t)snprintf(buf + n, WSYNC_PEER_NAME - n, "%02x", id[i]);
}

void
wsync_peer_name(wsync_parts_t *p, char *buf)
{
	const char *user = p->n >= 3 ? zmq_msg_gets(&p->part[2], "User-Id") : NULL;

	if (user != NULL && strlen(user) < WSYNC_PEER_NAME)
		snprintf(buf, WSYNC_PEER_NAME, "%s", user);
	else
		wsync_conn_name(p, buf);
}

int
wsync_blocked_has(const wsync_blocked_t *b, const void *id, size_t len, int64_t now)
{
	for (int i = 0; i < WSYNC_BLOCKED; i++)
		if (b->slot[i].until > now && b->slot[i].len == len &&
		    memcmp(b->slot[i].id, id, len) == 0)
			return 1;
	return 0;
}

void
wsync_blocked_add(wsync_blocked_t *b, const void *id, size_t len, int64_t now)
{
	int oldest = 0;

	if (len > sizeof(b->slot[0].id))
		len = sizeof(b->slot[0].id);
	for (int i = 1; i < WSYNC_BLOCKED; i++)
		if (b->slot[i].until < b->slot[oldest].until)
			oldest = i;
	memcpy(b->slot[oldest].id, id, len);
	b->slot[oldest].len = len;
	b->slot[oldest].until = now + WSYNC_BLOCK_MS;
}

int
wsync_space_check(const char *dir, uint64_t need, uint64_t pending, wsync_err_t *err)
{
	struct statvfs st;
	uint64_t avail;

	if (statvfs(dir, &st) < 0)
		return wsync_err_set(err, EX_IOERR, "%s: cannot see its free space: %s", dir,
		    strerror(errno));
	avail = (uint64_t)st.f_bavail * st.f_frsize;
	if (need > avail || pending > avail - need)
		return wsync_err_set(err, EX_IOERR, "the store %s has %" PRIu64 " bytes free: not "
		    "enough for %" PRIu64 " more (other uploads in progress need %" PRIu64 ")",
		    dir, avail, need, pending);
	return 0;
}
