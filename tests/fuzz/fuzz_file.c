/*
 * fuzz_file.c - libFuzzer target: the input as a .wsync file image in memory
 * (wsync_file_open_buffer). A file that parses is walked through every
 * accessor, lookup and verify, then written back as .wsync and as
 * safetensors, and each is read again and compared.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wsync_err_t err = { 0 };
	wsync_file_t *f;
	void *buf;

	/*
	 * Aligned like a mapping, so alignment is judged by file offset alone;
	 * exactly size bytes, so AddressSanitizer sees a read one byte past the end.
	 */
	FUZZ_ASSERT(posix_memalign(&buf, 64, size ? size : 1) == 0, "out of memory");
	memcpy(buf, data, size);
	f = wsync_file_open_buffer(buf, size, "fuzz.wsync", &err);
	if (f == NULL) {
		FUZZ_ASSERT(err.code != 0 && err.msg[0] != '\0', "failed without an error");
	} else {
		FUZZ_ASSERT(wsync_file_kind(f) == WSYNC_KIND_WSYNC, "open_buffer took kind %d",
		    (int)wsync_file_kind(f));
		FUZZ_ASSERT(wsync_file_bytes(f) == buf && wsync_file_size(f) == size,
		    "the file is not the buffer given");
		fuzz_check_file(f);
		fuzz_roundtrip(f, 1);
		wsync_file_close(&f);
		FUZZ_ASSERT(f == NULL, "close leaves the handle set");
	}
	free(buf);
	return 0;
}
