/*
 * wsync.h - public API of libwsync: the .wsync weight format (see wsync-format(5)).
 *
 * Conventions: functions return 0 (or a handle) on success and -1 (or NULL) on
 * failure, filling the caller's wsync_err_t with an exit code from <sysexits.h>
 * and a message that names the file and, where there is one, the tensor.
 * The library never prints and never exits.
 */
#ifndef WSYNC_H
#define WSYNC_H

#include <stddef.h>
#include <stdint.h>

#define WSYNC_VERSION "0.1.0"
#define WSYNC_FORMAT_VERSION 1

/* Limits a reader enforces on any input, and a writer on what it is given. */
#define WSYNC_MAX_DIMS 8
#define WSYNC_MAX_DEPTH 16          /* levels of maps below "tree" */
#define WSYNC_MAX_KEY 255           /* bytes in one key */
#define WSYNC_MAX_PATH 1024         /* bytes in a joined tensor path */
#define WSYNC_MAX_TENSORS 1000000
#define WSYNC_MAX_MODEL 64          /* bytes in a model id */
#define WSYNC_MAX_META 1024         /* entries in meta */
#define WSYNC_MAX_META_VALUE 65536  /* bytes in one meta value */
#define WSYNC_ALIGN 64              /* every tensor's data starts at a multiple */

/* An error: code is an exit status from <sysexits.h>, msg says what and where. */
typedef struct wsync_err {
	int code;
	char msg[1024];
} wsync_err_t;

/* Element types. The order is part of the ABI, not of the file format. */
typedef enum wsync_dtype {
	WSYNC_F64, WSYNC_F32, WSYNC_F16, WSYNC_BF16,
	WSYNC_I64, WSYNC_I32, WSYNC_I16, WSYNC_I8,
	WSYNC_U8, WSYNC_BOOL, WSYNC_F8E4M3, WSYNC_F8E5M2,
	WSYNC_DTYPE_COUNT
} wsync_dtype_t;

/* The file's name of a dtype ("f32"); NULL when out of range. */
const char *wsync_dtype_name(wsync_dtype_t dtype);
/* Looks a dtype up by its file name; -1 when unknown. */
int wsync_dtype_from_name(const char *name, wsync_dtype_t *dtype);
/* Bytes per element of a dtype. */
size_t wsync_dtype_size(wsync_dtype_t dtype);
/* Element i of data (of this dtype) as a double; NaN stays NaN. */
double wsync_dtype_get(wsync_dtype_t dtype, const void *data, uint64_t i);

/* Byte size of a tensor, checked for overflow: 0 and *nbytes set, or -1. */
int wsync_tensor_nbytes(wsync_dtype_t dtype, int ndim, const uint64_t *shape,
    uint64_t *nbytes);

/* XXH3-64 of a buffer, the per-tensor hash of the format. */
uint64_t wsync_hash(const void *data, size_t len);

/* 0 when s is a valid model id (1..64 of [A-Za-z0-9._-], not starting with '.'). */
int wsync_model_id_check(const char *s);

/* One tensor as read from a file; every pointer is borrowed from the file. */
typedef struct wsync_tensor {
	const char *path;           /* keys joined with '.' */
	wsync_dtype_t dtype;
	int ndim;
	uint64_t shape[WSYNC_MAX_DIMS];
	uint64_t nbytes;
	uint64_t hash;              /* as stored in the file */
	uint64_t offset;            /* file offset of the first data byte */
	const void *data;           /* nbytes bytes; WSYNC_ALIGN-aligned in a .wsync file */
} wsync_tensor_t;

/* One meta entry; pointers borrowed from the file. */
typedef struct wsync_meta {
	const char *key;
	const char *value;
} wsync_meta_t;

/* ---- building and writing ---- */

typedef struct wsync_tree wsync_tree_t;

/* A new empty tree for model (copied); NULL with err on a bad model id or no memory. */
wsync_tree_t *wsync_tree_new(const char *model, wsync_err_t *err);
/* Frees the tree (not the tensor data it borrows) and sets *tree to NULL. */
void wsync_tree_destroy(wsync_tree_t **tree);
/* Sets the version number written into the file (default 0: not stamped). */
void wsync_tree_set_version(wsync_tree_t *tree, uint64_t version);
/* Adds or replaces a meta entry; key and value are copied. */
int wsync_tree_set_meta(wsync_tree_t *tree, const char *key, const char *value,
    wsync_err_t *err);
/*
 * Adds a tensor at path, split into nested keys at every '.' and '/'.
 * data (nbytes, which must equal the shape's size) is borrowed until the tree
 * is destroyed; its hash is computed when the tree is written.
 */
int wsync_tree_add(wsync_tree_t *tree, const char *path, wsync_dtype_t dtype,
    int ndim, const uint64_t *shape, const void *data, uint64_t nbytes,
    wsync_err_t *err);
/* As wsync_tree_add, with the keys given one by one (a key may contain '.'). */
int wsync_tree_add_keys(wsync_tree_t *tree, const char *const *keys, int nkeys,
    wsync_dtype_t dtype, int ndim, const uint64_t *shape, const void *data,
    uint64_t nbytes, wsync_err_t *err);
/* Number of tensors added so far. */
size_t wsync_tree_count(const wsync_tree_t *tree);
/* Streams the tree as one .wsync document to fd (a pipe works); name is for errors. */
int wsync_tree_write_fd(wsync_tree_t *tree, int fd, const char *name,
    wsync_err_t *err);
/* Writes path atomically (temporary file, fsync, rename); "-" means stdout. */
int wsync_tree_write_file(wsync_tree_t *tree, const char *path, wsync_err_t *err);

/* ---- reading ---- */

typedef struct wsync_file wsync_file_t;

