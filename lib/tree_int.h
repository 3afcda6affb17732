/* tree_int.h - the builder's state, shared by the .wsync and safetensors writers. */
#ifndef WSYNC_TREE_INT_H
#define WSYNC_TREE_INT_H

#include "wsync.h"

struct wsync_tree_tensor {
	char **keys;                 /* owned */
	int nkeys;
	char *path;                  /* keys joined with '.', owned */
	wsync_dtype_t dtype;
	int ndim;
	uint64_t shape[WSYNC_MAX_DIMS];
	const void *data;            /* borrowed */
	uint64_t nbytes;
	uint64_t at;                 /* where its data is in the document, once sized */
	uint64_t hash_at;            /* where its hash (a big-endian uint64) is, too */
	uint64_t tag;                /* its writer's own (where its data is in the input) */
	uint64_t hash;               /* its hash, when known: a verified source's */
	int hash_known;
};

struct wsync_tree_meta {
	char *key;
	char *value;
};

struct wsync_tree {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	struct wsync_tree_meta *meta;
	size_t nmeta, meta_cap;
	struct wsync_tree_tensor *t;
	size_t n, cap;
	/*
	 * Every tensor's data is in a shared file mapping: written to a descriptor,
	 * its pages are let go a stride at a time (wsync_pages_release).
	 */
	int release_sources;
	/*
	 * Where a tensor's data can be read at offsets instead of through its
	 * address: 0 with *fd and *off when it can (NULL: nowhere). A source of
	 * sparse files sets it, so that nothing fills their holes.
	 */
	int (*locate)(void *arg, const void *data, uint64_t nbytes, int *fd, uint64_t *off);
	void *locate_arg;
};

/*
 * Sorts tensors by their keys, bytewise, and refuses a path that is also the
 * prefix of another (a tensor cannot be a subtree). Writers call it first.
 */
int wsync_tree_sort(wsync_tree_t *tree, wsync_err_t *err);

/*
 * The hash of the tensor added last, known (its source verified it): written
 * to a descriptor, its data is not read a second time to hash it.
 */
void wsync_tree_known_hash(wsync_tree_t *tree, uint64_t hash);

/*
 * Writes the document to fd, a file, at its offsets, but for the tensors'
 * data, left as it is, and their hashes, 0: a streaming writer writes them
 * afterwards, in any order, at each tensor's at and hash_at (which this and
 * wsync_tree_size set).
 */
int wsync_tree_write_skeleton(wsync_tree_t *tree, int fd, wsync_err_t *err);

#endif
