/* client.c - a DEALER connection to a hub: hello, requests with bounded waits, transfers. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_int.h"
#include "tempfile_int.h"
#include "file_int.h"
#include "io_int.h"
#include "tree_int.h"

/* How far ahead of the data a fetch allocates its file's pages. */
#define S_ALLOC_AHEAD (32u << 20)
#define S_AHEAD_MS 30000                /* a slot asked for ahead is given until then */
/* What a commit that got no answer adds: it may have happened all the same. */
#define S_MAYBE_COMMITTED "; the version may still have been committed (see " \
    "wsync-inspect --hub)"

static const char *const s_transfers[] = { "auto", "link", "copy", "socket" };

int
wsync_transfer_parse(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(name, s_transfers[i]) == 0)
			return i;
	return -1;
}

const char *
wsync_transfer_name(int mode)
{
	return mode >= 0 && mode < 4 ? s_transfers[mode] : "?";
}

static void
s_close_socket(wsync_client_t *c)
{
	if (c->sock != NULL) {
		wsync_curve_unwatch(c->sock, &c->mon);
		zmq_close(c->sock);
	}
	c->sock = NULL;
}

static int
s_open_socket(wsync_client_t *c, wsync_err_t *err)
{
	int zero = 0;

	if ((c->sock = zmq_socket(wsync_zmq_context(), ZMQ_DEALER)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s",
		    zmq_strerror(errno));
	zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (wsync_curve_client(c->sock, &c->curve, err) < 0 ||
	    (c->mon = wsync_curve_watch(c->sock, err)) == NULL) {
		s_close_socket(c);
		return -1;
	}
	if (zmq_connect(c->sock, c->endpoint) < 0) {
		wsync_err_set(err, EX_USAGE, "endpoint %s: %s", c->endpoint, zmq_strerror(errno));
		s_close_socket(c);
		return -1;
	}
	return 0;
}

/* Starts request op with nfields more fields; returns its id. */
static uint64_t
s_request(wsync_client_t *c, wsync_enc_t *e, const char *op, size_t nfields)
{
	uint64_t id = ++c->next_id;

	wsync_enc_init(e);
	msgpack_pack_map(&e->pk, nfields + 2);
	wsync_enc_kv_str(e, "op", op);
	wsync_enc_kv_u64(e, "id", id);
	return id;
}

static int
s_send(wsync_client_t *c, const wsync_enc_t *e, const void *data, size_t dlen,
    wsync_err_t *err)
{
	if (wsync_send(c->sock, NULL, 0, e, data, dlen, ZMQ_DONTWAIT) < 0)
		return wsync_err_set(err, EX_UNAVAILABLE, "cannot send to %s: %s", c->endpoint,
		    zmq_strerror(errno));
	return 0;
}

static void
s_release(wsync_msg_t *m, wsync_parts_t *p)
{
	wsync_msg_free(m);
	wsync_parts_close(p);
}

/* Milliseconds left until deadline, never negative. */
static int
s_left(int64_t deadline)
{
	int64_t left = deadline - wsync_now_ms();

	return left > 0 ? (int)left : 0;
}

/* Keeps a copy of the reply to the slot asked for ahead, read when it is taken. */
static void
s_ahead_keep(wsync_client_t *c, wsync_parts_t *p)
{
	size_t len = wsync_part_size(p, 1);

	if ((c->ahead.reply = malloc(len ? len : 1)) == NULL) {
		c->ahead.id = 0;        /* forgotten: the hub drops it after 60 s */
		return;
	}
	memcpy(c->ahead.reply, wsync_part_data(p, 1), len);
	c->ahead.len = len;
}

/*
 * Receives the next reply before deadline (monotonic ms). Returns 0 with the
 * reply in m and p (the caller frees both), 1 on timeout, or -1 with err set
 * and nothing to free: a malformed reply (*id 0) or a refusal (*id its id),
 * which keep_refusal leaves in m and p for the caller to read and free.
 */
static int
s_recv(wsync_client_t *c, int64_t deadline, uint64_t *id, wsync_msg_t *m,
    wsync_parts_t *p, int keep_refusal, wsync_err_t *err)
{
	zmq_pollitem_t items[2] = { { c->sock, 0, ZMQ_POLLIN, 0 }, { c->mon, 0, ZMQ_POLLIN, 0 } };
	int64_t left = deadline - wsync_now_ms();
	int rc;

	*id = 0;
	rc = zmq_poll(items, 2, (long)(left > 0 ? left : 0));
	if (rc < 0 && errno == EINTR)
		return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
	/* A refused handshake is retried by ZeroMQ for ever: only its monitor tells. */
	if (rc > 0 && (items[1].revents & ZMQ_POLLIN) &&
	    wsync_curve_failed(c->mon, c->endpoint, &c->curve, err) < 0)
		return -1;
	if (rc <= 0 || !(items[0].revents & ZMQ_POLLIN))
		return rc <= 0 ? 1 : s_recv(c, deadline, id, m, p, keep_refusal, err);
	if (wsync_recv(c->sock, p, 0) < 0)
		return wsync_err_set(err, EX_UNAVAILABLE, "receive from %s: %s", c->endpoint,
		    zmq_strerror(errno));
	if (p->n < 2 || wsync_part_size(p, 0) != 0) {
		wsync_parts_close(p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply that is not wsync protocol",
		    c->endpoint);
	}
	if (wsync_msg_decode(m, wsync_part_data(p, 1), wsync_part_size(p, 1), err) < 0) {
		char why[sizeof(err->msg)];
		snprintf(why, sizeof(why), "%s", err->msg);
		*id = 0;
		s_release(m, p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply it cannot read: %s",
		    c->endpoint, why);
	}
	rc = wsync_reply_decode(m, id, err);
	if (*id != 0 && *id == c->ahead.id && c->ahead.reply == NULL)
		s_ahead_keep(c, p);
	if (rc == 0)
		return 0;
	if (*id == 0) {
		s_release(m, p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: a reply without an id", c->endpoint);
	}
	if (!keep_refusal)
		s_release(m, p);
	return -1;
}

/*
 * Receives the reply to request id before deadline; replies to other requests
 * are dropped. 0 with it in m and p (the caller frees both), 1 on timeout, -1
 * with err; a refusal of id is 2 when keep_refusal, with err, and m and p.
 */
static int
s_await(wsync_client_t *c, uint64_t id, int64_t deadline, wsync_msg_t *m, wsync_parts_t *p,
    int keep_refusal, wsync_err_t *err)
{
	for (;;) {
		uint64_t got;
		int rc = s_recv(c, deadline, &got, m, p, keep_refusal, err);
		if (rc == 1 || got == id)
			return rc < 0 && keep_refusal ? 2 : rc;
		if (got == 0 && rc < 0)
			return -1;
		if (rc == 0 || keep_refusal)
			s_release(m, p);
	}
}

/* Sends a request and waits for its reply: on success m and p hold it (the caller frees both). */
static int
s_call(wsync_client_t *c, wsync_enc_t *e, uint64_t id, const void *data, size_t dlen,
    int timeout_ms, const char *what, wsync_msg_t *m, wsync_parts_t *p, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	int rc = s_send(c, e, data, dlen, err);

	wsync_enc_free(e);
	if (rc < 0)
		return -1;
	if ((rc = s_await(c, id, deadline, m, p, 0, err)) == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "%s: no answer from %s within the "
		    "timeout", what, c->endpoint);
	return rc;
}

/* The PUB endpoint as this client reaches it: a tcp host the client used itself. */
static void
s_pub_endpoint(wsync_client_t *c, const char *pub)
{
	const char *host_end, *port;

	snprintf(c->pub, sizeof(c->pub), "%s", pub);
	if (strncmp(c->endpoint, "tcp://", 6) != 0 || strncmp(pub, "tcp://", 6) != 0)
		return;
	host_end = strrchr(c->endpoint + 6, ':');
	port = strrchr(pub + 6, ':');
	if (host_end != NULL && port != NULL)
		snprintf(c->pub, sizeof(c->pub), "%.*s%s", (int)(host_end - c->endpoint),
		    c->endpoint, port);
}

/*
 * Whether the hub's store is visible here: its directory (from hello) holds
 * an .id file with the store id the hub gave. Another host, user or mount
 * namespace fails this, and versions then travel over the socket.
 */
static void
s_find_store(wsync_client_t *c, const wsync_msg_t *m)
{
	char id[64], path[PATH_MAX + 8], seen[33];
	ssize_t n = -1;
	int fd;

	c->local = 0;
	if (wsync_msg_str(m, "store", c->store, sizeof(c->store)) < 0 ||
	    wsync_msg_str(m, "store_id", id, sizeof(id)) < 0 || c->store[0] != '/')
		return;
	snprintf(path, sizeof(path), "%s/.id", c->store);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, seen, 32);
		close(fd);
	}
	seen[n == 32 ? 32 : 0] = '\0';
	c->local = n == 32 && strcmp(seen, id) == 0;
}

