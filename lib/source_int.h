/* source_int.h - a push's input, converted while it is written (see source.c). */
#ifndef WSYNC_SOURCE_INT_H
#define WSYNC_SOURCE_INT_H

#include <signal.h>
#include "delta_int.h"
#include "wsync.h"

/*
 * The .wsync document a push sends for one model, laid out before a byte of
 * tensor data is read, then written in one pass: each tensor read a piece at
 * a time, in the order its input holds it (a pipe is read once, front to
 * back), hashed while the piece is in the cache and written out, so a push
 * of any size holds a few hundred KiB of it. Either an input opened whole (wsync_source_open) or
 * tensors declared one by one (wsync_source_new, wsync_source_add: a
 * directory of files feeds it so).
 */
typedef struct wsync_source wsync_source_t;

/* Told how many bytes of how many are written; may be NULL. */
typedef void (*wsync_source_progress_fn)(void *arg, uint64_t done, uint64_t total);

/*
 * Opens path ("-": stdin) as the document for model: a safetensors file or
 * stream (only its header read now), or a .wsync file (sent as it is when it
 * is of model, re-written otherwise). Caller destroys it.
 */
wsync_source_t *wsync_source_open(const char *path, const char *model,
    const wsync_ckpt_in_t *ckpt, wsync_err_t *err);
/*
 * As wsync_source_open, but always a tree, for a signed push to sign before
 * it is laid out: a .wsync input of model is re-written too, and a pipe is
 * refused (64: its tensors would be read once, after the signature).
 */
wsync_source_t *wsync_source_open_tree(const char *path, const char *model,
    const wsync_ckpt_in_t *ckpt, wsync_err_t *err);
/* The source's tree (borrowed): NULL for an input sent as it is. */
wsync_tree_t *wsync_source_tree(wsync_source_t *src);
/*
 * An empty source for model, to declare tensors and meta in; caller destroys
 * it. shared: the data declared is in shared file mappings, whose pages are
 * let go once copied (never anonymous memory, whose data that would drop).
 */
wsync_source_t *wsync_source_new(const char *model, int shared, wsync_err_t *err);
/* Sets a meta entry (strings copied). */
int wsync_source_meta(wsync_source_t *src, const char *key, const char *value,
    wsync_err_t *err);
/*
 * Declares a tensor, its path split at '.', its nbytes at data (borrowed
 * until the source is destroyed, read once). Tensors are read in the order
 * of their addresses.
 */
int wsync_source_add(wsync_source_t *src, const char *path, wsync_dtype_t dtype, int ndim,
    const uint64_t *shape, const void *data, uint64_t nbytes, wsync_err_t *err);
/*
 * A source of tree's document (tree taken over, destroyed with the source,
 * or at once on failure): tensors declared in it by the caller, their data
 * read once, in the order of their addresses. shared as for wsync_source_new.
 */
wsync_source_t *wsync_source_of_tree(wsync_tree_t *tree, int shared, wsync_err_t *err);
/*
 * Has src read the data of its tree that lies in [base, base + size) from fd
 * at its offset there (borrowed until src is destroyed), not through the
 * mapping: a hole of a sparse file then reads as zeros without being filled
 * (through a mapping, tmpfs allocates every page read). -1 with err.
 */
int wsync_source_read_at(wsync_source_t *src, const void *base, uint64_t size, int fd,
    wsync_err_t *err);
/* Gives src what its data is borrowed from: release(arg) runs when src is destroyed. */
void wsync_source_hold(wsync_source_t *src, void (*release)(void *arg), void *arg);
/*
 * A checkpoint directory (ckpt.c) as the document for model: every shard's
 * tensors under their own names and the small files beside them, read once
 * from the shards' mappings. Caller destroys it.
 */
wsync_source_t *wsync_ckpt_source(const char *dir, const char *model,
    const wsync_ckpt_in_t *in, wsync_err_t *err);
/* The document's size in bytes; lays it out on first call (0 with err: it cannot be). */
uint64_t wsync_source_size(wsync_source_t *src, wsync_err_t *err);
/*
 * Writes the document into fd, a file of exactly wsync_source_size bytes
 * (whose pages exist already or are allocated), at its offsets: the skeleton
 * first, then each tensor read, hashed in the cache and written a piece at a
 * time, then its hash; a .wsync input's declared hashes are checked on the
 * way (65 naming the tensor). So the hashes written are those of the bytes
 * written: a commit may trust them. Stops at *stop (may be NULL).
 */
int wsync_source_write_fd(wsync_source_t *src, int fd, uint64_t size,
    wsync_source_progress_fn progress, void *arg, volatile sig_atomic_t *stop,
    wsync_err_t *err);
/*
 * Copies bytes [off, off + len) of the document into buf, for a push that
 * sends them: reads must go front to back. The first one hashes every
 * tensor (a pipe's input is spooled then, into a file of the document's
 * size); a .wsync input is sent as it is, for the hub to verify.
 */
int wsync_source_read(wsync_source_t *src, uint64_t off, void *buf, size_t len,
    wsync_err_t *err);
/*
 * Copies bytes [off, off + n) of the data of tensor i of src's tree (in the
 * document's order) into buf; any order, from several threads at once. Not
 * for a pipe (-1 with err, as for no tree).
 */
int wsync_source_read_data(wsync_source_t *src, size_t i, uint64_t off, void *buf, size_t n,
    wsync_err_t *err);
/*
 * The delta from base_fd (a .wsync file) to src's document (size bytes,
 * wsync_source_size) written to out_fd, the document's tensors read from
 * src, no file of it written; with patch, base_fd (open for reading and
 * writing) made into the document as it is (wsync_delta_make_over, whose
 * codes it returns: 2 also for a source that is not a tree or is a pipe),
 * through base_map when not NULL (wsync_delta_over_t).
 */
int wsync_source_delta_over(wsync_source_t *src, uint64_t size, int base_fd, int patch,
    unsigned char *base_map, int out_fd, const char *name, uint64_t limit,
    wsync_delta_stats_t *stats, wsync_err_t *err);
/*
 * As wsync_source_delta_over, from base's document (a tree, as src's: a
 * safetensors file, a checkpoint directory) where no file of it exists: its
 * tensors read from base and hashed on the way (base_content gets its
 * content id on 0), no file of it written. Where base is a file whose
 * hashes were remembered from its push (wsync_source_remember) and it has
 * not changed since, by its times, they are taken instead of hashing it:
 * *recalled (may be NULL) says so. 2 when src or base is not a tree or is a
 * pipe.
 */
int wsync_source_delta_from(wsync_source_t *src, uint64_t size, wsync_source_t *base,
    int out_fd, const char *name, uint64_t limit, wsync_delta_stats_t *stats,
    uint64_t *base_content, int *recalled, wsync_err_t *err);
/*
 * Remembers the hashes of src's tensors with the content id of its document
 * (pushed_int.h), for a later push that names src's file its base: only
 * when src is one file, unchanged since it was opened and settled by then
 * (its ctime before that moment), every tensor read whole and hashed.
 */
void wsync_source_remember(wsync_source_t *src);
/* Frees the source and what it opened, and sets *src to NULL. */
void wsync_source_destroy(wsync_source_t **src);

#endif
