/* signseq.c - the sequence counter kept beside a signing key (KEY.seq). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sysexits.h>
#include <unistd.h>

#include "tempfile_int.h"

/* Reads the counter at path into *last: 0 when there is no file yet; -1 with err. */
static int
s_read(const char *path, uint64_t *last, wsync_err_t *err)
{
	char text[32], *end = text;
	FILE *f = fopen(path, "re");
	int ok;

	*last = 0;
	if (f == NULL)
		return errno == ENOENT ? 0 : wsync_err_set(err, EX_IOERR, "%s: %s", path,
		    strerror(errno));
	/* An empty file leaves text as it was: never look for its end then. */
	ok = fgets(text, sizeof(text), f) != NULL;
	fclose(f);
	if (ok) {
		text[strcspn(text, "\n")] = '\0';
		errno = 0;
		*last = strtoull(text, &end, 10);
	}
	/* Digits alone: strtoull would take a sign or spaces before them. */
	if (!ok || text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0)
		return wsync_err_set(err, EX_DATAERR, "%s: not a sequence number (one decimal "
		    "number a line)", path);
	return 0;
}

int
wsync_signseq_next(const char *key_path, uint64_t given, uint64_t *seq, wsync_err_t *err)
{
	char path[4200], text[32];
	uint64_t last;
	int lock, rc = -1;

	if (snprintf(path, sizeof(path), "%s.seq", key_path) >= (int)sizeof(path))
		return wsync_err_set(err, EX_USAGE, "%s: path too long", key_path);
	/* Two pushes with one key at once take two numbers: the key file is the lock. */
	if ((lock = open(key_path, O_RDONLY | O_CLOEXEC)) < 0)
		return wsync_err_set(err, EX_NOINPUT, "%s: %s", key_path, strerror(errno));
	if (flock(lock, LOCK_EX) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot lock: %s", key_path, strerror(errno));
		goto out;
	}
	if (s_read(path, &last, err) < 0)
		goto out;
	if (given != 0 && given <= last) {
		wsync_err_set(err, EX_DATAERR, "sequence number %" PRIu64 " is not above %" PRIu64 ", the "
		    "last sequence number signed with %s (kept in %s): workers refuse a number "
		    "not above the one they applied", given, last, key_path, path);
		goto out;
	}
	if (given == 0 && last == UINT64_MAX) {
		wsync_err_set(err, EX_DATAERR, "%s: the sequence number cannot grow further", path);
		goto out;
	}
	*seq = given != 0 ? given : last + 1;
	snprintf(text, sizeof(text), "%" PRIu64 "\n", *seq);
	rc = wsync_temp_write_text(path, text, 0600, err);
out:
	close(lock);
	return rc;
}