static int
s_hello(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	char host[256] = "unknown", pub[512];
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id, v;

	gethostname(host, sizeof(host) - 1);
	id = s_request(c, &e, "hello", c->worker[0] ? 6 : 5);
	wsync_enc_kv_u64(&e, "proto", WSYNC_PROTO);
	wsync_enc_kv_str(&e, "role", c->role);
	if (c->worker[0])
		wsync_enc_kv_str(&e, "worker", c->worker);
	wsync_enc_kv_str(&e, "host", host);
	wsync_enc_kv_u64(&e, "pid", (uint64_t)getpid());
	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, (size_t)c->nmodels);
	for (int i = 0; i < c->nmodels; i++)
		wsync_enc_str(&e, c->models[i]);
	if (s_call(c, &e, id, NULL, 0, timeout_ms, "hello", &m, &p, err) < 0) {
		if (err->code == EX_TEMPFAIL)
			wsync_err_set(err, EX_UNAVAILABLE, "cannot reach %s after %.1f s (is "
			    "wsync-serve running?)", c->endpoint, timeout_ms / 1000.0);
		return -1;
	}
	if (wsync_msg_str(&m, "pub", pub, sizeof(pub)) < 0 ||
	    wsync_msg_str(&m, "hub", c->hub, sizeof(c->hub)) < 0) {
		s_release(&m, &p);
		return wsync_err_set(err, EX_PROTOCOL, "%s: hello reply lacks pub or hub",
		    c->endpoint);
	}
	s_pub_endpoint(c, pub);
	s_find_store(c, &m);
	c->chunk = wsync_msg_u64(&m, "chunk", &v) == 0 && v > 0 && v <= WSYNC_CHUNK ?
	    (uint32_t)v : WSYNC_CHUNK;
	c->window = wsync_msg_u64(&m, "window", &v) == 0 && v > 0 && v <= 64 ?
	    (uint32_t)v : WSYNC_WINDOW;
	c->heartbeat_ms = wsync_msg_u64(&m, "heartbeat_ms", &v) == 0 && v >= 10 &&
	    v <= 60000 ? (uint32_t)v : WSYNC_HEARTBEAT_MS;
	s_release(&m, &p);
	return 0;
}

wsync_client_t *
wsync_client_new(const wsync_client_opts_t *o, wsync_err_t *err)
{
	wsync_client_t *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	if (wsync_endpoint_resolve(o->endpoint, c->endpoint, sizeof(c->endpoint), err) < 0 ||
	    wsync_curve_load(&c->curve, o->key, o->hub_key, err) < 0)
		goto fail;
	snprintf(c->role, sizeof(c->role), "%s", o->role);
	c->progress = o->progress;
	c->progress_arg = o->progress_arg;
	c->transfer = o->transfer;
	c->stop = o->stop;
	c->used = "socket";
	if (o->worker != NULL)
		snprintf(c->worker, sizeof(c->worker), "%s", o->worker);
	if ((c->models = calloc((size_t)o->nmodels + 1, sizeof(*c->models))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	for (c->nmodels = 0; c->nmodels < o->nmodels; c->nmodels++) {
		if ((c->models[c->nmodels] = strdup(o->models[c->nmodels])) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto fail;
		}
	}
	if (s_open_socket(c, err) < 0 || s_hello(c, o->timeout_ms, err) < 0)
		goto fail;
	return c;
fail:
	wsync_client_destroy(&c);
	return NULL;
}

static void s_ahead_forget(wsync_client_t *c);
static void s_ahead_drop(wsync_client_t *c, int timeout_ms);

void
wsync_client_destroy(wsync_client_t **cp)
{
	wsync_client_t *c = *cp;

	if (c == NULL)
		return;
	s_ahead_drop(c, 1000);
	s_close_socket(c);
	for (int i = 0; i < c->nmodels; i++)
		free(c->models[i]);
	free(c->models);
	free(c);
	*cp = NULL;
}

const char *
wsync_client_transfer(const wsync_client_t *c)
{
	return c->used;
}

const char *
wsync_client_endpoint(const wsync_client_t *c)
{
	return c->endpoint;
}

int
wsync_client_reconnect(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	/* The hub keeps a slot for the connection that asked. */
	s_ahead_forget(c);
	s_close_socket(c);
	if (s_open_socket(c, err) < 0)
		return -1;
	return s_hello(c, timeout_ms, err);
}

int
wsync_client_heads(wsync_client_t *c, const char *const *models, int n, const char *worker,
    const uint64_t *applied, wsync_head_t *heads, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	const msgpack_object *all;
	uint64_t id = s_request(c, &e, "heads", worker ? 3 : 1);

	wsync_enc_str(&e, "models");
	msgpack_pack_array(&e.pk, (size_t)n);
	for (int i = 0; i < n; i++)
		wsync_enc_str(&e, models[i]);
	if (worker != NULL) {
		wsync_enc_kv_str(&e, "worker", worker);
		wsync_enc_str(&e, "applied");
		msgpack_pack_map(&e.pk, (size_t)n);
		for (int i = 0; i < n; i++)
			wsync_enc_kv_u64(&e, models[i], applied[i]);
	}
	if (s_call(c, &e, id, NULL, 0, timeout_ms, "heads", &m, &p, err) < 0)
		return -1;
	/* Who answered: the watcher compares these to notice a restarted hub. */
	if (wsync_msg_str(&m, "hub", c->heads_hub, sizeof(c->heads_hub)) < 0)
		c->heads_hub[0] = '\0';
	if (wsync_msg_str(&m, "store", c->heads_store, sizeof(c->heads_store)) < 0)
		c->heads_store[0] = '\0';
	all = wsync_msg_get(&m, "heads");
	for (int i = 0; i < n; i++) {
		const msgpack_object *h = wsync_obj_get(all, models[i]);
		if (h == NULL)
			memset(&heads[i], 0, sizeof(heads[i]));
		else if (wsync_head_decode(h, &heads[i]) < 0) {
			s_release(&m, &p);
			return wsync_err_set(err, EX_PROTOCOL, "%s: a heads reply for %s without "
			    "version, size or content", c->endpoint, models[i]);
		}
	}
	s_release(&m, &p);
	return 0;
}

static int
s_stat(wsync_client_t *c, const char *model, uint64_t version, const char *worker,
    wsync_head_t *h, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = s_request(c, &e, "stat", worker ? 3 : 2);
	int rc;

	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", version);
	if (worker != NULL)
		wsync_enc_kv_str(&e, "worker", worker);
	if (s_call(c, &e, id, NULL, 0, timeout_ms, "stat", &m, &p, err) < 0)
		return -1;
	rc = wsync_head_decode(m.root, h);
	s_release(&m, &p);
	if (rc < 0 || h->version == 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s: a stat reply without version, size "
		    "or content", c->endpoint);
	return 0;
}

/*
 * Gets bytes [0, h->size) of a version into fd with up to window gets in
 * flight, writing each chunk at its offset as it arrives.
 */
static int
s_get_all(wsync_client_t *c, const char *model, const wsync_head_t *h, const char *worker,
    int fd, int64_t deadline, wsync_err_t *err)
{
	uint64_t ids[64], offs[64], next_off = 0, done = 0, allocated = 0;
	unsigned inflight = 0;

	while (done < h->size) {
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };
		uint64_t id = 0, off, len;
		unsigned slot;
		int rc;

		while (inflight < c->window && next_off < h->size) {
			wsync_enc_t e;
			uint64_t n = h->size - next_off < c->chunk ? h->size - next_off : c->chunk;
			ids[inflight] = s_request(c, &e, "get", worker != NULL ? 5 : 4);
			offs[inflight] = next_off;
			if (worker != NULL)
				wsync_enc_kv_str(&e, "worker", worker);
			wsync_enc_kv_str(&e, "model", model);
			wsync_enc_kv_u64(&e, "version", h->version);
			wsync_enc_kv_u64(&e, "off", next_off);
			wsync_enc_kv_u64(&e, "len", n);
			rc = s_send(c, &e, NULL, 0, err);
			wsync_enc_free(&e);
			if (rc < 0)
				return -1;
			inflight++;
			next_off += n;
		}
		/*
		 * While the chunks are on their way, give the file its pages: fresh
		 * pages cost far less allocated in bulk than faulted in by each write.
		 */
		if (allocated < next_off + S_ALLOC_AHEAD && allocated < h->size) {
			uint64_t end = next_off + 2 * S_ALLOC_AHEAD;
			if (end > h->size)
				end = h->size;
			if (fallocate(fd, 0, (off_t)allocated, (off_t)(end - allocated)) < 0 &&
			    errno != EOPNOTSUPP)
				return wsync_err_set(err, EX_IOERR, "%s version %" PRIu64 ": cannot "
				    "allocate %" PRIu64 " bytes: %s", model, h->version, h->size,
				    strerror(errno));
			allocated = end;
		}
		rc = s_recv(c, deadline, &id, &m, &p, 0, err);
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "%s version %" PRIu64 ": not all "
			    "data came from %s within the timeout", model, h->version, c->endpoint);
		for (slot = 0; slot < inflight && ids[slot] != id; slot++)
			;
		if (rc < 0) {
			if (slot < inflight || id == 0)
				return -1;
			continue;
		}
		if (slot == inflight) {
			s_release(&m, &p);
			continue;
		}
		if (wsync_msg_u64(&m, "off", &off) < 0 || wsync_msg_u64(&m, "len", &len) < 0 ||
		    off != offs[slot] || p.n != 3 || wsync_part_size(&p, 2) != len ||
		    len == 0 || off + len > h->size) {
			s_release(&m, &p);
			return wsync_err_set(err, EX_PROTOCOL, "%s: a get reply that does not "
			    "match its request", c->endpoint);
		}
		if (pwrite(fd, wsync_part_data(&p, 2), len, (off_t)off) != (ssize_t)len) {
			s_release(&m, &p);
			return wsync_err_set(err, EX_IOERR, "write: %s", strerror(errno));
		}
		done += len;
		s_release(&m, &p);
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, h->size);
		/* A watcher bounds the silence, not the whole of a large transfer. */
		if (c->idle_ms > 0)
			deadline = wsync_now_ms() + c->idle_ms;
		ids[slot] = ids[inflight - 1];
		offs[slot] = offs[inflight - 1];
		inflight--;
	}
	return 0;
}

