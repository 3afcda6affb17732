/*
 * store_int.h - the hub's version store: immutable, numbered .wsync files.
 *
 * Layout (see wsync-serve(1)):
 *   STORE/MODEL/VERSION.wsync   a committed version, stamped with its number
 *   STORE/MODEL/VERSION.json    its sidecar: {"pusher", "time", "targets"}
 *   STORE/.uploads/             uploads in progress; emptied when the store opens
 *   STORE/.journal              numbers given, the last group key committed of each
 *                               model (a version in parts), the renames of the last commit
 * Directories are 0700, files 0600, a committed version 0444 (read-only: a
 * client's hard link is this very file; the directory keeps others out).
 * Writing the journal is a commit's commit point: opening the store finishes
 * the renames it records, then empties .uploads, then verifies every
 * version's bytes (wsync-serve(1), Crashes). A committed file is never
 * written again while anyone can see it;
 * retiring a version unlinks it, so a reader holding a descriptor or a link
 * keeps its bytes. With spares (wsync-serve --recycle), a retired file is kept
 * in .uploads instead and recycled into a slot (an upload written in place in
 * the store) once nothing else links it and no reader holds a shared flock(2)
 * lease on it (wsync(7), LEASES).
 *
 * The store's files, one concern each, are listed in store_impl_int.h.
 */
#ifndef WSYNC_STORE_INT_H
#define WSYNC_STORE_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "log_int.h"
#include "wsync.h"

#define WSYNC_KEEP_DEFAULT 3
#define WSYNC_STORE_MAX_SPARES 64

/*
 * A version's file mapped read-only. ZeroMQ's I/O thread holds a reference for
 * every message sent from it, the version one more; the last release unmaps.
 */
typedef struct wsync_map wsync_map_t;

/* One retained version of a model. */
typedef struct wsync_version {
	uint64_t version;
	uint64_t size;                  /* bytes in the file */
	uint64_t content;               /* content id */
	double time;                    /* unix seconds of the commit */
	/*
	 * The file's modification time (ns since the epoch) when this hub verified
	 * it, at its commit or when the store opened; 0 when not verified here. A client that links the file and finds it
	 * unchanged need not hash it again (wsync(7), TRANSFER).
	 */
	uint64_t mtime_ns;
	char *pusher;                   /* who pushed it; "" when unknown */
	char **targets;                 /* the only workers who see it; NULL: everyone */
	size_t ntargets;
	int fd;                         /* read-only, for serving byte ranges */
	wsync_map_t *map;               /* made on the first get; NULL before */
} wsync_version_t;

/* The bytes of v, mapped on first use; NULL with err when it cannot be mapped. */
const unsigned char *wsync_version_bytes(wsync_version_t *v, wsync_err_t *err);
/*
 * Wraps bytes [off, off + len) of v's mapping as a message without copying;
 * the mapping lives until the message is sent and closed.
 */
int wsync_version_msg(wsync_version_t *v, uint64_t off, uint64_t len, zmq_msg_t *msg,
    wsync_err_t *err);

/* One model: its retained versions, oldest first. */
typedef struct wsync_model {
	char id[WSYNC_MAX_MODEL + 1];
	uint64_t next;                  /* the number the next commit gets; never reused */
	wsync_version_t *versions;
	size_t nversions, cap;
} wsync_model_t;

typedef struct wsync_store wsync_store_t;

/* The store's identity (32 hex digits, kept in STORE/.id); borrowed. */
const char *wsync_store_id(const wsync_store_t *s);

/*
 * Opens (creating it 0700 when missing) the store at dir, or RUNDIR/store when
 * dir is NULL: finishes the commit the journal records, empties
 * STORE/.uploads, then reads every model's versions, checking that each
 * parses, verifies and carries the number of its name. What does not
 * fit is skipped and logged, never deleted. Retention with keep (>= 1) runs
 * once. log may be NULL. Caller closes with wsync_store_close.
 */
wsync_store_t *wsync_store_open(const char *dir, unsigned keep, wsync_log_fn log,
    void *log_arg, wsync_err_t *err);
/* Closes every version's descriptor, frees the store and sets *store to NULL. */
void wsync_store_close(wsync_store_t **store);
/*
 * Closes the files of the versions retired since the last call: the last
 * close of a large file frees its pages, which a commit's reply need not
 * wait for. The hub calls it after each request.
 */
void wsync_store_bury(wsync_store_t *store);
/* The store's directory; borrowed. */
const char *wsync_store_dir(const wsync_store_t *store);
/*
 * Where version of model lives in the store at dir: DIR/MODEL/VERSION.wsync,
 * or with sidecar its DIR/MODEL/VERSION.json; the one place that spells the
 * layout. -1 with errno ENAMETOOLONG when it does not fit in buf.
 */
int wsync_store_version_path(char *buf, size_t size, const char *dir, const char *model,
    uint64_t version, int sidecar);
