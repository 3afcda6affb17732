/*
 * auth.c - who may talk to a hub. With a secret key, every hub socket is a
 * CURVE server and ZeroMQ asks this module (over ZAP, RFC 27, on
 * inproc://zeromq.zap.01, polled in the hub's own loop) whether a client's
 * public key may connect; the allowed key then tags each of the client's
 * messages (ZeroMQ's User-Id property), so that every request is checked
 * against the key's role: pull, or push (which may also pull).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>

#include "auth_int.h"
#include "keys_int.h"
#include "net_int.h"

#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_MAX_KEYS 65536                /* keys on all the allow lists together */
#define S_MAX_SOCKETS 2                 /* the ROUTER and the PUB */

/* One allowed client key. */
struct s_allowed {
	uint8_t key[32];
	int push;                       /* 0: pull only */
};

struct wsync_auth {
	char secret[WSYNC_Z85_KEY + 1];
	char public[WSYNC_Z85_KEY + 1];
	char **paths;                   /* the allow lists as given, to reread on reload */
	int *push;                      /* per path: its keys may push */
	int npaths;
	struct s_allowed *keys;         /* sorted by key */
	size_t nkeys;
	/* A relay's: the relays its root placed under it, let in to pull (wsync_auth_admit). */
	struct s_allowed *placed;
	size_t nplaced;
	void *zap;
	void *socks[S_MAX_SOCKETS], *mons[S_MAX_SOCKETS];
	int nsocks;
	wsync_log_fn log;
	void *log_arg;
};

#define s_log(a, ...) wsync_logf((a)->log, (a)->log_arg, __VA_ARGS__)

static int
s_key_cmp(const void *x, const void *y)
{
	return memcmp(((const struct s_allowed *)x)->key, ((const struct s_allowed *)y)->key, 32);
}

/* Adds the key of the certificate at path to *keys (grown as needed). */
static int
s_add_cert(const char *path, int push, struct s_allowed **keys, size_t *n, size_t *cap,
    wsync_err_t *err)
{
	char public[WSYNC_Z85_KEY + 1];

	if (wsync_key_read(path, public, NULL, err) < 0)
		return -1;
	if (*n == S_MAX_KEYS)
		return wsync_err_set(err, EX_DATAERR, "%s: over %d keys on the allow lists", path,
		    S_MAX_KEYS);
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		struct s_allowed *nk = realloc(*keys, ncap * sizeof(*nk));
		if (nk == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		*keys = nk;
		*cap = ncap;
	}
	zmq_z85_decode((*keys)[*n].key, public);
	(*keys)[*n].push = push;
	(*n)++;
	return 0;
}

/* 1 when a directory entry is a certificate to read: not hidden, not a secret, not a temporary. */
static int
s_is_cert_name(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && !(n >= 7 && strcmp(name + n - 7, "_secret") == 0) &&
	    strstr(name, ".tmp.") == NULL;
}

/* Adds the keys of path: a certificate, or a directory of them. */
static int
s_add_path(const char *path, int push, struct s_allowed **keys, size_t *n, size_t *cap,
    wsync_err_t *err)
{
	char file[4200];
	struct dirent *d;
	struct stat st;
	DIR *dir;
	int rc = 0;

	if (stat(path, &st) < 0)
		return wsync_err_set(err, errno == ENOENT ? EX_NOINPUT : EX_NOPERM, "%s: cannot "
		    "read the allow list: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return s_add_cert(path, push, keys, n, cap, err);
	if ((dir = opendir(path)) == NULL)
		return wsync_err_set(err, EX_NOPERM, "%s: cannot read the allow list: %s", path,
		    strerror(errno));
	while (rc == 0 && (d = readdir(dir)) != NULL) {
		if (!s_is_cert_name(d->d_name))
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, d->d_name);
		if (stat(file, &st) == 0 && S_ISREG(st.st_mode))
			rc = s_add_cert(file, push, keys, n, cap, err);
	}
	closedir(dir);
	return rc;
}

