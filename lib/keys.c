/*
 * keys.c - CURVE keys: the certificate files czmq's zmakecert writes (ZPL
 * text), new key pairs from libzmq, and the client side of a handshake: its
 * keys on the socket, and a monitor that turns a refused handshake (otherwise
 * invisible in ZeroMQ: it just retries) into an error a person can act on.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "io_int.h"
#include "keys_int.h"
#include "tempfile_int.h"
#include "net_int.h"

#define S_MAX_CERT 65536                /* bytes in a certificate file */
#define S_FAILURES (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | \
    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | \
    ZMQ_EVENT_DISCONNECTED)

/* 0 when s is 40 characters of Z85 that decode to a 32-byte key. */
static int
s_key_check(const char *s)
{
	uint8_t bin[32];

	return strlen(s) == WSYNC_Z85_KEY && zmq_z85_decode(bin, s) != NULL ? 0 : -1;
}

/* The value of "name = value" (quoted or not) into buf; -1 when it does not fit. */
static int
s_value(const char *p, char *buf, size_t size)
{
	size_t n;

	while (*p == ' ' || *p == '\t')
		p++;
	if (*p == '"' || *p == '\'') {
		const char *end = strchr(p + 1, *p);
		if (end == NULL)
			return -1;
		n = (size_t)(end - p - 1);
		p++;
	} else
		n = strcspn(p, " \t");   /* '#' is a Z85 digit: a comment needs a space before it */
	if (n >= size)
		return -1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return 0;
}

/*
 * Finds the keys of the "curve" section of a ZPL text (NUL-terminated, changed
 * in place): public and secret get "" when absent.
 */
static void
s_parse(char *text, char *public, char *secret)
{
	int in_curve = 0;

	public[0] = secret[0] = '\0';
	for (char *line = strtok(text, "\r\n"); line != NULL; line = strtok(NULL, "\r\n")) {
		size_t indent = strspn(line, " \t");
		char *name = line + indent, *eq;
		size_t len;
		if (*name == '\0' || *name == '#')
			continue;
		if (indent == 0) {
			in_curve = strcspn(name, " \t=#") == 5 && strncmp(name, "curve", 5) == 0;
			continue;
		}
		if (!in_curve || (eq = strchr(name, '=')) == NULL)
			continue;
		len = strcspn(name, " \t=");
		if (len == 10 && strncmp(name, "public-key", 10) == 0)
			s_value(eq + 1, public, WSYNC_Z85_KEY + 1);
		else if (len == 10 && strncmp(name, "secret-key", 10) == 0)
			s_value(eq + 1, secret, WSYNC_Z85_KEY + 1);
	}
}

/* Like ssh: a secret others can read is no secret, and using it would hide that. */
static int
s_private(const char *path, mode_t mode, wsync_err_t *err)
{
	if ((mode & 077) == 0)
		return 0;
	return wsync_err_set(err, EX_NOPERM, "%s: the secret key file is open to others (mode "
	    "%04o): chmod 600 %s", path, (unsigned)(mode & 07777), path);
}