/* Number of models. */
size_t wsync_store_count(const wsync_store_t *store);
/* Model i, sorted by id; borrowed until the next commit or close. */
const wsync_model_t *wsync_store_model(const wsync_store_t *store, size_t i);
/* The model with this id; NULL when the store has none. Borrowed as above. */
const wsync_model_t *wsync_store_find(const wsync_store_t *store, const char *model);

/* The retained version number version of m; NULL when absent or retired. */
const wsync_version_t *wsync_model_version(const wsync_model_t *m, uint64_t version);
/* The newest version of m, whoever it targets; NULL when m has none. */
const wsync_version_t *wsync_model_newest(const wsync_model_t *m);
/*
 * The newest version of m that worker sees: an untargeted one or one that
 * names worker. worker NULL sees only untargeted versions. NULL when none.
 */
const wsync_version_t *wsync_model_head(const wsync_model_t *m, const char *worker);
/* 1 when worker (may be NULL) sees version v. */
int wsync_version_visible(const wsync_version_t *v, const char *worker);

/*
 * Retention, a pure function over versions sorted oldest first: sets
 * retire[i] to 1 for each version a store keeping keep versions drops, 0 for
 * the others. The newest version and the newest untargeted one (what a
 * worker no push named sees) are always kept. Returns how many retire.
 */
size_t wsync_store_retention(const wsync_version_t *versions, size_t n, unsigned keep,
    unsigned char *retire);
/*
 * Parses a store file name, "VERSION.wsync" or "VERSION.json" (decimal,
 * non-zero, no leading zero): 0 with *version and *sidecar set, -1 otherwise.
 */
int wsync_store_parse_name(const char *name, uint64_t *version, int *sidecar);

/* A file being uploaded: a temporary file in STORE/.uploads. */
typedef struct wsync_store_temp {
	char model[WSYNC_MAX_MODEL + 1];
	char path[PATH_MAX];
	int fd;                         /* read-write; -1 when closed */
	/*
	 * Every tensor hash and the content id were checked as the file was
	 * written (a delta applied, wsync_delta_apply): a commit does not verify
	 * it again.
	 */
	int verified;
} wsync_store_temp_t;

/* Creates an empty temporary file for an upload of model (a checked id). */
int wsync_store_temp_open(wsync_store_t *store, const char *model, wsync_store_temp_t *t,
    wsync_err_t *err);
/*
 * Opens a slot's file: as wsync_store_temp_open, sized to size bytes, and
 * recycled from a spare (a retired version's file, whose pages exist) when one
 * is free: 1 then, 0 for a new file. The file is exclusively flocked until
 * its commit.
 */
int wsync_store_slot_open(wsync_store_t *store, const char *model, uint64_t size,
    wsync_store_temp_t *t, wsync_err_t *err);
/* Keeps up to n retired files as spares (0, the default: retiring unlinks). */
void wsync_store_set_spares(wsync_store_t *store, unsigned n);
/* Closes and unlinks a temporary file; nothing when already consumed. */
void wsync_store_temp_remove(wsync_store_temp_t *t);

/* What one committed file became. */
typedef struct wsync_committed {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	uint64_t size;
	uint64_t content;
	uint64_t mtime_ns;              /* as wsync_version_t's */
} wsync_committed_t;

/* Who pushed an upload, when, and to whom it is announced. */
typedef struct wsync_commit_info {
	const char *pusher;             /* "" when unknown */
	double time;
	const char *const *targets;     /* NULL: every worker */
	size_t ntargets;
	int trust;                      /* take the files' declared hashes unverified */
	/*
	 * NULL: each file gets its model's next number. Else the number of each
	 * file, given (a relay keeps its upstream's): one not above the last its
	 * model had is refused (65).
	 */
	const uint64_t *versions;
	/* A version in parts (n is 1): its group key, kept by the journal; 0: none. */
	uint64_t group;
} wsync_commit_info_t;

/*
 * Commits n uploaded files together. Each must parse as .wsync, verify (every
 * tensor hash, unless info->trust) and have a fixed-width version field; the first that fails
 * fails the commit (code 65, the message naming the model and the tensor) and
 * nothing becomes visible. Otherwise each gets the next version of its model,
 * stamped in place, synced, its sidecar written; the journal is written (the
 * commit point) and each is renamed into the store; then retention runs. On success the temporary files are consumed and
 * out[i] (n entries, caller's) says what file i became; on failure the caller
 * still owns them, unless a rename failed after the commit point: then they
 * are left for the next open to finish, and marked consumed.
 */
int wsync_store_commit(wsync_store_t *store, wsync_store_temp_t *files, size_t n,
    const wsync_commit_info_t *info, wsync_committed_t *out, wsync_err_t *err);
/* The last group key committed of model (0: none), across restarts: the journal's. */
uint64_t wsync_store_group_last(const wsync_store_t *store, const char *model);

#endif
