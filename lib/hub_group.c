/*
 * hub_group.c - versions in parts: the parts of one group held until all N
 * are whole and verified, then copied into one version and committed once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <sys/mman.h>
#include <unistd.h>

#include "delta_int.h"
#include "file_int.h"
#include "io_int.h"
#include "hub_int.h"
#include "tree_int.h"

#define HUB_GROUP_MODELS 256            /* models whose last group's parts are kept as bases */

/* One part of a group: its attempt (an upload), then, whole, its file and the commit to answer. */
struct hub_part {
	struct hub_upload up;           /* id 0: no attempt */
	int whole;                      /* committed whole and verified: waiting for the others */
	/*
	 * Whole as a delta (up.files[0]) not yet rebuilt: file is its head as
	 * the delta describes it, data holes, rebuilt with the union.
	 */
	int deferred;
	wsync_file_t *file;             /* whole: its tensors and meta, mapped */
	unsigned char ident[256];       /* whole: the commit to answer; identlen 0: answered */
	size_t identlen;
	void *router;
	uint64_t req;
	int64_t begun, deadline;        /* its begin, and its pusher's bound from there */
};

/* A group: a version of model in nparts parts, named by key (0: a free entry). */
struct hub_group {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t key;
	uint32_t nparts;
	struct hub_part *parts;
	int64_t deadline;               /* the longest bound of its pushers */
	int code;                       /* refused: every part of it is refused with why */
	char why[WSYNC_MAX_REASON];
};

struct hub_groups {
	struct hub_group groups[HUB_GROUPS];
	struct hub_group_last {
		char model[WSYNC_MAX_MODEL + 1];
		uint64_t version;       /* the version it became */
		uint64_t *contents;     /* its parts' content ids, a rank's next base */
		uint32_t nparts;
	} last[HUB_GROUP_MODELS];       /* the last group committed of each model, since the start */
	size_t nlast;
};

/* The entry of model's last group, made (the oldest forgotten when full). */
static struct hub_group_last *
s_last(struct hub_groups *gs, const char *model)
{
	struct hub_group_last *l;

	for (size_t i = 0; i < gs->nlast; i++)
		if (strcmp(gs->last[i].model, model) == 0)
			return &gs->last[i];
	if (gs->nlast == HUB_GROUP_MODELS) {
		free(gs->last[0].contents);
		memmove(&gs->last[0], &gs->last[1], (HUB_GROUP_MODELS - 1) * sizeof(gs->last[0]));
		gs->nlast--;
	}
	l = &gs->last[gs->nlast++];
	snprintf(l->model, sizeof(l->model), "%s", model);
	l->contents = NULL;
	l->nparts = 0;
	return l;
}

uint64_t
hub_group_base(const wsync_hub_t *h, const char *model, uint64_t content)
{
	const struct hub_groups *gs = h->groups;

	for (size_t i = 0; gs != NULL && i < gs->nlast; i++)
		for (uint32_t j = 0; strcmp(gs->last[i].model, model) == 0 &&
		    j < gs->last[i].nparts; j++)
			if (gs->last[i].contents[j] == content)
				return gs->last[i].version;
	return 0;
}

/* Remembers group g, committed as version, and its parts' content ids. */
static void
s_remember(wsync_hub_t *h, const struct hub_group *g, uint64_t version)
{
	struct hub_group_last *l = s_last(h->groups, g->model);
	uint64_t *contents = calloc(g->nparts, sizeof(*contents));

	free(l->contents);
	l->contents = contents;
	l->nparts = contents != NULL ? g->nparts : 0;
	l->version = version;
	for (uint32_t q = 0; contents != NULL && q < g->nparts; q++)
		contents[q] = wsync_file_content_id(g->parts[q].file);
}

/*
 * When every part of g came as a delta from one version, their deltas make
 * the delta from it to version, the group's: kept, without a diff pass.
 */
static void
s_adopt_deltas(wsync_hub_t *h, const struct hub_group *g, uint64_t version)
{
	int *fds = calloc(g->nparts, sizeof(*fds));
	uint64_t base = g->parts[0].up.files[0].base;

	for (uint32_t q = 0; fds != NULL && q < g->nparts; q++) {
		const struct hub_ufile *uf = &g->parts[q].up.files[0];
		if (base == 0 || uf->base != base || uf->delta.fd < 0) {
			free(fds);
			return;
		}
		fds[q] = uf->delta.fd;
	}
	if (fds != NULL)
		hub_delta_adopt(h, g->model, base, version, fds, g->nparts);
	free(fds);
}

