/* client_fetch.c - fetching a version: gets, or a link or copy from the store; verify; pull. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "client_conn_int.h"
#include "file_int.h"
#include "io_int.h"
#include "pace_int.h"
#include "signcheck_int.h"
#include "signround_int.h"
#include "store_int.h"
#include "stream_hash_int.h"
#include "tempfile_int.h"

/*
 * From this size on, a fetch with no output in place asks the hub where the
 * tensors lie (one round trip), to hash them as they arrive rather than read
 * the file back: below it, the round trip costs more than the read.
 */
#define S_LAYOUT_MIN (16u << 20)
/* How long a relay's root may take to say a version's layout (wsync_fetch_temp_t's layout_from). */
#define S_LAYOUT_FIRST_MS 500
/*
 * A fetch that tells what it writes (wsync_fetch_temp_t's written) tells it
 * again after this long with nothing in: a relay held up by its parent still
 * reports, and hears that it was placed elsewhere.
 */
#define S_TICK_MS 100

static int
s_stat(wsync_client_t *c, const wsync_fetch_t *f, wsync_head_t *h, int timeout_ms,
    wsync_err_t *err)
{
	wsync_enc_t e;
	wsync_msg_t m;
	wsync_parts_t p = { .n = 0 };
	uint64_t id = wsync_client_request(c, &e, "stat", f->worker ? 3 : 2);
	int rc;

	wsync_enc_kv_str(&e, "model", f->model);
	wsync_enc_kv_u64(&e, "version", f->version);
	if (f->worker != NULL)
		wsync_enc_kv_str(&e, "worker", f->worker);
	if (wsync_client_call(c, &e, id, NULL, 0, timeout_ms, "stat", &m, &p, err) < 0)
		return -1;
	rc = wsync_head_decode(m.root, h);
	wsync_client_release(&m, &p);
	if (rc < 0 || h->version == 0)
		return wsync_err_set(err, EX_PROTOCOL, "%s: a stat reply without version, size "
		    "or content", c->endpoint);
	return 0;
}

/*
 * What one fetch's gets are: the byte ranges of a version (of the delta to it
 * from base, when base is not 0), hashed by sh (may be NULL) while in the
 * cache, and the fetch's own options (zero: none; see wsync_fetch_temp_t).
 */
struct s_gets {
	uint64_t base;
	const wsync_range_t *ranges;
	size_t nranges;
	wsync_stream_hash_t *sh;
	unsigned window;
	uint64_t piece;
	int arriving;
	int (*written)(void *arg, const char *tmp, uint64_t upto);  /* nonzero: stop */
	void *written_arg;
	const char *tmp;
	wsync_fetched_t *out;           /* counts what was asked and what came */
};

/* Sends a get of n bytes at off of version h of model; -1 with err. */
static int
s_get_send(wsync_client_t *c, const char *model, const wsync_head_t *h, const char *worker,
    const struct s_gets *g, uint64_t off, uint64_t n, uint64_t *id, wsync_err_t *err)
{
	wsync_enc_t e;
	int rc;

	*id = wsync_client_request(c, &e, "get", 4 + (worker != NULL) + (g->base != 0) +
	    (g->arriving != 0));
	if (worker != NULL)
		wsync_enc_kv_str(&e, "worker", worker);
	if (g->base != 0)
		wsync_enc_kv_u64(&e, "base", g->base);
	if (g->arriving)
		wsync_enc_kv_bool(&e, "arriving", 1);
	wsync_enc_kv_str(&e, "model", model);
	wsync_enc_kv_u64(&e, "version", h->version);
	wsync_enc_kv_u64(&e, "off", off);
	wsync_enc_kv_u64(&e, "len", n);
	rc = wsync_client_send(c, &e, NULL, 0, err);
	wsync_enc_free(&e);
	return rc;
}

/* Tells g->written that upto is in without a gap; -1 with err when it says stop (65). */
static int
s_tell(const struct s_gets *g, const char *model, const wsync_head_t *h, uint64_t upto,
    wsync_err_t *err)
{
	if (g->written(g->written_arg, g->tmp, upto) != 0)
		return wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": the transfer was "
		    "stopped by what it feeds", model, h->version);
	return 0;
}

/*
 * Gets g's ranges of version h of model into fd, each chunk written at its
 * offset as it arrives, with up to window gets in flight. With a bound on
 * silence, each get is as long as arrives well within it (pace_int.h).
 */