/* Where version of model lives in the hub's store (wsync-serve(1), FILES). */
static int
s_store_path(const wsync_client_t *c, const char *model, uint64_t version, char *buf,
    size_t size, wsync_err_t *err)
{
	if (snprintf(buf, size, "%s/%s/%" PRIu64 ".wsync", c->store, model, version) >= (int)size)
		return wsync_err_set(err, EX_USAGE, "%s: path too long", c->store);
	return 0;
}

static int
s_retired(const char *model, uint64_t version, wsync_err_t *err)
{
	return wsync_err_set(err, EX_NOINPUT, "%s version %" PRIu64 " was retired before it "
	    "could be read", model, version);
}

/* Opens a version's file in the hub's store, read-only; 66 when it is retired. */
static int
s_store_open(const wsync_client_t *c, const char *model, uint64_t version, wsync_err_t *err)
{
	char src[PATH_MAX];
	int fd;

	if (s_store_path(c, model, version, src, sizeof(src), err) < 0)
		return -1;
	/* Leased: a hub that recycles retired files leaves it alone while it is read. */
	if ((fd = wsync_lease_open(src)) < 0)
		return errno == ENOENT || errno == EAGAIN ? s_retired(model, version, err) :
		    wsync_err_set(err, EX_IOERR, "%s: %s", src, strerror(errno));
	return fd;
}

/*
 * Copies size bytes of in to out inside the kernel (copy_file_range, else
 * sendfile), a window at a time so that progress can be shown.
 */
static int
s_copy_fd(const wsync_client_t *c, int in, int out, uint64_t size, int64_t deadline,
    wsync_err_t *err)
{
	uint64_t done = 0;
	int range = 1;

	while (done < size) {
		if (c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		if (deadline != 0 && s_left(deadline) == 0)
			return wsync_err_set(err, EX_TEMPFAIL, "copy: not done within the timeout");
		size_t want = size - done > S_ALLOC_AHEAD ? S_ALLOC_AHEAD : (size_t)(size - done);
		off_t ioff = (off_t)done, ooff = (off_t)done;
		ssize_t n;
		if (range) {
			n = copy_file_range(in, &ioff, out, &ooff, want, 0);
			/* Across file systems (or where it is missing): sendfile does the same. */
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
			    errno == ENOSYS)) {
				range = 0;
				continue;
			}
		} else if (lseek(out, ooff, SEEK_SET) < 0)
			n = -1;
		else
			n = sendfile(out, in, &ioff, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wsync_err_set(err, n < 0 ? EX_IOERR : EX_DATAERR, "copy: %s",
			    n < 0 ? strerror(errno) : "the store's file is shorter than announced");
		done += (uint64_t)n;
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, size);
	}
	return 0;
}

/*
 * 1 when fd is the store's file just as the hub verified it: the hub gave its
 * modification time then, and nothing has written to it since.
 */
static int
s_unchanged(int fd, const wsync_head_t *got)
{
	struct stat st;

	return got->mtime != 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == got->size &&
	    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec ==
	    got->mtime;
}

/*
 * Checks that fd holds version got of model: every hash (unless hashes is 0),
 * the content id, the stamp.
 */
static int
s_verify_fd(int fd, const char *model, const wsync_head_t *got, int hashes,
    wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open_fd(fd, model, err);
	int rc = -1;

	if (f == NULL || (hashes && wsync_file_verify(f, NULL, NULL, err) < 0))
		goto out;
	if (wsync_file_content_id(f) != got->content || wsync_file_version(f) != got->version) {
		wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": received content "
		    "%016" PRIx64 " version %" PRIu64 ", the hub announced %016" PRIx64, model,
		    got->version, wsync_file_content_id(f), wsync_file_version(f), got->content);
		goto out;
	}
	rc = 0;
out:
	wsync_file_close(&f);
	return rc;
}

/* The error for a transfer mode asked for that cannot work here. */
static int
s_not_local(const wsync_client_t *c, wsync_err_t *err)
{
	return wsync_err_set(err, EX_USAGE, "--transfer %s: the hub's store is not visible "
	    "from here (another host, user or mount namespace); use socket or auto",
	    wsync_transfer_name(c->transfer));
}

/*
 * Puts version got of model into a new file beside path, in buf, open as *fd:
 * a hard link to the store's file when the mode allows and the file systems
 * agree, else a kernel copy of it. 1 when it was linked. On failure buf names
 * the file made (the caller removes it) or is empty.
 */
