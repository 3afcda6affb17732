/*
 * wsync.h - public API of libwsync: the .wsync weight format (see wsync-format(5)).
 *
 * Conventions: functions return 0 (or a handle) on success and -1 (or NULL) on
 * failure, filling the caller's wsync_err_t with an exit code from <sysexits.h>
 * and a message that names the file and, where there is one, the tensor.
 * The library never prints and never exits.
 *
 * After the limits and the error below, one section per file of lib/ that
 * defines what the section declares, named in its heading, in the order of
 * HACKING.md's source map; a file with nothing public has none.
 */
#ifndef WSYNC_H
#define WSYNC_H

#include <signal.h>
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
/* Slots one client keeps open at once: a hub takes one upload more, for plain pushes. */
#define WSYNC_SLOTS_OPEN_MAX 3
#define WSYNC_MAX_META_VALUE 65536  /* bytes in one meta value */
#define WSYNC_ALIGN 64              /* every tensor's data starts at a multiple */
#define WSYNC_MAX_ID 128            /* bytes in a worker id or host name */
#define WSYNC_MAX_REASON 512        /* bytes in a failure reason */

/* An error: code is an exit status from <sysexits.h>, msg says what and where. */
typedef struct wsync_err {
	int code;
	char msg[1024];
} wsync_err_t;

/* ---- lib/dtype.c: element types: names, sizes, values; tensor sizes; model ids ---- */

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

/* 0 when s is a valid model id (1..64 of [A-Za-z0-9._-], not starting with '.'). */
int wsync_model_id_check(const char *s);

/* ---- lib/hash.c: XXH3-64, the per-tensor hash ---- */

/* XXH3-64 of a buffer, the per-tensor hash of the format. */
uint64_t wsync_hash(const void *data, size_t len);
/*
 * Copies n bytes from src to dst (not overlapping) and returns their XXH3-64,
 * in one pass over the data: about the time of the copy alone (bench/copyhash).
 * Large copies bypass the cache (streaming stores) and hash src, so src must
 * not change during the call; from 8 MiB on, a second thread hashes src just
 * behind the copy, so the whole costs about one copy (two cores busy).
 */
uint64_t wsync_copy_hash(void *dst, const void *src, size_t n);

/* ---- lib/tree.c: building a tensor tree and writing it as a .wsync file ---- */

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
/* As wsync_tree_add, splitting path only at the characters in seps (".": PyTorch names). */
int wsync_tree_add_split(wsync_tree_t *tree, const char *path, const char *seps,
    wsync_dtype_t dtype, int ndim, const uint64_t *shape, const void *data,
    uint64_t nbytes, wsync_err_t *err);
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
/*
 * The exact byte size of the document wsync_tree_write_fd writes for the tree
 * as it is now; reads no tensor data.
 */
int wsync_tree_size(wsync_tree_t *tree, uint64_t *size, wsync_err_t *err);
/*
 * Writes the document into memory of exactly wsync_tree_size bytes (64 when
 * size differs), byte for byte what wsync_tree_write_fd writes: the header in
 * place, then each tensor copied and hashed in one pass (wsync_copy_hash), its
 * hash patched into the header. For a MAP_SHARED mapping of a file whose pages
 * exist, this is about the cost of one memcpy of the data.
 */
int wsync_tree_write_into(wsync_tree_t *tree, void *dst, uint64_t size,
    wsync_err_t *err);
/*
 * wsync_tree_write_into on a file open for reading and writing, which must
 * already hold exactly wsync_tree_size bytes (64 otherwise): maps it shared,
 * writes, unmaps. It never changes the file's size or allocates its blocks,
 * and does not fsync it.
 */
int wsync_tree_write_map(wsync_tree_t *tree, int fd, wsync_err_t *err);

/* ---- lib/file.c: reading a weight file ---- */

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
/* The tensor at path ('.' separated, or '/' when no key holds one); NULL when absent. */
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

/* ---- lib/safetensors.c: the safetensors format written ---- */

/* Streams the tree as a safetensors file to fd: names are the joined paths, meta
 * becomes __metadata__. */
int wsync_tree_write_safetensors_fd(wsync_tree_t *tree, int fd, const char *name,
    wsync_err_t *err);
/* Writes a safetensors file atomically; "-" means stdout. */
int wsync_tree_write_safetensors_file(wsync_tree_t *tree, const char *path,
    wsync_err_t *err);

/* ---- lib/io.c: version files opened with a lease (wsync(7), LEASES) ---- */

/*
 * Opens a version file read-only with a lease: a shared flock(2) taken while
 * path still names the file. A hub that recycles retired files
 * (wsync-serve --recycle) never rewrites a leased one, so the bytes stay
 * this version's for as long as the descriptor (or a mapping made from it)
 * lives, whatever replaces path (wsync(7), LEASES). -1 with errno set;
 * EAGAIN when path kept changing.
 */
int wsync_lease_open(const char *path);

/* ---- lib/ckpt.c: checkpoint directories read (wsync-format(5), CHECKPOINT DIRECTORIES) ---- */

/* The subtree of a version that holds the small files beside the weights. */
#define WSYNC_CKPT_FILES "__files__"
#define WSYNC_CKPT_MAX_FILE (16 << 20)          /* bytes in one small file, by default */
#define WSYNC_CKPT_MAX_FILES_BYTES (64 << 20)   /* bytes in all of them: 4 times that */
#define WSYNC_CKPT_MAX_FILES 256                /* small files in one directory */
/* Shard size wsync writes when none is asked for. */
#define WSYNC_CKPT_SHARD_SIZE (2ULL << 30)

/* A checkpoint directory opened for reading: its shards mapped; opaque. */
typedef struct wsync_ckpt wsync_ckpt_t;

/* A small file beside the weights; borrowed from its wsync_ckpt_t. */
typedef struct wsync_ckpt_file {
	const char *name;
	const void *data;               /* NULL when size is 0 */
	uint64_t size;
} wsync_ckpt_file_t;