static int
s_get_ranges(wsync_client_t *c, const char *model, const wsync_head_t *h, const char *worker,
    int fd, const struct s_gets *g, int64_t deadline, wsync_err_t *err)
{
	uint64_t ids[64], offs[64], next_off = 0, done = 0, allocated = 0, total = 0, end = 0;
	/* What is in without a gap, as last told to g->written. */
	uint64_t said = 0;
	int64_t wake;
	const wsync_range_t *ranges = g->ranges;
	size_t nranges = g->nranges;
	unsigned window = g->window > 0 && g->window < c->window ? g->window : c->window;
	int64_t asked[64];
	unsigned inflight = 0;
	wsync_pace_t pace;
	/*
	 * One range to the end, from 0 or from what a cut-off fetch left: what
	 * is in without a gap can be told (g->written).
	 */
	int from0 = nranges == 1 && ranges[0].off + ranges[0].len == h->size;
	/*
	 * The whole file: its pages are allocated ahead of the chunks, unless it
	 * has them all already (a recycled file), when asking costs a look-up a page.
	 */
	int whole = from0 && ranges[0].len == h->size;
	struct stat st;
	size_t r = 0;

	if (whole && fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 >= h->size)
		whole = 0;
	if (from0)
		said = ranges[0].off;

	wsync_pace_init(&pace, g->piece > 0 && g->piece < c->chunk ? g->piece : c->chunk,
	    c->idle_ms);
	for (size_t i = 0; i < nranges; i++) {
		if (ranges[i].off > h->size || ranges[i].len > h->size - ranges[i].off)
			return wsync_err_set(err, EX_SOFTWARE, "%s version %" PRIu64 ": a range "
			    "beyond its %" PRIu64 " bytes", model, h->version, h->size);
		total += ranges[i].len;
	}
	while (r < nranges && ranges[r].len == 0)
		r++;
	if (r < nranges) {
		next_off = ranges[r].off;
		end = ranges[r].off + ranges[r].len;
	}
	g->out->asked += total;
	while (done < total) {
		wsync_msg_t m;
		wsync_parts_t p = { .n = 0 };
		uint64_t id = 0, off, len;
		unsigned at;
		int rc;

		/* A relay's fetch stops between pieces when told (the root moved it, or it stops). */
		if (g->arriving && c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "%s version %" PRIu64 ": interrupted",
			    model, h->version);

		while (inflight < window && r < nranges) {
			uint64_t n = end - next_off < pace.chunk ? end - next_off : pace.chunk;
			offs[inflight] = next_off;
			asked[inflight] = wsync_now_ms();
			if (s_get_send(c, model, h, worker, g, next_off, n, &ids[inflight],
			    err) < 0)
				return -1;
			inflight++;
			if ((next_off += n) == end) {
				while (++r < nranges && ranges[r].len == 0)
					;
				if (r < nranges) {
					next_off = ranges[r].off;
					end = ranges[r].off + ranges[r].len;
				}
			}
		}
		/*
		 * While the chunks are on their way, give the file its pages: fresh
		 * pages cost far less allocated in bulk than faulted in by each write.
		 */
		if (whole && allocated < next_off + WSYNC_CLIENT_STRIDE && allocated < h->size) {
			uint64_t upto = next_off + 2 * WSYNC_CLIENT_STRIDE;
			if (upto > h->size)
				upto = h->size;
			if (fallocate(fd, 0, (off_t)allocated, (off_t)(upto - allocated)) < 0 &&
			    errno != EOPNOTSUPP)
				return wsync_err_set(err, EX_IOERR, "%s version %" PRIu64 ": cannot "
				    "allocate %" PRIu64 " bytes: %s", model, h->version, h->size,
				    strerror(errno));
			allocated = upto;
		}
		wake = wsync_now_ms() + S_TICK_MS;
		if (g->written == NULL || !from0 || wake >= deadline)
			wake = deadline;
		rc = wsync_client_recv(c, wake, &id, &m, &p, 0, err);
		/* Quiet until wake (not a poll that failed at once): told, and on. */
		if (rc == 1 && wake < deadline && wsync_now_ms() >= wake) {
			if (s_tell(g, model, h, said, err) < 0)
				return -1;
			continue;
		}
		if (rc == 1)
			return wsync_err_set(err, EX_TEMPFAIL, "%s version %" PRIu64 ": not all "
			    "data came from %s within the timeout", model, h->version, c->endpoint);
		for (at = 0; at < inflight && ids[at] != id; at++)
			;
		if (rc < 0) {
			if (at < inflight || id == 0)
				return -1;
			continue;
		}
		if (at == inflight) {
			wsync_client_release(&m, &p);
			continue;
		}
		if (wsync_msg_u64(&m, "off", &off) < 0 || wsync_msg_u64(&m, "len", &len) < 0 ||
		    off != offs[at] || p.n != 3 || wsync_part_size(&p, 2) != len ||
		    len == 0 || off + len > h->size) {
			wsync_client_release(&m, &p);
			return wsync_err_set(err, EX_PROTOCOL, "%s: a get reply that does not "
			    "match its request", c->endpoint);
		}
		if (pwrite(fd, wsync_part_data(&p, 2), len, (off_t)off) != (ssize_t)len) {
			wsync_client_release(&m, &p);
			return wsync_err_set(err, EX_IOERR, "write: %s", strerror(errno));
		}
		wsync_stream_hash_chunk(g->sh, off, wsync_part_data(&p, 2), len);
		done += len;
		g->out->wire += len;
		wsync_client_release(&m, &p);
		wsync_pace_arrived(&pace, len, asked[at], wsync_now_ms());
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, total);
		/*
		 * What is in without a gap: everything below the lowest get still
		 * out and below the next one to ask for.
		 */
		if (g->written != NULL && from0) {
			uint64_t upto = next_off;
			for (unsigned i = 0; i < inflight; i++)
				if (i != at && offs[i] < upto)
					upto = offs[i];
			said = upto;
			if (s_tell(g, model, h, upto, err) < 0)
				return -1;
		}
		/* A watcher bounds the silence, not the whole of a large transfer. */
		if (c->idle_ms > 0)
			deadline = wsync_now_ms() + c->idle_ms;
		ids[at] = ids[inflight - 1];
		offs[at] = offs[inflight - 1];
		asked[at] = asked[inflight - 1];
		inflight--;
	}
	return 0;
}