static int
s_fetch_local(wsync_client_t *c, const char *model, const wsync_head_t *got,
    const char *path, char *buf, size_t size, int *fd, wsync_err_t *err)
{
	char src[PATH_MAX];
	int in;

	buf[0] = '\0';
	if (s_store_path(c, model, got->version, src, sizeof(src), err) < 0)
		return -1;
	if (c->transfer != WSYNC_TRANSFER_COPY) {
		if (wsync_temp_link(src, path, buf, size) == 0) {
			c->used = "link";
			if ((*fd = open(buf, O_RDONLY | O_CLOEXEC)) < 0) {
				wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
				unlink(buf);
				buf[0] = '\0';
				return -1;
			}
			return 1;
		}
		int e = errno;
		buf[0] = '\0';
		if (e == ENOENT && access(src, F_OK) < 0)
			return s_retired(model, got->version, err);
		if (c->transfer == WSYNC_TRANSFER_LINK && e == EXDEV)
			return wsync_err_set(err, EX_USAGE, "--transfer link: cannot link %s to %s: "
			    "%s (--transfer copy works across file systems)", src, path,
			    strerror(e));
		if (c->transfer == WSYNC_TRANSFER_LINK)
			return wsync_err_set(err, EX_IOERR, "cannot link %s to %s: %s", src, path,
			    strerror(e));
	}
	if ((*fd = wsync_temp_open(path, buf, size, err)) < 0)
		return -1;
	c->used = "copy";
	if ((in = s_store_open(c, model, got->version, err)) < 0)
		return -1;
	if (s_copy_fd(c, in, *fd, got->size, 0, err) < 0) {
		close(in);
		return -1;
	}
	close(in);
	return 0;
}

int
wsync_client_fetch_temp(wsync_client_t *c, const char *model, uint64_t version,
    const wsync_head_t *known, const char *worker, const char *path, char **tmp,
    wsync_head_t *got, int timeout_ms, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	char buf[PATH_MAX];
	int fd = -1, linked = 0;

	*tmp = NULL;
	buf[0] = '\0';
	if (!c->local && c->transfer != WSYNC_TRANSFER_AUTO && c->transfer !=
	    WSYNC_TRANSFER_SOCKET)
		return s_not_local(c, err);
	if (known != NULL)
		*got = *known;
	else if (s_stat(c, model, version, worker, got, timeout_ms, err) < 0)
		return -1;
	if (c->local && c->transfer != WSYNC_TRANSFER_SOCKET) {
		if ((linked = s_fetch_local(c, model, got, path, buf, sizeof(buf), &fd, err)) < 0)
			goto fail;
	} else {
		c->used = "socket";
		if ((fd = wsync_temp_open(path, buf, sizeof(buf), err)) < 0)
			return -1;
		if (ftruncate(fd, (off_t)got->size) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
			goto fail;
		}
		if (s_get_all(c, model, got, worker, fd, deadline, err) < 0)
			goto fail;
	}
	/*
	 * A link is the store's own file: its mode is the store's, and it is on
	 * disk already. Untouched since the hub verified and stamped it (the size
	 * and modification time the hub gave), it is that version, whole: a name
	 * in the store is never given to another file, and a retired one is only
	 * rewritten once no one links it. Nothing to read again.
	 */
	if (!(linked && s_unchanged(fd, got)) && s_verify_fd(fd, model, got, 1, err) < 0)
		goto fail;
	if (!linked && (fchmod(fd, 0644) < 0 || fsync(fd) < 0)) {
		wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
		goto fail;
	}
	if ((*tmp = strdup(buf)) == NULL) {
		unlink(buf);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (buf[0] != '\0')
		unlink(buf);
	return -1;
}

/* Copies all of fd (from its start) to stdout. */
static int
s_copy_out(int fd, wsync_err_t *err)
{
	char buf[1 << 16];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (wsync_write_all(STDOUT_FILENO, buf, (size_t)n) < 0)
			return wsync_err_set(err, EX_IOERR, "stdout: %s", strerror(errno));
	return n < 0 ? wsync_err_set(err, EX_IOERR, "read: %s", strerror(errno)) : 0;
}

/* Pull to stdout from a store visible here: the store's file itself, verified, then copied. */
static int
s_pull_local_stdout(wsync_client_t *c, const char *model, uint64_t version,
    const char *worker, wsync_head_t *got, int64_t deadline, wsync_err_t *err)
{
	int fd, rc;

	for (;;) {
		if (s_stat(c, model, version, worker, got, s_left(deadline), err) < 0)
			return -1;
		if ((fd = s_store_open(c, model, got->version, err)) >= 0)
			break;
		/* Retired between stat and open: the newer head, within the same bound. */
		if (version != 0 || err->code != EX_NOINPUT || s_left(deadline) == 0)
			return -1;
	}
	c->used = "copy";
	rc = s_verify_fd(fd, model, got, !s_unchanged(fd, got), err);
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = wsync_err_set(err, EX_IOERR, "%s: %s", model, strerror(errno));
	if (rc == 0)
		rc = s_copy_out(fd, err);
	close(fd);
	return rc;
}

int
wsync_client_pull(wsync_client_t *c, const char *model, uint64_t version,
    const char *worker, const char *path, wsync_head_t *got, int timeout_ms,
    wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	const char *td = getenv("TMPDIR"), *beside = path;
	char dir[PATH_MAX], *tmp = NULL;
	int rc, fd;

	/* Standard output gets nothing until the whole version is verified. */
	if (strcmp(path, "-") == 0 && c->local && c->transfer != WSYNC_TRANSFER_SOCKET)
		return s_pull_local_stdout(c, model, version, worker, got, deadline, err);
	if (strcmp(path, "-") == 0) {
		snprintf(dir, sizeof(dir), "%s/wsync-pull", td && td[0] == '/' ? td : "/tmp");
		beside = dir;
	}
	/*
	 * The head can be retired while it is fetched (the hub keeps the last N):
	 * then the newer head is fetched instead, within the same bound.
	 */
	for (;;) {
		got->version = 0;
		rc = wsync_client_fetch_temp(c, model, version, NULL, worker, beside, &tmp, got,
		    s_left(deadline), err);
		if (rc == 0 || version != 0 || err->code != EX_NOINPUT || got->version == 0 ||
		    s_left(deadline) == 0)
			break;
	}
	if (rc < 0)
		return -1;
	if (beside == path) {
		if ((rc = rename(tmp, path)) < 0)
			wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", path,
			    strerror(errno));
		/* Also when path was a link to the same file already: rename left tmp. */
		unlink(tmp);
		free(tmp);
		return rc;
	}
	fd = open(tmp, O_RDONLY | O_CLOEXEC);
	unlink(tmp);
	free(tmp);
	if (fd < 0)
		return wsync_err_set(err, EX_IOERR, "temporary file: %s", strerror(errno));
	rc = s_copy_out(fd, err);
	close(fd);
	return rc;
}

/* What a push sends for one item: the bytes of a .wsync file, mapped. */
struct s_source {
	wsync_file_t *file;             /* the input, when sent as it is */
	void *map;                      /* or a re-written copy in a memfd */
	size_t maplen;
	const unsigned char *base;
	size_t size;
	int shared;                     /* base is a shared file mapping: pages may be let go */
	int fd;                         /* the same bytes, for a kernel copy; -1: none */
};

static void
s_source_free(struct s_source *src)
{
	wsync_file_close(&src->file);
	if (src->map != NULL)
		munmap(src->map, src->maplen);
	if (src->fd >= 0)
		close(src->fd);
	memset(src, 0, sizeof(*src));
	src->fd = -1;
}

/*
 * Makes the bytes to upload for item: a .wsync input of the same model as it
 * is (its hashes still to be verified); anything else re-written as .wsync of
 * item->model into memory (tensors split into a tree at '.'). Both mapped, and
 * open as src->fd when they are files, for a hand-over the kernel copies.
 */