/* 1 when path names a directory (following links), 0 otherwise ("-" too). */
int wsync_is_dir(const char *path);
/*
 * Opens a checkpoint directory: the shards its model.safetensors.index.json
 * names, or else every *.safetensors in it, mapped (no data page touched),
 * each tensor checked to be in one shard, the one the index says; every other
 * regular file not hidden becomes a small file (within the bounds above).
 * 65 naming the file and the tensor otherwise. Caller closes.
 */
wsync_ckpt_t *wsync_ckpt_open(const char *dir, wsync_err_t *err);
/* How a checkpoint directory is read; zeros: as wsync_ckpt_open does. */
typedef struct wsync_ckpt_in {
	const char *const *exclude;     /* fnmatch(3) globs of names to leave out */
	int nexclude;
	uint64_t max_file;              /* bytes in one small file (all: 4 times); 0: 16 MiB */
} wsync_ckpt_in_t;
/* As wsync_ckpt_open, read as in says (may be NULL); in is borrowed for the call. */
wsync_ckpt_t *wsync_ckpt_open_in(const char *dir, const wsync_ckpt_in_t *in,
    wsync_err_t *err);
/*
 * What the directory holds that ck leaves out: subdirectories, shards the
 * index does not name ("sub (a directory: ...), x.safetensors (...)"); ""
 * when nothing. Borrowed until close.
 */
const char *wsync_ckpt_left_out(const wsync_ckpt_t *ck);
/* Unmaps everything and sets *ck to NULL. */
void wsync_ckpt_close(wsync_ckpt_t **ck);
/* Number of tensors, in shard order and each shard's file order. */
size_t wsync_ckpt_count(const wsync_ckpt_t *ck);
/* Tensor i, its name whole in path; borrowed until close. */
const wsync_tensor_t *wsync_ckpt_tensor(const wsync_ckpt_t *ck, size_t i);
/* Number of small files. */
size_t wsync_ckpt_file_count(const wsync_ckpt_t *ck);
/* Small file i; borrowed until close. */
const wsync_ckpt_file_t *wsync_ckpt_file(const wsync_ckpt_t *ck, size_t i);
/*
 * A tree of model holding every tensor (split at '.' unless whole, and kept
 * whole when split fails), every shard's __metadata__ as meta and each small
 * file as a u8 tensor under WSYNC_CKPT_FILES. It borrows ck's data: destroy
 * it before closing ck.
 */
wsync_tree_t *wsync_ckpt_tree(const wsync_ckpt_t *ck, const char *model, int whole,
    wsync_err_t *err);

/* ---- lib/ckpt_out.c: a version written as a checkpoint directory ---- */

/* How a version becomes a checkpoint directory; every pointer borrowed for the call. */
typedef struct wsync_ckpt_out {
	uint64_t shard_size;            /* bytes of tensor data a shard holds at most (0: default) */
	const char *const *select;      /* fnmatch(3) patterns on tensor names; none: all */
	int nselect;
} wsync_ckpt_out_t;

/* 1 when name matches one of o's patterns (or o selects nothing). */
int wsync_ckpt_selected(const wsync_ckpt_out_t *o, const char *name);
/*
 * Writes f's tensors (o's selection) as a new directory dir: shards
 * model-0000N-of-0000M.safetensors, model.safetensors.index.json, and the
 * small files byte for byte; each file and dir fsynced. dir must not exist.
 */
int wsync_ckpt_write(const wsync_file_t *f, const char *dir, const wsync_ckpt_out_t *o,
    wsync_err_t *err);
/*
 * Writes f as the directory LINK.vVERSION (through a temporary name), then
 * renames a new symlink onto link pointing at it, so that a reader that
 * resolves link sees a whole version. Older LINK.vN directories go once
 * more than keep are older than this one and none of their readers holds a
 * lease (wsync_lease_open on the directory). real (size bytes) gets the new
 * directory's path.
 */
int wsync_ckpt_publish(const wsync_file_t *f, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err);
/* wsync_ckpt_publish of the .wsync file at path, opened and closed for the call. */
int wsync_ckpt_publish_path(const char *path, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err);

/* ---- lib/signkey.c: ed25519 signing keys (wsync-format(5), SIGNATURES) ---- */

#define WSYNC_KEYID 8               /* bytes in a signing key's id (minisign's key number) */
#define WSYNC_SIGN_PUBLIC 57        /* bytes of a public key's base64 line and its NUL */

/* A secret ed25519 signing key, read from minisign's or signify's file; opaque. */
typedef struct wsync_signkey wsync_signkey_t;

/* A public ed25519 key to verify with, read from a minisign or signify file. */
typedef struct wsync_verifykey {
	uint8_t id[WSYNC_KEYID];
	uint8_t pk[32];
} wsync_verifykey_t;

/*
 * Reads a secret key: minisign's (unencrypted, as minisign -G -W and
 * wsync-keygen --sign make it) or signify's (made with -n). An encrypted key
 * is refused (65), as is a file others can read (77). Caller destroys.
 */
wsync_signkey_t *wsync_signkey_load(const char *path, wsync_err_t *err);
/* Wipes and frees the key and sets *key to NULL. */
void wsync_signkey_destroy(wsync_signkey_t **key);
/* The key's public half (its id and public key). */
void wsync_signkey_public(const wsync_signkey_t *key, wsync_verifykey_t *pub);
/* Reads a public key file, minisign's or signify's (the same framing). */
int wsync_verifykey_load(const char *path, wsync_verifykey_t *key, wsync_err_t *err);
/*
 * Makes a new signing key pair in minisign's format: base.pub (0644) and
 * base.key (unencrypted, 0600). Existing files are replaced only when force.
 * public (WSYNC_SIGN_PUBLIC bytes) gets the public key's line, the base64
 * that minisign -P takes.
 */
int wsync_signkey_generate(const char *base, int force, char *public, wsync_err_t *err);
/* A key id as minisign prints it: 16 uppercase hex digits of its little-endian value. */
void wsync_keyid_hex(const uint8_t *id, char *hex);

/* ---- lib/manifest.c: the signed statement of a push ---- */

