/*
 * fuzz_check.h - what the fuzz targets assert about every file libwsync
 * accepts. A broken promise aborts, which libFuzzer reports as a crash.
 */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include "wsync.h"

/* Prints what failed and aborts when cond is false. */
#define FUZZ_ASSERT(cond, ...) \
	do { \
		if (!(cond)) \
			fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/* Reports a broken invariant on stderr and aborts. */
void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));

/*
 * Walks every tensor and meta entry of an opened file through the accessors,
 * wsync_file_find and wsync_file_verify, and checks them against the format:
 * data inside the file, sizes matching shapes, alignment, the content id
 * recomputed from the spec, sums, the version stamp offset.
 */
void fuzz_check_file(const wsync_file_t *f);

/*
 * Writes the file's tensors and meta back out with the tree writer (.wsync,
 * read back through a pipe, and safetensors when also_safetensors), reads
 * the result and checks it holds the same tensors, bytes and meta. Inputs
 * the writer cannot express (a path no key split fits) are skipped.
 */
void fuzz_roundtrip(const wsync_file_t *f, int also_safetensors);

/* A memfd for the targets' scratch files, created on first use, emptied. */
int fuzz_scratch_fd(int which);
/* 1 when files a and b hold the same bytes. */
int fuzz_same_fds(int a, int b);

#endif