size_t
hub_groups_open(const wsync_hub_t *h)
{
	size_t n = 0;

	for (int i = 0; h->groups != NULL && i < HUB_GROUPS; i++)
		n += h->groups->groups[i].key != 0;
	return n;
}

size_t
hub_groups_sending(const wsync_hub_t *h)
{
	size_t n = 0;

	for (int i = 0; h->groups != NULL && i < HUB_GROUPS; i++) {
		const struct hub_group *g = &h->groups->groups[i];
		for (uint32_t j = 0; g->key != 0 && j < g->nparts; j++)
			n += g->parts[j].up.id != 0 && !g->parts[j].whole;
	}
	return n;
}

/* Answers part p's commit with e (freed), once. */
static void
s_answer(wsync_hub_t *h, struct hub_part *p, wsync_enc_t *e)
{
	if (p->identlen == 0) {
		wsync_enc_free(e);
		return;
	}
	hub_send(h, p->router, p->ident, p->identlen, e);
	p->identlen = 0;
}

/* Refuses part p's commit with code and why. */
static void
s_refuse(wsync_hub_t *h, struct hub_part *p, int code, const char *why)
{
	wsync_err_t err;
	wsync_enc_t e;

	wsync_err_set(&err, code, "%s", why);
	hub_refusal(&e, p->req, &err, 0);
	s_answer(h, p, &e);
}

/* Ends part p's attempt: its upload's files removed, its file closed. */
static void
s_part_clear(struct hub_part *p)
{
	wsync_file_close(&p->file);
	hub_upload_end(&p->up);
	p->whole = 0;
	p->deferred = 0;
	p->identlen = 0;
}

/* Frees group g's entry, every part refused with why first (code 0: answered already). */
static void
s_group_end(wsync_hub_t *h, struct hub_group *g, int code, const char *why)
{
	for (uint32_t i = 0; i < g->nparts; i++) {
		if (code != 0)
			s_refuse(h, &g->parts[i], code, why);
		s_part_clear(&g->parts[i]);
	}
	free(g->parts);
	memset(g, 0, sizeof(*g));
}

/*
 * Refuses group g for good (code, why): the parts waiting are answered, every
 * attempt ends, and later parts of it are refused the same until its deadline.
 */
static void
s_group_fail(wsync_hub_t *h, struct hub_group *g, int code, const char *why)
{
	char quoted[4 * WSYNC_MAX_REASON + 8];

	hub_log(h, "event=refuse model=%s group=%" PRIu64 " reason=\"%s\"", g->model, g->key,
	    wsync_log_quote(why, quoted, sizeof(quoted)));
	for (uint32_t i = 0; i < g->nparts; i++) {
		s_refuse(h, &g->parts[i], code, why);
		s_part_clear(&g->parts[i]);
	}
	g->code = code;
	snprintf(g->why, sizeof(g->why), "%s", why);
}

/* The parts of g not whole, "1,3", into buf; how many. */
static size_t
s_missing(const struct hub_group *g, char *buf, size_t size)
{
	size_t n = 0, at = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < g->nparts; i++)
		if (!g->parts[i].whole) {
			at += (size_t)snprintf(buf + at, at < size ? size - at : 0, "%s%" PRIu32,
			    n ? "," : "", i);
			n++;
		}
	return n;
}

/* The group of model named key, made when new (NULL with err when the hub has no room). */
static struct hub_group *
s_group_get(wsync_hub_t *h, const char *model, uint64_t key, uint32_t nparts, wsync_err_t *err)
{
	struct hub_groups *gs = h->groups;
	struct hub_group *g = NULL;
	size_t busy = hub_groups_open(h);

	for (int i = 0; i < HUB_GROUPS; i++) {
		struct hub_group *o = &gs->groups[i];
		if (o->key == key && strcmp(o->model, model) == 0)
			return o;
		if (o->key == 0 && g == NULL)
			g = o;
	}
	for (int i = 0; i < HUB_UPLOADS; i++)
		busy += h->uploads[i].id != 0;
	/* A group counts as one upload, whatever its number of parts. */
	if (g == NULL || busy >= HUB_UPLOADS) {
		wsync_err_set(err, EX_UNAVAILABLE, "the hub has %d uploads and groups in flight "
		    "already; try again later", HUB_UPLOADS);
		return NULL;
	}
	if ((g->parts = calloc(nparts, sizeof(*g->parts))) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		return NULL;
	}
	snprintf(g->model, sizeof(g->model), "%s", model);
	g->key = key;
	g->nparts = nparts;
	return g;
}

