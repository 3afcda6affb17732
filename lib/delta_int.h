/*
 * delta_int.h - deltas between two versions of a model (wsync-format(5), DELTA):
 * making one from a base B and a head H, reading its header, and rebuilding H
 * from B and the delta, verified, into a new file.
 */
#ifndef WSYNC_DELTA_INT_H
#define WSYNC_DELTA_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kept_int.h"
#include "wsync.h"

#define WSYNC_DELTA_FORMAT 1

/* How one tensor of H travels; the order is not part of the format, the names are. */
typedef enum wsync_delta_enc {
	WSYNC_DELTA_SAME,       /* B's bytes, unchanged */
	WSYNC_DELTA_XOR,        /* zstd of H xor B */
	WSYNC_DELTA_SPARSE,     /* zstd of the changed elements' positions and xors */
	WSYNC_DELTA_WHOLE,      /* zstd of H's bytes */
	WSYNC_DELTA_RAW,        /* H's bytes as they are */
	WSYNC_DELTA_ENC_COUNT
} wsync_delta_enc_t;

/* The format's name of an encoding ("xor"); NULL when out of range. */
const char *wsync_delta_enc_name(wsync_delta_enc_t enc);

/* What wsync_delta_make wrote. */
typedef struct wsync_delta_stats {
	uint64_t bytes;                         /* the whole delta, or written when it stopped */
	uint64_t head_bytes;                    /* H's file size, for the ratio */
	uint64_t estimate;                      /* the delta's size as estimated first */
	uint64_t skeleton_bytes;                /* the compressed skeleton */
	uint64_t count[WSYNC_DELTA_ENC_COUNT];  /* tensors per encoding */
	uint64_t data[WSYNC_DELTA_ENC_COUNT];   /* H's data bytes per encoding */
	uint64_t encoded[WSYNC_DELTA_ENC_COUNT]; /* bytes on the wire per encoding */
} wsync_delta_stats_t;

/*
 * Writes the delta that turns base (B) into head (H) to out_fd, at its
 * current offset. Both inputs are .wsync files of the same model, read
 * through mappings a window at a time, so memory stays bounded whatever
 * their size. name is for errors; stats (may be NULL) says what was written.
 * limit is the most the delta may take, in bytes: WSYNC_DELTA_WORTH for half
 * of H, WSYNC_DELTA_ANY for no limit. 0 when the delta is written; 1 when it
 * would take more than limit, by a first estimate or once it grows past it
 * while made (out_fd then holds a part, to be thrown away); -1 with err.
 */
int wsync_delta_make(int base_fd, int head_fd, int out_fd, const char *name,
    uint64_t limit, wsync_delta_stats_t *stats, wsync_err_t *err);
#define WSYNC_DELTA_WORTH 0             /* limit: half of H, where a delta stops paying */
#define WSYNC_DELTA_ANY UINT64_MAX      /* limit: none, whatever the delta's size */

/* Reads n bytes of H's tensor i, from byte off of its data, into buf; -1 with err. */
typedef int (*wsync_delta_read_fn)(void *arg, size_t i, uint64_t off, void *buf, size_t n,
    wsync_err_t *err);
/* H as wsync_delta_make_over takes it: a skeleton, and where its data is read from. */
typedef struct wsync_delta_over {
	int fd;                 /* H's header and the bytes between tensors, hashes 0, of H's size */
	size_t n;               /* H's tensors, in the skeleton's order: */
	const char *const *paths;       /* each one's path */
	const uint64_t *hash_at;        /* where in fd its hash goes (a big-endian uint64) */
	wsync_delta_read_fn read;       /* reads its data; called from several threads */
	void *arg;
	int patch;              /* B is made into H as it is read; 0: B is only read */
	/*
	 * With patch, B's file mapped whole for writing, kept by the caller
	 * from one delta to the next (wsync_kept_one): B is made into H
	 * through it. NULL: through windows mapped and let go as they pass.
	 */
	unsigned char *base_map;
	/*
	 * Set (patch 0 only): base_fd is B's skeleton too, hashes 0, open for
	 * writing, and B's tensors (base_n, in its order, each path in
	 * base_paths) are read through base_read, as H's through read: each is
	 * hashed on the way (or after, when no pass reads it whole) and its hash
	 * written at base_hash_at, so that the skeleton then gives B's content id.
	 */
	wsync_delta_read_fn base_read;
	void *base_arg;
	size_t base_n;
	const char *const *base_paths;
	const uint64_t *base_hash_at;
	/*
	 * With base_read, B's hashes when the caller knows them (base_n, in B's
	 * order: remembered from the push of B): written as they are, no tensor
	 * of B hashed. NULL: each is hashed.
	 */
	const uint64_t *base_hashes;
} wsync_delta_over_t;
/*
 * As wsync_delta_make, the delta's bytes the same, with H's tensor data read
 * through head->read, no file of H written first: each tensor of H hashed
 * on the way and the hashes written into head->fd. With head->patch, B is
 * made into H as it is read: each piece of B that differs from H's is
 * written over with H's (B is mapped shared: base_fd open for reading and
 * writing), and H's bytes outside its tensors over B's. One pass over both,
 * where making H's file first and then its delta takes three. 0: the delta
 * is written (and, with patch, B's file is H's, byte for byte); 2 (patch
 * only): H's data does not lie where B's does, nothing written anywhere; 1
 * (not worth it) and -1: with patch, B's file holds part of H, neither B nor
 * H.
 */
