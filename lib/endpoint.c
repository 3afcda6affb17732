/* endpoint.c - where a hub listens when nobody says: one per-user local endpoint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "wsync.h"

int
wsync_runtime_dir(char *buf, size_t size, wsync_err_t *err)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	int n;

	/* Memory-backed when possible, so the default store delivers at memory speed. */
	if (xdg != NULL && xdg[0] == '/')
		n = snprintf(buf, size, "%s/wsync", xdg);
	else if (access("/dev/shm", W_OK | X_OK) == 0)
		n = snprintf(buf, size, "/dev/shm/wsync-%u", (unsigned)getuid());
	else
		n = snprintf(buf, size, "/tmp/wsync-%u", (unsigned)getuid());
	if (n < 0 || (size_t)n >= size)
		return wsync_err_set(err, EX_USAGE, "runtime directory path too long");
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return wsync_err_set(err, EX_IOERR, "%s: cannot create: %s", buf,
		    strerror(errno));
	/* A directory someone else made in /tmp must not become ours to trust. */
	if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 077) != 0)
		return wsync_err_set(err, EX_NOPERM, "%s: not a private directory of this user "
		    "(want mode 0700, owner uid %u)", buf, (unsigned)getuid());
	return 0;
}

int
wsync_endpoint_resolve(const char *opt, char *buf, size_t size, wsync_err_t *err)
{
	const char *env = getenv("WSYNC_ENDPOINT");
	char dir[200];
	int n;

	if (opt == NULL && env != NULL && env[0] != '\0')
		opt = env;
	if (opt != NULL) {
		if (strncmp(opt, "tcp://", 6) != 0 && strncmp(opt, "ipc://", 6) != 0)
			return wsync_err_set(err, EX_USAGE, "endpoint \"%s\": use tcp://HOST:PORT "
			    "or ipc://PATH", opt);
		n = snprintf(buf, size, "%s", opt);
	} else {
		if (wsync_runtime_dir(dir, sizeof(dir), err) < 0)
			return -1;
		n = snprintf(buf, size, "ipc://%s/hub", dir);
	}
	if (n < 0 || (size_t)n >= size)
		return wsync_err_set(err, EX_USAGE, "endpoint too long");
	return 0;
}

int
wsync_endpoint_absent(const char *endpoint)
{
	struct stat st;

	return strncmp(endpoint, "ipc://", 6) == 0 && endpoint[6] != '@' &&
	    stat(endpoint + 6, &st) < 0 && errno == ENOENT;
}

int
wsync_endpoint_local(const char *endpoint)
{
	const char *host = endpoint + 6, *colon = strrchr(host, ':');
	size_t n = colon != NULL ? (size_t)(colon - host) : strlen(host);

	if (strncmp(endpoint, "tcp://", 6) != 0)
		return 1;
	return (n >= 4 && strncmp(host, "127.", 4) == 0) ||
	    (n == 9 && strncmp(host, "localhost", 9) == 0) ||
	    (n == 5 && strncmp(host, "[::1]", 5) == 0);
}
