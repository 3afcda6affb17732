/*
 * fuzz_safetensors.c - libFuzzer target: the input as a file of either kind
 * (wsync_input_open on a memfd's /proc/self/fd path), so mostly safetensors
 * headers. A file that parses is walked, then written back as .wsync and as
 * safetensors and compared.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = fuzz_scratch_fd(0);
	char path[64];
	wsync_err_t err = { 0 };
	wsync_file_t *f;

	FUZZ_ASSERT(size == 0 || write(fd, data, size) == (ssize_t)size, "write: %s",
	    strerror(errno));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	f = wsync_input_open(path, &err);
	if (f == NULL) {
		FUZZ_ASSERT(err.code != 0 && err.msg[0] != '\0', "failed without an error");
		return 0;
	}
	FUZZ_ASSERT(wsync_file_size(f) == size, "file of %zu bytes reads as %llu", size,
	    (unsigned long long)wsync_file_size(f));
	fuzz_check_file(f);
	fuzz_roundtrip(f, 1);
	wsync_file_close(&f);
	FUZZ_ASSERT(f == NULL, "close leaves the handle set");
	return 0;
}
