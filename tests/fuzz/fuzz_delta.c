/*
 * fuzz_delta.c - libFuzzer target: the input as a delta (wsync-format(5),
 * DELTA). Its header is decoded from memory (wsync_delta_read_header) and,
 * when it reads, checked to lie inside the input and inside the head; then
 * the input is applied to a fixed base (delta_models.h), and a result is
 * checked to be a valid file whose every hash and content id hold; applied
 * as it arrives (wsync_delta_apply_fed), it must give the same verdict and
 * the same file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "delta_int.h"
#include "delta_models.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_check_header(const wsync_delta_header_t *h, size_t size)
{
	uint64_t end = 0;

	FUZZ_ASSERT(h->skeleton_off + h->skeleton_len <= size, "skeleton outside the input");
	FUZZ_ASSERT(wsync_model_id_check(h->model) == 0, "bad model id accepted");
	for (size_t i = 0; i < h->ntensors; i++) {
		const wsync_delta_tensor_t *t = &h->tensors[i];
		FUZZ_ASSERT(t->path != NULL && t->path[0] != '\0', "tensor %zu without a path", i);
		FUZZ_ASSERT((unsigned)t->enc < WSYNC_DELTA_ENC_COUNT, "encoding %d", (int)t->enc);
		FUZZ_ASSERT(t->data_off + t->data_len <= size, "tensor %s: data outside", t->path);
		FUZZ_ASSERT(t->off + t->len <= h->size, "tensor %s: outside the head", t->path);
		FUZZ_ASSERT(t->len == 0 || t->off >= end, "tensor %s: overlaps", t->path);
		if (t->len > 0)
			end = t->off + t->len;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int base = -1;
	wsync_err_t err = { 0 };
	wsync_delta_header_t h;
	uint64_t version = 0, content = 0;
	wsync_delta_feed_t *feed;
	unsigned char *buf;
	int d, out, fed, rc, fed_rc;

	if (base < 0) {
		base = fuzz_scratch_fd(0);
		FUZZ_ASSERT(delta_model_write(base, 0, &err) == 0, "base: %s", err.msg);
	}
	/* Exactly size bytes, so AddressSanitizer sees a read one byte past the end. */
	FUZZ_ASSERT((buf = malloc(size ? size : 1)) != NULL, "out of memory");
	memcpy(buf, data, size);
	rc = wsync_delta_read_header(buf, size, "fuzz.wdelta", &h, &err);
	if (rc < 0)
		FUZZ_ASSERT(err.code == EX_DATAERR && err.msg[0] != '\0',
		    "refused with %d: %s", err.code, err.msg);
	else
		s_check_header(&h, size);
	wsync_delta_header_free(&h);
	FUZZ_ASSERT(h.tensors == NULL && h.ntensors == 0, "free leaves the header set");
	free(buf);

	d = fuzz_scratch_fd(1);
	FUZZ_ASSERT(write(d, data, size) == (ssize_t)size, "cannot write the delta");
	/* Applied as it arrives (all of it in): the same verdict, the same file. */
	fed = fuzz_scratch_fd(3);
	feed = wsync_delta_feed_new(size);
	FUZZ_ASSERT(feed != NULL, "out of memory");
	wsync_delta_feed_arrived(feed, size);
	memset(&err, 0, sizeof(err));
	fed_rc = wsync_delta_apply_fed(base, d, fed, "fuzz.wdelta", NULL, NULL, feed, NULL, NULL,
	    &err);
	wsync_delta_feed_free(&feed);
	if (fed_rc < 0)
		FUZZ_ASSERT(err.code == EX_DATAERR && err.msg[0] != '\0',
		    "applied as it arrives, failed with %d: %s", err.code, err.msg);
	out = fuzz_scratch_fd(2);
	memset(&err, 0, sizeof(err));
	if (wsync_delta_apply(base, d, out, "fuzz.wdelta", &version, &content, &err) < 0) {
		FUZZ_ASSERT(fed_rc < 0, "applied as it arrived, but not whole: %s", err.msg);
		FUZZ_ASSERT(err.code == EX_DATAERR && err.msg[0] != '\0',
		    "apply failed with %d: %s", err.code, err.msg);
	} else {
		wsync_file_t *f = wsync_file_open_fd(out, "rebuilt", &err);
		FUZZ_ASSERT(rc == 0, "applied a delta whose header does not read");
		FUZZ_ASSERT(f != NULL, "applied, but the result does not read: %s", err.msg);
		FUZZ_ASSERT(wsync_file_verify(f, NULL, NULL, &err) == 0,
		    "applied, but a hash is wrong: %s", err.msg);
		FUZZ_ASSERT(wsync_file_content_id(f) == content && wsync_file_version(f) == version,
		    "applied, but content or version differ from what apply returned");
		wsync_file_close(&f);
		FUZZ_ASSERT(fed_rc == 0 && fuzz_same_fds(out, fed),
		    "applied whole, but not the same as it arrived");
	}
	return 0;
}