/* The part's own checks on a begin: one file, sent, announced to everyone. */
static int
s_begin_check(const struct hub_req *r, char *model, wsync_err_t *err)
{
	const msgpack_object *files = wsync_msg_get(&r->msg, "files");
	int local;

	if (files == NULL)
		return hub_missing("files", err);
	if (files->type != MSGPACK_OBJECT_ARRAY || files->via.array.size != 1 ||
	    wsync_obj_str(wsync_obj_get(&files->via.array.ptr[0], "model"), model,
	    WSYNC_MAX_MODEL + 1) < 0 || wsync_model_id_check(model) < 0)
		return wsync_err_set(err, EX_USAGE, "a part is one file of one model "
		    "(field \"files\": [{model, size}])");
	if (hub_bool(r, "local", &local, err) < 0)
		return -1;
	if (local || wsync_msg_get(&r->msg, "workers") != NULL)
		return wsync_err_set(err, EX_USAGE, "model %s: a part is sent over the socket and "
		    "announced to every worker (no \"local\", no \"workers\")", model);
	return 0;
}

int
hub_group_begin(wsync_hub_t *h, struct hub_req *r, struct hub_upload **up, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t key, part, nparts, timeout = HUB_UPLOAD_IDLE_MS, last;
	int64_t now = wsync_now_ms();
	struct hub_group *g;
	struct hub_part *p;

	*up = NULL;
	if (wsync_msg_get(&r->msg, "group") == NULL)
		return 0;
	if (hub_u64(r, "group", 1, &key, err) < 0 || hub_u64(r, "part", 1, &part, err) < 0 ||
	    hub_u64(r, "parts", 1, &nparts, err) < 0 ||
	    hub_u64(r, "timeout_ms", 0, &timeout, err) < 0 || s_begin_check(r, model, err) < 0)
		return -1;
	if (nparts == 0 || nparts > HUB_GROUP_PARTS || part >= nparts)
		return wsync_err_set(err, EX_USAGE, "model %s group %" PRIu64 ": part %" PRIu64 " of "
		    "%" PRIu64 ": a group has 1 to %d parts, numbered from 0", model, key, part,
		    nparts, HUB_GROUP_PARTS);
	if (timeout > HUB_MAX_WAIT_MS)
		timeout = HUB_MAX_WAIT_MS;
	if (h->groups == NULL && (h->groups = calloc(1, sizeof(*h->groups))) == NULL)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	/* The store's journal keeps the last key: a restarted hub refuses the same. */
	last = wsync_store_group_last(h->store, model);
	if (last != 0 && key <= last)
		return wsync_err_set(err, EX_DATAERR, "model %s group %" PRIu64 " (part %" PRIu64
		    " of %" PRIu64 ") is not above the last group committed, %" PRIu64, model, key,
		    part, nparts, last);
	if (key == 0)
		return wsync_err_set(err, EX_DATAERR, "model %s group 0 (part %" PRIu64 " of %"
		    PRIu64 "): a group key is 1 or more", model, part, nparts);
	if ((g = s_group_get(h, model, key, (uint32_t)nparts, err)) == NULL)
		return -1;
	if (g->code != 0)
		return wsync_err_set(err, g->code, "%s", g->why);
	if (g->nparts != nparts) {
		uint32_t other = 0;
		while (other + 1 < g->nparts && g->parts[other].up.id == 0 && !g->parts[other].whole)
			other++;
		return wsync_err_set(err, EX_USAGE, "model %s group %" PRIu64 ": part %" PRIu64
		    " says %" PRIu64 " parts, part %" PRIu32 " said %" PRIu32, model, key, part,
		    nparts, other, g->nparts);
	}
	p = &g->parts[part];
	/* A live attempt is refused; one gone silent (its pusher lost) is replaced. */
	if (p->up.id != 0 && !p->whole && now - p->up.touched < HUB_PART_LIVE_MS)
		return wsync_err_set(err, EX_TEMPFAIL, "model %s group %" PRIu64 ": part %" PRIu64
		    " is being pushed already (upload %" PRIu64 ", heard from %" PRId64 " ms ago); "
		    "a part silent for %d ms may be pushed again", model, key, part, p->up.id,
		    now - p->up.touched, HUB_PART_LIVE_MS);
	if (p->up.id != 0) {
		hub_log(h, "event=replace model=%s group=%" PRIu64 " part=%" PRIu64 " upload=%"
		    PRIu64, model, key, part, p->up.id);
		s_refuse(h, p, EX_TEMPFAIL, "this part was pushed again: the later push replaces it");
		s_part_clear(p);
	}
	p->begun = now;
	p->deadline = now + (int64_t)timeout;
	if (p->deadline > g->deadline)
		g->deadline = p->deadline;
	*up = &p->up;
	return 0;
}

