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
};

/*
 * Sorts tensors by their keys, bytewise, and refuses a path that is also the
 * prefix of another (a tensor cannot be a subtree). Writers call it first.
 */
int wsync_tree_sort(wsync_tree_t *tree, wsync_err_t *err);

#endif
