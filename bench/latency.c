/*
 * latency - update latency: pushes a file as the next version of a model and
 * waits until every live watcher applied it, RUNS times after one warm-up:
 *
 *   latency FILE MODEL RUNS [COUNT]
 *
 * Prints seconds per update, one a line. The hub is $WSYNC_ENDPOINT; the
 * watchers are started by bench/run. The pusher stays connected, as a trainer's
 * coprocess would, so process start-up is not counted. With COUNT it waits for
 * that many workers instead of all; with $STOP_PID set it stops that process
 * (SIGSTOP) as soon as each version is committed, while it fetches, and lets
 * it go (SIGCONT) after the wait.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "wsync.h"

int
main(int argc, char **argv)
{
	const char *model;
	wsync_client_t *c;
	wsync_err_t err;
	int runs;

	const char *stop = getenv("STOP_PID");
	pid_t victim = stop != NULL ? (pid_t)atoi(stop) : 0;
	unsigned count = 0;

	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: latency FILE MODEL RUNS [COUNT]\n");
		return 64;
	}
	if (argc == 5)
		count = (unsigned)atoi(argv[4]);
	model = argv[2];
	runs = atoi(argv[3]);
	c = wsync_client_new(&(wsync_client_opts_t){ .role = "push", .models = &model,
	    .nmodels = 1, .timeout_ms = 5000 }, &err);
	if (c == NULL) {
		fprintf(stderr, "latency: %s\n", err.msg);
		return err.code;
	}
	for (int r = 0; r <= runs; r++) {
		wsync_push_item_t item = { .model = model, .path = argv[1] };
		double start = bench_now();
		char *missing = NULL;

		int rc = wsync_client_push(c, &item, 1, NULL, 0, 60000, &err);

		if (rc == 0 && victim > 0)
			kill(victim, SIGSTOP);
		if (rc == 0)
			rc = wsync_client_wait(c, model, item.version, &(wsync_wait_t){ .mode =
			    count ? WSYNC_WAIT_COUNT : WSYNC_WAIT_ALL, .count = count }, 60000,
			    &missing, &err);
		if (rc < 0) {
			fprintf(stderr, "latency: %s\n%s", err.msg, missing ? missing : "");
			return err.code;
		}
		if (r > 0)
			printf("%.9f\n", bench_now() - start);
		if (victim > 0)
			kill(victim, SIGCONT);
	}
	wsync_client_destroy(&c);
	return 0;
}
