/* signcheck_int.h - a fetched version's checks before it is put in place (see signcheck.c). */
#ifndef WSYNC_SIGNCHECK_INT_H
#define WSYNC_SIGNCHECK_INT_H

#include "wsync.h"

/*
 * Checks the fetched file tmp, version of model, as wsync_verify_update
 * against what the output holds (last; NULL: nothing), after checking that
 * the file names model (else not-listed: the signature vouches for it as a
 * version of the model it names, nothing else). 0 with *manifest
 * filled (may be NULL; wsync_manifest_free it); a WSYNC_VERIFY_* reason with
 * err (77): "refused (REASON): MODEL version N: why"; -1 with err when the
 * file cannot be read.
 */
int wsync_verify_fetched(const char *tmp, const char *model, uint64_t version,
    const wsync_verifykey_t *keys, int nkeys, const wsync_applied_t *last,
    wsync_manifest_t *manifest, wsync_err_t *err);

#endif
