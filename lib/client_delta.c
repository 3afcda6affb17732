/* client_delta.c - a version fetched as a delta from an older one, rebuilt beside its path. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "delta_int.h"
#include "tempfile_int.h"

#define S_PENDING_MS 30000      /* longest wait for the hub to make a delta */
#define S_TELL_MS 1000          /* bound on telling the hub a delta did not apply */

/* Says in out->delta_note why the version comes whole; 1, what the caller returns then. */
__attribute__((format(printf, 2, 3)))
static int
s_whole(wsync_fetched_t *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out->delta_note, sizeof(out->delta_note), fmt, ap);
	va_end(ap);
	return 1;
}

/*
 * Asks the hub for the delta from version base (content base_content) to
 * got's version, or with failed tells it why the one it sent did not apply.
 * The reply in m and p (the caller frees both); -1 with err.
 */
static int
s_ask(wsync_client_t *c, const wsync_fetch_t *f, const wsync_head_t *got, uint64_t base,
    uint64_t base_content, const char *failed, int timeout_ms, wsync_msg_t *m,
    wsync_parts_t *p, wsync_err_t *err)
{
	wsync_enc_t e;
	uint64_t id = wsync_client_request(c, &e, "delta", 4 + (f->worker != NULL) +
	    (failed != NULL));

	wsync_enc_kv_str(&e, "model", f->model);
	wsync_enc_kv_u64(&e, "version", got->version);
	wsync_enc_kv_u64(&e, "base", base);
	wsync_enc_kv_u64(&e, "base_content", base_content);
	if (f->worker != NULL)
		wsync_enc_kv_str(&e, "worker", f->worker);
	if (failed != NULL)
		wsync_enc_kv_str(&e, "failed", failed);
	return wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "delta", m, p, err);
}

/* How long one request may take: the silence a watcher bounds, else what is left. */
static int
s_call_ms(const wsync_client_t *c, int64_t deadline)
{
	return c->idle_ms > 0 ? c->idle_ms : wsync_ms_left(deadline);
}

/*
 * Waits until the hub has the delta from base to out->head's version: 0 with
 * its size in *size, 1 when the version comes whole (out->delta_note says
 * why), -1 with err when the hub is lost.
 */
static int
s_ready(wsync_client_t *c, const wsync_fetch_t *f, wsync_fetched_t *out, uint64_t base,
    uint64_t base_content, int64_t deadline, uint64_t *size, wsync_err_t *err)
{
	int64_t until = wsync_now_ms() + S_PENDING_MS;
	int nap_ms = 1;

	if (c->idle_ms <= 0 && deadline < until)
		until = deadline;
	for (;;) {
		char state[16] = "", reason[WSYNC_MAX_REASON] = "";
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };

		if (s_ask(c, f, &out->head, base, base_content, NULL, s_call_ms(c, deadline), &m, &p,
		    err) < 0) {
			/*
			 * A refusal: the hub no longer has the base, or has it as another
			 * content, or (an older hub) knows no delta op. Only silence, or
			 * a stop, means the hub is lost.
			 */
			if (err->code != EX_TEMPFAIL && err->code != EX_UNAVAILABLE &&
			    !(c->stop != NULL && *c->stop))
				return s_whole(out, "%s", err->msg);
			return -1;
		}
		wsync_msg_str(&m, "state", state, sizeof(state));
		wsync_msg_str(&m, "reason", reason, sizeof(reason));
		int rc = strcmp(state, "ready") == 0 && wsync_msg_u64(&m, "size", size) == 0 ? 0 :
		    strcmp(state, "whole") == 0 ? 1 : strcmp(state, "pending") == 0 ? 2 : -1;
		wsync_client_release(&m, &p);
		if (rc == 0)
			return 0;
		if (rc == 1)
			return s_whole(out, "the hub sends it whole: %s", reason[0] ? reason :
			    "no reason given");
		if (rc < 0)
			return wsync_err_set(err, EX_PROTOCOL, "%s: a delta reply without a state "
			    "(ready with a size, pending or whole)", c->endpoint);
		if (wsync_now_ms() + nap_ms > until)
			return s_whole(out, "the hub was still making the delta after %.1f s",
			    (double)(wsync_now_ms() - until + S_PENDING_MS) / 1000.0);
		if (c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		poll(NULL, 0, nap_ms);
		if (nap_ms < 10)
			nap_ms *= 2;
	}
}

/* Tells the hub that its delta did not apply here, and why; an answer is not needed. */
static void
s_tell(wsync_client_t *c, const wsync_fetch_t *f, const wsync_fetched_t *out, uint64_t base,
    uint64_t base_content)
{
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	wsync_err_t ignored;

	if (s_ask(c, f, &out->head, base, base_content, out->delta_note, S_TELL_MS, &m, &p,
	    &ignored) == 0)
		wsync_client_release(&m, &p);
}