/* What a weight file holds: detected from its first bytes, never from its name. */
typedef enum wsync_kind {
	WSYNC_KIND_WSYNC,
	WSYNC_KIND_SAFETENSORS
} wsync_kind_t;

/*
 * Opens a .wsync file: mapped when it is a regular file (no data page is
 * touched), read into memory when it is a pipe; "-" means stdin.
 * Caller closes with wsync_file_close.
 */
wsync_file_t *wsync_file_open(const char *path, wsync_err_t *err);
/* As wsync_file_open on an open descriptor (not closed by the library). */
wsync_file_t *wsync_file_open_fd(int fd, const char *name, wsync_err_t *err);
/* Parses a file image in memory; buf is borrowed until wsync_file_close. */
wsync_file_t *wsync_file_open_buffer(const void *buf, size_t len,
    const char *name, wsync_err_t *err);
/*
 * Opens a weight file of either kind (.wsync or safetensors). A safetensors
 * file has no stored hashes: its tensors' hash fields are 0, its content id 0.
 */
wsync_file_t *wsync_input_open(const char *path, wsync_err_t *err);
/* Which kind of file this is. */
wsync_kind_t wsync_file_kind(const wsync_file_t *file);
/* Unmaps or frees the file and sets *file to NULL. */
void wsync_file_close(wsync_file_t **file);

/* The name given at open ("-" reads as "stdin"). */
const char *wsync_file_name(const wsync_file_t *file);
/* Format version (the "wsync" field). */
unsigned wsync_file_format(const wsync_file_t *file);
/* Model id; borrowed. */
const char *wsync_file_model(const wsync_file_t *file);
/* Version number (0: not stamped). */
uint64_t wsync_file_version(const wsync_file_t *file);
/* File offset of the 8-byte big-endian version value, for stamping in place. */
uint64_t wsync_file_version_offset(const wsync_file_t *file);
/* Content identity: XXH3-64 over every tensor's path, dtype, shape and hash. */
uint64_t wsync_file_content_id(const wsync_file_t *file);
/* Size in bytes of the whole file. */
uint64_t wsync_file_size(const wsync_file_t *file);
/* Start of the file image in memory; borrowed. */
const void *wsync_file_bytes(const wsync_file_t *file);
/* Number of tensors, in file order. */
size_t wsync_file_count(const wsync_file_t *file);
/* Tensor i (0 <= i < count), borrowed until close. */
const wsync_tensor_t *wsync_file_tensor(const wsync_file_t *file, size_t i);
/* The tensor at path ('.' or '/' separated); NULL when absent. */
const wsync_tensor_t *wsync_file_find(const wsync_file_t *file, const char *path);
/* Number of meta entries. */
size_t wsync_file_meta_count(const wsync_file_t *file);
/* Meta entry i, borrowed until close. */
const wsync_meta_t *wsync_file_meta(const wsync_file_t *file, size_t i);
/* Sum of every tensor's element count. */
uint64_t wsync_file_params(const wsync_file_t *file);
/* Sum of every tensor's data bytes. */
uint64_t wsync_file_data_bytes(const wsync_file_t *file);

/* Called by wsync_file_verify for each tensor whose data does not match its hash. */
typedef void (*wsync_bad_tensor_fn)(const wsync_tensor_t *tensor,
    uint64_t computed, void *arg);
/*
 * Recomputes every tensor's hash: 0 when all match; otherwise -1, err naming
 * the first bad tensor and the count, and bad() called for each (may be NULL).
 */
int wsync_file_verify(const wsync_file_t *file, wsync_bad_tensor_fn bad,
    void *arg, wsync_err_t *err);

/* Streams the tree as a safetensors file to fd: names are the joined paths, meta
 * becomes __metadata__. */
int wsync_tree_write_safetensors_fd(wsync_tree_t *tree, int fd, const char *name,
    wsync_err_t *err);
/* Writes a safetensors file atomically; "-" means stdout. */
int wsync_tree_write_safetensors_file(wsync_tree_t *tree, const char *path,
    wsync_err_t *err);

/* ---- endpoints ---- */

/*
 * The per-user runtime directory, created 0700 and checked to be private:
 * $XDG_RUNTIME_DIR/wsync, else /tmp/wsync-UID.
 */
int wsync_runtime_dir(char *buf, size_t size, wsync_err_t *err);
/* The hub endpoint: opt when given, else $WSYNC_ENDPOINT, else ipc://RUNDIR/hub. */
int wsync_endpoint_resolve(const char *opt, char *buf, size_t size, wsync_err_t *err);

/* ---- the hub (wsync-serve) ---- */

typedef struct wsync_hub wsync_hub_t;

/* How a hub runs; every pointer is borrowed for the call to wsync_hub_new only. */
typedef struct wsync_hub_opts {
	const char *const *endpoints;   /* at least one; the first also names the PUB socket */
	int nendpoints;
	const char *store;              /* NULL: RUNDIR/store */
	unsigned keep;                  /* versions kept per model, at least 1 */
	/* Called with one line per event (no newline); may be NULL. */
	void (*log)(void *arg, const char *line);
	void *log_arg;
} wsync_hub_opts_t;

/* Opens the store and binds the sockets; 69 (EX_UNAVAILABLE) when an endpoint is taken. */
wsync_hub_t *wsync_hub_new(const wsync_hub_opts_t *opts, wsync_err_t *err);
/* Serves until *stop becomes non-zero (set it from a signal handler); then aborts uploads. */
int wsync_hub_run(wsync_hub_t *hub, volatile int *stop, wsync_err_t *err);
/* Closes the sockets and files and sets *hub to NULL. */
void wsync_hub_destroy(wsync_hub_t **hub);

/* Sets err: code, then a printf-style message. Returns -1. */
int wsync_err_set(wsync_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