static int
s_source_make(const wsync_push_item_t *item, struct s_source *src, wsync_err_t *err)
{
	wsync_file_t *in = wsync_input_open(item->path, err);
	wsync_tree_t *tree = NULL;
	int fd = -1, rc = -1;
	struct stat st;

	memset(src, 0, sizeof(*src));
	src->fd = -1;
	if (in == NULL)
		return -1;
	if (wsync_file_kind(in) == WSYNC_KIND_WSYNC) {
		if (strcmp(wsync_file_model(in), item->model) == 0) {
			src->file = in;
			src->base = wsync_file_bytes(in);
			src->size = wsync_file_size(in);
			src->shared = in->mem == WSYNC_MEM_MMAP;
			/* The very file mapped (same size), or none: the hub verifies either way. */
			if (src->shared && (src->fd = open(item->path, O_RDONLY | O_CLOEXEC)) >= 0 &&
			    (fstat(src->fd, &st) < 0 || (uint64_t)st.st_size != src->size)) {
				close(src->fd);
				src->fd = -1;
			}
			return 0;
		}
	}
	/* Re-written, its hashes are computed afresh: the old ones must hold first. */
	if (wsync_file_kind(in) == WSYNC_KIND_WSYNC && wsync_file_verify(in, NULL, NULL, err) < 0)
		goto out;
	if ((tree = wsync_tree_new(item->model, err)) == NULL)
		goto out;
	for (size_t i = 0; i < wsync_file_meta_count(in); i++) {
		const wsync_meta_t *m = wsync_file_meta(in, i);
		if (wsync_tree_set_meta(tree, m->key, m->value, err) < 0)
			goto out;
	}
	for (size_t i = 0; i < wsync_file_count(in); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(in, i);
		if (wsync_tree_add_split(tree, t->path, ".", t->dtype, t->ndim, t->shape,
		    t->data, t->nbytes, err) < 0 &&
		    wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, err) < 0)
			goto out;
	}
	if ((fd = memfd_create("wsync-push", MFD_CLOEXEC)) < 0) {
		wsync_err_set(err, EX_SOFTWARE, "memfd_create: %s", strerror(errno));
		goto out;
	}
	if (wsync_tree_write_fd(tree, fd, item->path, err) < 0)
		goto out;
	if (fstat(fd, &st) < 0 || (src->map = mmap(NULL, (size_t)st.st_size, PROT_READ,
	    MAP_SHARED, fd, 0)) == MAP_FAILED) {
		src->map = NULL;
		wsync_err_set(err, EX_SOFTWARE, "%s: cannot map the re-written file: %s", item->path,
		    strerror(errno));
		goto out;
	}
	src->maplen = src->size = (size_t)st.st_size;
	src->base = src->map;
	src->shared = 1;
	src->fd = fd;
	fd = -1;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	wsync_tree_destroy(&tree);
	wsync_file_close(&in);
	return rc;
}

static void
s_abort(wsync_client_t *c, uint64_t upload)
{
	wsync_err_t ignored;

	wsync_client_abort(c, upload, 1000, &ignored);
}

/* Sends every chunk of every source (none is empty) with up to window in flight. */
static int
s_upload(wsync_client_t *c, uint64_t upload, const struct s_source *src, int n,
    int64_t deadline, wsync_err_t *err)
{
	uint64_t ids[64], lens[64], done = 0, total = 0;
	unsigned inflight = 0;
	int file = 0;
	size_t off = 0;

	for (int i = 0; i < n; i++)
		total += src[i].size;

	for (;;) {
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };
		uint64_t id;
		unsigned slot;
		int rc;

		while (inflight < c->window && file < n) {
			wsync_enc_t e;
			size_t len = src[file].size - off < c->chunk ? src[file].size - off : c->chunk;
			lens[inflight] = len;
			ids[inflight++] = s_request(c, &e, "chunk", 3);
			wsync_enc_kv_u64(&e, "upload", upload);
			wsync_enc_kv_u64(&e, "file", (uint64_t)file);
			wsync_enc_kv_u64(&e, "off", off);
			rc = s_send(c, &e, src[file].base + off, len, err);
			wsync_enc_free(&e);
			if (rc < 0)
				return -1;
			/* ZeroMQ copied the chunk: its pages can go. */
			if (src[file].shared)
				wsync_pages_release(src[file].base + off, len);
			off += len;
			if (off >= src[file].size) {
				file++;
				off = 0;
			}
		}
		if (inflight == 0)
			return 0;
		rc = s_recv(c, deadline, &id, &m, &p, 0, err);
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "upload: no answer from %s within "
			    "the timeout", c->endpoint);
		for (slot = 0; slot < inflight && ids[slot] != id; slot++)
			;
		if (rc < 0) {
			if (slot < inflight || id == 0)
				return -1;
			continue;
		}
		s_release(&m, &p);
		if (slot == inflight)
			continue;
		done += lens[slot];
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, total);
		ids[slot] = ids[--inflight];
		lens[slot] = lens[inflight];
	}
}

/*
 * Writes a mapped source to fd a window at a time, letting each window's
 * pages go once written: a push of any size holds a window of it.
 */
