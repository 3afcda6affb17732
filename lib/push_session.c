/* push_session.c - a push session: made on a client's first push, ended with its connection. */
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "push_session_int.h"

/* A reply came (frames p): kept when it answers the next slot's begin. */
static void
s_seen(void *arg, uint64_t id, wsync_parts_t *p)
{
	struct wsync_push_session *ps = arg;
	size_t len = wsync_part_size(p, 1);

	if (id != ps->next_slot.id || ps->next_slot.reply != NULL)
		return;
	if ((ps->next_slot.reply = malloc(len ? len : 1)) == NULL) {
		ps->next_slot.id = 0;   /* forgotten: the hub drops it after 60 s */
		return;
	}
	memcpy(ps->next_slot.reply, wsync_part_data(p, 1), len);
	ps->next_slot.len = len;
}

static void
s_reset(void *arg)
{
	/* The hub keeps a slot for the connection that asked. */
	wsync_push_next_forget(arg);
}

static void
s_end(void *arg, wsync_client_t *c)
{
	struct wsync_push_session *ps = arg;

	wsync_client_next_drop(c, 1000);
	wsync_client_keep_pushed(c, 0);
	wsync_signkey_destroy(&ps->sign);
	free(ps);
}

static const struct wsync_conn_hooks s_hooks = { s_seen, s_reset, s_end };

struct wsync_push_session *
wsync_push_find(const wsync_client_t *c)
{
	return c->hooks == &s_hooks ? c->hooks_arg : NULL;
}

struct wsync_push_session *
wsync_push_session(wsync_client_t *c, wsync_err_t *err)
{
	struct wsync_push_session *ps = wsync_push_find(c);

	if (ps != NULL)
		return ps;
	if ((ps = calloc(1, sizeof(*ps))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	c->hooks = &s_hooks;
	c->hooks_arg = ps;
	return ps;
}

void
wsync_push_next_forget(struct wsync_push_session *ps)
{
	free(ps->next_slot.reply);
	memset(&ps->next_slot, 0, sizeof(ps->next_slot));
}