/* The group and part whose attempt is u; NULL when u is no part's. */
static struct hub_group *
s_group_of(wsync_hub_t *h, const struct hub_upload *u, struct hub_part **part)
{
	for (int i = 0; h->groups != NULL && i < HUB_GROUPS; i++) {
		struct hub_group *g = &h->groups->groups[i];
		for (uint32_t j = 0; g->key != 0 && j < g->nparts; j++)
			if (&g->parts[j].up == u) {
				*part = &g->parts[j];
				return g;
			}
	}
	return NULL;
}

struct hub_upload *
hub_group_upload(wsync_hub_t *h, uint64_t id)
{
	for (int i = 0; id != 0 && h->groups != NULL && i < HUB_GROUPS; i++) {
		struct hub_group *g = &h->groups->groups[i];
		for (uint32_t j = 0; g->key != 0 && j < g->nparts; j++)
			if (g->parts[j].up.id == id && !g->parts[j].whole)
				return &g->parts[j].up;
	}
	return NULL;
}

/*
 * Part r (file f) against the whole parts of g: no tensor in two parts, no
 * meta key with two values. 0, or -1 with why.
 */
static int
s_part_fits(const struct hub_group *g, uint32_t r, const wsync_file_t *f, char *why,
    size_t size)
{
	for (uint32_t q = 0; q < g->nparts; q++) {
		const wsync_file_t *o = g->parts[q].file;
		if (q == r || o == NULL)
			continue;
		for (size_t i = 0; i < wsync_file_count(f); i++) {
			const char *path = wsync_file_tensor(f, i)->path;
			if (wsync_file_find(o, path) != NULL) {
				snprintf(why, size, "model %s group %" PRIu64 ": parts %" PRIu32 " and %"
				    PRIu32 " both hold tensor \"%s\"; nothing committed", g->model,
				    g->key, q < r ? q : r, q < r ? r : q, path);
				return -1;
			}
		}
		for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
			const wsync_meta_t *m = wsync_file_meta(f, i);
			for (size_t j = 0; j < wsync_file_meta_count(o); j++) {
				const wsync_meta_t *n = wsync_file_meta(o, j);
				if (strcmp(m->key, n->key) != 0 || strcmp(m->value, n->value) == 0)
					continue;
				snprintf(why, size, "model %s group %" PRIu64 ": parts %" PRIu32 " and %"
				    PRIu32 " give meta \"%s\" two values; nothing committed", g->model,
				    g->key, q < r ? q : r, q < r ? r : q, m->key);
				return -1;
			}
		}
	}
	return 0;
}

/* One tensor of a part into the union, split as a pushed file's is (source.c). */
static int
s_union_add(wsync_tree_t *tree, const wsync_tensor_t *t, wsync_err_t *err)
{
	if (wsync_tree_add_split(tree, t->path, ".", t->dtype, t->ndim, t->shape, t->data,
	    t->nbytes, err) < 0 && wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim,
	    t->shape, t->data, t->nbytes, err) < 0)
		return -1;
	/* The part was verified whole: its hash is the tensor's, no second read to hash it. */
	wsync_tree_known_hash(tree, t->hash);
	return 0;
}

/*
 * The union of g's whole parts as a tree: every part's tensors, each with its
 * part's hash, and every part's meta. NULL with err.
 */
