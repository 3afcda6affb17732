/*
 * relay_int.h - a relay: the thread that follows its upstream (relay_follow.c),
 * the hub's side of it (hub_relay.c), and the messages between the two on
 * their inproc pair (relay_msg.c).
 */
#ifndef WSYNC_RELAY_INT_H
#define WSYNC_RELAY_INT_H

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "follow_int.h"
#include "log_int.h"
#include "net_int.h"
#include "proto_int.h"
#include "wsync.h"

/* What the relay has of one model: the newest version it committed, or that failed. */
struct relay_have {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	uint64_t failed;
};

/* The most versions of one upstream commit handed over together (an upload's files). */
#define RELAY_GROUP_MAX 64

/*
 * A version the thread fetched and did not hand over yet: one of a round's,
 * handed over with the others at its end, or one fetched as it arrived
 * upstream, kept until the upstream's heads show it committed.
 */
struct relay_fetched {
	char model[WSYNC_MAX_MODEL + 1];
	wsync_head_t head;
	char *tmp;
	char *delta;                    /* NULL, or the delta from version base it came as */
	uint64_t base;
};

struct relay_hand_over;

/*
 * The most bytes one get of a relay asks for: its piece. A version flowing
 * down a chain is passed on a piece at a time, so each hop adds a piece's
 * time on its link (wsync(7) RELAYS: 10.5 ms at 100 Mbit/s); smaller ones
 * cost more messages per byte than they save (bench/journal.md, 2026-11-27).
 */
#define RELAY_PIECE (128u << 10)
/*
 * Gets in flight, at most: a hub grants 8 (WSYNC_WINDOW), 1 MiB of pieces,
 * what fills a link and holds little of a hub's memory.
 */
#define RELAY_WINDOW 8
/* A fetch this large or larger measures the relay's rate, for the root to place it. */
#define RELAY_RATE_MIN (4u << 20)
/*
 * A fetch of RELAY_RATE_MIN or more under way tells its rate once this much
 * came in this long after its first bytes (then at each report): a link of
 * a fifth of 100 Mbit/s says so a third of a second into the version, one
 * at full rate after 300 ms.
 */
#define RELAY_RATE_EARLY (768u << 10)
#define RELAY_RATE_EARLY_MS 300
/*
 * A fetch from the root by a relay it probes tells it sooner, when the
 * 768 KiB came: the root sets the first relay's rate beside the second's
 * while it feeds both (the probe, wsync(7) Placement), and each of its
 * milliseconds sends the version twice through the root's link. A link of
 * a fifth still takes a third of a second for the 768 KiB; the burst its
 * shaper lets through first is under a fifth of them.
 */
#define RELAY_RATE_PROBE_MS 150

/* A fetch cut off (its upstream lost), kept for the next one to resume; path "": none. */
struct relay_cut {
	char model[WSYNC_MAX_MODEL + 1];
	wsync_head_t head;
	char path[PATH_MAX];
	uint64_t upto;                  /* bytes in, from 0 without a gap */
};

/*
 * The relay's state. The thread owns everything here but the hub's end of
 * the pair; the hub reads only the lists, which never change.
 */
struct hub_relay {
	pthread_t thread;
	int started;
	void *pair;                     /* the thread's end */
	char **upstreams;
	int nupstreams;
	char **models;                  /* NULL: every model of the upstream */
	int nmodels;
	char *key, *hub_key;
	char store[PATH_MAX];           /* the hub's store: a version's base is read there */
	char beside[PATH_MAX];          /* STORE/.uploads/relay: fetches go beside it */
	struct relay_have *have;
	size_t nhave;
	struct relay_fetched fetched[RELAY_GROUP_MAX];
	size_t nfetched;
	struct relay_hand_over *group;  /* the loop's: hand-overs of one commit received so far */
	size_t ngroup;
	volatile sig_atomic_t stop;
	/* The upstream's fetch stops: at stop, or to follow a parent the root named mid-version. */
	volatile sig_atomic_t halt;
	wsync_follower_t up;            /* the upstream followed */
	char name[300];                 /* this hub's, as its upstream knows it */
	char fetching[WSYNC_MAX_MODEL + 1]; /* the model of the version being fetched */
	wsync_head_t arriving;          /* that version, as the upstream described it */
	uint64_t told;                  /* bytes of it the hub was told are in; 0 before the first */
	unsigned char *report;          /* the hub's latest [worker], for upstream; NULL: none */
	size_t report_len;
	char tmp[PATH_MAX];             /* the file the version being fetched is written to */
	uint64_t in;                    /* bytes of it in, from 0 without a gap (told counts 0 as 1) */
	uint64_t in_from;               /* bytes of it in when this fetch's first bytes came */
	int64_t in_ms;                  /* when they came (until then: when the fetch began) */
	int in_started;                 /* this fetch's first bytes came: the rate counts from them */
	int64_t moved_ms;               /* when in last moved (until then: when the fetch began) */
	int rate_told;                  /* this fetch's rate was told home */
	int resumed;                    /* this fetch resumes one cut off */
	struct relay_cut cut;
	/* Placement (wsync(7) RELAYS): reports go home, versions come from the parent. */
	char advertise[512];            /* where downstream relays reach this hub; "": nowhere */
	char advertise_key[64];         /* this hub's public key (Z85); "": none */
	unsigned char *admitted;        /* the root's last "admit", as the ADMIT message sent */
	size_t admitted_len;
	wsync_client_t *home;           /* the connection to the upstream reports go to */
	int home_next;                  /* the index of the upstream home tries next */
	int64_t reported_ms;            /* when the last report went home */
	char parent[512];               /* the relay followed, as the root placed it; "": upstream */
	char parent_key[64];            /* its public key (z85), as the root said; "": none */
	char placed[512];               /* the parent the root named last */
	char placed_key[64];
	char lost[512];                 /* a parent lost, or whose bytes did not verify: for home */
	/*
	 * A parent that passed on, as it arrived there, a version that did not
	 * verify here: its committed heads are fetched next, and blamed if bad.
	 */
	char spoiled_from[512];
	uint64_t rate;                  /* bytes/s of the last fetch of RELAY_RATE_MIN or more */
	char rate_from[512];            /* the upstream that fetch came from */
	int rate_root;                  /* that upstream was the root, followed unplaced or placed there */
	int64_t rate_ms;                /* when that rate was measured; 0: never */
	int probed;                     /* the root's last reply said it probes this relay (wsync(7) Placement) */
	wsync_log_fn log;
	void *log_arg;
};