int
wsync_client_get_ranges(wsync_client_t *c, const char *model, wsync_fetched_t *out,
    const char *worker, int fd, const wsync_range_t *ranges, size_t nranges, int64_t deadline,
    wsync_err_t *err)
{
	const struct s_gets g = { .ranges = ranges, .nranges = nranges, .out = out };

	return s_get_ranges(c, model, &out->head, worker, fd, &g, deadline, err);
}

int
wsync_client_get_all(wsync_client_t *c, const char *model, uint64_t version, uint64_t base,
    uint64_t size, const char *worker, int fd, wsync_fetched_t *out,
    int (*written)(void *arg, const char *tmp, uint64_t upto), void *written_arg,
    int64_t deadline, wsync_err_t *err)
{
	const wsync_head_t head = { .version = version, .size = size };
	const struct s_gets g = { .base = base, .ranges = &(wsync_range_t){ 0, size },
	    .nranges = 1, .out = out, .written = written, .written_arg = written_arg };

	return s_get_ranges(c, model, &head, worker, fd, &g, deadline, err);
}

/* Where version of model lives in the hub's store (wsync-serve(1), FILES). */
static int
s_store_path(const wsync_client_t *c, const char *model, uint64_t version, char *buf,
    size_t size, wsync_err_t *err)
{
	if (wsync_store_version_path(buf, size, c->store, model, version, 0) < 0)
		return wsync_err_set(err, EX_USAGE, "%s: path too long", c->store);
	return 0;
}

static int
s_retired(const char *model, uint64_t version, wsync_err_t *err)
{
	return wsync_err_set(err, EX_NOINPUT, "%s version %" PRIu64 " was retired before it "
	    "could be read", model, version);
}

/* Opens a version's file in the hub's store, read-only; 66 when it is retired. */
static int
s_store_open(const wsync_client_t *c, const char *model, uint64_t version, wsync_err_t *err)
{
	char src[PATH_MAX];
	int fd;

	if (s_store_path(c, model, version, src, sizeof(src), err) < 0)
		return -1;
	/* Leased: a hub that recycles retired files leaves it alone while it is read. */
	if ((fd = wsync_lease_open(src)) < 0)
		return errno == ENOENT || errno == EAGAIN ? s_retired(model, version, err) :
		    wsync_err_set(err, EX_IOERR, "%s: %s", src, strerror(errno));
	return fd;
}