static wsync_tree_t *
s_union_tree(const struct hub_group *g, wsync_err_t *err)
{
	wsync_tree_t *tree = wsync_tree_new(g->model, err);

	for (uint32_t q = 0; tree != NULL && q < g->nparts; q++) {
		const wsync_file_t *f = g->parts[q].file;
		for (size_t i = 0; i < wsync_file_count(f); i++)
			if (s_union_add(tree, wsync_file_tensor(f, i), err) < 0)
				goto fail;
		for (size_t i = 0; i < wsync_file_meta_count(f); i++)
			if (wsync_tree_set_meta(tree, wsync_file_meta(f, i)->key,
			    wsync_file_meta(f, i)->value, err) < 0)
				goto fail;
	}
	return tree;
fail:
	wsync_tree_destroy(&tree);
	return NULL;
}

/*
 * Writes the union of g's whole parts into an upload file t, the meta of
 * every part. The parts are file mappings, each verified whole: each
 * tensor keeps its part's hash and is written a stride at a time, each
 * stride's pages let go once done
 * (release_sources), so the hub's memory stays a stride whatever the model's
 * size, where a mapped output filled in one pass holds every page of the
 * parts and of the union until the end (8 GiB resident for a 4 GiB model).
 */
static int
s_union_write(wsync_hub_t *h, const struct hub_group *g, wsync_store_temp_t *t,
    wsync_err_t *err)
{
	wsync_tree_t *tree = s_union_tree(g, err);
	uint64_t size;
	int rc = -1;

	if (tree == NULL)
		return -1;
	tree->release_sources = 1;
	/*
	 * Into a spare's existing pages when one is free (--recycle): a new file's
	 * fresh pages cost more than the copy (1 GiB of two parts: 1.4-3.0 s
	 * into a new file on tmpfs, one thread).
	 */
	if (wsync_tree_size(tree, &size, err) < 0 ||
	    wsync_store_slot_open(h->store, g->model, size, t, err) < 0 ||
	    wsync_tree_write_fd(tree, t->fd, t->path, err) < 0)
		goto done;
	/* The hashes of parts each verified whole, of the bytes written: the commit trusts them. */
	t->verified = 1;
	rc = 0;
done:
	wsync_tree_destroy(&tree);
	return rc;
}

/* Whether every part of g is deferred, each a delta from the same version. */
static int
s_one_base(const struct hub_group *g)
{
	for (uint32_t q = 0; q < g->nparts; q++)
		if (!g->parts[q].deferred || g->parts[q].up.files[0].base !=
		    g->parts[0].up.files[0].base)
			return 0;
	return 1;
}

/*
 * The union's skeleton, every hash in it (its parts'), into a file of its
 * size whose data is holes: the head the parts' deltas are joined into.
 * The descriptor, or -1 with err.
 */