/* ---- the thread (relay_follow.c) ---- */

/* What rl has of model, added with nothing when new; NULL when out of memory. */
struct relay_have *relay_have(struct hub_relay *rl, const char *model);
/* Forgets fetched version i, removing its file and the delta it came as. */
void relay_fetched_drop(struct hub_relay *rl, size_t i);
/* The thread's body: follows the upstreams until rl->stop (arg is rl). */
void *relay_follow(void *arg);

/* ---- the messages on the pair (relay_msg.c) ---- */

/* What a message is; each is two frames, its kind's name, then a msgpack body. */
enum relay_msg_kind {
	RELAY_MSG_NONE,                 /* nothing received, or a kind not known */
	RELAY_MSG_ARRIVING,             /* thread to hub: how much of a version is in */
	RELAY_MSG_DROPPED,              /* thread to hub: that version will not arrive */
	RELAY_MSG_HAND_OVER,            /* thread to hub: a version fetched whole, to commit */
	RELAY_MSG_REPLY,                /* hub to thread: the hand-over's commit, or why not */
	RELAY_MSG_REPORT,               /* hub to thread: its workers, for upstream */
	RELAY_MSG_ADMIT,                /* thread to hub: {keys}, the relays placed under it */
};

/* Arriving: version v of model is written to path, upto bytes in from 0 without a gap. */
typedef struct relay_arriving {
	char model[WSYNC_MAX_MODEL + 1];
	wsync_head_t v;                 /* version, size and content */
	char path[PATH_MAX];
	uint64_t upto;
} relay_arriving_t;

/* Dropped: version of model will not arrive; code and error say why. */
typedef struct relay_dropped {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version;
	uint64_t code;
	char error[WSYNC_MAX_REASON];
} relay_dropped_t;

/*
 * A hand-over: version of model, verified in path, from upstream, whose
 * tree's root is origin; hand-over index of count (0: alone) that the hub
 * commits together, as the upstream committed them, once the last came.
 */
typedef struct relay_hand_over {
	char model[WSYNC_MAX_MODEL + 1];
	uint64_t version, content;
	uint64_t index, count;
	char path[PATH_MAX];
	char origin[64];                /* "": not known */
	char upstream[512];             /* "": not known */
	/* "", or the delta from version base the version came as: the hub serves it on. */
	char delta[PATH_MAX];
	uint64_t base;
} relay_hand_over_t;

/* The hub's reply to a hand-over: committed (ok), or error says why not. */
typedef struct relay_reply {
	int ok;
	char error[sizeof(((wsync_err_t *)0)->msg)];
} relay_reply_t;

/*
 * Packs msg, the body of a message of kind ARRIVING (a relay_arriving_t),
 * DROPPED (relay_dropped_t) or HAND_OVER (relay_hand_over_t), into e
 * (initialized by the caller).
 */
void relay_pack(wsync_enc_t *e, enum relay_msg_kind kind, const void *msg);
/* Unpacks the body m of a message of kind (as relay_pack's) into msg; -1 without a field it needs. */
int relay_unpack(const wsync_msg_t *m, enum relay_msg_kind kind, void *msg);
/* Packs and unpacks the hub's reply to a hand-over (-1: not a reply). */
void relay_reply_pack(wsync_enc_t *e, const relay_reply_t *r);
int relay_reply_unpack(const wsync_msg_t *m, relay_reply_t *r);

/* Sends a message of kind with body e (freed) on pair, with zmq_send's flags; -1 with errno. */
int relay_send(void *pair, enum relay_msg_kind kind, wsync_enc_t *e, int flags);
/*
 * Receives the next message on pair without waiting: its kind, its frames in
 * p (the caller closes them) and its body decoded in m (the caller frees it;
 * empty when the body is no map, as a report's, the packed array of workers
 * in frame 1). RELAY_MSG_NONE when nothing came: nothing to free then.
 */
enum relay_msg_kind relay_recv(void *pair, wsync_parts_t *p, wsync_msg_t *m);

#endif