/* Reads every allow list into a new sorted table, replacing a's only when all are good. */
static int
s_load(wsync_auth_t *a, wsync_err_t *err)
{
	struct s_allowed *keys = NULL;
	size_t n = 0, cap = 0, kept = 0;

	for (int i = 0; i < a->npaths; i++)
		if (s_add_path(a->paths[i], a->push[i], &keys, &n, &cap, err) < 0) {
			free(keys);
			return -1;
		}
	if (n > 0)
		qsort(keys, n, sizeof(*keys), s_key_cmp);
	/* A key on both lists may push. */
	for (size_t i = 0; i < n; i++) {
		if (kept > 0 && memcmp(keys[kept - 1].key, keys[i].key, 32) == 0)
			keys[kept - 1].push |= keys[i].push;
		else
			keys[kept++] = keys[i];
	}
	free(a->keys);
	a->keys = keys;
	a->nkeys = kept;
	return 0;
}

static const struct s_allowed *
s_find(const wsync_auth_t *a, const uint8_t *key)
{
	struct s_allowed probe;
	const struct s_allowed *k = NULL;

	memcpy(probe.key, key, 32);
	if (a->nkeys > 0)
		k = bsearch(&probe, a->keys, a->nkeys, sizeof(*a->keys), s_key_cmp);
	for (size_t i = 0; k == NULL && i < a->nplaced; i++)
		if (memcmp(a->placed[i].key, key, 32) == 0)
			k = &a->placed[i];
	return k;
}

