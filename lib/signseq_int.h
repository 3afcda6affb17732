/* signseq_int.h - the sequence counter kept beside a signing key (see signseq.c). */
#ifndef WSYNC_SIGNSEQ_INT_H
#define WSYNC_SIGNSEQ_INT_H

#include <stdint.h>

#include "wsync.h"

/*
 * The sequence number the next push signed with the key at key_path takes:
 * given when not 0 (it must be above the counter, else 65), else the
 * counter's next. The counter (key_path.seq, one decimal line) is set to it
 * atomically, under a lock on the key file, before anything is signed.
 */
int wsync_signseq_next(const char *key_path, uint64_t given, uint64_t *seq, wsync_err_t *err);

#endif
