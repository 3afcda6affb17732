/*
 * fuzz_hub.c - libFuzzer target: the input as a conversation with one hub.
 * It is a sequence of records, each [flags][len: 2 bytes LE][request bytes],
 * plus [len][data bytes] when flags bit 0 is set; bits 1-2 pick one of four
 * peers. Each record goes through wsync_hub_serve as if received on the
 * ROUTER, so requests reach every handler with the state earlier ones built
 * (workers, uploads, commits into a real store, waits). The hub and its
 * store live for the whole run, in a temporary directory.
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "hub_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static wsync_hub_t *s_hub;
static char s_dir[] = "/tmp/wsync-fuzz-hub.XXXXXX";

static int
s_unlink(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Closes the hub and removes its directory when the fuzzer exits. */
static void
s_stop(void)
{
	wsync_hub_destroy(&s_hub);
	nftw(s_dir, s_unlink, 16, FTW_DEPTH | FTW_PHYS);
}

static void
s_ignore(void *arg, const char *line)
{
	(void)arg;
	FUZZ_ASSERT(strchr(line, '\n') == NULL, "a log line with a newline: %s", line);
}

static void
s_start(void)
{
	char endpoint[128], store[128];
	const char *endpoints[1] = { endpoint };
	wsync_hub_opts_t o = { .endpoints = endpoints, .nendpoints = 1, .store = store,
	    .keep = 2, .log = s_ignore };
	wsync_err_t err = { 0 };

	FUZZ_ASSERT(mkdtemp(s_dir) != NULL, "mkdtemp failed");
	snprintf(endpoint, sizeof(endpoint), "ipc://%s/hub", s_dir);
	snprintf(store, sizeof(store), "%s/store", s_dir);
	s_hub = wsync_hub_new(&o, &err);
	FUZZ_ASSERT(s_hub != NULL, "hub: %s", err.msg);
	atexit(s_stop);
}

/* Takes len (2 bytes LE) and that many bytes from *p; -1 when the input ends first. */
static int
s_take(const uint8_t **p, const uint8_t *end, const uint8_t **bytes, size_t *len)
{
	if (end - *p < 2)
		return -1;
	*len = (size_t)(*p)[0] | (size_t)(*p)[1] << 8;
	*p += 2;
	if ((size_t)(end - *p) < *len)
		*len = (size_t)(end - *p);
	*bytes = *p;
	*p += *len;
	return 0;
}

static void
s_frame(wsync_parts_t *parts, const void *bytes, size_t len)
{
	zmq_msg_t *msg = &parts->part[parts->n++];

	FUZZ_ASSERT(zmq_msg_init_size(msg, len) == 0, "zmq_msg_init_size");
	if (len > 0)
		memcpy(zmq_msg_data(msg), bytes, len);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size, *req, *body;
	size_t reqlen, bodylen;

	if (s_hub == NULL)
		s_start();
	while (p < end) {
		uint8_t flags = *p++;
		char ident[8];
		wsync_parts_t parts = { .n = 0 };

		if (s_take(&p, end, &req, &reqlen) < 0)
			break;
		snprintf(ident, sizeof(ident), "peer%d", (flags >> 1) & 3);
		s_frame(&parts, ident, strlen(ident));
		s_frame(&parts, "", 0);
		s_frame(&parts, req, reqlen);
		if ((flags & 1) && s_take(&p, end, &body, &bodylen) == 0)
			s_frame(&parts, body, bodylen);
		wsync_hub_serve(s_hub, &parts);
		wsync_parts_close(&parts);
	}
	return 0;
}