int
wsync_key_file_read(const char *path, int secret, char *text, size_t size, wsync_err_t *err)
{
	struct stat st;
	ssize_t n;
	int fd, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return wsync_err_set(err, errno == ENOENT ? EX_NOINPUT : EX_NOPERM, "%s: cannot "
		    "open the key file: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		wsync_err_set(err, EX_DATAERR, "%s: not a key file (a regular file)", path);
		goto out;
	}
	if (secret && s_private(path, st.st_mode, err) < 0)
		goto out;
	if ((n = read(fd, text, size)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	if ((size_t)n >= size) {
		wsync_err_set(err, EX_DATAERR, "%s: over %zu bytes: not a key file", path, size - 1);
		goto out;
	}
	text[n] = '\0';
	rc = 0;
out:
	close(fd);
	return rc;
}

int
wsync_key_read(const char *path, char *public, char *secret, wsync_err_t *err)
{
	char text[S_MAX_CERT + 1], sec[WSYNC_Z85_KEY + 1];
	struct stat st;
	int rc = -1;

	/* What kind of key the file holds comes first: its mode matters for a secret one. */
	if (wsync_key_file_read(path, 0, text, sizeof(text), err) < 0)
		return -1;
	s_parse(text, public, secret != NULL ? secret : sec);
	if (secret != NULL && secret[0] == '\0' && public[0] != '\0') {
		wsync_err_set(err, EX_DATAERR, "%s: a public key file, where a secret one is wanted "
		    "(wsync-keygen writes that beside it, as %s_secret)", path, path);
		goto out;
	}
	if (secret == NULL && sec[0] != '\0') {
		wsync_err_set(err, EX_DATAERR, "%s: a secret key file, where the peer's public one "
		    "is wanted (the file without _secret; the secret stays with its owner)", path);
		goto out;
	}
	if (secret != NULL && stat(path, &st) < 0) {
		wsync_err_set(err, EX_NOINPUT, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (secret != NULL && s_private(path, st.st_mode, err) < 0)
		goto out;
	if (secret != NULL) {
		if (s_key_check(secret) < 0) {
			wsync_err_set(err, EX_DATAERR, "%s: no secret-key of 40 Z85 characters in "
			    "its curve section (make one with wsync-keygen)", path);
			goto out;
		}
		/* The public key follows from the secret one: a stale public line cannot lie. */
		if (zmq_curve_public(public, secret) < 0) {
			wsync_err_set(err, EX_DATAERR, "%s: the secret key is not a CURVE key", path);
			goto out;
		}
	} else if (s_key_check(public) < 0) {
		wsync_err_set(err, EX_DATAERR, "%s: no public-key of 40 Z85 characters in its "
		    "curve section (make one with wsync-keygen)", path);
		goto out;
	}
	rc = 0;
out:
	explicit_bzero(text, sizeof(text));
	explicit_bzero(sec, sizeof(sec));
	return rc;
}

int
wsync_curve_load(wsync_curve_t *c, const char *key, const char *hub_key, wsync_err_t *err)
{
	memset(c, 0, sizeof(*c));
	if (key == NULL && (key = getenv("WSYNC_KEY")) != NULL && key[0] == '\0')
		key = NULL;
	if (hub_key == NULL && (hub_key = getenv("WSYNC_HUB_KEY")) != NULL && hub_key[0] == '\0')
		hub_key = NULL;
	if (key == NULL && hub_key == NULL)
		return 0;
	if (key == NULL || hub_key == NULL)
		return wsync_err_set(err, EX_USAGE, "%s: CURVE needs both this client's secret "
		    "key and the hub's public key", key ? "a secret key without the hub's public "
		    "key ($WSYNC_HUB_KEY)" : "the hub's public key without a secret key ($WSYNC_KEY)");
	if (wsync_key_read(key, c->public, c->secret, err) < 0 ||
	    wsync_key_read(hub_key, c->server, NULL, err) < 0)
		return -1;
	c->on = 1;
	return 0;
}

int
wsync_curve_client(void *sock, const wsync_curve_t *c, wsync_err_t *err)
{
	if (!c->on)
		return 0;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, c->server, WSYNC_Z85_KEY + 1) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, c->public, WSYNC_Z85_KEY + 1) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret, WSYNC_Z85_KEY + 1) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "cannot set the CURVE keys: %s",
		    zmq_strerror(errno));
	return 0;
}

void *
wsync_curve_watch(void *sock, wsync_err_t *err)
{
	static unsigned long seq;
	char addr[64];
	void *mon;
	int zero = 0;

	snprintf(addr, sizeof(addr), "inproc://wsync-handshakes-%lu",
	    __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	if (zmq_socket_monitor(sock, addr, S_FAILURES) < 0) {
		wsync_err_set(err, EX_SOFTWARE, "cannot watch the socket: %s", zmq_strerror(errno));
		return NULL;
	}
	if ((mon = zmq_socket(wsync_zmq_context(), ZMQ_PAIR)) == NULL) {
		zmq_socket_monitor(sock, NULL, 0);
		wsync_err_set(err, EX_SOFTWARE, "cannot make a socket: %s", zmq_strerror(errno));
		return NULL;
	}
	zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(mon, addr) < 0) {
		zmq_close(mon);
		zmq_socket_monitor(sock, NULL, 0);
		wsync_err_set(err, EX_SOFTWARE, "cannot watch the socket: %s", zmq_strerror(errno));
		return NULL;
	}
	return mon;
}

