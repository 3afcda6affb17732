/* store_sidecar.c - VERSION.json sidecars: who pushed a version, when, and to whom. */
/* {"pusher", "time", "targets"} beside each VERSION.wsync (wsync-serve(1)). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "io_int.h"
#include "proto_int.h"
#include "store_impl_int.h"

#define S_SIDECAR_MAX (1 << 20)         /* bytes a sidecar may have */

void
wsync_sidecar_free(wsync_version_t *v)
{
	free(v->pusher);
	for (size_t i = 0; i < v->ntargets; i++)
		free(v->targets[i]);
	free(v->targets);
	v->pusher = NULL;
	v->targets = NULL;
	v->ntargets = 0;
}

int
wsync_sidecar_set(wsync_version_t *v, const char *pusher, const char *const *targets,
    size_t n)
{
	v->targets = NULL;
	v->ntargets = 0;
	if ((v->pusher = strdup(pusher)) == NULL)
		return -1;
	if (targets == NULL)
		return 0;
	if ((v->targets = calloc(n > 0 ? n : 1, sizeof(*v->targets))) == NULL)
		return -1;
	for (; v->ntargets < n; v->ntargets++)
		if ((v->targets[v->ntargets] = strdup(targets[v->ntargets])) == NULL)
			return -1;
	return 0;
}

int
wsync_sidecar_write(const wsync_store_t *s, char *tmp, const wsync_commit_info_t *info,
    wsync_err_t *err)
{
	json_t *doc = json_object(), *targets = info->targets ? json_array() : json_null();
	char *text = NULL;
	int fd = -1, rc = -1;

	for (size_t i = 0; info->targets != NULL && i < info->ntargets; i++)
		json_array_append_new(targets, json_string(info->targets[i]));
	json_object_set_new(doc, "pusher", json_string(info->pusher));
	json_object_set_new(doc, "time", json_real(info->time));
	json_object_set_new(doc, "targets", targets);
	if ((text = json_dumps(doc, JSON_COMPACT)) == NULL) {
		wsync_err_set(err, EX_SOFTWARE, "out of memory");
		goto done;
	}
	if (wsync_store_path(tmp, PATH_MAX, "%s/sidecar.XXXXXX", s->uploads) < 0 ||
	    (fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot create a temporary file: %s",
		    s->uploads, strerror(errno));
		tmp[0] = '\0';
		goto done;
	}
	if (wsync_write_all(fd, text, strlen(text)) < 0 || wsync_write_all(fd, "\n", 1) < 0 ||
	    fsync(fd) < 0) {
		wsync_err_set(err, EX_IOERR, "%s: cannot write: %s", tmp, strerror(errno));
		unlink(tmp);
		tmp[0] = '\0';
		goto done;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(doc);
	return rc;
}

int
wsync_sidecar_read(const char *path, wsync_version_t *v, char *why, size_t whylen)
{
	json_error_t jerr;
	json_t *doc = NULL, *pusher, *time, *targets;
	struct stat st;
	int rc = -1;

	snprintf(why, whylen, "out of memory");
	if (stat(path, &st) < 0 || st.st_size > S_SIDECAR_MAX) {
		snprintf(why, whylen, "%s", errno == ENOENT ? "missing" : "unreadable or too large");
		return -1;
	}
	if ((doc = json_load_file(path, 0, &jerr)) == NULL) {
		snprintf(why, whylen, "%s", jerr.text);
		return -1;
	}
	pusher = json_object_get(doc, "pusher");
	time = json_object_get(doc, "time");
	targets = json_object_get(doc, "targets");
	if (!json_is_string(pusher) || !json_is_number(time) ||
	    !(json_is_null(targets) || json_is_array(targets))) {
		snprintf(why, whylen, "fields pusher, time or targets missing or mistyped");
		goto done;
	}
	if ((v->pusher = strdup(json_string_value(pusher))) == NULL)
		goto done;
	v->time = json_number_value(time);
	if (json_is_array(targets)) {
		size_t n = json_array_size(targets);
		if ((v->targets = calloc(n > 0 ? n : 1, sizeof(*v->targets))) == NULL)
			goto done;
		for (; v->ntargets < n; v->ntargets++) {
			const char *t = json_string_value(json_array_get(targets, v->ntargets));
			if (t == NULL || wsync_id_check(t) < 0) {
				snprintf(why, whylen, "target %zu is not a worker id", v->ntargets);
				goto done;
			}
			if ((v->targets[v->ntargets] = strdup(t)) == NULL)
				goto done;
		}
	}
	rc = 0;
done:
	json_decref(doc);
	return rc;
}