/* The keep of wsync_delta_apply_some for a selection. */
static int
s_keep(void *sel, const char *path)
{
	return wsync_client_selects(sel, path);
}

/* The bytes of the tensors sel takes, as the base file bf lays them out. */
static uint64_t
s_selected_bytes(const wsync_file_t *bf, const wsync_ckpt_out_t *sel)
{
	uint64_t n = 0;

	for (size_t i = 0; i < wsync_file_count(bf); i++)
		if (wsync_client_selects(sel, wsync_file_tensor(bf, i)->path))
			n += wsync_file_tensor(bf, i)->nbytes;
	return n;
}

/* An apply of the delta as it arrives, on a thread of its own. */
typedef struct s_fed_job {
	int base_fd, delta_fd, out_fd;
	const char *model;
	const wsync_ckpt_out_t *sel;
	wsync_delta_feed_t *feed;
	uint64_t version, content;
	int rc;
	wsync_err_t why;
	int refused;                    /* it stopped the transfer (this thread's, not the apply's) */
} s_fed_job_t;

static void *
s_fed_run(void *arg)
{
	s_fed_job_t *j = arg;

	j->rc = wsync_delta_apply_fed(j->base_fd, j->delta_fd, j->out_fd, j->model,
	    j->sel != NULL ? s_keep : NULL, (void *)j->sel, j->feed, &j->version, &j->content,
	    &j->why);
	/* Refused (a damaged delta or base): the rest of the delta is not worth fetching. */
	if (j->rc < 0)
		wsync_delta_feed_stop(j->feed);
	return NULL;
}

/*
 * What the transfer has in without a gap, told to the apply; nonzero once the
 * apply refused the delta. For wsync_client_get_all.
 */
static int
s_arrived(void *arg, const char *tmp, uint64_t upto)
{
	s_fed_job_t *j = arg;

	(void)tmp;
	wsync_delta_feed_arrived(j->feed, upto);
	return j->refused = wsync_delta_feed_stopped(j->feed);
}

/*
 * Starts j's apply on a thread that takes no signal (this one's, waiting on
 * the hub, must see them); 0 when it started.
 */
static int
s_fed_start(pthread_t *t, s_fed_job_t *j)
{
	sigset_t all, was;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &was);
	rc = pthread_create(t, NULL, s_fed_run, j);
	pthread_sigmask(SIG_SETMASK, &was, NULL);
	return rc;
}