#define WSYNC_DIGEST 32             /* bytes in a model's digest: SHA-256 */
#define WSYNC_MAX_SIGNED 256        /* models in one manifest */
/*
 * The meta keys that carry a signed push; the meta digest leaves them out.
 * Part R of a signed version in parts is carried in the same keys followed
 * by "." and R in decimal ("wsync.manifest.0").
 */
#define WSYNC_META_MANIFEST "wsync.manifest"
#define WSYNC_META_SIGNATURE "wsync.signature"
#define WSYNC_MAX_GROUP 256         /* parts of one version in parts */

/* What a manifest says about one model of a push. */
typedef struct wsync_signed_model {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t content;               /* content id */
	uint8_t digest[WSYNC_DIGEST];   /* model digest: every tensor's path, dtype, shape, data */
	uint8_t meta[WSYNC_DIGEST];     /* meta digest: every meta entry but the two above */
} wsync_signed_model_t;

/* The signed statement of one push, or of one part of a version in parts. */
typedef struct wsync_manifest {
	uint64_t seq;                   /* only grows from one push to the next; a part's: its group */
	uint64_t time;                  /* signing time, seconds since the epoch */
	uint8_t key[WSYNC_KEYID];       /* the signing key's id */
	size_t nmodels;
	wsync_signed_model_t *models;   /* sorted by model id; owned */
	/* A part's manifest (format 2) has one model; parts 0: a whole push's (format 1). */
	uint32_t part, parts;
	size_t ntensors, nmetakeys;
	char **tensors;                 /* the part's tensor paths, sorted bytewise; owned */
	char **metakeys;                /* the part's meta keys, sorted bytewise; owned */
} wsync_manifest_t;

/* The canonical bytes of a manifest (wsync-format(5), SIGNATURES); caller frees *buf. */
int wsync_manifest_encode(const wsync_manifest_t *m, unsigned char **buf, size_t *len,
    wsync_err_t *err);
/* Decodes canonical manifest bytes (anything else is 65); wsync_manifest_free after. */
int wsync_manifest_decode(const void *buf, size_t len, wsync_manifest_t *m, wsync_err_t *err);
/* Frees what a manifest owns and empties it; a zeroed manifest is fine. */
void wsync_manifest_free(wsync_manifest_t *m);
/*
 * Sets a part's names in m: copies of the n tensor paths and nkeys meta keys,
 * sorted (the manifest owns them); -1 with err when out of memory.
 */
int wsync_manifest_set_names(wsync_manifest_t *m, const char *const *paths, size_t n,
    const char *const *keys, size_t nkeys, wsync_err_t *err);
/* Whether key is one a signature is carried in: the two above, or a part's (".R"). */
int wsync_meta_is_signature(const char *key);
/* The manifest's entry for model; NULL when it has none. Borrowed from m. */
const wsync_signed_model_t *wsync_manifest_find(const wsync_manifest_t *m, const char *model);

/* ---- lib/sign.c: signing a push and verifying one file of it ---- */

/*
 * A tree's digests and content id, into out, in one pass over its data:
 * about the time of SHA-256 over the data (bench/digest).
 */
int wsync_tree_digest(wsync_tree_t *tree, wsync_signed_model_t *out, wsync_err_t *err);
/* The same of a file (its stored hashes give the content id; the data is read once). */
int wsync_file_digest(const wsync_file_t *file, wsync_signed_model_t *out, wsync_err_t *err);

/*
 * Signs a push: a manifest of the n trees (their digests, one pass over each
 * one's data), seq and the time now, signed with key; every tree gets it in
 * its meta (WSYNC_META_MANIFEST and WSYNC_META_SIGNATURE, replaced when
 * there). Write the trees afterwards, unchanged. out (may be NULL) gets the
 * manifest (wsync_manifest_free it).
 */
int wsync_sign_trees(wsync_tree_t *const *trees, int n, const wsync_signkey_t *key,
    uint64_t seq, wsync_manifest_t *out, wsync_err_t *err);
/*
 * Signs part part of parts of the version named group: a part's manifest
 * (seq group, the tree's digests, its tensor paths and meta keys) in the
 * tree's meta under the keys of that part ("wsync.manifest.R"), every other
 * signature in its meta (its input's) dropped first. As above.
 */
int wsync_sign_part(wsync_tree_t *tree, const wsync_signkey_t *key, uint64_t group,
    uint32_t part, uint32_t parts, wsync_manifest_t *out, wsync_err_t *err);

/* Why wsync_verify_file refused a file; wsync_verify_reason names them. */
typedef enum wsync_verify {
	WSYNC_VERIFY_OK,
	WSYNC_VERIFY_UNSIGNED,          /* no signature or no manifest in its meta */
	WSYNC_VERIFY_MALFORMED,         /* a signature or manifest that cannot be read */
	WSYNC_VERIFY_UNKNOWN_KEY,       /* signed by none of the keys */
	WSYNC_VERIFY_BAD_SIGNATURE,     /* the signature does not hold for the manifest */
	WSYNC_VERIFY_NOT_LISTED,        /* the manifest does not list this file's model */
	WSYNC_VERIFY_CONTENT,           /* its content id is not the signed one */
	WSYNC_VERIFY_META,              /* its meta is not the signed meta */
	WSYNC_VERIFY_DIGEST,            /* its tensors' bytes are not the signed ones */
	WSYNC_VERIFY_ROLLBACK,          /* its seq is not above the one applied */
	WSYNC_VERIFY_MIXED,             /* its push's other models are not beside it */
	WSYNC_VERIFY_GROUP              /* its parts are not the parts of one signed group */
} wsync_verify_t;

/* A reason's name for logs and reports ("unsigned", "bad-signature"...). */
const char *wsync_verify_reason(wsync_verify_t reason);
/*
 * Checks that file is vouched for by one of the nkeys keys: its signature
 * holds for its manifest, which lists its model with its content id, meta
 * digest and model digest (one pass over the data). Returns WSYNC_VERIFY_OK
 * and fills manifest (may be NULL; wsync_manifest_free it) for the caller's
 * own checks (seq, time, the other models); otherwise the reason, with err
 * (77, naming the file) saying it. -1 with err on an internal error.
 * A version in parts is vouched for when each part's manifest is, over the
 * tensors and meta it names, and the parts are one group: 0 to N-1, each of
 * N, one seq, every tensor in one part; manifest gets part 0's.
 */