static int
s_union_skeleton(wsync_tree_t *tree, uint64_t size, wsync_err_t *err)
{
	int fd = memfd_create("wsync-union", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		wsync_err_set(err, EX_OSERR, "model %s: the union's skeleton: %s", tree->model,
		    strerror(errno));
		goto fail;
	}
	if (wsync_tree_write_skeleton(tree, fd, err) < 0)
		goto fail;
	for (size_t i = 0; i < tree->n; i++)
		if (wsync_write_be64_at(fd, tree->t[i].hash, tree->t[i].hash_at) < 0) {
			wsync_err_set(err, EX_IOERR, "model %s: the union's skeleton: %s",
			    tree->model, strerror(errno));
			goto fail;
		}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/*
 * Every part of g came as a delta from one version V: their deltas, joined
 * as the union's delta from V (no tensor decoded), rebuild the union into t
 * in one pass, each tensor and the content id checked, where rebuilding each
 * part and then copying them into the union took two; on *threads threads, a
 * part's at least (its rank's parallelism kept). -1 with err: some
 * delta does not rebuild its part (which one, s_parts_rebuild tells).
 */
static int
s_union_apply(wsync_hub_t *h, const struct hub_group *g, wsync_store_temp_t *t,
    unsigned *threads, wsync_err_t *err)
{
	const struct hub_ufile *uf = &g->parts[0].up.files[0];
	char name[WSYNC_MAX_MODEL + 64];
	wsync_tree_t *tree = s_union_tree(g, err);
	wsync_store_temp_t joined = { .fd = -1 };
	wsync_delta_dest_t dest;
	int *fds = calloc(g->nparts, sizeof(*fds)), skel = -1, rc = -1;
	uint64_t size;

	snprintf(name, sizeof(name), "model %s group %" PRIu64 ": the parts' deltas from "
	    "version %" PRIu64, g->model, g->key, uf->base);
	if (fds == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	for (uint32_t q = 0; q < g->nparts; q++)
		fds[q] = g->parts[q].up.files[0].delta.fd;
	if (tree == NULL || wsync_tree_size(tree, &size, err) < 0 ||
	    (skel = s_union_skeleton(tree, size, err)) < 0 ||
	    wsync_store_temp_open(h->store, g->model, &joined, err) < 0 ||
	    wsync_delta_rebase(fds, g->nparts, uf->base_fd, uf->base, skel, joined.fd, name,
	    NULL, err) < 0 || wsync_store_slot_open(h->store, g->model, size, t, err) < 0)
		goto done;
	dest = (wsync_delta_dest_t){ .fd = t->fd, .path = t->path, .kept = h->kept };
	if (wsync_delta_apply_parts(uf->base_fd, joined.fd, &dest, name, g->nparts, threads,
	    err) < 0)
		goto done;
	t->verified = 1;
	rc = 0;
done:
	wsync_store_temp_remove(&joined);
	if (skel >= 0)
		close(skel);
	free(fds);
	wsync_tree_destroy(&tree);
	return rc;
}

/*
 * Rebuilds each deferred part of g on its own, as a part that came whole is:
 * one whose delta does not rebuild it is refused (its rank pushes it whole)
 * and no longer whole. One whose pusher was answered already (its bound ran
 * out) would never come again: the group fails then. Whether every part is
 * whole after (0 too when the group failed).
 */
static int
s_parts_rebuild(wsync_hub_t *h, struct hub_group *g)
{
	char why[WSYNC_MAX_REASON] = "";
	int all = 1;

	for (uint32_t q = 0; q < g->nparts; q++) {
		struct hub_part *p = &g->parts[q];
		char name[WSYNC_MAX_MODEL + 64];
		wsync_err_t err;
		if (!p->deferred)
			continue;
		snprintf(name, sizeof(name), "model \"%s\" group %" PRIu64 " part %" PRIu32,
		    g->model, g->key, q);
		wsync_file_close(&p->file);
		p->deferred = 0;
		if (hub_pushdelta_apply(h, &p->up, 0, &err) == 0 &&
		    (p->file = wsync_file_open_fd(p->up.temps[0].fd, name, &err)) != NULL)
			continue;
		if (p->identlen == 0 && why[0] == '\0')
			snprintf(why, sizeof(why), "model %s group %" PRIu64 ": part %" PRIu32 " did "
			    "not rebuild once its pusher had gone (%.*s); nothing committed", g->model,
			    g->key, q, WSYNC_MAX_REASON / 2, err.msg);
		s_refuse(h, p, err.code, err.msg);
		s_part_clear(p);
		all = 0;
	}
	if (why[0] != '\0')
		s_group_fail(h, g, EX_DATAERR, why);
	return all;
}

/*
 * Whether g may still be rebuilt at once from its parts' deltas with a part
 * that is a delta from base (0: not a delta) besides those in: every part in
 * is a deferred delta from base.
 */
static int
s_may_defer(const struct hub_group *g, uint64_t base)
{
	if (base == 0)
		return 0;
	for (uint32_t q = 0; q < g->nparts; q++)
		if (g->parts[q].whole && (!g->parts[q].deferred ||
		    g->parts[q].up.files[0].base != base))
			return 0;
	return 1;
}

int
hub_group_defers(wsync_hub_t *h, const struct hub_upload *u)
{
	struct hub_part *p;
	const struct hub_group *g = s_group_of(h, u, &p);

	return g != NULL && s_may_defer(g, u->files[0].base);
}

/* Refuses group g for good: group last of its model, a newer one, committed while g was open. */
static void
s_stale(wsync_hub_t *h, struct hub_group *g, uint64_t last)
{
	char why[WSYNC_MAX_REASON];

	snprintf(why, sizeof(why), "model %s group %" PRIu64 " is not above the last group "
	    "committed, %" PRIu64 " (committed while it was open); nothing committed", g->model,
	    g->key, last);
	s_group_fail(h, g, EX_DATAERR, why);
}

/*
 * Group g committed: the open groups of its model with a lower key never
 * will, so their parts are refused now rather than when they complete.
 */
static void
s_older_fail(wsync_hub_t *h, const struct hub_group *g)
{
	for (int i = 0; i < HUB_GROUPS; i++) {
		struct hub_group *o = &h->groups->groups[i];
		if (o != g && o->key != 0 && o->key < g->key && o->code == 0 &&
		    strcmp(o->model, g->model) == 0)
			s_stale(h, o, g->key);
	}
}

/* Every part of g is whole: commits their union as one version and answers every part. */
static void
s_group_commit(wsync_hub_t *h, struct hub_group *g)
{
	wsync_store_temp_t t = { .fd = -1 };
	wsync_committed_t out;
	wsync_commit_info_t info = { .pusher = g->parts[0].up.pusher, .time = wsync_wall_time(),
	    .group = g->key };
	wsync_err_t err;
	int64_t start = wsync_now_ms();
	const char *how = "copy";
	uint64_t last = wsync_store_group_last(h->store, g->model);
	unsigned threads = 1;

	/* A newer group committed while this one was open: an older step never follows it. */
	if (last != 0 && g->key <= last) {
		s_stale(h, g, last);
		return;
	}
	/* Parts' deltas from one version: the union rebuilt from them at once. */
	if (s_one_base(g)) {
		if (s_union_apply(h, g, &t, &threads, &err) == 0) {
			how = "delta";
		} else {
			char quoted[4 * WSYNC_MAX_REASON + 8];
			hub_log(h, "event=union model=%s group=%" PRIu64 " reason=\"%s\" "
			    "then=\"each part rebuilt on its own\"", g->model, g->key,
			    wsync_log_quote(err.msg, quoted, sizeof(quoted)));
			wsync_store_temp_remove(&t);
			t = (wsync_store_temp_t){ .fd = -1 };
		}
	}
	if (t.fd < 0 && !s_parts_rebuild(h, g))
		return;
	if ((t.fd < 0 && s_union_write(h, g, &t, &err) < 0) ||
	    wsync_store_commit(h->store, &t, 1, &info, &out, &err) < 0) {
		wsync_store_temp_remove(&t);
		s_group_fail(h, g, err.code, err.msg);
		return;
	}
	h->counts.commits++;
	s_remember(h, g, out.version);
	s_adopt_deltas(h, g, out.version);
	hub_log(h, "event=commit model=%s version=%" PRIu64 " size=%" PRIu64 " content=%016" PRIx64
	    " pusher=%s group=%" PRIu64 " parts=%" PRIu32 " union=%s union_threads=%u"
	    " union_ms=%" PRId64, out.model, out.version, out.size, out.content,
	    info.pusher[0] ? info.pusher : "-", g->key, g->nparts, how, threads,
	    wsync_now_ms() - start);
	hub_announce(h, &out, &t, 1, NULL, 0);
	hub_waits_check(h, out.model);
	for (uint32_t i = 0; i < g->nparts; i++) {
		wsync_enc_t e;
		hub_ok(&e, g->parts[i].req, 1);
		hub_pack_versions(&e, &out, 1);
		s_answer(h, &g->parts[i], &e);
	}
	s_older_fail(h, g);
	s_group_end(h, g, 0, NULL);
}

int
hub_group_commit(wsync_hub_t *h, struct hub_req *r, struct hub_upload *u, wsync_err_t *err)
{
	char name[WSYNC_MAX_MODEL + 64], why[WSYNC_MAX_REASON], missing[256];
	struct hub_part *p;
	struct hub_group *g = s_group_of(h, u, &p);
	uint32_t rank;
	wsync_file_t *f;

	if (g == NULL)
		return 1;
	rank = (uint32_t)(p - g->parts);
	if (wsync_msg_get(&r->msg, "mode") != NULL || wsync_msg_get(&r->msg, "trust") != NULL)
		return wsync_err_set(err, EX_USAGE, "model %s group %" PRIu64 ": the commit of a part "
		    "neither waits nor trusts (wait for the version once the group committed)",
		    g->model, g->key);
	snprintf(name, sizeof(name), "model \"%s\" group %" PRIu64 " part %" PRIu32, g->model,
	    g->key, rank);
	/*
	 * A part that does not verify ends its attempt only: its rank may push it
	 * again. One sent as a delta is known by its head until the union is
	 * rebuilt (wsync_delta_head): its tensors, hashes and meta.
	 */
	if (u->files[0].base != 0 && !u->temps[0].verified) {
		if (hub_pushdelta_rebase(h, u, 0, err) < 0 ||
		    (f = wsync_delta_head(u->files[0].delta.fd, name, err)) == NULL) {
			hub_log(h, "event=abort upload=%" PRIu64 " model=%s reason=\"the delta did "
			    "not apply\"", u->id, g->model);
			hub_upload_end(u);
			return -1;
		}
		p->deferred = 1;
		/* Its file is made when it is rebuilt: none held open meanwhile. */
		wsync_store_temp_remove(&u->temps[0]);
	} else if ((f = wsync_file_open_fd(u->temps[0].fd, name, err)) == NULL ||
	    (!u->temps[0].verified && wsync_file_verify_fd(f, u->temps[0].fd, NULL, 0, err) < 0)) {
		wsync_file_close(&f);
		hub_upload_end(u);
		return -1;
	}
	if (s_part_fits(g, rank, f, why, sizeof(why)) < 0) {
		wsync_file_close(&f);
		s_group_fail(h, g, EX_DATAERR, why);
		return wsync_err_set(err, EX_DATAERR, "%s", why);
	}
	p->file = f;
	p->whole = 1;
	p->router = h->router;
	memcpy(p->ident, r->ident, r->identlen);
	p->identlen = r->identlen;
	p->req = r->id;
	/*
	 * A part rebuilt at its commit (whole, or a delta from another base than
	 * the others'): the group is no longer rebuilt at once, and the parts
	 * waiting as deltas are rebuilt now, each alone, as they would have been
	 * at their commits. Failed meanwhile, every part was answered.
	 */
	if (!p->deferred && !s_parts_rebuild(h, g) && g->code != 0)
		return 0;
	s_missing(g, missing, sizeof(missing));
	hub_log(h, "event=part model=%s group=%" PRIu64 " part=%" PRIu32 "/%" PRIu32 " upload=%"
	    PRIu64 " missing=%s", g->model, g->key, rank, g->nparts, u->id,
	    missing[0] ? missing : "-");
	if (missing[0] == '\0')
		s_group_commit(h, g);
	return 0;
}

void
hub_groups_expire(wsync_hub_t *h, int64_t now)
{
	for (int i = 0; h->groups != NULL && i < HUB_GROUPS; i++) {
		struct hub_group *g = &h->groups->groups[i];
		char missing[256], why[WSYNC_MAX_REASON];
		size_t n;
		if (g->key == 0)
			continue;
		n = s_missing(g, missing, sizeof(missing));
		/* Each pusher hears of the parts missing when its own bound runs out. */
		for (uint32_t j = 0; g->code == 0 && j < g->nparts; j++) {
			struct hub_part *p = &g->parts[j];
			if (!p->whole || p->identlen == 0 || now < p->deadline)
				continue;
			snprintf(why, sizeof(why), "model %s group %" PRIu64 ": part%s %s of %" PRIu32
			    " missing after %.1f s; nothing committed", g->model, g->key,
			    n > 1 ? "s" : "", missing, g->nparts,
			    (double)(p->deadline - p->begun) / 1000.0);
			s_refuse(h, p, EX_TEMPFAIL, why);
		}
		if (now < g->deadline)
			continue;
		if (g->code == 0)
			hub_log(h, "event=drop model=%s group=%" PRIu64 " parts=%" PRIu32 " missing=%s "
			    "reason=\"timeout\"", g->model, g->key, g->nparts, missing);
		s_group_end(h, g, 0, NULL);
	}
}

void
hub_groups_stop(wsync_hub_t *h)
{
	for (int i = 0; h->groups != NULL && i < HUB_GROUPS; i++)
		if (h->groups->groups[i].key != 0)
			s_group_end(h, &h->groups->groups[i], EX_UNAVAILABLE, "the hub is stopping");
	for (size_t i = 0; h->groups != NULL && i < h->groups->nlast; i++)
		free(h->groups->last[i].contents);
	free(h->groups);
	h->groups = NULL;
}