static int
s_paths(wsync_auth_t *a, const wsync_hub_opts_t *o, wsync_err_t *err)
{
	int n = o->nallow_push + o->nallow_pull;

	if ((a->paths = calloc((size_t)n + 1, sizeof(*a->paths))) == NULL ||
	    (a->push = calloc((size_t)n + 1, sizeof(*a->push))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < n; i++) {
		int push = i < o->nallow_push;
		const char *p = push ? o->allow_push[i] : o->allow_pull[i - o->nallow_push];
		if ((a->paths[i] = strdup(p)) == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		a->push[i] = push;
		a->npaths++;
	}
	return 0;
}

/* Without keys: only endpoints no other host reaches, unless insecure says otherwise. */
static int
s_check_plain(const wsync_hub_opts_t *o, wsync_err_t *err)
{
	if (o->nallow_push > 0 || o->nallow_pull > 0)
		return wsync_err_set(err, EX_USAGE, "allow lists need a secret key (the hub's "
		    "own key)");
	for (int i = 0; i < o->nendpoints; i++) {
		if (wsync_endpoint_local(o->endpoints[i]))
			continue;
		if (!o->insecure)
			return wsync_err_set(err, EX_USAGE, "%s is reachable from other hosts: it "
			    "needs a secret key and allow lists, or to be served insecure "
			    "(unauthenticated and unencrypted)", o->endpoints[i]);
		wsync_logf(o->log, o->log_arg, "event=warning endpoint=%s error=\"--insecure: "
		    "anyone who reaches this endpoint may push and read weights, in clear text\"",
		    o->endpoints[i]);
	}
	return 0;
}

int
wsync_auth_new(const wsync_hub_opts_t *o, wsync_auth_t **out, wsync_err_t *err)
{
	char public[WSYNC_Z85_KEY + 1];
	wsync_auth_t *a;
	int zero = 0;

	*out = NULL;
	if (o->secret_key == NULL)
		return s_check_plain(o, err);
	if (o->nallow_push + o->nallow_pull == 0)
		return wsync_err_set(err, EX_USAGE, "a secret key without allow lists would let "
		    "no client in");
	if ((a = calloc(1, sizeof(*a))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	a->log = o->log;
	a->log_arg = o->log_arg;
	if (wsync_key_read(o->secret_key, public, a->secret, err) < 0 || s_paths(a, o, err) < 0 ||
	    s_load(a, err) < 0)
		goto fail;
	if ((a->zap = zmq_socket(wsync_zmq_context(), ZMQ_REP)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s", zmq_strerror(errno));
		goto fail;
	}
	zmq_setsockopt(a->zap, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_bind(a->zap, S_ZAP_ENDPOINT) < 0) {
		wsync_err_set(err, EX_SOFTWARE, "%s: cannot bind: %s", S_ZAP_ENDPOINT,
		    zmq_strerror(errno));
		goto fail;
	}
	snprintf(a->public, sizeof(a->public), "%s", public);
	s_log(a, "event=keys public=%s allowed=%zu", public, a->nkeys);
	*out = a;
	return 0;
fail:
	wsync_auth_destroy(&a);
	return -1;
}

void
wsync_auth_destroy(wsync_auth_t **ap)
{
	wsync_auth_t *a = *ap;

	if (a == NULL)
		return;
	for (int i = 0; i < a->nsocks; i++)
		wsync_curve_unwatch(a->socks[i], &a->mons[i]);
	if (a->zap != NULL)
		zmq_close(a->zap);
	for (int i = 0; i < a->npaths; i++)
		free(a->paths[i]);
	free(a->paths);
	free(a->push);
	free(a->keys);
	free(a->placed);
	explicit_bzero(a->secret, sizeof(a->secret));
	free(a);
	*ap = NULL;
}

int
wsync_auth_server(wsync_auth_t *a, void *sock, wsync_err_t *err)
{
	int one = 1;

	if (a->nsocks == S_MAX_SOCKETS)
		return wsync_err_set(err, EX_SOFTWARE, "a hub has %d sockets", S_MAX_SOCKETS);
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->secret, WSYNC_Z85_KEY + 1) < 0 ||
	    zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "wsync", 5) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a CURVE server: %s",
		    zmq_strerror(errno));
	if ((a->mons[a->nsocks] = wsync_curve_watch(sock, err)) == NULL)
		return -1;
	a->socks[a->nsocks++] = sock;
	return 0;
}

int
wsync_auth_items(wsync_auth_t *a, zmq_pollitem_t *items)
{
	if (a == NULL)
		return 0;
	items[0] = (zmq_pollitem_t){ a->zap, 0, ZMQ_POLLIN, 0 };
	for (int i = 0; i < a->nsocks; i++)
		items[1 + i] = (zmq_pollitem_t){ a->mons[i], 0, ZMQ_POLLIN, 0 };
	return 1 + a->nsocks;
}

#define S_ZAP_FRAMES 8

/* Copies frame m into buf as a printable string for the log ("-" when empty or binary). */
static void
s_frame_text(zmq_msg_t *m, char *buf, size_t size)
{
	size_t n = zmq_msg_size(m) < size - 1 ? zmq_msg_size(m) : size - 1;
	const char *d = zmq_msg_data(m);

	snprintf(buf, size, "-");
	for (size_t i = 0; i < n; i++)
		if (d[i] <= ' ' || d[i] >= 0x7f)
			return;
	if (n > 0) {
		memcpy(buf, d, n);
		buf[n] = '\0';
	}
}

/*
 * Answers one ZAP request: version, request id, domain, address, identity,
 * mechanism, key. 200 with the key as the User-Id when the key is allowed,
 * else 400; either way logged.
 */
static void
s_zap(wsync_auth_t *a)
{
	zmq_msg_t f[S_ZAP_FRAMES];
	char z85[WSYNC_Z85_KEY + 1] = "-", address[64];
	const struct s_allowed *k = NULL;
	int n = 0, more = 1;

	while (more) {
		zmq_msg_t scratch, *m = n < S_ZAP_FRAMES ? &f[n] : &scratch;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, a->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(m);
			for (int i = 0; i < n && i < S_ZAP_FRAMES; i++)
				zmq_msg_close(&f[i]);
			return;
		}
		more = zmq_msg_more(m);
		if (m == &scratch)
			zmq_msg_close(m);
		else
			n++;
	}
	/* A REP socket must answer, even a request it cannot read. */
	if (n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
	    zmq_msg_size(&f[6]) == 32) {
		zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32);
		k = s_find(a, zmq_msg_data(&f[6]));
	}
	if (n >= 4)
		s_frame_text(&f[3], address, sizeof(address));
	else
		snprintf(address, sizeof(address), "-");
	zmq_send(a->zap, "1.0", 3, ZMQ_SNDMORE);
	if (n >= 2)
		zmq_msg_send(&f[1], a->zap, ZMQ_SNDMORE);
	else
		zmq_send(a->zap, "", 0, ZMQ_SNDMORE);
	zmq_send(a->zap, k != NULL ? "200" : "400", 3, ZMQ_SNDMORE);
	zmq_send(a->zap, k != NULL ? "OK" : "key not allowed", k != NULL ? 2 : 15, ZMQ_SNDMORE);
	zmq_send(a->zap, k != NULL ? z85 : "", k != NULL ? WSYNC_Z85_KEY : 0, ZMQ_SNDMORE);
	zmq_send(a->zap, "", 0, 0);
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
	if (k != NULL)
		s_log(a, "event=admit key=%s role=%s address=%s", z85, k->push ? "push" : "pull",
		    address);
	else
		s_log(a, "event=deny key=%s address=%s error=\"the key is on no allow list\"", z85,
		    address);
}