int wsync_verify_file(const wsync_file_t *file, const wsync_verifykey_t *keys, int nkeys,
    wsync_manifest_t *manifest, wsync_err_t *err);

/* ---- lib/signseq.c: the sequence counter beside a signing key ---- */

/*
 * The sequence number the next push signed with the key at key_path takes:
 * given when not 0 (it must be above the counter, else 65), else the
 * counter's next. The counter (key_path.seq, one decimal line) is set to it
 * atomically, under a lock on the key file, before anything is signed: what
 * a writer that signs its own trees (wsync_sign_trees into a slot) calls first.
 */
int wsync_signseq_next(const char *key_path, uint64_t given, uint64_t *seq, wsync_err_t *err);

/* ---- lib/signcheck.c: a worker's checks of signed versions ---- */

/* What a worker's output holds: its content id and, when signed, its manifest's seq and time. */
typedef struct wsync_applied {
	uint64_t content;               /* 0: no file that can be read */
	int is_signed;                  /* a manifest in its meta (not checked again) */
	uint64_t seq;
	uint64_t time;                  /* signing time, seconds since the epoch */
	uint8_t key[WSYNC_KEYID];
} wsync_applied_t;
/* Reads what the file at path holds into a; a missing or unreadable file holds nothing. */
void wsync_applied_read(const char *path, wsync_applied_t *a);
/*
 * The seconds since a was signed, when they are more than max_age_s (> 0):
 * a version in place grown older than its reader accepts; 0 when a is
 * unsigned, signed since, or max_age_s is 0.
 */
uint64_t wsync_applied_age_over(const wsync_applied_t *a, int max_age_s);
/* Reads file's manifest without checking its signature (wsync_manifest_free after); -1 when it has none. */
int wsync_manifest_of(const wsync_file_t *file, wsync_manifest_t *m);
/*
 * Checks a fetched file before it replaces an output that holds *last:
 * wsync_verify_file, then its seq above last's (the same seq only for the
 * same content: the version in place served again). WSYNC_VERIFY_OK with
 * *manifest filled (wsync_manifest_free it), or a reason with err (77).
 */
int wsync_verify_update(const wsync_file_t *file, const wsync_verifykey_t *keys, int nkeys,
    const wsync_applied_t *last, wsync_manifest_t *manifest, wsync_err_t *err);

/* ---- lib/err.c: filling a wsync_err_t ---- */