int
wsync_client_fetch_delta(wsync_client_t *c, const wsync_fetch_t *f, wsync_fetched_t *out,
    const char *path, char *buf, size_t size, int *fd, const wsync_ckpt_out_t *sel,
    wsync_recycle_t *recycle, char *keep, int64_t deadline, wsync_err_t *err)
{
	uint64_t base, base_content, dsize, selected = 0;
	int base_fd, dfd = -1, rc = 1;
	char dtmp[PATH_MAX];
	wsync_file_t *bf;
	const wsync_head_t *got = &out->head;
	wsync_err_t why;
	s_fed_job_t job;
	pthread_t applier;
	int fed, got_all, recycled;

	*fd = -1;
	buf[0] = '\0';
	dtmp[0] = '\0';
	if (keep != NULL)
		keep[0] = '\0';
	if ((base_fd = open(f->base, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 1 : s_whole(out, "%s: %s", f->base, strerror(errno));
	/* The base's header says which version it holds; its bytes are checked as it is used. */
	if ((bf = wsync_file_open_fd(base_fd, f->base, &why)) == NULL) {
		close(base_fd);
		return s_whole(out, "no delta from %s: %s", f->base, why.msg);
	}
	base = wsync_file_version(bf);
	base_content = wsync_file_content_id(bf);
	if (sel != NULL && sel->nselect == 0)
		sel = NULL;
	if (sel != NULL)
		selected = s_selected_bytes(bf, sel);
	wsync_file_close(&bf);
	if (base == 0 || base >= got->version) {
		close(base_fd);
		return base == 0 ? s_whole(out, "%s holds no numbered version", f->base) : 1;
	}
	if ((rc = s_ready(c, f, out, base, base_content, deadline, &dsize, err)) != 0)
		goto finish;
	/* A delta of every tensor can outweigh a few tensors fetched whole. */
	if (sel != NULL && dsize >= selected) {
		rc = s_whole(out, "the delta (%" PRIu64 " bytes) is not smaller than the selection "
		    "(%" PRIu64 " bytes)", dsize, selected);
		goto finish;
	}
	/* The delta itself needs no name, unless kept: a watcher killed while it comes leaves nothing. */
	if ((dfd = wsync_temp_open(path, dtmp, sizeof(dtmp), err)) < 0) {
		dtmp[0] = '\0';
		rc = -1;
		goto finish;
	}
	if (keep == NULL) {
		unlink(dtmp);
		dtmp[0] = '\0';
	}
	if (ftruncate(dfd, (off_t)dsize) < 0) {
		rc = s_whole(out, "cannot hold the delta: %s", strerror(errno));
		goto finish;
	}
	/*
	 * Never in place: the version is rebuilt into another file, the base stays
	 * whole. A spare's pages exist (--recycle): rebuilding into one costs a
	 * copy, not fresh pages. Not with a selection, whose other tensors stay zeros.
	 */
	if (recycle != NULL && sel == NULL &&
	    (*fd = wsync_recycle_take(recycle, buf, size)) >= 0 &&
	    ftruncate(*fd, (off_t)got->size) < 0) {
		close(*fd);
		unlink(buf);
		*fd = -1;
	}
	recycled = *fd >= 0;
	if (*fd < 0 && (*fd = wsync_temp_open(path, buf, size, err)) < 0) {
		rc = -1;
		goto finish;
	}
	/*
	 * The version is rebuilt while the delta comes: each tensor once its
	 * bytes are in, on a thread of its own. Where none can start, after.
	 */
	job = (s_fed_job_t){ .base_fd = base_fd, .delta_fd = dfd, .out_fd = *fd,
	    .model = f->model, .sel = sel, .feed = wsync_delta_feed_new(dsize), .rc = -1 };
	/* A delta whose head is not the size announced writes nothing (65). */
	if (job.feed != NULL)
		wsync_delta_feed_expect(job.feed, got->size);
	fed = job.feed != NULL && s_fed_start(&applier, &job) == 0;
	got_all = wsync_client_get_all(c, f->model, got->version, base, dsize, f->worker, dfd,
	    out, fed ? s_arrived : NULL, &job, c->idle_ms > 0 ? wsync_now_ms() +
	    c->idle_ms : deadline, err);
	if (fed) {
		if (got_all == 0)
			wsync_delta_feed_arrived(job.feed, dsize);
		wsync_delta_feed_stop(job.feed);
		pthread_join(applier, NULL);
	}
	wsync_delta_feed_free(&job.feed);
	if (got_all < 0 && !job.refused) {
		/* A spare stays one: its pages serve the fetch that comes next. */
		if (recycled)
			wsync_recycle_keep(recycle, buf);
		/* Dropped since (its base retired): the version comes whole. */
		rc = err->code == EX_NOINPUT ? s_whole(out, "%s", err->msg) : -1;
		goto finish;
	}
	/* Stopped by the apply's refusal: not a transfer's failure. */
	if (job.refused)
		*err = (wsync_err_t){ 0 };
	if (!fed)
		job.rc = wsync_delta_apply_some(base_fd, dfd, *fd, f->model, sel != NULL ?
		    s_keep : NULL, (void *)sel, got->size, &job.version, &job.content, &job.why);
	if (job.rc < 0) {
		/* The version comes whole next: into the spare's pages. */
		if (recycled)
			wsync_recycle_keep(recycle, buf);
		rc = s_whole(out, "the delta from version %" PRIu64 " did not apply: %s", base,
		    job.why.msg);
	} else if (job.version != got->version || job.content != got->content)
		rc = s_whole(out, "the delta from version %" PRIu64 " rebuilt version %" PRIu64
		    " content %016" PRIx64 ", the hub announced %" PRIu64 " content %016" PRIx64,
		    base, job.version, job.content, got->version, got->content);
	else
		rc = 0;
#ifdef WSYNC_TEST_HOOKS
	/* WSYNC_TEST_DELTA_STOP (wsync-watch(1)): stopped with the head rebuilt, not yet in place. */
	if (rc == 0 && getenv("WSYNC_TEST_DELTA_STOP") != NULL)
		raise(SIGSTOP);
#endif
	if (rc == 1)
		s_tell(c, f, out, base, base_content);
finish:
	if (rc != 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	if (rc != 0 && buf[0] != '\0') {
		unlink(buf);
		buf[0] = '\0';
	}
	if (rc == 0)
		out->transfer = WSYNC_TRANSFER_DELTA;
	if (rc == 0 && dtmp[0] != '\0')
		snprintf(keep, PATH_MAX, "%s", dtmp);
	else if (dtmp[0] != '\0')
		unlink(dtmp);
	if (dfd >= 0)
		close(dfd);
	close(base_fd);
	return rc;
}
