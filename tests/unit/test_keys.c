/* test_keys.c - CURVE certificate files: reading czmq's format, writing pairs, refusing bad ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>
#include <zmq.h>

#include "keys_int.h"
#include "tap.h"

static char s_dir[64];
static char s_public[41], s_secret[41];

/* Writes text to DIR/name with mode; returns the path (static buffer). */
static const char *
s_file(const char *name, mode_t mode, const char *text)
{
	static char path[128];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", s_dir, name);
	fp = fopen(path, "w");
	fputs(text, fp);
	fclose(fp);
	chmod(path, mode);
	return path;
}

static void
test_reads_czmq_certificates(void)
{
	char text[512], pub[41], sec[41];
	wsync_err_t err = { 0 };
	const char *path;

	snprintf(text, sizeof(text), "#   ZeroMQ CURVE **Secret** Certificate\n\nmetadata\n"
	    "    name = \"x\"\ncurve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
	    s_public, s_secret);
	path = s_file("double", 0600, text);
	ok(wsync_key_read(path, pub, sec, &err) == 0 && strcmp(pub, s_public) == 0 &&
	    strcmp(sec, s_secret) == 0, "reads a czmq secret certificate: %s", err.msg);
	snprintf(text, sizeof(text), "curve\n\tpublic-key = '%s'  # a comment\n", s_public);
	path = s_file("single", 0644, text);
	ok(wsync_key_read(path, pub, NULL, &err) == 0 && strcmp(pub, s_public) == 0,
	    "reads a single-quoted public key with a comment after it");
	snprintf(text, sizeof(text), "curve\n    public-key = %s\n", s_public);
	path = s_file("bare", 0644, text);
	ok(wsync_key_read(path, pub, NULL, &err) == 0 && strcmp(pub, s_public) == 0,
	    "reads an unquoted public key");
}

static void
test_secret_decides_the_public_key(void)
{
	char text[512], pub[41], sec[41];
	wsync_err_t err = { 0 };

	snprintf(text, sizeof(text), "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
	    "0000000000000000000000000000000000000000", s_secret);
	ok(wsync_key_read(s_file("stale", 0600, text), pub, sec, &err) == 0 &&
	    strcmp(pub, s_public) == 0, "a stale public line gives way to the secret key's");
}

static void
test_refuses_bad_files(void)
{
	char text[512], pub[41], sec[41];
	wsync_err_t err = { 0 };
	const char *path;

	snprintf(text, sizeof(text), "metadata\n    public-key = \"%s\"\n", s_public);
	ok(wsync_key_read(s_file("nosection", 0644, text), pub, NULL, &err) < 0 &&
	    err.code == EX_DATAERR && strstr(err.msg, "no public-key of 40 Z85 characters"),
	    "a key outside the curve section is no key (65): %s", err.msg);
	ok(wsync_key_read(s_file("short", 0644, "curve\n    public-key = \"abc\"\n"), pub, NULL,
	    &err) < 0 && err.code == EX_DATAERR, "a short key is refused (65)");
	snprintf(text, sizeof(text), "curve\n    public-key = \"%.39s~\"\n", s_public);
	ok(wsync_key_read(s_file("notz85", 0644, text), pub, NULL, &err) < 0 &&
	    err.code == EX_DATAERR, "a key that is not Z85 is refused (65)");
	snprintf(text, sizeof(text), "curve\n    secret-key = \"%s\"\n", s_secret);
	path = s_file("open", 0644, text);
	ok(wsync_key_read(path, pub, sec, &err) < 0 && err.code == EX_NOPERM &&
	    strstr(err.msg, "open to others (mode 0644)"), "a secret others can read is "
	    "refused (77): %s", err.msg);
	ok(wsync_key_read("/nonexistent/key", pub, NULL, &err) < 0 && err.code == EX_NOINPUT,
	    "a missing file is 66");
}

static void
test_keygen_round_trip(void)
{
	char base[128], secret_path[160], pub[41], pub2[41], sec[41];
	wsync_err_t err = { 0 };
	struct stat st;

	snprintf(base, sizeof(base), "%s/pair", s_dir);
	snprintf(secret_path, sizeof(secret_path), "%s_secret", base);
	ok(wsync_keygen(base, 0, pub, &err) == 0, "makes a pair: %s", err.msg);
	ok(stat(secret_path, &st) == 0 && (st.st_mode & 0777) == 0600, "the secret is 0600");
	ok(wsync_key_read(base, pub2, NULL, &err) == 0 && strcmp(pub, pub2) == 0 &&
	    wsync_key_read(secret_path, pub2, sec, &err) == 0 && strcmp(pub, pub2) == 0,
	    "both files read back to the printed public key");
	ok(wsync_keygen(base, 0, pub2, &err) < 0 && err.code == EX_IOERR,
	    "an existing pair is not replaced without force (74)");
	ok(wsync_keygen(base, 1, pub2, &err) == 0 && strcmp(pub, pub2) != 0,
	    "force replaces it with a new pair");
}

static void
test_client_needs_both_keys(void)
{
	wsync_curve_t c;
	wsync_err_t err = { 0 };

	unsetenv("WSYNC_KEY");
	unsetenv("WSYNC_HUB_KEY");
	ok(wsync_curve_load(&c, NULL, NULL, &err) == 0 && !c.on, "no keys: no CURVE");
	ok(wsync_curve_load(&c, "k", NULL, &err) < 0 && err.code == EX_USAGE,
	    "a key without the hub's key is a usage error (64): %s", err.msg);
}

int
main(void)
{
	char cmd[96];

	snprintf(s_dir, sizeof(s_dir), "/tmp/test_keys.XXXXXX");
	if (mkdtemp(s_dir) == NULL || zmq_curve_keypair(s_public, s_secret) < 0)
		return 1;
	test_reads_czmq_certificates();
	test_secret_decides_the_public_key();
	test_refuses_bad_files();
	test_keygen_round_trip();
	test_client_needs_both_keys();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