/* Sets err: code, then a printf-style message. Returns -1. */
int wsync_err_set(wsync_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- lib/hub.c: a hub: making it, its loop, ending it (wsync-serve) ---- */

typedef struct wsync_hub wsync_hub_t;

/*
 * How a hub runs. Every pointer is borrowed for the call to wsync_hub_new only,
 * except log_arg, which is passed to log until wsync_hub_destroy.
 */
typedef struct wsync_hub_opts {
	const char *const *endpoints;   /* at least one; each gets a PUB of its own beside it */
	int nendpoints;
	const char *store;              /* NULL: RUNDIR/store */
	unsigned keep;                  /* versions kept per model, at least 1 */
	/*
	 * Retired version files kept to be written again by local uploads (pages
	 * that exist are ~10x faster to fill); 0: retiring unlinks. Only for readers
	 * that lease what they keep open (wsync(7), LEASES). At most 64.
	 */
	unsigned recycle;
	/* Called with one line per event (no newline); may be NULL. */
	void (*log)(void *arg, const char *line);
	void *log_arg;
	/*
	 * CURVE on every socket with this secret certificate (NULL: none, and then
	 * only ipc:// and loopback tcp endpoints unless insecure). Clients whose
	 * public keys are in the allow_push certificates (files or directories of
	 * them) may push; those in allow_pull may only hello, get, ack and watch.
	 */
	const char *secret_key;
	const char *const *allow_push;
	int nallow_push;
	const char *const *allow_pull;
	int nallow_pull;
	int insecure;                   /* serve non-loopback tcp without keys */
	volatile sig_atomic_t *reload;  /* set non-zero (SIGHUP) to reread the allow lists */
	/*
	 * A relay (wsync(7), RELAYS): the hubs to mirror versions from, in order
	 * of preference (the next when one is unreachable); none: a root hub.
	 * Mirrored models (upstream_models, or every one when none are named) keep
	 * the upstream's numbers, and pushes of them here are refused (77).
	 * upstream_key and upstream_hub_key are as wsync_client_opts_t's key and
	 * hub_key, for the upstream.
	 */
	const char *const *upstreams;
	int nupstreams;
	const char *const *upstream_models;
	int nupstream_models;
	const char *upstream_key;
	const char *upstream_hub_key;
	/*
	 * A relay: the endpoint other relays reach this hub at, told to the
	 * upstream, which may place relays under it (wsync(7), RELAYS). NULL:
	 * the first of endpoints that names a host (tcp, not a wildcard), else
	 * the first ipc one; "": none, and this relay is placed under nobody's
	 * parent or given children.
	 */
	const char *advertise;
} wsync_hub_opts_t;

/* Opens the store and binds the sockets; 69 (EX_UNAVAILABLE) when an endpoint is taken. */
wsync_hub_t *wsync_hub_new(const wsync_hub_opts_t *opts, wsync_err_t *err);
/* Serves until *stop becomes non-zero (set it from a signal handler); then aborts uploads. */
int wsync_hub_run(wsync_hub_t *hub, volatile sig_atomic_t *stop, wsync_err_t *err);
/* Closes the sockets and files and sets *hub to NULL. */
void wsync_hub_destroy(wsync_hub_t **hub);

/* ---- lib/client.c: the connection (wsync(7) describes the protocol) ---- */

typedef struct wsync_client wsync_client_t;

/*
 * How a version travels between a client and a hub (wsync(7), TRANSFER):
 * auto takes the cheapest that works; link and copy need the hub's store
 * visible on this host; socket always works.
 */
enum {
	WSYNC_TRANSFER_AUTO,
	WSYNC_TRANSFER_LINK,            /* a hard link to the store's immutable file */
	WSYNC_TRANSFER_COPY,            /* a copy of it made in the kernel */
	WSYNC_TRANSFER_SOCKET,          /* bytes over the connection */
	WSYNC_TRANSFER_DELTA            /* a delta from an older version over the connection */
};
/* The mode a name (auto, link, copy, socket) stands for; -1 for anything else (delta too). */
int wsync_transfer_parse(const char *name);
/* The name of a mode ("?" out of range); static. */
const char *wsync_transfer_name(int mode);

/*
 * Who a client is; every pointer is borrowed for the call to wsync_client_new
 * only, except progress_arg, passed to progress, and stop, read, until
 * wsync_client_destroy.
 */
typedef struct wsync_client_opts {
	const char *endpoint;           /* NULL: wsync_endpoint_resolve(NULL) */
	const char *role;               /* "push", "pull", "watch" or "inspect" */
	const char *worker;             /* a watcher's worker id; NULL otherwise */
	const char *const *models;      /* the models it works on */
	int nmodels;
	int timeout_ms;                 /* how long to wait for the hub's hello */
	/* Called as a transfer's bytes arrive or are taken by the hub; may be NULL. */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	int transfer;                   /* WSYNC_TRANSFER_*: how versions travel */
	volatile sig_atomic_t *stop;    /* may be NULL; set non-zero (a signal) to abandon */
	/* > 0: a fetch over the socket may take any time while data keeps coming, at
	 * most this long apart (its timeout then bounds only what precedes the data). */
	int idle_ms;
	/* CURVE: this client's secret certificate and the hub's public one (NULL:
	 * $WSYNC_KEY and $WSYNC_HUB_KEY, else none). Both or neither. */
	const char *key;
	const char *hub_key;
	/* NULL, or the hub's public key itself (40 Z85 characters), in place of hub_key's. */
	const char *hub_public;
	/* A watcher's tensor selection (wsync-watch --select), told to the hub in hello. */
	const char *const *select;
	int nselect;
	/*
	 * Set: the hub closing the connection (its process ended: the kernel
	 * closes it at once) fails the request waiting for a reply (69), instead
	 * of the silence bound; a relay follows its parent so (wsync(7) RELAYS).
	 */
	int close_lost;
} wsync_client_opts_t;

/* A model's version as the hub describes it. */
typedef struct wsync_head {
	uint64_t version;               /* 0: the model has no version (for this worker) */
	uint64_t size;                  /* bytes of the .wsync file */
	uint64_t content;               /* content id */
	double time;                    /* commit time, seconds since the epoch */
	uint64_t mtime;                 /* the store file's mtime (ns) once verified; 0: unknown */
} wsync_head_t;

/* Connects and says hello; 69 (EX_UNAVAILABLE) when no hub answers within timeout_ms. */
wsync_client_t *wsync_client_new(const wsync_client_opts_t *opts, wsync_err_t *err);
/* Closes the connection (aborting the next slot, if any) and sets *client to NULL. */
void wsync_client_destroy(wsync_client_t **client);
/* The endpoint in use; borrowed. */
const char *wsync_client_endpoint(const wsync_client_t *client);
/* Drops the socket (and anything queued on it), connects anew and says hello again. */
int wsync_client_reconnect(wsync_client_t *client, int timeout_ms, wsync_err_t *err);

/* Whose heads a heads request asks for, as any client sees them; borrowed for the call. */
typedef struct wsync_heads_ask {
	const char *const *models;
	int n;
} wsync_heads_ask_t;
/* Who answered a heads request (the reply's hub and store fields). */
typedef struct wsync_heads_from {
	char hub[256];                  /* the hub's identity; empty when not given */
	char store[64];                 /* its store id; empty when not given */
	/*
	 * The store id of its tree's root (its store's when not given); empty: a
	 * relay that does not know it yet.
	 */
	char origin[64];
} wsync_heads_from_t;
/*
 * The head of each of ask->n models into heads (n of them); from (may be NULL)
 * says who answered, so that a watcher notices a restarted hub or another store.
 */
int wsync_client_heads(wsync_client_t *client, const wsync_heads_ask_t *ask,
    wsync_head_t *heads, wsync_heads_from_t *from, int timeout_ms, wsync_err_t *err);

/* What a worker tells the hub of a version; every pointer borrowed for the call. */
typedef struct wsync_report {
	const char *worker;
	const char *model;
	uint64_t version;
	const char *reason;             /* NULL: applied (wire: ack); else why not (wire: fail) */
	int transfer;                   /* WSYNC_TRANSFER_*: how it came; AUTO: not said */
	uint64_t wire;                  /* its bytes on the wire; 0: not said */
} wsync_report_t;
/* Tells the hub a worker applied or failed to apply a version. */
int wsync_client_report(wsync_client_t *client, const wsync_report_t *report, int timeout_ms,
    wsync_err_t *err);
/* Tells the hub a worker leaves. */
int wsync_client_bye(wsync_client_t *client, const char *worker, int timeout_ms,
    wsync_err_t *err);
/* The hub's status (models, versions, workers) as a JSON text; caller frees. */
char *wsync_client_status_json(wsync_client_t *client, int timeout_ms, wsync_err_t *err);

/* ---- lib/client_fetch.c: fetching a version ---- */

/* Which version a fetch or pull asks for; every pointer borrowed for the call. */
typedef struct wsync_fetch {
	const char *model;
	uint64_t version;               /* 0: the head */
	const char *worker;             /* NULL: the head as any client sees it */
	/* nkeys > 0: a pull takes only a version signed by one of keys, newer than
	 * the output's (wsync_verify_update); else 77 naming the reason. */
	const struct wsync_verifykey *keys;
	int nkeys;
	/*
	 * A file holding an older version of the model: over the socket, the
	 * version comes as a delta from it when the hub has one smaller than the
	 * version (wsync(7), DELTAS), else whole. NULL: always whole.
	 */
	const char *base;
} wsync_fetch_t;
/* What a fetch or pull did: the version it got, and how it came. */
typedef struct wsync_fetched {
	wsync_head_t head;              /* the version got */
	int transfer;                   /* WSYNC_TRANSFER_LINK, COPY, SOCKET or DELTA */
	uint64_t asked;                 /* bytes asked of the hub over the socket (0: none) */
	uint64_t wire;                  /* bytes of data received over the connection */
	/* With a base: why the version came whole; "" when it came as a delta. */
	char delta_note[WSYNC_MAX_REASON];
} wsync_fetched_t;
/*
 * Fetches f's version, verifies every hash and the content id, and writes it
 * to path atomically ("-": stdout, only after verifying); got says what came
 * and how.
 */
int wsync_client_pull(wsync_client_t *client, const wsync_fetch_t *f, const char *path,
    wsync_fetched_t *got, int timeout_ms, wsync_err_t *err);
/*
 * Pulls the heads of n models (each f[i].version 0), as one instant of the
 * hub shows them, into paths[i] (files; not "-"): every version fetched and
 * verified before any is put in place. With keys (f[0]'s, for all), they are
 * checked as one round: each signed and newer than paths[i]'s, and the models
 * of one signed push together or not at all (77 naming the reason). got
 * receives the n heads. 0, or -1 with err and nothing put in place (unless
 * a rename itself fails, 74: those before it stay).
 */
int wsync_client_pull_models(wsync_client_t *client, const wsync_fetch_t *f, int n,
    const char *const *paths, wsync_head_t *got, int timeout_ms, wsync_err_t *err);

/* ---- lib/client_pushdelta.c: a push sent as a delta ---- */

/*
 * on: a push over the socket keeps the version it sent (a scratch file in
 * $TMPDIR) and sends the next version of that model as a delta from it, when
 * the hub still retains it and the delta is at most half of it (wsync-push --batch does
 * this); off: forgets what was kept.
 */
void wsync_client_keep_pushed(wsync_client_t *client, int on);

/* ---- lib/client_upload.c: pushing ---- */

/* One file of a push: model and path (or "-") in; version and content out. */
typedef struct wsync_push_item {
	const char *model;
	const char *path;
	uint64_t version;
	uint64_t content;
	/*
	 * NULL, or what was pushed before of model, in the form it was pushed
	 * (a safetensors file, a checkpoint directory, a .wsync file): over the
	 * socket, the push sends the delta from it when the hub holds a version
	 * of its content and the delta is at most half of the version
	 * (wsync(7), DELTAS), else the version whole.
	 */
	const char *base;
	/* A checkpoint directory at path: how it is read (NULL: as wsync_ckpt_open). */
	const wsync_ckpt_in_t *ckpt;
} wsync_push_item_t;

/*
 * Checks every input (65 before anything is sent), uploads them, and commits
 * them together as the next version of each model; workers (NULL: all) are
 * the only ones it is announced to. Fills each item's version and content.
 * The tensor hashes of each input file it read are remembered in
 * $XDG_CACHE_HOME/wsync/pushed (wsync-push(1) FILES), so that a later push
 * naming that file its base does not hash it again.
 */
int wsync_client_push(wsync_client_t *client, wsync_push_item_t *items, int n,
    const char *const *workers, int nworkers, int timeout_ms, wsync_err_t *err);
/*
 * Makes every later push of client part part (from 0) of parts of the version
 * named group (wsync(7), SHARDED TRAINERS): sent over the socket, committed
 * by the hub with the other parts once all are in. parts 0: whole versions
 * again. 64 when part is not below parts or parts above 256.
 */
int wsync_client_push_part(wsync_client_t *client, unsigned part, unsigned parts,
    uint64_t group, wsync_err_t *err);
/* Drops an upload (a slot) that will not be committed. */
int wsync_client_abort(wsync_client_t *client, uint64_t upload, int timeout_ms,
    wsync_err_t *err);
/*
 * Why the last push that had a base moved the version whole; "" when it went
 * as a delta or had no base. Borrowed until the next push.
 */
const char *wsync_client_delta_note(const wsync_client_t *client);

/* ---- lib/client_commit.c: an upload's commit, and waits ---- */

/* Whom a wait waits for (wire: the mode field, by these names). */
typedef enum wsync_wait_mode {
	WSYNC_WAIT_ALL,                 /* all of them */
	WSYNC_WAIT_COUNT,               /* count workers */
	WSYNC_WAIT_IDS                  /* the nids workers named */
} wsync_wait_mode_t;
/* Whom a wait waits for; ids borrowed for the call. */
typedef struct wsync_wait {
	wsync_wait_mode_t mode;
	unsigned count;                 /* WSYNC_WAIT_COUNT */
	const char *const *ids;         /* WSYNC_WAIT_IDS */
	int nids;
} wsync_wait_t;
/*
 * A slot to ask for: n models of sizes[i] bytes, for workers (NULL: all).
 * Every pointer borrowed for the call.
 */
typedef struct wsync_slot_ask {
	const char *const *models;
	const uint64_t *sizes;
	int n;
	const char *const *workers;
	int nworkers;
} wsync_slot_ask_t;
/* An upload to commit; every pointer borrowed for the call. */
typedef struct wsync_commit {
	uint64_t upload;                /* a slot, or a push's upload */
	/* The upload's n files in their order: model in; version and content out. */
	wsync_push_item_t *items;
	int n;
	/* The hub takes the declared hashes without reading the data (slots only;
	 * the writer answers for them). */
	int trust;
	const wsync_wait_t *wait;       /* NULL: no wait */
	/* NULL, or the next slot: one asked for right after the commit, without
	 * waiting for it. The next wsync_client_slot for exactly those models, sizes
	 * and workers, within 30 s, gets it; another aborts it, and so does
	 * wsync_client_destroy. */
	const wsync_slot_ask_t *next;
} wsync_commit_t;
/*
 * Commits cm->upload and sets its items' version and content; then, with
 * cm->wait, waits for each model as wsync_client_wait, all within timeout_ms
 * (an upload of one file commits and waits in one request). On a wait that
 * timed out, *missing as for wsync_client_wait (missing may be NULL without
 * cm->wait), and the items hold the versions committed all the same.
 */
int wsync_client_commit(wsync_client_t *client, const wsync_commit_t *cm, int timeout_ms,
    char **missing, wsync_err_t *err);
/*
 * Waits until the workers w names have applied version of model (or newer).
 * On timeout: 75 and *missing a malloc'd text, one line per missing worker
 * (caller frees).
 */
int wsync_client_wait(wsync_client_t *client, const char *model, uint64_t version,
    const wsync_wait_t *w, int timeout_ms, char **missing, wsync_err_t *err);

/* ---- lib/client_sign.c: a push's signature ---- */

/*
 * Signs every later push of client with the secret key at path (minisign's
 * or signify's; wsync-format(5), SIGNATURES): one manifest of all the push's
 * models, its sequence number from the counter beside the key (path.seq).
 */
int wsync_client_sign_with(wsync_client_t *client, const char *path, wsync_err_t *err);
/*
 * The next signed push's sequence number: seq (above the counter's, else 65);
 * 0: the counter's next. 64 when the client signs nothing.
 */
int wsync_client_sign_seq(wsync_client_t *client, uint64_t seq, wsync_err_t *err);

/* ---- lib/client_slot.c: slots ---- */

/*
 * Slots (this host only): asks the hub for writable files in its store for
 * the next versions of a->n models, of a->sizes[i] bytes each (spares, when
 * the hub recycles). Sets *upload and paths[i] (malloc'd). The caller writes
 * each whole .wsync file into its path, then commits or aborts; the hub drops
 * a slot left untouched for 60 s.
 */
int wsync_client_slot(wsync_client_t *client, const wsync_slot_ask_t *a, int timeout_ms,
    uint64_t *upload, char **paths, wsync_err_t *err);

/* ---- lib/watch.c: the watcher's loop (wsync-watch) ---- */

/* One model's new version, in place, handed to the apply callback. */
typedef struct wsync_update {
	const char *model;
	uint64_t version;
	const char *path;
	/*
	 * A callback that runs longer than beat_ms calls beat(beat_ctx) at least
	 * that often, so that the hub keeps counting the worker as alive.
	 */
	int beat_ms;
	void (*beat)(void *beat_ctx);
	void *beat_ctx;
	char reason[WSYNC_MAX_REASON];  /* why, when the callback returns -1 */
} wsync_update_t;

/*
 * Called when a model's new version is in place, after every model of the
 * same update is in place too. Returns 0 when applied, or -1 with u->reason.
 */
typedef int (*wsync_apply_fn)(void *arg, wsync_update_t *u);

typedef struct wsync_watch_opts {
	const char *endpoint;           /* NULL: the default */
	/*
	 * With nendpoints > 0, the hubs to follow in order of preference, in place
	 * of endpoint: the next one is tried when one cannot be reached or is lost.
	 * They must be hubs of one tree (wsync(7), RELAYS), which number versions
	 * alike.
	 */
	const char *const *endpoints;
	int nendpoints;
	const char *worker;             /* the worker id */
	const char *const *models;
	const char *const *paths;       /* where each model's file goes */
	int nmodels;
	int connect_timeout_ms;         /* 0: wait for a hub for ever */
	int once;                       /* return after the first update of every model */
	uint64_t max_lag;               /* 0: none; else 75 when further behind the head */
	/*
	 * Hold leases (wsync(7), LEASES) on the keep versions applied before the
	 * current one of each model, so that a hub that recycles retired files
	 * leaves them alone for readers still on them; 0: none. At most 16.
	 */
	unsigned keep;
	/*
	 * Write a version sent over the socket into a file this watcher wrote
	 * before and a newer version replaced, once no reader holds a lease on
	 * it and nothing else links it: its pages exist. Only for outputs whose
	 * readers take leases (wsync(7), LEASES): one that does not may see the
	 * file it holds rewritten.
	 */
	int recycle;
	int transfer;                   /* WSYNC_TRANSFER_*: how versions come */
	int no_delta;                   /* always fetch versions whole, never as deltas */
	wsync_apply_fn apply;
	void *arg;
	void (*log)(void *arg, const char *line);  /* what a person should know; may be NULL */
	volatile sig_atomic_t *stop;    /* set non-zero (from a signal handler) to return 0 */
	const char *key;                /* as in wsync_client_opts_t */
	const char *hub_key;
	/* nverify > 0: apply only versions signed by one of verify (signcheck.c),
	 * newer than the one in place, each push's watched models together. */
	const struct wsync_verifykey *verify;
	int nverify;
	int max_age_s;                  /* > 0: log when the signed version in place is older */
	/*
	 * With patterns: only the headers, the selected tensors and the small
	 * files of a checkpoint directory come over the socket; the rest of each
	 * file stays zeros (see wsync_ckpt_out_t). NULL: everything.
	 */
	const wsync_ckpt_out_t *select;
} wsync_watch_opts_t;

/* Follows the hub: initial weights at once, then every new version, latest wins. */
int wsync_watch_run(const wsync_watch_opts_t *opts, wsync_err_t *err);

/* ---- lib/keys.c: CURVE keys ---- */

/*
 * Writes a new CURVE key pair as ZeroMQ certificates (czmq's zmakecert
 * format): base holds the public key, base_secret both (mode 0600). Existing
 * files are replaced only when force. public (41 bytes) gets the Z85 public key.
 */
int wsync_keygen(const char *base, int force, char *public, wsync_err_t *err);

/* ---- lib/net.c: clocks ---- */

/* Monotonic milliseconds, for deadlines. */
int64_t wsync_now_ms(void);

/* ---- lib/proto.c: worker ids, the names of wait modes ---- */

/* 0 when s is a worker id fit for logs: 1..128 printable ASCII bytes, no spaces. */
int wsync_id_check(const char *s);
/* The wait mode (wsync_wait_mode_t) a name (all, count, ids) stands for; -1 for anything else. */
int wsync_wait_parse(const char *name);
/* The name of a wait mode ("?" out of range); static. */
const char *wsync_wait_name(int mode);

/* ---- lib/endpoint.c: where a hub listens when nobody says; who reaches it ---- */

/*
 * The per-user runtime directory, created 0700 and checked to be private:
 * $XDG_RUNTIME_DIR/wsync, else /dev/shm/wsync-UID (tmpfs), else /tmp/wsync-UID.
 */
int wsync_runtime_dir(char *buf, size_t size, wsync_err_t *err);
/* The hub endpoint: opt when given, else $WSYNC_ENDPOINT, else ipc://RUNDIR/hub. */
int wsync_endpoint_resolve(const char *opt, char *buf, size_t size, wsync_err_t *err);
/* 1 when no other host reaches endpoint: not tcp://, or tcp:// on a loopback address. */
int wsync_endpoint_local(const char *endpoint);
/*
 * 1 when endpoint is ipc://PATH and nothing is at PATH: no hub listens there
 * (until one starts); 0 otherwise, tcp:// included.
 */
int wsync_endpoint_absent(const char *endpoint);

/* ---- lib/cast.c: weights cast on the way out (wsync-format(5), CASTS) ---- */

/* The meta keys of a cast version: what it is a cast of, and by which rules (JSON texts). */
#define WSYNC_META_CAST_OF "wsync.cast_of"
#define WSYNC_META_CAST "wsync.cast"

/* How an f8e4m3 cast scales: a float32 scale per 128x128 block, or one per tensor. */
typedef enum wsync_scaling {
	WSYNC_SCALING_NONE, WSYNC_SCALING_BLOCK128, WSYNC_SCALING_TENSOR
} wsync_scaling_t;

/* One rule of a cast (--cast PATTERN=DTYPE[:SCALING]). */
typedef struct wsync_cast_rule {
	char pattern[256];              /* fnmatch(3) glob on tensor names */
	wsync_dtype_t dtype;            /* bf16, f16, f32 or f8e4m3 */
	wsync_scaling_t scaling;        /* f8e4m3: block128 or tensor; else none */
} wsync_cast_rule_t;

/* A cast: the first rule that matches a tensor's name decides; rules borrowed. */
typedef struct wsync_cast {
	const wsync_cast_rule_t *rules;
	int n;
} wsync_cast_t;

/* Parses PATTERN=DTYPE[:SCALING] into rule; 64 when it is not one (message: "SPEC": why). */
int wsync_cast_parse(const char *spec, wsync_cast_rule_t *rule, wsync_err_t *err);
/* 64 when c's rules cannot make one checkpoint (block128 and tensor scaling together). */
int wsync_cast_check(const wsync_cast_t *c, wsync_err_t *err);
/* The rule as it is written ("*.weight=f8e4m3:block128") into buf. */
void wsync_cast_rule_text(const wsync_cast_rule_t *r, char *buf, size_t size);

/* float32 to bf16, rounded to nearest even; every NaN becomes 0x7fc0 (as PyTorch's). */
uint16_t wsync_bf16_from_f32(float x);
/* float32 to IEEE half, rounded to nearest even; -1 for a finite x beyond its range. */
int wsync_f16_from_f32(float x, uint16_t *h);
/*
 * float32 to e4m3 (E4M3FN), rounded to nearest even, subnormals included;
 * NaN and anything rounding beyond 448 become 0x7f (with x's sign), as
 * PyTorch's conversion does: the FP8 rule clamps first.
 */
uint8_t wsync_e4m3_from_f32(float x);
/* e4m3 to float32, exactly. */
float wsync_e4m3_to_f32(uint8_t b);
/*
 * Converts count elements of a float dtype (f64, f32, f16, bf16) through
 * float32 to f32, bf16 or f16 into dst; -1 with *bad the element that
 * overflows f16.
 */
int wsync_cast_convert(wsync_dtype_t from, const void *src, uint64_t count, wsync_dtype_t to,
    void *dst, uint64_t *bad);
/*
 * The FP8 rule on an [m, n] tensor x of a float dtype, in float32: each
 * block x block tile (0: the whole tensor as one), edge tiles as they are,
 * gets s = max(amax(|tile|) / 448, 1e-12) in scales (row-major over tiles)
 * and q = e4m3(clamp(x / s, -448, 448)). -1 with *bad the first NaN or
 * infinite element, nothing meaningful in q.
 */
int wsync_fp8_quantize(wsync_dtype_t dtype, const void *x, uint64_t m, uint64_t n,
    uint64_t block, uint8_t *q, float *scales, uint64_t *bad);

/* Writes tree into anonymous memory and opens it as a file named name; caller closes. */
wsync_file_t *wsync_tree_image(wsync_tree_t *tree, const char *name, wsync_err_t *err);
/*
 * f cast by c, as a new .wsync image in memory (caller closes): only the
 * tensors select picks (NULL: all) and every small file; X_scale_inv or
 * X_scale beside each FP8 tensor X; config.json given its quantization_config;
 * meta saying what it is a cast of. 65 naming the tensor and the rule before
 * anything is made when a rule cannot apply.
 */
wsync_file_t *wsync_cast_file(const wsync_file_t *f, const wsync_cast_t *c,
    const wsync_ckpt_out_t *select, wsync_err_t *err);
/* Writes a cast (wsync_cast_file's) to path atomically, as a .wsync file. */
int wsync_cast_write(const wsync_file_t *cast, const char *path, wsync_err_t *err);
/*
 * wsync_ckpt_publish of a cast (wsync_cast_file's, which applied o's
 * selection) with o's shard size.
 */
int wsync_cast_publish(const wsync_file_t *cast, const char *link, uint64_t version,
    const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size, wsync_err_t *err);
/*
 * A worker's output of the version in the .wsync file at path, cast by c:
 * the cast made (65 naming the tensor and the rule, nothing written, when a
 * rule cannot apply), then written to out atomically as a .wsync file, or
 * (dir) published as a checkpoint directory behind the symlink out as
 * wsync_cast_publish does. real (size bytes) gets what was written.
 */
int wsync_cast_output_path(const char *path, const wsync_cast_t *c, const char *out, int dir,
    uint64_t version, const wsync_ckpt_out_t *o, unsigned keep, char *real, size_t size,
    wsync_err_t *err);

#endif