int
wsync_client_copy_fd(const wsync_client_t *c, int in, int out, uint64_t size,
    int64_t deadline, wsync_err_t *err)
{
	uint64_t done = 0;
	int range = 1;

	while (done < size) {
		if (c->stop != NULL && *c->stop)
			return wsync_err_set(err, EX_TEMPFAIL, "interrupted");
		if (deadline != 0 && wsync_ms_left(deadline) == 0)
			return wsync_err_set(err, EX_TEMPFAIL, "copy: not done within the timeout");
		size_t want = size - done > WSYNC_CLIENT_STRIDE ? WSYNC_CLIENT_STRIDE :
		    (size_t)(size - done);
		off_t ioff = (off_t)done, ooff = (off_t)done;
		ssize_t n;
		if (range) {
			n = copy_file_range(in, &ioff, out, &ooff, want, 0);
			/* Across file systems (or where it is missing): sendfile does the same. */
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
			    errno == ENOSYS)) {
				range = 0;
				continue;
			}
		} else if (lseek(out, ooff, SEEK_SET) < 0)
			n = -1;
		else
			n = sendfile(out, in, &ioff, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wsync_err_set(err, n < 0 ? EX_IOERR : EX_DATAERR, "copy: %s",
			    n < 0 ? strerror(errno) : "the store's file is shorter than announced");
		done += (uint64_t)n;
		if (c->progress != NULL)
			c->progress(c->progress_arg, done, size);
	}
	return 0;
}

/*
 * 1 when fd is the store's file just as the hub verified it: the hub gave its
 * modification time then, and nothing has written to it since.
 */
static int
s_unchanged(int fd, const wsync_head_t *got)
{
	struct stat st;

	return got->mtime != 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == got->size &&
	    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec ==
	    got->mtime;
}

/*
 * Checks that fd holds version got of model: every hash (unless hashes is 0;
 * those sh took as the file was written are not read again), the content id,
 * the stamp.
 */
static int
s_verify_fd(int fd, const char *model, const wsync_head_t *got, int hashes,
    const wsync_stream_hash_t *sh, wsync_err_t *err)
{
	wsync_file_t *f = wsync_file_open_fd(fd, model, err);
	size_t nknown;
	const wsync_known_hash_t *known = wsync_stream_hash_known(sh, &nknown);
	int rc = -1;

	if (f == NULL || (hashes && wsync_file_verify_fd(f, fd, known, nknown, err) < 0))
		goto out;
	if (wsync_file_content_id(f) != got->content || wsync_file_version(f) != got->version) {
		wsync_err_set(err, EX_DATAERR, "%s version %" PRIu64 ": received content "
		    "%016" PRIx64 " version %" PRIu64 ", the hub announced %016" PRIx64, model,
		    got->version, wsync_file_content_id(f), wsync_file_version(f), got->content);
		goto out;
	}
	rc = 0;
out:
	wsync_file_close(&f);
	return rc;
}

/*
 * Puts version out->head of model into a new file beside path, in buf, open
 * as *fd: a hard link to the store's file when the mode allows and the file
 * systems agree, else a kernel copy of it. 1 when it was linked. On failure
 * buf names the file made (the caller removes it) or is empty.
 */
static int
s_fetch_from_store(wsync_client_t *c, const char *model, wsync_fetched_t *out,
    const char *path, char *buf, size_t size, int *fd, wsync_err_t *err)
{
	const wsync_head_t *got = &out->head;
	char src[PATH_MAX];
	int in;

	buf[0] = '\0';
	if (s_store_path(c, model, got->version, src, sizeof(src), err) < 0)
		return -1;
	if (c->transfer != WSYNC_TRANSFER_COPY) {
		if (wsync_temp_link(src, path, buf, size) == 0) {
			out->transfer = WSYNC_TRANSFER_LINK;
			if ((*fd = open(buf, O_RDONLY | O_CLOEXEC)) < 0) {
				wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
				unlink(buf);
				buf[0] = '\0';
				return -1;
			}
			return 1;
		}
		int e = errno;
		buf[0] = '\0';
		if (e == ENOENT && access(src, F_OK) < 0)
			return s_retired(model, got->version, err);
		if (c->transfer == WSYNC_TRANSFER_LINK && e == EXDEV)
			return wsync_err_set(err, EX_USAGE, "cannot link %s to %s: "
			    "%s (a copy works across file systems)", src, path,
			    strerror(e));
		if (c->transfer == WSYNC_TRANSFER_LINK)
			return wsync_err_set(err, EX_IOERR, "cannot link %s to %s: %s", src, path,
			    strerror(e));
	}
	if ((*fd = wsync_temp_open(path, buf, size, err)) < 0)
		return -1;
	out->transfer = WSYNC_TRANSFER_COPY;
	if ((in = s_store_open(c, model, got->version, err)) < 0)
		return -1;
	if (wsync_client_copy_fd(c, in, *fd, got->size, 0, err) < 0) {
		close(in);
		return -1;
	}
	close(in);
	return 0;
}