int wsync_delta_make_over(int base_fd, const wsync_delta_over_t *head, int out_fd,
    const char *name, uint64_t limit, wsync_delta_stats_t *stats, wsync_err_t *err);

/*
 * Rebuilds H from base (B) and the delta into out_fd, a file open for
 * writing at its start: a new one, or one whose pages exist (a recycled file,
 * cut to H's size at the end); the caller renames it into place. Every tensor's
 * hash, the tensor list and H's content id are checked against the delta;
 * any mismatch, a base that is not the delta's, or a damaged delta gives 65
 * naming the tensor. base_fd is only read. version and content (may be NULL)
 * receive H's.
 */
int wsync_delta_apply(int base_fd, int delta_fd, int out_fd, const char *name,
    uint64_t *version, uint64_t *content, wsync_err_t *err);
/*
 * Where an apply writes H: the file open at fd, named path; with kept (unless
 * NULL), a store's files kept mapped on tmpfs (kept_int.h): B is then read
 * through its kept mapping when it has one, and H written through one
 * (made when fd's file qualifies) instead of with pwrite. The same bytes.
 */
typedef struct {
	int fd;
	const char *path;
	wsync_kept_t *kept;
	int base_kept, head_kept;       /* set by the apply: whether B, H went through kept maps */
} wsync_delta_dest_t;
/* As wsync_delta_apply, into o. */
int wsync_delta_apply_into(int base_fd, int delta_fd, wsync_delta_dest_t *o,
    const char *name, uint64_t *version, uint64_t *content, wsync_err_t *err);
/*
 * H as the delta describes it, no tensor decoded: its header and the bytes
 * between its tensors (the skeleton) in a file of H's size whose data is
 * holes, each tensor's path, length, hash and offset and H's content id
 * checked against the delta's. For what H holds (tensors, meta, hashes)
 * before it is rebuilt; its data reads as zeros. NULL with err (65).
 */
wsync_file_t *wsync_delta_head(int delta_fd, const char *name, wsync_err_t *err);
/* The size of the file the delta in delta_fd rebuilds, its header checked; -1 with err (65). */
int wsync_delta_head_size(int delta_fd, const char *name, uint64_t *size, wsync_err_t *err);
/*
 * 0 when a delta's head has size bytes, the want its sender said; else -1
 * with err (65): "NAME: it rebuilds a version of SIZE bytes, where SAID WANT".
 */
int wsync_delta_size_check(uint64_t size, uint64_t want, const char *name, const char *said,
    wsync_err_t *err);
/* Whether an apply writes the tensor at path: 1 to write it. */
typedef int (*wsync_delta_keep_fn)(void *arg, const char *path);
/*
 * As wsync_delta_apply, writing only the tensors keep(arg, path) keeps
 * (keep NULL: all): the data of the others is a hole that reads as zeros
 * (out_fd must then be a new empty file), neither read from B nor checked.
 * H's header, every tensor hash in it and H's content id are checked as
 * ever, and each tensor written against its hash: the file holds a
 * selection of H (wsync-watch --select). expect, unless 0, is H's size as
 * announced: a delta of another head writes nothing (65).
 */
int wsync_delta_apply_some(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, uint64_t expect, uint64_t *version,
    uint64_t *content, wsync_err_t *err);

/*
 * As wsync_delta_apply_into, for a version that came in parts parts, pushed by as
 * many processes at once: on at least a thread per part, up to the CPUs
 * (wsync_threads_parts), where WSYNC_THREADS says fewer; *threads the
 * threads it ran on.
 */
int wsync_delta_apply_parts(int base_fd, int delta_fd, wsync_delta_dest_t *o,
    const char *name, unsigned parts, unsigned *threads, wsync_err_t *err);

