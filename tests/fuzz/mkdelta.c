/*
 * mkdelta.c - writes fuzz_delta's seeds: a delta from delta_models.h's base
 * to each of its heads, as libwsync makes them.
 *
 *   mkdelta DIR
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "delta_int.h"
#include "delta_models.h"

int
main(int argc, char **argv)
{
	static const char *const names[DELTA_MODEL_HEADS + 1] = {
		NULL, "sparse", "redrawn", "added-removed", "reshaped", "unchanged", "xor"
	};
	wsync_err_t err = { 0 };
	int base = memfd_create("base", 0);

	if (argc != 2) {
		fputs("usage: mkdelta DIR\n", stderr);
		return 64;
	}
	if (base < 0 || delta_model_write(base, 0, &err) < 0)
		goto fail;
	for (int i = 1; i <= DELTA_MODEL_HEADS; i++) {
		char path[4096];
		int head = memfd_create("head", 0), out;
		snprintf(path, sizeof(path), "%s/%s.wdelta", argv[1], names[i]);
		out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (head < 0 || out < 0 || delta_model_write(head, i, &err) < 0 ||
		    wsync_delta_make(base, head, out, path, WSYNC_DELTA_ANY, NULL, &err) < 0)
			goto fail;
		close(head);
		close(out);
	}
	return 0;
fail:
	fprintf(stderr, "mkdelta: %s\n", err.msg[0] ? err.msg : "cannot create a file");
	return 70;
}