/*
 * 1 when version out->head came as a delta from f->base, rebuilt into buf
 * (open as *fd); 0 when it must come whole (no base, or out->delta_note says
 * why); -1 with err when the hub was lost or the fetch stopped.
 */
static int
s_try_delta(wsync_client_t *c, const wsync_fetch_t *f, wsync_fetched_t *out,
    const char *path, char *buf, size_t size, int *fd, const wsync_ckpt_out_t *sel,
    wsync_recycle_t *recycle, char *keep, int64_t deadline, wsync_err_t *err)
{
	int rc;

	if (f->base == NULL)
		return 0;
	rc = wsync_client_fetch_delta(c, f, out, path, buf, size, fd, sel, recycle, keep,
	    deadline, err);
	return rc == 0 ? 1 : rc == 1 ? 0 : -1;
}

/*
 * A hasher for version got from the layout of it that first (when not NULL:
 * a relay's root, which has committed it) or else the hub gives; NULL when
 * neither gives one (the file is read back to verify it then).
 */
static wsync_stream_hash_t *
s_layout_hash(wsync_client_t *c, wsync_client_t *first, const char *model,
    const wsync_head_t *got, const char *worker, int64_t deadline)
{
	wsync_stream_hash_t *sh = NULL;
	wsync_known_hash_t *data;
	wsync_layout_t l;
	wsync_err_t ignored;
	int64_t soon = wsync_now_ms() + S_LAYOUT_FIRST_MS;

	/* The other hub's word is worth little time: the fetch goes on without it. */
	if ((first == NULL || first == c || wsync_client_layout(first, model, got, worker,
	    soon < deadline ? soon : deadline, &l, &ignored) < 0) &&
	    wsync_client_layout(c, model, got, worker, deadline, &l, &ignored) < 0)
		return NULL;
	if ((data = calloc(l.n + 1, sizeof(*data))) != NULL) {
		for (size_t i = 0; i < l.n; i++)
			data[i] = (wsync_known_hash_t){ .at = l.data[i].off, .nbytes = l.data[i].len };
		sh = wsync_stream_hash_of(data, l.n);
	}
	free(data);
	wsync_layout_free(&l);
	return sh;
}

/*
 * Opens f->resume, what a cut-off fetch of version got left, to be written
 * on (its name into buf); -1 with err when it is not that version's size.
 */
static int
s_resume_open(const wsync_fetch_temp_t *f, const wsync_head_t *got, char *buf, size_t size,
    wsync_err_t *err)
{
	struct stat st;
	int fd;

	snprintf(buf, size, "%s", f->resume);
	if ((fd = open(buf, O_RDWR | O_CLOEXEC)) < 0) {
		buf[0] = '\0';
		return wsync_err_set(err, EX_IOERR, "%s: %s", f->resume, strerror(errno));
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != got->size ||
	    f->resume_upto > got->size) {
		close(fd);
		return wsync_err_set(err, EX_IOERR, "%s: not a part of %s version %" PRIu64,
		    f->resume, f->what.model, got->version);
	}
	return fd;
}

