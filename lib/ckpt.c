/* ckpt.c - checkpoint directories read: an index and its shards, or every shard; the small files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "file_int.h"
#include "source_int.h"
#include "tree_int.h"
#include "wsync.h"

#define S_INDEX "model.safetensors.index.json"
#define S_MAX_SHARDS 100000

/* One tensor of the directory: where it lives. */
struct s_entry {
	const char *name;            /* borrowed from the shard's tensor */
	size_t shard, tensor;
};

struct wsync_ckpt {
	char *dir;
	char **shard_names;          /* file names in dir, owned */
	wsync_file_t **shards;
	int *fds;                    /* each shard's, for reads at offsets */
	size_t nshards;
	struct s_entry *entries;     /* shard order, then each shard's file order */
	size_t nentries;
	wsync_ckpt_file_t *files;    /* names owned, data mapped */
	size_t nfiles;
	uint64_t files_bytes;
	wsync_ckpt_in_t in;          /* how it is read; exclude borrowed for the open */
	char **left;                 /* what the directory holds that is left out, each "NAME (why)" */
	size_t nleft;
	char *left_out;              /* them sorted, joined by ", "; owned */
};

static int
s_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
s_cmp_entry(const void *a, const void *b)
{
	const struct s_entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c != 0 ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

static int
s_cmp_entry_name(const void *a, const void *b)
{
	return strcmp(((const struct s_entry *)a)->name, ((const struct s_entry *)b)->name);
}

/* Puts "DIR/NAME: " before the message err holds. */
static int
s_prefix(wsync_err_t *err, const char *dir, const char *name)
{
	char msg[sizeof(err->msg)];

	snprintf(msg, sizeof(msg), "%s", err->msg);
	return wsync_err_set(err, err->code, "%s/%s: %s", dir, name, msg);
}

static int
s_has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A name that stays inside the directory: one component, not "." or "..". */
static int
s_plain_name(const char *s)
{
	return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 &&
	    strcmp(s, "..") != 0;
}

static char *
s_join(const char *dir, const char *name)
{
	char *p;

	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static int
s_add_shard_name(wsync_ckpt_t *ck, const char *name, size_t *cap, wsync_err_t *err)
{
	if (ck->nshards == *cap) {
		size_t n = *cap ? *cap * 2 : 8;
		char **p = realloc(ck->shard_names, n * sizeof(*p));
		if (p == NULL)
			return wsync_err_set(err, EX_SOFTWARE, "out of memory");
		ck->shard_names = p;
		*cap = n;
	}
	if ((ck->shard_names[ck->nshards] = strdup(name)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	ck->nshards++;
	return 0;
}

/* The shards the index names, each once, sorted; the weight map kept for the checks. */
static int
s_read_index(wsync_ckpt_t *ck, const char *path, json_t **map_out, wsync_err_t *err)
{
	json_error_t jerr;
	json_t *root, *map, *v;
	const char *name;
	size_t cap = 0, kept = 0;

	if ((root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
		return wsync_err_set(err, EX_DATAERR, "%s: bad JSON: line %d, column %d: %s", path,
		    jerr.line, jerr.column, jerr.text);
	map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		json_decref(root);
		return wsync_err_set(err, EX_DATAERR, "%s: no \"weight_map\" object", path);
	}
	json_object_foreach(map, name, v) {
		if (name[0] == '\0') {
			json_decref(root);
			return wsync_err_set(err, EX_DATAERR, "%s: a tensor name is empty", path);
		}
		if (!json_is_string(v) || !s_plain_name(json_string_value(v)) ||
		    !s_has_suffix(json_string_value(v), ".safetensors")) {
			json_decref(root);
			return wsync_err_set(err, EX_DATAERR, "%s: tensor %s: the shard is not the "
			    "name of a .safetensors file in the directory", path, name);
		}
		if (ck->nshards >= S_MAX_SHARDS) {
			json_decref(root);
			return wsync_err_set(err, EX_DATAERR, "%s: more than %d shards", path,
			    S_MAX_SHARDS);
		}
		if (s_add_shard_name(ck, json_string_value(v), &cap, err) < 0) {
			json_decref(root);
			return -1;
		}
	}
	if (ck->nshards > 1)
		qsort(ck->shard_names, ck->nshards, sizeof(char *), s_cmp_str);
	for (size_t i = 0; i < ck->nshards; i++) {
		if (kept > 0 && strcmp(ck->shard_names[kept - 1], ck->shard_names[i]) == 0) {
			free(ck->shard_names[i]);
			continue;
		}
		ck->shard_names[kept++] = ck->shard_names[i];
	}
	ck->nshards = kept;
	*map_out = json_incref(map);
	json_decref(root);
	return 0;
}

/* Reads a small file into a private mapping (none for an empty one). */
static int
s_add_file(wsync_ckpt_t *ck, const char *name, const struct stat *st, wsync_err_t *err)
{
	char *path = s_join(ck->dir, name);
	wsync_ckpt_file_t *f;
	void *map = NULL;
	int fd = -1, rc = -1;

	if (path == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((uint64_t)st->st_size > ck->in.max_file) {
		wsync_err_set(err, EX_DATAERR, "%s: %lld bytes, over the bound of %" PRIu64 " for "
		    "a file beside the weights (wsync-format(5), CHECKPOINT DIRECTORIES): leave it "
		    "out, or raise the bound", path, (long long)st->st_size, ck->in.max_file);
		goto out;
	}
	if (ck->nfiles >= WSYNC_CKPT_MAX_FILES || ck->files_bytes + (uint64_t)st->st_size >
	    4 * ck->in.max_file) {
		wsync_err_set(err, EX_DATAERR, "%s: the files beside the weights exceed %d files "
		    "or %" PRIu64 " bytes (wsync-format(5), CHECKPOINT DIRECTORIES)", path,
		    WSYNC_CKPT_MAX_FILES, 4 * ck->in.max_file);
		goto out;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		wsync_err_set(err, EX_NOINPUT, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	if (st->st_size > 0 && (map = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_SHARED,
	    fd, 0)) == MAP_FAILED) {
		map = NULL;
		wsync_err_set(err, EX_IOERR, "%s: cannot map: %s", path, strerror(errno));
		goto out;
	}
	f = &ck->files[ck->nfiles];
	if ((f->name = strdup(name)) == NULL) {
		if (map != NULL)
			munmap(map, (size_t)st->st_size);
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	f->data = map;
	f->size = (uint64_t)st->st_size;
	ck->nfiles++;
	ck->files_bytes += f->size;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

/* Notes name (with why) among what the directory holds but the version leaves out. */
static int
s_leave_out(wsync_ckpt_t *ck, const char *name, const char *why, wsync_err_t *err)
{
	char **p = realloc(ck->left, (ck->nleft + 1) * sizeof(*p));

	if (p == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	ck->left = p;
	if (asprintf(&ck->left[ck->nleft], "%s %s", name, why) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	ck->nleft++;
	return 0;
}

/* Joins what was left out, sorted by name (readdir's order is the file system's). */
static int
s_join_left(wsync_ckpt_t *ck, wsync_err_t *err)
{
	size_t len = 0;
	FILE *f;

	if (ck->nleft == 0)
		return 0;
	qsort(ck->left, ck->nleft, sizeof(*ck->left), s_cmp_str);
	if ((f = open_memstream(&ck->left_out, &len)) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (size_t i = 0; i < ck->nleft; i++)
		fprintf(f, "%s%s", i ? ", " : "", ck->left[i]);
	if (fclose(f) != 0)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	return 0;
}

/* 1 when the index names shard name (ck->shard_names holds its shards). */
static int
s_indexed(const wsync_ckpt_t *ck, const char *name)
{
	for (size_t i = 0; i < ck->nshards; i++)
		if (strcmp(ck->shard_names[i], name) == 0)
			return 1;
	return 0;
}

/* 1 when name matches one of the globs to leave out. */
static int
s_excluded(const wsync_ckpt_t *ck, const char *name)
{
	for (int i = 0; i < ck->in.nexclude; i++)
		if (fnmatch(ck->in.exclude[i], name, 0) == 0)
			return 1;
	return 0;
}

/*
 * One pass over the directory: every *.safetensors becomes a shard when
 * there is no index, every other regular file (not hidden, not the index, not
 * excluded) a small file. Subdirectories and shards the index does not name
 * are noted as left out.
 */
static int
s_scan(wsync_ckpt_t *ck, int have_index, wsync_err_t *err)
{
	DIR *d = opendir(ck->dir);
	struct dirent *de;
	size_t cap = 0;
	int rc = -1;

	if (d == NULL)
		return wsync_err_set(err, EX_NOINPUT, "%s: cannot open: %s", ck->dir,
		    strerror(errno));
	if ((ck->files = calloc(WSYNC_CKPT_MAX_FILES, sizeof(*ck->files))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		if (de->d_name[0] == '.' || strcmp(de->d_name, S_INDEX) == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, 0) < 0 || s_excluded(ck, de->d_name))
			continue;
		if (S_ISDIR(st.st_mode) && s_leave_out(ck, de->d_name, "(a directory: only the "
		    "files at the top are read)", err) < 0)
			goto out;
		if (!S_ISREG(st.st_mode))
			continue;
		if (s_has_suffix(de->d_name, ".safetensors")) {
			if (have_index && !s_indexed(ck, de->d_name) && s_leave_out(ck, de->d_name,
			    "(a shard the index does not name)", err) < 0)
				goto out;
			if (!have_index && s_add_shard_name(ck, de->d_name, &cap, err) < 0)
				goto out;
			continue;
		}
		if (s_add_file(ck, de->d_name, &st, err) < 0)
			goto out;
	}
	if (!have_index && ck->nshards > 1)
		qsort(ck->shard_names, ck->nshards, sizeof(char *), s_cmp_str);
	rc = s_join_left(ck, err);
out:
	closedir(d);
	return rc;
}

/* The first tensor the weight map puts in shard; for a message. */
static const char *
s_first_in(json_t *map, const char *shard)
{
	const char *name;
	json_t *v;

	json_object_foreach(map, name, v)
		if (strcmp(json_string_value(v), shard) == 0)
			return name;
	return "?";
}

/* Opens every shard and checks that each tensor is in one shard, the one the index says. */
static int
s_open_shards(wsync_ckpt_t *ck, json_t *map, wsync_err_t *err)
{
	char *index = s_join(ck->dir, S_INDEX);
	size_t total = 0;
	int rc = -1;

	if (index == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if ((ck->shards = calloc(ck->nshards + 1, sizeof(*ck->shards))) == NULL ||
	    (ck->fds = malloc((ck->nshards + 1) * sizeof(*ck->fds))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ck->nshards; i++)
		ck->fds[i] = -1;
	for (size_t i = 0; i < ck->nshards; i++) {
		char *path = s_join(ck->dir, ck->shard_names[i]);
		struct stat st;
		if (path == NULL) {
			wsync_err_set(err, EX_SOFTWARE, "out of memory");
			goto out;
		}
		if (map != NULL && stat(path, &st) < 0 && errno == ENOENT) {
			wsync_err_set(err, EX_DATAERR, "%s: tensor %s: its shard %s is missing",
			    index, s_first_in(map, ck->shard_names[i]), ck->shard_names[i]);
			free(path);
			goto out;
		}
		ck->shards[i] = wsync_input_open(path, err);
		if (ck->shards[i] != NULL && wsync_file_kind(ck->shards[i]) != WSYNC_KIND_SAFETENSORS) {
			wsync_err_set(err, EX_DATAERR, "%s: not a safetensors file", path);
			wsync_file_close(&ck->shards[i]);
		}
		if (ck->shards[i] != NULL && (ck->fds[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			wsync_err_set(err, EX_NOINPUT, "%s: cannot open: %s", path, strerror(errno));
			wsync_file_close(&ck->shards[i]);
		}
		free(path);
		if (ck->shards[i] == NULL)
			goto out;
		total += wsync_file_count(ck->shards[i]);
	}
	if ((ck->entries = calloc(total + 1, sizeof(*ck->entries))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ck->nshards; i++)
		for (size_t j = 0; j < wsync_file_count(ck->shards[i]); j++)
			ck->entries[ck->nentries++] = (struct s_entry){
			    .name = wsync_file_tensor(ck->shards[i], j)->path, .shard = i, .tensor = j };
	rc = 0;
out:
	free(index);
	return rc;
}

/* Every name once, in the shard the index names; nothing the index lists missing. */
static int
s_check_names(wsync_ckpt_t *ck, json_t *map, wsync_err_t *err)
{
	struct s_entry *sorted = NULL;
	const char *name;
	json_t *v;
	int rc = -1;

	if (ck->nentries > 0 && (sorted = malloc(ck->nentries * sizeof(*sorted))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	if (ck->nentries > 0)
		memcpy(sorted, ck->entries, ck->nentries * sizeof(*sorted));
	if (ck->nentries > 1)
		qsort(sorted, ck->nentries, sizeof(*sorted), s_cmp_entry);
	for (size_t i = 0; i < ck->nentries; i++) {
		const struct s_entry *e = &sorted[i];
		const char *in;
		if (i > 0 && strcmp(sorted[i - 1].name, e->name) == 0) {
			wsync_err_set(err, EX_DATAERR, "%s/%s: tensor %s: also in %s", ck->dir,
			    ck->shard_names[e->shard], e->name, ck->shard_names[sorted[i - 1].shard]);
			goto out;
		}
		if (strcmp(e->name, WSYNC_CKPT_FILES) == 0 ||
		    strncmp(e->name, WSYNC_CKPT_FILES ".", sizeof(WSYNC_CKPT_FILES)) == 0) {
			wsync_err_set(err, EX_DATAERR, "%s/%s: tensor %s: the name is reserved for "
			    "the files beside the weights", ck->dir, ck->shard_names[e->shard],
			    e->name);
			goto out;
		}
		if (map == NULL)
			continue;
		if ((in = json_string_value(json_object_get(map, e->name))) == NULL) {
			wsync_err_set(err, EX_DATAERR, "%s/%s: tensor %s: not listed in the index %s",
			    ck->dir, ck->shard_names[e->shard], e->name, S_INDEX);
			goto out;
		}
		if (strcmp(in, ck->shard_names[e->shard]) != 0) {
			wsync_err_set(err, EX_DATAERR, "%s/%s: tensor %s: the index %s puts it in %s",
			    ck->dir, ck->shard_names[e->shard], e->name, S_INDEX, in);
			goto out;
		}
	}
	if (map != NULL && json_object_size(map) != ck->nentries) {
		json_object_foreach(map, name, v) {
			struct s_entry key = { .name = name };
			if (ck->nentries == 0 || bsearch(&key, sorted, ck->nentries, sizeof(*sorted),
			    s_cmp_entry_name) == NULL) {
				wsync_err_set(err, EX_DATAERR, "%s/%s: tensor %s: listed in the index "
				    "%s, not in the shard", ck->dir, json_string_value(v), name,
				    S_INDEX);
				goto out;
			}
		}
	}
	rc = 0;
out:
	free(sorted);
	return rc;
}

wsync_ckpt_t *
wsync_ckpt_open(const char *dir, wsync_err_t *err)
{
	return wsync_ckpt_open_in(dir, NULL, err);
}

wsync_ckpt_t *
wsync_ckpt_open_in(const char *dir, const wsync_ckpt_in_t *in, wsync_err_t *err)
{
	wsync_ckpt_t *ck = calloc(1, sizeof(*ck));
	json_t *map = NULL;
	char *index = NULL;
	struct stat st;
	int have_index;

	if (ck == NULL || (ck->dir = strdup(dir)) == NULL ||
	    (index = s_join(dir, S_INDEX)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto fail;
	}
	if (in != NULL)
		ck->in = *in;
	if (ck->in.max_file == 0)
		ck->in.max_file = WSYNC_CKPT_MAX_FILE;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		wsync_err_set(err, EX_NOINPUT, "%s: not a directory", dir);
		goto fail;
	}
	have_index = stat(index, &st) == 0;
	if (have_index && s_read_index(ck, index, &map, err) < 0)
		goto fail;
	if (s_scan(ck, have_index, err) < 0)
		goto fail;
	if (ck->nshards == 0) {
		wsync_err_set(err, EX_NOINPUT, "%s: no shard: neither %s nor a *.safetensors file",
		    dir, S_INDEX);
		goto fail;
	}
	if (s_open_shards(ck, map, err) < 0 || s_check_names(ck, map, err) < 0)
		goto fail;
	json_decref(map);
	free(index);
	return ck;
fail:
	json_decref(map);
	free(index);
	wsync_ckpt_close(&ck);
	return NULL;
}

void
wsync_ckpt_close(wsync_ckpt_t **ckp)
{
	wsync_ckpt_t *ck = *ckp;

	if (ck == NULL)
		return;
	for (size_t i = 0; i < ck->nshards; i++) {
		if (ck->shards != NULL)
			wsync_file_close(&ck->shards[i]);
		if (ck->fds != NULL && ck->fds[i] >= 0)
			close(ck->fds[i]);
		free(ck->shard_names[i]);
	}
	free(ck->fds);
	for (size_t i = 0; i < ck->nfiles; i++) {
		free((char *)ck->files[i].name);
		if (ck->files[i].data != NULL)
			munmap((void *)ck->files[i].data, (size_t)ck->files[i].size);
	}
	free(ck->files);
	free(ck->shards);
	free(ck->shard_names);
	free(ck->entries);
	free(ck->dir);
	for (size_t i = 0; i < ck->nleft; i++)
		free(ck->left[i]);
	free(ck->left);
	free(ck->left_out);
	free(ck);
	*ckp = NULL;
}

const char *
wsync_ckpt_left_out(const wsync_ckpt_t *ck)
{
	return ck->left_out != NULL ? ck->left_out : "";
}

int
wsync_is_dir(const char *path)
{
	struct stat st;

	return strcmp(path, "-") != 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

size_t wsync_ckpt_count(const wsync_ckpt_t *ck) { return ck->nentries; }
size_t wsync_ckpt_file_count(const wsync_ckpt_t *ck) { return ck->nfiles; }
const wsync_ckpt_file_t *wsync_ckpt_file(const wsync_ckpt_t *ck, size_t i) { return &ck->files[i]; }

const wsync_tensor_t *
wsync_ckpt_tensor(const wsync_ckpt_t *ck, size_t i)
{
	return wsync_file_tensor(ck->shards[ck->entries[i].shard], ck->entries[i].tensor);
}

wsync_tree_t *
wsync_ckpt_tree(const wsync_ckpt_t *ck, const char *model, int whole, wsync_err_t *err)
{
	static const unsigned char empty[1];
	wsync_tree_t *tree = wsync_tree_new(model, err);

	if (tree == NULL)
		return NULL;
	/* Shards and small files are file mappings: their pages can go once written. */
	tree->release_sources = 1;
	/* Every shard's __metadata__; where two disagree, the first shard's value stays. */
	for (size_t s = ck->nshards; s-- > 0;)
		for (size_t i = 0; i < wsync_file_meta_count(ck->shards[s]); i++) {
			const wsync_meta_t *m = wsync_file_meta(ck->shards[s], i);
			if (wsync_tree_set_meta(tree, m->key, m->value, err) < 0)
				goto fail;
		}
	for (size_t i = 0; i < ck->nentries; i++) {
		const wsync_tensor_t *t = wsync_ckpt_tensor(ck, i);
		if ((whole || wsync_tree_add_split(tree, t->path, ".", t->dtype, t->ndim,
		    t->shape, t->data, t->nbytes, err) < 0) &&
		    wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim, t->shape, t->data,
		    t->nbytes, err) < 0) {
			s_prefix(err, ck->dir, ck->shard_names[ck->entries[i].shard]);
			goto fail;
		}
	}
	for (size_t i = 0; i < ck->nfiles; i++) {
		const wsync_ckpt_file_t *f = &ck->files[i];
		const char *keys[2] = { WSYNC_CKPT_FILES, f->name };
		uint64_t shape[1] = { f->size };
		if (wsync_tree_add_keys(tree, keys, 2, WSYNC_U8, 1, shape,
		    f->data != NULL ? f->data : empty, f->size, err) < 0) {
			s_prefix(err, ck->dir, f->name);
			goto fail;
		}
	}
	return tree;
fail:
	wsync_tree_destroy(&tree);
	return NULL;
}

/* Closes the checkpoint a source borrowed its data from. */
static void
s_ckpt_release(void *arg)
{
	wsync_ckpt_t *ck = arg;

	wsync_ckpt_close(&ck);
}

wsync_source_t *
wsync_ckpt_source(const char *dir, const char *model, const wsync_ckpt_in_t *in,
    wsync_err_t *err)
{
	wsync_ckpt_t *ck = wsync_ckpt_open_in(dir, in, err);
	wsync_tree_t *tree;
	wsync_source_t *src;

	if (ck == NULL)
		return NULL;
	/* Shards and small files are file mappings: their pages can go once written. */
	if ((tree = wsync_ckpt_tree(ck, model, 0, err)) == NULL ||
	    (src = wsync_source_of_tree(tree, 1, err)) == NULL) {
		wsync_ckpt_close(&ck);
		return NULL;
	}
	wsync_source_hold(src, s_ckpt_release, ck);
	for (size_t i = 0; i < ck->nshards; i++)
		if (wsync_source_read_at(src, wsync_file_bytes(ck->shards[i]),
		    wsync_file_size(ck->shards[i]), ck->fds[i], err) < 0) {
			wsync_source_destroy(&src);
			return NULL;
		}
	return src;
}