static int
s_write_window(const wsync_client_t *c, int fd, const struct s_source *src, int64_t deadline,
    wsync_err_t *err)
{
	for (size_t off = 0; off < src->size; off += S_ALLOC_AHEAD) {
		size_t n = src->size - off < S_ALLOC_AHEAD ? src->size - off : S_ALLOC_AHEAD;
		if (c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		if (s_left(deadline) == 0)
			return wsync_err_set(err, EX_TEMPFAIL, "upload: not written within the "
			    "timeout");
		if (wsync_write_all(fd, src->base + off, n) < 0)
			return wsync_err_set(err, EX_IOERR, "cannot write an upload file: %s",
			    strerror(errno));
		if (src->shared)
			wsync_pages_release(src->base + off, n);
		if (c->progress != NULL)
			c->progress(c->progress_arg, off + n, src->size);
	}
	return 0;
}

/*
 * Opens for writing the n upload files a local begin's reply names, in fds
 * (and copies their paths into paths[i], malloc'd, when paths is not NULL).
 * Only a file right in STORE/.uploads, reached without following a link,
 * regular, with no other link, empty or of its declared size: whatever a hub
 * says, nothing else gets written. 0; 1 when they cannot be written from
 * here (another user, a read-only mount); -1 with err.
 */
static int
s_upload_files(wsync_client_t *c, const wsync_msg_t *m, const uint64_t *sizes, int n,
    int *fds, char **paths, wsync_err_t *err)
{
	const msgpack_object *list = wsync_msg_get(m, "paths");
	char dir[PATH_MAX + 16];
	struct stat dst;
	int dfd, rc = -1;

	for (int i = 0; i < n; i++)
		fds[i] = -1;
	if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY ||
	    list->via.array.size != (uint32_t)n)
		return wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without paths",
		    c->endpoint);
	snprintf(dir, sizeof(dir), "%s/.uploads", c->store);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 1;
	if (fstat(dfd, &dst) < 0) {
		rc = 1;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		const char *name = path + strlen(dir) + 1;
		struct stat st;
		if (wsync_obj_str(&list->via.array.ptr[i], path, sizeof(path)) < 0 ||
		    strncmp(path, dir, strlen(dir)) != 0 || path[strlen(dir)] != '/' ||
		    strncmp(name, "upload.", 7) != 0 || strchr(name, '/') != NULL) {
			wsync_err_set(err, EX_PROTOCOL, "%s: an upload path outside %s", c->endpoint,
			    dir);
			goto out;
		}
		if ((fds[i] = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			rc = 1;
			goto out;
		}
		if (fstat(fds[i], &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
		    (st.st_size != 0 && (uint64_t)st.st_size != sizes[i]) ||
		    st.st_dev != dst.st_dev) {
			wsync_err_set(err, EX_PROTOCOL, "%s: %s is not a fresh upload file",
			    c->endpoint, path);
			goto out;
		}
		if (paths != NULL && (paths[i] = strdup(path)) == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
	}
	rc = 0;
out:
	for (int i = 0; rc != 0 && i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
		if (paths != NULL) {
			free(paths[i]);
			paths[i] = NULL;
		}
	}
	close(dfd);
	return rc;
}

/*
 * Hands the files over to a hub on this host: writes them straight into the
 * upload files its begin reply names. 1 when they cannot be written here.
 */
static int
s_hand_over(wsync_client_t *c, const wsync_msg_t *m, const struct s_source *src, int n,
    int64_t deadline, wsync_err_t *err)
{
	int *fds = calloc((size_t)n, sizeof(*fds)), rc = -1;
	uint64_t *sizes = calloc((size_t)n, sizeof(*sizes));

	if (fds == NULL || sizes == NULL) {
		free(fds);
		free(sizes);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	for (int i = 0; i < n; i++)
		sizes[i] = src[i].size;
	if ((rc = s_upload_files(c, m, sizes, n, fds, NULL, err)) != 0)
		goto out;
	rc = -1;
	for (int i = 0; i < n; i++) {
		/* Fresh pages cost less allocated at once than faulted in by each write. */
		if (fallocate(fds[i], 0, 0, (off_t)src[i].size) < 0 && errno != EOPNOTSUPP) {
			wsync_err_set(err, EX_IOERR, "%s/.uploads: cannot allocate %zu bytes: %s",
			    c->store, src[i].size, strerror(errno));
			goto out;
		}
		if ((src[i].fd >= 0 ? s_copy_fd(c, src[i].fd, fds[i], src[i].size, deadline, err) :
		    s_write_window(c, fds[i], &src[i], deadline, err)) < 0)
			goto out;
	}
	rc = 0;
out:
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0 && close(fds[i]) < 0 && rc == 0)
			rc = wsync_err_set(err, EX_IOERR, "%s/.uploads: %s", c->store,
			    strerror(errno));
	free(fds);
	free(sizes);
	return rc;
}

/* Packs what begin and put share: files, pusher and the target workers. */
static void
s_pack_upload(wsync_enc_t *e, const wsync_push_item_t *items, const struct s_source *src,
    int n, const char *const *workers, int nworkers)
{
	char host[200] = "unknown", pusher[256];

	gethostname(host, sizeof(host) - 1);
	snprintf(pusher, sizeof(pusher), "%s:%ld", host, (long)getpid());
	wsync_enc_str(e, "files");
	msgpack_pack_array(&e->pk, (size_t)n);
	for (int i = 0; i < n; i++) {
		msgpack_pack_map(&e->pk, 2);
		wsync_enc_kv_str(e, "model", items[i].model);
		wsync_enc_kv_u64(e, "size", src[i].size);
	}
	wsync_enc_kv_str(e, "pusher", pusher);
	if (workers != NULL) {
		wsync_enc_str(e, "workers");
		msgpack_pack_array(&e->pk, (size_t)nworkers);
		for (int i = 0; i < nworkers; i++)
			wsync_enc_str(e, workers[i]);
	}
}

/* Reads the versions a commit or put reply gives into items. */
static int
s_versions(wsync_client_t *c, wsync_msg_t *m, wsync_push_item_t *items, int n,
    wsync_err_t *err)
{
	if (wsync_versions_decode(m, items, n) < 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s: commit reply without versions",
		    c->endpoint);
	return 0;
}

/* A push that fits in one chunk: one put request carries the files and commits them. */
static int
s_put(wsync_client_t *c, wsync_push_item_t *items, const struct s_source *src, int n,
    size_t total, const char *const *workers, int nworkers, int timeout_ms, wsync_err_t *err)
{
	unsigned char *joined = NULL;
	const void *data = src[0].base;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id;
	int rc;

	if (n > 1) {
		size_t at = 0;
		if ((joined = malloc(total)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		for (int i = 0; i < n; i++) {
			memcpy(joined + at, src[i].base, src[i].size);
			at += src[i].size;
		}
		data = joined;
	}
	id = s_request(c, &e, "put", workers != NULL ? 3 : 2);
	s_pack_upload(&e, items, src, n, workers, nworkers);
	rc = s_call(c, &e, id, data, total, timeout_ms, "put", &m, &p, err);
	free(joined);
	if (rc < 0 && err->code == EX_TEMPFAIL)
		wsync_err_set(err, EX_TEMPFAIL, "put: no answer from %s within the timeout; the "
		    "version may still have been committed (see wsync-inspect --hub)",
		    c->endpoint);
	if (rc < 0)
		return -1;
	rc = s_versions(c, &m, items, n, err);
	s_release(&m, &p);
	return rc;
}

int
wsync_client_push(wsync_client_t *c, wsync_push_item_t *items, int n,
    const char *const *workers, int nworkers, int timeout_ms, wsync_err_t *err)
{
	struct s_source *src = calloc((size_t)n + 1, sizeof(*src));
	int64_t deadline = wsync_now_ms() + timeout_ms;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id, upload = 0;
	size_t total = 0;
	int rc = -1, i, local;

	if (src == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (i = 0; i < n; i++)
		src[i].fd = -1;
	for (i = 0; i < n; i++) {
		if (s_source_make(&items[i], &src[i], err) < 0)
			goto out;
		total += src[i].size;
	}
	if (!c->local && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY)) {
		rc = s_not_local(c, err);
		goto out;
	}
	/* One message is as cheap as handing files over; auto only hands over larger pushes. */
	local = c->local && (c->transfer == WSYNC_TRANSFER_LINK ||
	    c->transfer == WSYNC_TRANSFER_COPY ||
	    (c->transfer == WSYNC_TRANSFER_AUTO && total > c->chunk));
	/*
	 * Nothing bad is sent: an input that travels as it is gets verified here.
	 * Handed over, it is the hub's own verification, before the commit, that
	 * keeps it out, and the input is read once instead of twice.
	 */
	for (i = 0; i < n && !local; i++)
		if (src[i].file != NULL && wsync_file_verify(src[i].file, NULL, NULL, err) < 0)
			goto out;
	if (total <= c->chunk && !local) {
		rc = s_put(c, items, src, n, total, workers, nworkers, s_left(deadline), err);
		goto out;
	}
	id = s_request(c, &e, "begin", (workers != NULL ? 3 : 2) + local);
	s_pack_upload(&e, items, src, n, workers, nworkers);
	if (local)
		wsync_enc_kv_bool(&e, "local", 1);
	if (s_call(c, &e, id, NULL, 0, s_left(deadline), "begin", &m, &p, err) < 0)
		goto out;
	if ((rc = wsync_msg_u64(&m, "upload", &upload)) < 0)
		wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without upload", c->endpoint);
	else if (local && (rc = s_hand_over(c, &m, src, n, deadline, err)) == 1) {
		/* The files cannot be written here: send them, verified first. */
		local = rc = 0;
		for (i = 0; i < n && rc == 0; i++)
			if (src[i].file != NULL)
				rc = wsync_file_verify(src[i].file, NULL, NULL, err);
	}
	s_release(&m, &p);
	if (rc < 0) {
		if (upload != 0)
			s_abort(c, upload);
		goto out;
	}
	if (!local && (rc = s_upload(c, upload, src, n, deadline, err)) < 0) {
		s_abort(c, upload);
		goto out;
	}
	rc = wsync_client_commit(c, upload, 0, items, n, s_left(deadline), err);
out:
	for (i = 0; i < n; i++)
		s_source_free(&src[i]);
	free(src);
	return rc;
}

/* Fields of a wait (mode, timeout_ms, count or ids) to pack after a request's own. */
static size_t
s_wait_fields(const wsync_wait_t *w)
{
	return 2 + (strcmp(w->mode, "count") == 0 || strcmp(w->mode, "ids") == 0);
}

static void
s_pack_wait(wsync_enc_t *e, const wsync_wait_t *w, int timeout_ms)
{
	wsync_enc_kv_str(e, "mode", w->mode);
	wsync_enc_kv_u64(e, "timeout_ms", (uint64_t)timeout_ms);
	if (strcmp(w->mode, "count") == 0)
		wsync_enc_kv_u64(e, "count", w->count);
	else if (strcmp(w->mode, "ids") == 0) {
		wsync_enc_str(e, "ids");
		msgpack_pack_array(&e->pk, (size_t)w->nids);
		for (int i = 0; i < w->nids; i++)
			wsync_enc_str(e, w->ids[i]);
	}
}

/*
 * The reply to a waiting request id (the hub answers by timeout_ms, plus 2 s
 * of grace here): 0 with it in m and p; -1 with err; 2 with err, the refusal
 * in m and p (the caller frees both, as after 0) and *missing (caller frees)
 * the workers a timed-out wait misses. commit: the request committed as well
 * (no answer does not say it did not).
 */
static int
s_await_wait(wsync_client_t *c, uint64_t id, int commit, int timeout_ms, wsync_msg_t *m,
    wsync_parts_t *p, char **missing, wsync_err_t *err)
{
	int rc = s_await(c, id, wsync_now_ms() + timeout_ms + 2000, m, p, 1, err);

	if (rc == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "wait: no answer from %s%s", c->endpoint,
		    commit ? " within the timeout" S_MAYBE_COMMITTED : "");
	if (rc == 2)
		*missing = wsync_missing_text(wsync_msg_get(m, "missing"));
	return rc;
}

/* The key of a slot's models, sizes and workers, in key; -1 when it does not fit. */
static int
s_slot_key(const wsync_slot_ask_t *a, char *key, size_t size)
{
	size_t at = 0;

	for (int i = 0; i < a->n; i++)
		at += (size_t)snprintf(key + at, at < size ? size - at : 0, "%s=%" PRIu64 " ",
		    a->models[i], a->sizes[i]);
	at += (size_t)snprintf(key + at, at < size ? size - at : 0, "%s",
	    a->workers != NULL ? "for" : "all");
	for (int i = 0; a->workers != NULL && i < a->nworkers; i++)
		at += (size_t)snprintf(key + at, at < size ? size - at : 0, " %s", a->workers[i]);
	return at < size ? 0 : -1;
}

/* Sends a local begin for the slot a asks for: its request id, 0 with err. */
static uint64_t
s_slot_send(wsync_client_t *c, const wsync_slot_ask_t *a, wsync_err_t *err)
{
	wsync_push_item_t *items = calloc((size_t)a->n + 1, sizeof(*items));
	struct s_source *src = calloc((size_t)a->n + 1, sizeof(*src));
	wsync_enc_t e;
	uint64_t id = 0;

	if (items == NULL || src == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (int i = 0; i < a->n; i++) {
		items[i].model = a->models[i];
		src[i].size = (size_t)a->sizes[i];
	}
	id = s_request(c, &e, "begin", (a->workers != NULL ? 3 : 2) + 1);
	s_pack_upload(&e, items, src, a->n, a->workers, a->nworkers);
	wsync_enc_kv_bool(&e, "local", 1);
	if (s_send(c, &e, NULL, 0, err) < 0)
		id = 0;
	wsync_enc_free(&e);
out:
	free(items);
	free(src);
	return id;
}

/*
 * Takes the slot a local begin's reply m gives for a: *upload, paths[i]
 * (malloc'd), every file of its size (a new file's pages allocated at once);
 * aborted on failure.
 */
static int
s_slot_take(wsync_client_t *c, const wsync_msg_t *m, const wsync_slot_ask_t *a,
    uint64_t *upload, char **paths, wsync_err_t *err)
{
	int *fds = calloc((size_t)a->n + 1, sizeof(*fds)), rc = -1;

	if (fds == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (wsync_msg_u64(m, "upload", upload) < 0)
		wsync_err_set(err, EX_PROTOCOL, "%s: a begin reply without upload", c->endpoint);
	else if ((rc = s_upload_files(c, m, a->sizes, a->n, fds, paths, err)) == 1)
		rc = wsync_err_set(err, EX_NOPERM, "%s/.uploads: the hub's slots cannot be "
		    "written by this user", c->store);
	for (int i = 0; rc == 0 && i < a->n; i++) {
		/* A new file's pages, allocated at once; a recycled one's exist already. */
		struct stat st;
		if (fstat(fds[i], &st) == 0 && (uint64_t)st.st_blocks * 512 < a->sizes[i] &&
		    fallocate(fds[i], 0, 0, (off_t)a->sizes[i]) < 0 && errno != EOPNOTSUPP)
			rc = wsync_err_set(err, EX_IOERR, "%s: cannot allocate %" PRIu64 " bytes: %s",
			    paths[i], a->sizes[i], strerror(errno));
	}
	for (int i = 0; i < a->n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	if (rc < 0 && *upload != 0) {
		s_abort(c, *upload);
		for (int i = 0; i < a->n; i++) {
			free(paths[i]);
			paths[i] = NULL;
		}
	}
	return rc;
}

/* The earlier of deadline and 1 s from now: how long a reply on its way may take. */
static int64_t
s_soon(int64_t deadline)
{
	int64_t soon = wsync_now_ms() + 1000;

	return soon < deadline ? soon : deadline;
}

/* Forgets the slot asked for ahead (its reply, if kept). */
static void
s_ahead_forget(wsync_client_t *c)
{
	free(c->ahead.reply);
	memset(&c->ahead, 0, sizeof(c->ahead));
}

/* Asks for slot a ahead of need; forgotten if it cannot be asked. */
static void
s_ahead_ask(wsync_client_t *c, const wsync_slot_ask_t *a)
{
	wsync_err_t ignored;

	if (s_slot_key(a, c->ahead.key, sizeof(c->ahead.key)) < 0)
		return;
	c->ahead.at = wsync_now_ms();
	c->ahead.id = s_slot_send(c, a, &ignored);
}

/*
 * The reply to the slot asked for ahead, decoded into m (the caller frees it,
 * then forgets the slot), waited for until deadline: 0; 2 with err, its
 * refusal; -1 with err, no reply.
 */
static int
s_ahead_reply(wsync_client_t *c, int64_t deadline, wsync_msg_t *m, wsync_err_t *err)
{
	uint64_t got;

	msgpack_unpacked_init(&m->doc);
	if (c->ahead.reply == NULL) {
		/* s_recv keeps its reply, a refusal as well, whenever it comes. */
		wsync_msg_t other;
		wsync_parts_t p = { .n = 0 };
		int rc = s_await(c, c->ahead.id, deadline, &other, &p, 0, err);
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "slot: no answer from %s within the "
			    "timeout", c->endpoint);
		if (rc == 0)
			s_release(&other, &p);
	}
	if (c->ahead.reply == NULL && c->ahead.id != 0)
		return -1;
	if (c->ahead.reply == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	msgpack_unpacked_destroy(&m->doc);
	if (wsync_msg_decode(m, c->ahead.reply, c->ahead.len, err) < 0)
		return -1;
	return wsync_reply_decode(m, &got, err) == 0 ? 0 : 2;
}

/* Aborts the slot asked for ahead, once its reply came (within timeout_ms), and forgets it. */
static void
s_ahead_drop(wsync_client_t *c, int timeout_ms)
{
	wsync_err_t ignored;
	wsync_msg_t m;
	uint64_t upload;

	if (c->ahead.id == 0)
		return;
	if (s_ahead_reply(c, wsync_now_ms() + timeout_ms, &m, &ignored) == 0 &&
	    wsync_msg_u64(&m, "upload", &upload) == 0)
		s_abort(c, upload);
	wsync_msg_free(&m);
	s_ahead_forget(c);
}

int
wsync_client_commit_wait(wsync_client_t *c, uint64_t upload, int trust,
    wsync_push_item_t *items, int n, const wsync_wait_t *wait, const wsync_slot_ask_t *next,
    int timeout_ms, char **missing, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	int both = wait != NULL && n == 1, rc;
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = s_request(c, &e, "commit", (trust ? 2 : 1) +
	    (both ? s_wait_fields(wait) : 0));

	*missing = NULL;
	wsync_enc_kv_u64(&e, "upload", upload);
	if (trust)
		wsync_enc_kv_bool(&e, "trust", 1);
	if (both)
		s_pack_wait(&e, wait, timeout_ms);
	rc = s_send(c, &e, NULL, 0, err);
	wsync_enc_free(&e);
	if (rc < 0)
		return -1;
	/* Asked for now, the slot is ready by the time the workers have this version. */
	if (next != NULL && c->ahead.id == 0)
		s_ahead_ask(c, next);
	if (both)
		rc = s_await_wait(c, id, 1, timeout_ms, &m, &p, missing, err);
	else if ((rc = s_await(c, id, deadline, &m, &p, 0, err)) == 1)
		rc = wsync_err_set(err, EX_TEMPFAIL, "commit: no answer from %s within the "
		    "timeout" S_MAYBE_COMMITTED, c->endpoint);
	if (rc < 0)
		return -1;
	if (rc == 2) {
		/* The wait timed out (or was refused): the version is committed all the same. */
		wsync_err_t ignored;
		s_versions(c, &m, items, n, &ignored);
		s_release(&m, &p);
		return -1;
	}
	rc = s_versions(c, &m, items, n, err);
	s_release(&m, &p);
	for (int i = 0; rc == 0 && wait != NULL && !both && i < n; i++)
		rc = wsync_client_wait(c, items[i].model, items[i].version, wait->mode, wait->count,
		    wait->ids, wait->nids, s_left(deadline), missing, err);
	return rc;
}

int
wsync_client_commit(wsync_client_t *c, uint64_t upload, int trust, wsync_push_item_t *items,
    int n, int timeout_ms, wsync_err_t *err)
{
	char *missing;

	return wsync_client_commit_wait(c, upload, trust, items, n, NULL, NULL, timeout_ms,
	    &missing, err);
}

int
wsync_client_slot(wsync_client_t *c, const char *const *models, const uint64_t *sizes,
    int n, const char *const *workers, int nworkers, int timeout_ms, uint64_t *upload,
    char **paths, wsync_err_t *err)
{
	const wsync_slot_ask_t a = { .models = models, .sizes = sizes, .n = n,
	    .workers = workers, .nworkers = nworkers };
	int64_t deadline = wsync_now_ms() + timeout_ms;
	char key[sizeof(c->ahead.key)];
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id;
	int rc;

	*upload = 0;
	if (!c->local)
		return wsync_err_set(err, EX_USAGE, "a slot is a file in the hub's store, which "
		    "is not visible from here (another host, user or mount namespace): push a "
		    "file");
	for (int i = 0; i < n; i++)
		if (sizes[i] == 0 || sizes[i] != (uint64_t)(size_t)sizes[i])
			return wsync_err_set(err, EX_USAGE, "a slot of %" PRIu64 " bytes for model "
			    "%s", sizes[i], models[i]);
	/*
	 * The one asked for ahead, unless the hub may drop it soon (at 60 s). Its
	 * reply is here already, or on its way (at most 1 s more); if the hub
	 * refused it, or restarted since (its file gone), a new one is asked for.
	 */
	if (c->ahead.id != 0 && s_slot_key(&a, key, sizeof(key)) == 0 &&
	    strcmp(key, c->ahead.key) == 0 && wsync_now_ms() - c->ahead.at < S_AHEAD_MS) {
		if ((rc = s_ahead_reply(c, s_soon(deadline), &m, err)) == 0)
			rc = s_slot_take(c, &m, &a, upload, paths, err);
		wsync_msg_free(&m);
		s_ahead_forget(c);
		if (rc == 0)
			return 0;
	}
	s_ahead_drop(c, s_left(s_soon(deadline)));
	if ((id = s_slot_send(c, &a, err)) == 0)
		return -1;
	if ((rc = s_await(c, id, deadline, &m, &p, 0, err)) == 1)
		return wsync_err_set(err, EX_TEMPFAIL, "begin: no answer from %s within the "
		    "timeout", c->endpoint);
	if (rc < 0)
		return -1;
	rc = s_slot_take(c, &m, &a, upload, paths, err);
	s_release(&m, &p);
	return rc;
}

int
wsync_client_abort(wsync_client_t *c, uint64_t upload, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = s_request(c, &e, "abort", 1);

	wsync_enc_kv_u64(&e, "upload", upload);
	if (s_call(c, &e, id, NULL, 0, timeout_ms, "abort", &m, &p, err) < 0)
		return -1;
	s_release(&m, &p);
	return 0;
}

int
wsync_client_wait(wsync_client_t *c, const char *model, uint64_t version,
    const char *mode, unsigned count, const char *const *ids, int nids, int timeout_ms,
    char **missing, wsync_err_t *err)
{
	const wsync_wait_t w = { .mode = mode, .count = count, .ids = ids, .nids = nids };
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = s_request(c, &e, "wait", 2 + s_wait_fields(&w));
	int rc;

	*missing = NULL;
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", version);
	s_pack_wait(&e, &w, timeout_ms);
	rc = s_send(c, &e, NULL, 0, err);
	wsync_enc_free(&e);
	if (rc < 0 || (rc = s_await_wait(c, id, 0, timeout_ms, &m, &p, missing, err)) < 0)
		return -1;
	s_release(&m, &p);
	return rc == 0 ? 0 : -1;
}

/* Sends a small request whose reply carries nothing the caller needs. */
static int
s_simple(wsync_client_t *c, wsync_enc_t *e, uint64_t id, int timeout_ms, const char *what,
    wsync_err_t *err)
{
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };

	if (s_call(c, e, id, NULL, 0, timeout_ms, what, &m, &p, err) < 0)
		return -1;
	s_release(&m, &p);
	return 0;
}

int
wsync_client_report_how(wsync_client_t *c, const char *worker, const char *model,
    uint64_t version, const char *reason, const char *transfer, int timeout_ms,
    wsync_err_t *err)
{
	wsync_enc_t e;
	uint64_t id = s_request(c, &e, reason ? "fail" : "ack",
	    3 + (reason != NULL) + (transfer != NULL));

	wsync_enc_kv_str(&e, "worker", worker);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", version);
	if (reason != NULL)
		wsync_enc_kv_str(&e, "reason", reason);
	if (transfer != NULL)
		wsync_enc_kv_str(&e, "transfer", transfer);
	return s_simple(c, &e, id, timeout_ms, reason ? "fail" : "ack", err);
}

int
wsync_client_report(wsync_client_t *c, const char *worker, const char *model,
    uint64_t version, const char *reason, int timeout_ms, wsync_err_t *err)
{
	return wsync_client_report_how(c, worker, model, version, reason, NULL, timeout_ms,
	    err);
}

int
wsync_client_bye(wsync_client_t *c, const char *worker, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	uint64_t id = s_request(c, &e, "bye", 1);

	wsync_enc_kv_str(&e, "worker", worker);
	return s_simple(c, &e, id, timeout_ms, "bye", err);
}

char *
wsync_client_status_json(wsync_client_t *c, int timeout_ms, wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = s_request(c, &e, "status", 0);
	json_t *j;
	char *text;

	if (s_call(c, &e, id, NULL, 0, timeout_ms, "status", &m, &p, err) < 0)
		return NULL;
	j = wsync_obj_json(m.root);
	json_object_del(j, "id");
	json_object_del(j, "ok");
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	s_release(&m, &p);
	if (text == NULL)
		wsync_err_set(err, EX_PROTOCOL, "%s: a status that is not valid UTF-8",
		    c->endpoint);
	return text;
}