int
wsync_client_fetch_temp(wsync_client_t *c, const wsync_fetch_temp_t *f, char **tmp,
    wsync_fetched_t *out, int timeout_ms, wsync_err_t *err)
{
	wsync_head_t *got = &out->head;
	int64_t deadline = wsync_now_ms() + timeout_ms;
	const char *model = f->what.model, *path = f->beside;
	char buf[PATH_MAX];
	int fd = -1, linked = 0, selected = 0, rebuilt = 0, cut_kept = 0;
	wsync_stream_hash_t *sh = NULL;

	*tmp = NULL;
	memset(out, 0, sizeof(*out));
	buf[0] = '\0';
	if (f->keep_delta != NULL)
		f->keep_delta[0] = '\0';
	if (!c->store_here && c->transfer != WSYNC_TRANSFER_AUTO && c->transfer !=
	    WSYNC_TRANSFER_SOCKET)
		return wsync_client_not_visible(c, err);
	if (f->known != NULL)
		*got = *f->known;
	else if (s_stat(c, &f->what, got, timeout_ms, err) < 0)
		return -1;
	if (f->resume != NULL) {
		if ((fd = s_resume_open(f, got, buf, sizeof(buf), err)) < 0)
			return -1;
		out->transfer = WSYNC_TRANSFER_SOCKET;
		cut_kept = f->keep_cut;
		const struct s_gets g = { .ranges = &(wsync_range_t){ f->resume_upto,
		    got->size - f->resume_upto }, .nranges = 1, .window = f->window,
		    .piece = f->piece, .arriving = f->arriving, .written = f->written,
		    .written_arg = f->written_arg, .tmp = buf, .out = out };
		if (s_get_ranges(c, model, got, f->what.worker, fd, &g, deadline, err) < 0)
			goto fail;
	} else if (c->store_here && c->transfer != WSYNC_TRANSFER_SOCKET) {
		if ((linked = s_fetch_from_store(c, model, out, path, buf, sizeof(buf), &fd, err)) < 0)
			goto fail;
	} else if ((rebuilt = s_try_delta(c, &f->what, out, path, buf, sizeof(buf), &fd,
	    f->select, f->recycle, f->keep_delta, deadline, err)) < 0) {
		return -1;
	} else if (!rebuilt) {
		out->transfer = WSYNC_TRANSFER_SOCKET;
		/* A spare's pages exist: writing it costs a copy, not fresh pages. */
		if ((fd = f->recycle != NULL ? wsync_recycle_take(f->recycle, buf, sizeof(buf)) :
		    -1) < 0 && (fd = wsync_temp_open(path, buf, sizeof(buf), err)) < 0)
			return -1;
		if (ftruncate(fd, (off_t)got->size) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
			goto fail;
		}
		selected = f->select != NULL && f->select->nselect > 0;
		/*
		 * The output in place holds an older version of the model, most
		 * often laid out as this one: where its tensors lie, the chunks are
		 * hashed as they arrive, and verifying reads none of them. No such
		 * output: where a large version's tensors lie, the hub says. Written
		 * is told first: a relay then passes the version on while it asks
		 * (the one below learns of it a round trip sooner, at every hop).
		 */
		if (f->written != NULL)
			(void)f->written(f->written_arg, buf, 0);
		if (!selected && (sh = wsync_stream_hash_new(path)) == NULL &&
		    got->size >= S_LAYOUT_MIN)
			sh = s_layout_hash(c, f->layout_from, model, got, f->what.worker, deadline);
		if (selected) {
			if (wsync_client_get_selected(c, model, out, f->what.worker, f->select, fd,
			    deadline, err) < 0)
				goto fail;
		} else {
			const struct s_gets g = { .ranges = &(wsync_range_t){ 0, got->size },
			    .nranges = 1, .sh = sh, .window = f->window, .piece = f->piece,
			    .arriving = f->arriving, .written = f->written,
			    .written_arg = f->written_arg, .tmp = buf, .out = out };
			cut_kept = f->keep_cut;
			if (s_get_ranges(c, model, got, f->what.worker, fd, &g, deadline, err) < 0)
				goto fail;
		}
	}
	/*
	 * A link is the store's own file: its mode is the store's, and it is on
	 * disk already. Untouched since the hub verified and stamped it (the size
	 * and modification time the hub gave), it is that version, whole: a name
	 * in the store is never given to another file, and a retired one is only
	 * rewritten once no one links it. Nothing to read again.
	 */
	/* A version rebuilt from a delta was verified as it was written (client_delta.c). */
	if (rebuilt ? 0 : selected ? wsync_client_verify_selected(fd, model, got, f->select,
	    err) < 0 : !(linked && s_unchanged(fd, got)) &&
	    s_verify_fd(fd, model, got, 1, sh, err) < 0)
		goto fail;
	cut_kept = 0;
	wsync_stream_hash_destroy(&sh);
	if (!linked && (fchmod(fd, 0644) < 0 || fsync(fd) < 0)) {
		wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		wsync_err_set(err, EX_IOERR, "%s: %s", buf, strerror(errno));
		goto fail;
	}
	if ((*tmp = strdup(buf)) == NULL) {
		unlink(buf);
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	}
	return 0;
fail:
	wsync_stream_hash_destroy(&sh);
	if (fd >= 0)
		close(fd);
	/* Cut off, not refused: what came stays for a later fetch to resume. */
	if (buf[0] != '\0' && !(cut_kept && err->code != EX_DATAERR))
		unlink(buf);
	if (f->keep_delta != NULL && f->keep_delta[0] != '\0') {
		unlink(f->keep_delta);
		f->keep_delta[0] = '\0';
	}
	return -1;
}