/*
 * A delta that is still arriving, in order, into its file: how much of it
 * has (the receiver says), and how far an apply of it got. Thread-safe.
 */
typedef struct wsync_delta_feed wsync_delta_feed_t;
/* A feed for a delta of size bytes; NULL when out of memory. */
wsync_delta_feed_t *wsync_delta_feed_new(uint64_t size);
/* The head's size the apply must find (the version announced), checked before it writes. */
void wsync_delta_feed_expect(wsync_delta_feed_t *feed, uint64_t size);
/* Bytes [0, upto) of the delta are in its file. */
void wsync_delta_feed_arrived(wsync_delta_feed_t *feed, uint64_t upto);
/* No more bytes will come: an apply waiting for them fails. */
void wsync_delta_feed_stop(wsync_delta_feed_t *feed);
/* Whether the feed was stopped by the receiver, or an apply of it refused the delta. */
int wsync_delta_feed_stopped(wsync_delta_feed_t *feed);
/* The tensors an apply of it has written so far (and checked). */
size_t wsync_delta_feed_applied(wsync_delta_feed_t *feed);
void wsync_delta_feed_free(wsync_delta_feed_t **feed);
/*
 * As wsync_delta_apply_some, with the delta in delta_fd (already of its
 * size) still arriving as feed says: each tensor is rebuilt once its entry
 * has arrived, while later ones are still on their way, on as many threads as
 * wsync_delta_apply_some takes, the others (skeleton, content id) at the end.
 * A delta whose top-level keys do not all come before its tensors (wsync
 * writes them so) is applied once it has all arrived. The file written is the
 * same byte for byte. A feed stopped before the end gives 75.
 */
int wsync_delta_apply_fed(int base_fd, int delta_fd, int out_fd, const char *name,
    wsync_delta_keep_fn keep, void *keep_arg, wsync_delta_feed_t *feed, uint64_t *version,
    uint64_t *content, wsync_err_t *err);

/*
 * Writes to out_fd the delta in delta_fds (n of them), made against some copy
 * of B's tensors, as the delta from base_fd (B as held, numbered base): the
 * same encoded tensor bytes, each base_off where base_fd holds a tensor of
 * that path and length, base_content B's. With head_fd (H as stored and
 * stamped; -1: none, with one delta), the entries come in H's order at H's
 * offsets, the skeleton is made from H, and version, content and size are
 * H's: the deltas of a version's parts make the version's so. Without it,
 * they stay as they came. No tensor is diffed or decoded. bytes (may be
 * NULL) receives what was written. -1 with err (65: base_fd lacks a tensor,
 * or head_fd is not the deltas' head).
 */
int wsync_delta_rebase(const int *delta_fds, size_t n, int base_fd, uint64_t base,
    int head_fd, int out_fd, const char *name, uint64_t *bytes, wsync_err_t *err);

/* One tensor of H as the delta describes it; offsets into the delta buffer. */
typedef struct wsync_delta_tensor {
	const char *path;       /* owned by the header */
	uint64_t off;           /* data offset in H (0 for an empty tensor) */
	uint64_t len;           /* data bytes in H */
	uint64_t hash;          /* H's tensor hash */
	wsync_delta_enc_t enc;
	uint64_t base_off;      /* B's tensor data offset: same, xor, sparse */
	uint64_t data_off;      /* the encoded bytes: xor, sparse, whole, raw */
	uint64_t data_len;
} wsync_delta_tensor_t;

/* A delta's header, everything but the encoded bytes, which stay in the buffer. */
typedef struct wsync_delta_header {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t base, base_content;            /* B's version and content id */
	uint64_t version, content;              /* H's */
	uint64_t size;                          /* H's file size */
	uint64_t skeleton_off, skeleton_len;    /* the compressed skeleton */
	wsync_delta_tensor_t *tensors;          /* in H's file order */
	size_t ntensors;
} wsync_delta_header_t;

/*
 * Decodes and checks the delta document in buf (len bytes): its fields, and
 * that every tensor lies inside H, in order, without overlap, with the keys
 * its encoding needs. Allocates at most a bounded multiple of len. 0, or -1
 * with 65 and err naming the tensor; free the header with
 * wsync_delta_header_free either way.
 */
int wsync_delta_read_header(const void *buf, size_t len, const char *name,
    wsync_delta_header_t *h, wsync_err_t *err);
/* Frees what wsync_delta_read_header allocated and zeroes the header. */
void wsync_delta_header_free(wsync_delta_header_t *h);

#endif
