/*
 * wsync-keygen - make a key pair: a CURVE pair for a hub or a client, as
 * ZeroMQ certificates, or with --sign a signing pair in minisign's format.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

static const char s_usage[] = "usage: wsync-keygen [-fs] NAME\n";

static void
s_help(void)
{
	printf("%s\n"
	    "Make a CURVE key pair: NAME gets the public key (give it to the other side),\n"
	    "NAME_secret both keys (mode 0600; keep it). The files are ZeroMQ certificates\n"
	    "(the format czmq's zmakecert writes). Prints the public key.\n"
	    "With --sign, make a signing key pair for signed pushes instead: NAME.pub and\n"
	    "NAME.key (unencrypted, mode 0600), in minisign's format.\n"
	    "\n"
	    "  -f, --force              replace existing files\n"
	    "  -s, --sign               make a signing key pair (ed25519, minisign's format)\n"
	    "  -h, --help               show this help\n"
	    "  -V, --version            show the version\n"
	    "\n"
	    "Exit status: 0 ok, 64 usage, 70 internal error, 74 I/O error or the files\n"
	    "exist. See wsync-keygen(1).\n", s_usage);
	exit(0);
}

/*
 * Refuses to replace NAME's key files unless forced, naming the option (the
 * library refuses the same, naming none).
 */
static void
s_check_new(const char *name, int sign)
{
	const char *ends[] = { sign ? ".pub" : "", sign ? ".key" : "_secret" };

	for (int i = 0; i < 2; i++) {
		char *path;
		if (asprintf(&path, "%s%s", name, ends[i]) < 0)
			cli_die(EX_SOFTWARE, "out of memory");
		if (access(path, F_OK) == 0)
			cli_die(EX_IOERR, "%s exists: keys are not replaced without --force", path);
		free(path);
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "sign", no_argument, NULL, 's' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	char public[WSYNC_SIGN_PUBLIC];
	wsync_err_t err;
	int force = 0, sign = 0, c, rc;

	cli_init("wsync-keygen");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":fhsV", opts, NULL)) != -1) {
		switch (c) {
		case 'f': force = 1; break;
		case 'h': s_help(); break;
		case 's': sign = 1; break;
		case 'V': cli_version(); break;
		default: cli_bad_option(argv, c);
		}
	}
	if (argc == optind)
		cli_usage_error(sign ? "no NAME given (the files are NAME.pub and NAME.key)" :
		    "no NAME given (the files are NAME and NAME_secret)");
	if (argc - optind > 1)
		cli_usage_error("unexpected argument \"%s\"", argv[optind + 1]);
	if (!force)
		s_check_new(argv[optind], sign);
	if (sign)
		rc = wsync_signkey_generate(argv[optind], force, public, &err);
	else
		rc = wsync_keygen(argv[optind], force, public, &err);
	if (rc < 0)
		cli_die_err(&err);
	printf("%s\n", public);
	if (fflush(stdout) != 0)
		cli_die(EX_IOERR, "cannot write to stdout");
	return 0;
}