/* Copies all of fd (from its start) to stdout. */
static int
s_copy_out(int fd, wsync_err_t *err)
{
	char buf[1 << 16];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (wsync_write_all(STDOUT_FILENO, buf, (size_t)n) < 0)
			return wsync_err_set(err, EX_IOERR, "stdout: %s", strerror(errno));
	return n < 0 ? wsync_err_set(err, EX_IOERR, "read: %s", strerror(errno)) : 0;
}

/* Pull to stdout from a store visible here: the store's file itself, verified, then copied. */
static int
s_pull_store_stdout(wsync_client_t *c, const wsync_fetch_t *f, wsync_fetched_t *out,
    int64_t deadline, wsync_err_t *err)
{
	wsync_head_t *got = &out->head;
	const char *model = f->model;
	int fd, rc;

	for (;;) {
		if (s_stat(c, f, got, wsync_ms_left(deadline), err) < 0)
			return -1;
		if ((fd = s_store_open(c, model, got->version, err)) >= 0)
			break;
		/* Retired between stat and open: the newer head, within the same bound. */
		if (f->version != 0 || err->code != EX_NOINPUT || wsync_ms_left(deadline) == 0)
			return -1;
	}
	out->transfer = WSYNC_TRANSFER_COPY;
	rc = s_verify_fd(fd, model, got, !s_unchanged(fd, got), NULL, err);
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = wsync_err_set(err, EX_IOERR, "%s: %s", model, strerror(errno));
	if (rc == 0)
		rc = s_copy_out(fd, err);
	close(fd);
	return rc;
}

/* A pull with keys: the fetched tmp must be signed, newer than what path holds. */
static int
s_check_signed(const wsync_fetch_t *f, const char *path, const char *tmp,
    const wsync_head_t *got, wsync_err_t *err)
{
	wsync_applied_t last = { 0 };

	if (strcmp(path, "-") != 0)
		wsync_applied_read(path, &last);
	return wsync_verify_fetched(tmp, f->model, got->version, f->keys, f->nkeys, &last,
	    NULL, err) == 0 ? 0 : -1;
}

int
wsync_client_pull(wsync_client_t *c, const wsync_fetch_t *f, const char *path,
    wsync_fetched_t *got, int timeout_ms, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	const char *td = getenv("TMPDIR");
	wsync_fetch_temp_t into = { .what = *f, .known = NULL, .beside = path };
	char dir[PATH_MAX], *tmp = NULL;
	int rc, fd;

	memset(got, 0, sizeof(*got));
	/* Standard output gets nothing until the whole version is verified. */
	if (strcmp(path, "-") == 0 && f->nkeys == 0 && c->store_here && c->transfer != WSYNC_TRANSFER_SOCKET)
		return s_pull_store_stdout(c, f, got, deadline, err);
	if (strcmp(path, "-") == 0) {
		snprintf(dir, sizeof(dir), "%s/wsync-pull", td && td[0] == '/' ? td : "/tmp");
		into.beside = dir;
	}
	/*
	 * The head can be retired while it is fetched (the hub keeps the last N):
	 * then the newer head is fetched instead, within the same bound.
	 */
	for (;;) {
		got->head.version = 0;
		rc = wsync_client_fetch_temp(c, &into, &tmp, got, wsync_ms_left(deadline), err);
		if (rc == 0 || f->version != 0 || err->code != EX_NOINPUT || got->head.version == 0 ||
		    wsync_ms_left(deadline) == 0)
			break;
	}
	if (rc < 0)
		return -1;
	if (f->nkeys > 0 && s_check_signed(f, path, tmp, &got->head, err) < 0) {
		unlink(tmp);
		free(tmp);
		return -1;
	}
	if (into.beside == path) {
		if ((rc = rename(tmp, path)) < 0)
			wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", path,
			    strerror(errno));
		/* Also when path was a link to the same file already: rename left tmp. */
		unlink(tmp);
		free(tmp);
		return rc;
	}
	fd = open(tmp, O_RDONLY | O_CLOEXEC);
	unlink(tmp);
	free(tmp);
	if (fd < 0)
		return wsync_err_set(err, EX_IOERR, "temporary file: %s", strerror(errno));
	rc = s_copy_out(fd, err);
	close(fd);
	return rc;
}


