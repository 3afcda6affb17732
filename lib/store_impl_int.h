/* store_impl_int.h - what the store's files share: the handle's fields, their helpers. */
/*
 * Users of the store include store_int.h only.
 *
 *   store.c          opening (journal recovery, cleanup, scan, verification),
 *                    models and versions in memory, lookup, retention, closing
 *   store_journal.c  numbers given and the commit journal STORE/.journal
 *   store_commit.c   upload files, their checks, numbering, stamping, commit
 *   store_recycle.c  spares: retired files kept and recycled into slots
 *   store_sidecar.c  VERSION.json sidecars: pusher, time, targets
 *   store_map.c      a version's file mapped for sending without copies
 */
#ifndef WSYNC_STORE_IMPL_INT_H
#define WSYNC_STORE_IMPL_INT_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "store_int.h"

struct wsync_store {
	char *dir;
	char *uploads;                  /* STORE/.uploads */
	int lock;                       /* STORE/.lock, flocked while open */
	char id[33];                    /* STORE/.id: this store's random identity */
	unsigned keep;
	wsync_log_fn log;
	void *log_arg;
	wsync_model_t **models;         /* sorted by id */
	size_t nmodels, cap;
	json_t *numbers;                /* model id -> last number given (decimal string) */
	json_t *groups;                 /* model id -> last group key committed (decimal string) */
#ifdef WSYNC_TEST_HOOKS
	int crash_at;                   /* WSYNC_TEST_CRASH_AT: 0, or a commit step to die at */
	int step;                       /* commit steps taken so far */
#endif
	/* Spares: retired version files kept for reuse (STORE/.uploads/spare.N), oldest first. */
	unsigned spares;                /* the most kept; 0: retiring unlinks */
	char spare[WSYNC_STORE_MAX_SPARES][32];
	size_t nspare;
	uint64_t spare_seq;
	/* Retired versions whose files are closed by wsync_store_bury, after the reply. */
	wsync_version_t *graves;
	size_t ngraves, graves_cap;
};

/* Logs one key=value line through the store's logger. */
#define wsync_store_log(s, ...) wsync_logf((s)->log, (s)->log_arg, __VA_ARGS__)

/* One file of a commit, between its checks and its rename. */
struct wsync_staged {
	uint64_t version, size, content, offset;
	char final[PATH_MAX];           /* STORE/MODEL/VERSION.wsync */
	char sidecar[PATH_MAX];         /* STORE/MODEL/VERSION.json */
	char sidecar_tmp[PATH_MAX];     /* STORE/.uploads/sidecar.XXXXXX until renamed */
	int renamed;
};

/* ---- store.c: paths, directories, models in memory, retention ---- */

/* Formats a path into buf; -1 with errno ENAMETOOLONG when it does not fit. */
int wsync_store_path(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Creates directory path 0700 unless it is one already. */
int wsync_store_mkdir(const char *path, wsync_err_t *err);
/* fsyncs directory path, so that renames into it are durable; -1 with errno. */
int wsync_store_sync_dir(const char *path);
/* The model with this id, added (empty, next = 1) when missing; NULL when out of memory. */
wsync_model_t *wsync_store_model_add(wsync_store_t *s, const char *id);
/* Appends v (newer than every version of m); m owns it afterwards, even on failure. */
int wsync_model_append(wsync_model_t *m, wsync_version_t *v);
/* Closes v's descriptor, drops its mapping and frees what its sidecar gave it. */
void wsync_version_free(wsync_version_t *v);
/* Unlinks (or keeps as spares) and forgets the versions of m that retention drops. */
void wsync_store_retain(wsync_store_t *s, wsync_model_t *m);

/* ---- store_journal.c: numbers and the commit journal ---- */

/* The last number model was given (0: none), as the journal keeps it. */
uint64_t wsync_journal_last(const wsync_store_t *s, const char *model);
/* Records number as given to model when it is above what the journal has. */
int wsync_journal_last_set(wsync_store_t *s, const char *model, uint64_t number);
/* Records key as model's last group committed; -1 when out of memory. */
int wsync_journal_group_set(wsync_store_t *s, const char *model, uint64_t key);
/*
 * Writes STORE/.journal atomically: the numbers given so far and, when n > 0,
 * the renames of a commit (st[i] for files[i]). Once it is in place the
 * commit has happened.
 */
int wsync_journal_write(wsync_store_t *s, const wsync_store_temp_t *files, size_t n,
    const struct wsync_staged *st, wsync_err_t *err);
/* Reads STORE/.journal's numbers and finishes the renames of the commit it records. */
int wsync_journal_recover(wsync_store_t *s, wsync_err_t *err);

/* ---- store_commit.c: a file's model, the test-only crash hook ---- */

/*
 * Whether f is a version of model (its file names it): a version is served
 * only under its own model's name, since a signature vouches for it as that.
 */
int wsync_store_model_fits(const wsync_file_t *f, const char *model);

#ifdef WSYNC_TEST_HOOKS
/* Counts one step of a commit that writes to disk; dies at WSYNC_TEST_CRASH_AT's. */
void wsync_store_crash_point(wsync_store_t *s);
#else
#define wsync_store_crash_point(s) ((void)(s))
#endif

/* ---- store_recycle.c: spares ---- */

/*
 * Keeps the retired file of v, at path, as a spare instead of unlinking it.
 * -1 when it is not kept (the caller unlinks).
 */
int wsync_spare_keep(wsync_store_t *s, const wsync_version_t *v, const char *path);

/* ---- store_sidecar.c: VERSION.json ---- */

/* Writes a sidecar into a new synced temporary file in STORE/.uploads, named in tmp. */
int wsync_sidecar_write(const wsync_store_t *s, char *tmp, const wsync_commit_info_t *info,
    wsync_err_t *err);
/* Fills pusher, time and targets of v from its sidecar; -1 with why when it is unusable. */
int wsync_sidecar_read(const char *path, wsync_version_t *v, char *why, size_t whylen);
/* Gives v copies of pusher and targets (NULL stays NULL); -1 when out of memory. */
int wsync_sidecar_set(wsync_version_t *v, const char *pusher, const char *const *targets,
    size_t n);
/* Frees what a sidecar gave v. */
void wsync_sidecar_free(wsync_version_t *v);

/* ---- store_map.c: mappings ---- */

/* Drops v's own reference to its mapping (ZeroMQ's keep it until sent). */
void wsync_version_unmap(wsync_version_t *v);
/* 1 while ZeroMQ still sends from v's mapping. */
int wsync_version_sending(const wsync_version_t *v);

#endif
