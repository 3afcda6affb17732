/* file_int.h - the reader's state, shared by the .wsync and safetensors parsers. */
#ifndef WSYNC_FILE_INT_H
#define WSYNC_FILE_INT_H

#include "stream_hash_int.h"
#include "wsync.h"

enum wsync_mem {
	WSYNC_MEM_BORROWED,  /* caller's buffer */
	WSYNC_MEM_MMAP,      /* mapped regular file */
	WSYNC_MEM_ANON       /* anonymous mapping holding what a pipe gave */
};

struct wsync_file {
	char *name;
	const unsigned char *base;
	size_t size;
	size_t mapped;               /* length to munmap (WSYNC_MEM_ANON may be larger) */
	enum wsync_mem mem;
	int fd;                      /* while a file is opened: its descriptor, else -1 */
	wsync_kind_t kind;
	unsigned format;
	char *model;
	uint64_t version;
	uint64_t version_offset;
	uint64_t content_id;
	uint64_t params;
	uint64_t data_bytes;
	wsync_tensor_t *tensors;     /* path strings owned */
	size_t ntensors, tensors_cap;
	size_t *by_path;             /* indices into tensors, sorted by path */
	wsync_meta_t *meta;          /* key and value strings owned */
	size_t nmeta, meta_cap;
};

/* Appends a tensor; takes ownership of t->path (freed on failure too). */
int wsync_file_push_tensor(wsync_file_t *f, const wsync_tensor_t *t, wsync_err_t *err);
/* Appends a meta entry; takes ownership of both strings (freed on failure too). */
int wsync_file_push_meta(wsync_file_t *f, char *key, char *value, wsync_err_t *err);
/* After parsing: sorts the path index, refuses duplicate paths, sums params and bytes. */
int wsync_file_index(wsync_file_t *f, wsync_err_t *err);
/* Parses f->base/f->size as safetensors, filling tensors and meta. */
int wsync_safetensors_parse(wsync_file_t *f, wsync_err_t *err);
/* 1 when the bytes look like a safetensors file (a header length below 4 GiB, then '{'). */
int wsync_safetensors_sniff(const unsigned char *p, size_t len);
/* wsync_input_open on a buffer (borrowed until closed): .wsync or safetensors. */
wsync_file_t *wsync_input_open_buffer(const void *buf, size_t len, const char *name,
    wsync_err_t *err);
/*
 * Parses a safetensors header alone, head (borrowed until closed) holding its
 * first len bytes (8 + the JSON's length): each tensor's offset counts from
 * the file's start; its data pointer points nowhere yet.
 */
wsync_file_t *wsync_safetensors_open_head(const void *head, size_t len, const char *name,
    wsync_err_t *err);
/*
 * wsync_file_verify of a file opened from fd (wsync_file_open_fd), its data
 * read through fd rather than through the mapping: for a file just written,
 * whose pages are not mapped here yet. A tensor whose data [offset, offset +
 * nbytes) is among the nknown (sorted by at; may be NULL) was hashed as it
 * was written, from the very bytes written: its hash is taken from there.
 */
int wsync_file_verify_fd(const wsync_file_t *f, int fd, const wsync_known_hash_t *known,
    size_t nknown, wsync_err_t *err);

#endif