/* Unlinks and frees the temporary files of the n models of a pull of several. */
static void
s_drop_temps(wsync_round_model_t *r, int n)
{
	for (int i = 0; i < n; i++) {
		if (r[i].tmp != NULL)
			unlink(r[i].tmp);
		free(r[i].tmp);
		r[i].tmp = NULL;
	}
}

/* Fetches the heads of the n models of r into their tmp, beside paths; -1 with err. */
static int
s_fetch_round(wsync_client_t *c, const wsync_fetch_t *f, int n, const char *const *paths,
    wsync_round_model_t *r, int64_t deadline, wsync_err_t *err)
{
	for (int i = 0; i < n; i++) {
		wsync_fetch_temp_t into = { .what = f[i], .known = &r[i].head, .beside = paths[i] };
		wsync_fetched_t one;
		into.what.version = r[i].head.version;
		if (wsync_client_fetch_temp(c, &into, &r[i].tmp, &one, wsync_ms_left(deadline),
		    err) < 0)
			return -1;
		r[i].head = one.head;
	}
	return 0;
}

/* With keys, the round r of n fetched models as one (signround.c); -1 with err (77). */
static int
s_check_round(const wsync_fetch_t *f, int n, const char *const *models,
    const char *const *paths, wsync_round_model_t *r, wsync_err_t *err)
{
	for (int i = 0; i < n; i++)
		wsync_applied_read(paths[i], &r[i].in_place);
	if (wsync_check_round(&(wsync_round_t){ .models = models, .n = n, .keys = f[0].keys,
	    .nkeys = f[0].nkeys }, r) < 0)
		return wsync_err_set(err, EX_SOFTWARE, "out of memory");
	for (int i = 0; i < n; i++)
		if (r[i].why[0] != '\0')
			return wsync_err_set(err, EX_NOPERM, "%s", r[i].why);
	return 0;
}

int
wsync_client_pull_models(wsync_client_t *c, const wsync_fetch_t *f, int n,
    const char *const *paths, wsync_head_t *got, int timeout_ms, wsync_err_t *err)
{
	int64_t deadline = wsync_now_ms() + timeout_ms;
	const char **models = calloc((size_t)n, sizeof(*models));
	wsync_round_model_t *r = calloc((size_t)n, sizeof(*r));
	int rc = -1;

	if (models == NULL || r == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		models[i] = f[i].model;
	/*
	 * One heads request sees every model at one instant of the hub, so the
	 * models of one push come together; a head retired while the round is
	 * fetched starts the round over at the newer heads, within the bound.
	 */
	for (;;) {
		if (wsync_client_heads(c, &(wsync_heads_ask_t){ .models = models, .n = n }, got,
		    NULL, wsync_ms_left(deadline), err) < 0)
			goto out;
		for (int i = 0; i < n; i++) {
			if (got[i].version == 0) {
				wsync_err_set(err, EX_NOINPUT, "model \"%s\" has no version", models[i]);
				goto out;
			}
			r[i].head = got[i];
		}
		if (s_fetch_round(c, f, n, paths, r, deadline, err) == 0)
			break;
		s_drop_temps(r, n);
		if (err->code != EX_NOINPUT || wsync_ms_left(deadline) == 0)
			goto out;
	}
	for (int i = 0; i < n; i++)
		got[i] = r[i].head;
	if (f[0].nkeys > 0 && s_check_round(f, n, models, paths, r, err) < 0)
		goto out;
	/* Every version is whole and verified: only now is any put in place. */
	for (int i = 0; i < n; i++) {
		if (rename(r[i].tmp, paths[i]) < 0) {
			wsync_err_set(err, EX_IOERR, "%s: cannot rename into place: %s", paths[i],
			    strerror(errno));
			goto out;
		}
		/* Also when paths[i] was a link to the same file already: rename left it. */
		unlink(r[i].tmp);
		free(r[i].tmp);
		r[i].tmp = NULL;
	}
	rc = 0;
out:
	if (r != NULL)
		s_drop_temps(r, n);
	free(r);
	free(models);
	return rc;
}