/* Logs a handshake that failed before the key was known: no keys, or not the hub's key. */
static void
s_handshake_failed(wsync_auth_t *a, int i)
{
	zmq_msg_t m;
	uint16_t event;
	uint32_t value;
	const char *why;

	zmq_msg_init(&m);
	while (zmq_msg_recv(&m, a->mons[i], ZMQ_DONTWAIT) >= 0) {
		int first = zmq_msg_size(&m) >= 6 && zmq_msg_more(&m);
		if (!first)
			continue;
		memcpy(&event, zmq_msg_data(&m), sizeof(event));
		memcpy(&value, (char *)zmq_msg_data(&m) + 2, sizeof(value));
		/* ZAP refusals were logged with their key already. */
		if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
			continue;
		why = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ? "a client left during the "
		    "handshake (one without keys?)" :
		    value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? "a client without "
		    "CURVE keys" : value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC ? "a client "
		    "that does not have the hub's public key" : "a broken handshake";
		s_log(a, "event=deny socket=%s error=\"%s\" code=0x%x", i == 0 ? "router" : "pub",
		    why, (unsigned)value);
	}
	zmq_msg_close(&m);
}

void
wsync_auth_serve(wsync_auth_t *a, const zmq_pollitem_t *items)
{
	if (a == NULL)
		return;
	if (items[0].revents & ZMQ_POLLIN)
		s_zap(a);
	for (int i = 0; i < a->nsocks; i++)
		if (items[1 + i].revents & ZMQ_POLLIN)
			s_handshake_failed(a, i);
}

void
wsync_auth_reload(wsync_auth_t *a)
{
	wsync_err_t err;
	char quoted[2048];

	if (a == NULL)
		return;
	if (s_load(a, &err) < 0) {
		s_log(a, "event=reload error=\"%s\" allowed=%zu", wsync_log_quote(err.msg, quoted,
		    sizeof(quoted)), a->nkeys);
		return;
	}
	s_log(a, "event=reload allowed=%zu", a->nkeys);
}

int
wsync_auth_permits(const wsync_auth_t *a, zmq_msg_t *msg, const char *op, wsync_err_t *err)
{
	static const char *const push_ops[] = { "abort", "begin", "chunk", "commit", "put" };
	const char *user;
	const struct s_allowed *k;
	uint8_t key[32];
	size_t i, n = sizeof(push_ops) / sizeof(push_ops[0]);

	if (a == NULL)
		return 0;
	user = zmq_msg_gets(msg, "User-Id");
	if (user == NULL || strlen(user) != WSYNC_Z85_KEY || zmq_z85_decode(key, user) == NULL ||
	    (k = s_find(a, key)) == NULL)
		return wsync_err_set(err, EX_NOPERM, "the key %s is no longer on the hub's allow "
		    "lists", user != NULL ? user : "-");
	if (k->push)
		return 0;
	for (i = 0; i < n && strcmp(op, push_ops[i]) != 0; i++)
		;
	if (i == n)
		return 0;
	return wsync_err_set(err, EX_NOPERM, "the key %s may only pull: %s is for keys on the "
	    "hub's push list", user, op);
}

void
wsync_auth_key_of(const wsync_auth_t *a, zmq_msg_t *msg, char *buf, size_t size)
{
	const char *user = a != NULL ? zmq_msg_gets(msg, "User-Id") : NULL;

	snprintf(buf, size, "%s", user != NULL ? user : "");
}

const char *
wsync_auth_public(const wsync_auth_t *a)
{
	return a != NULL ? a->public : "";
}

int
wsync_auth_admit(wsync_auth_t *a, char *const *keys, size_t n)
{
	struct s_allowed *placed = n > 0 ? calloc(n, sizeof(*placed)) : NULL;
	size_t kept = 0;

	if (a == NULL) {
		free(placed);
		return 0;
	}
	if (n > 0 && placed == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (strlen(keys[i]) == WSYNC_Z85_KEY &&
		    zmq_z85_decode(placed[kept].key, keys[i]) != NULL)
			kept++;
	free(a->placed);
	a->placed = placed;
	a->nplaced = kept;
	return 0;
}