void
wsync_curve_unwatch(void *sock, void **mon)
{
	if (*mon == NULL)
		return;
	zmq_socket_monitor(sock, NULL, 0);
	zmq_close(*mon);
	*mon = NULL;
}

int
wsync_curve_failed(void *mon, const char *endpoint, const wsync_curve_t *c, int *closed,
    wsync_err_t *err)
{
	zmq_msg_t m;
	uint16_t event;
	uint32_t value;

	for (;;) {
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return 0;
		}
		/* [event u16, value u32] then the endpoint, which the caller knows already. */
		if (zmq_msg_size(&m) < 6 || !zmq_msg_more(&m)) {
			zmq_msg_close(&m);
			continue;
		}
		memcpy(&event, zmq_msg_data(&m), sizeof(event));
		memcpy(&value, (char *)zmq_msg_data(&m) + 2, sizeof(value));
		zmq_msg_close(&m);
		zmq_msg_init(&m);
		zmq_msg_recv(&m, mon, 0);
		zmq_msg_close(&m);
		/* The peer closed a connection that was up: no handshake failed. */
		if (event == ZMQ_EVENT_DISCONNECTED) {
			*closed = 1;
			continue;
		}
		break;
	}
	if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
		return wsync_err_set(err, EX_NOPERM, "the hub at %s refused this client's key %s "
		    "(status %u): it is on none of the hub's allow lists",
		    endpoint, c->public, (unsigned)value);
	/* Without keys, either side may notice the mismatch first: any failure means it. */
	if (!c->on)
		return wsync_err_set(err, EX_NOPERM, "the hub at %s only lets in clients with "
		    "keys: this client has none (its secret key and the hub's public key, as "
		    "$WSYNC_KEY and $WSYNC_HUB_KEY give them)", endpoint);
	if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
	    value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
		return wsync_err_set(err, EX_NOPERM, "the hub at %s does not use CURVE keys (it "
		    "runs without a secret key), but this client was given some", endpoint);
	return wsync_err_set(err, EX_NOPERM, "the CURVE handshake with the hub at %s failed: "
	    "is %s the hub's public key?", endpoint, c->server);
}

int
wsync_keygen(const char *base, int force, char *public, wsync_err_t *err)
{
	char secret[WSYNC_Z85_KEY + 1], secret_path[4096], stamp[32], text[1024];
	time_t now = time(NULL);
	struct tm tm;
	int rc;

	if (snprintf(secret_path, sizeof(secret_path), "%s_secret", base) >=
	    (int)sizeof(secret_path))
		return wsync_err_set(err, EX_USAGE, "%s: path too long", base);
	if (!force && (access(base, F_OK) == 0 || access(secret_path, F_OK) == 0))
		return wsync_err_set(err, EX_IOERR, "%s exists: keys are not replaced unless "
		    "forced", access(base, F_OK) == 0 ? base : secret_path);
	if (zmq_curve_keypair(public, secret) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "cannot make a key pair: %s (libzmq "
		    "without CURVE?)", zmq_strerror(errno));
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	/* The secret goes first: a public key without its secret would be useless. */
	snprintf(text, sizeof(text),
	    "#   ****  Generated on %s by wsync-keygen  ****\n"
	    "#   ZeroMQ CURVE **Secret** Certificate\n"
	    "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
	    "\n"
	    "metadata\n"
	    "curve\n"
	    "    public-key = \"%s\"\n"
	    "    secret-key = \"%s\"\n", stamp, public, secret);
	rc = wsync_temp_write_text(secret_path, text, 0600, err);
	explicit_bzero(secret, sizeof(secret));
	explicit_bzero(text, sizeof(text));
	if (rc < 0)
		return -1;
	snprintf(text, sizeof(text),
	    "#   ****  Generated on %s by wsync-keygen  ****\n"
	    "#   ZeroMQ CURVE Public Certificate\n"
	    "#   Exchange securely, or use a secure mechanism to verify the contents\n"
	    "#   of this file after exchange.\n"
	    "\n"
	    "metadata\n"
	    "curve\n"
	    "    public-key = \"%s\"\n", stamp, public);
	return wsync_temp_write_text(base, text, 0644, err);
}
