/*
 * timeit - runs a command RUNS times, after one untimed warm-up run, with
 * stdout to /dev/null, and prints each run's wall time in seconds, one a line:
 *
 *   timeit RUNS COMMAND [ARG...]
 *
 * Exits 1 when a run fails, so a benchmark never reports the speed of an error.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* Runs argv once; its wall time in seconds, or -1 when it did not exit 0. */
static double
s_run(char **argv)
{
	double start = bench_now();
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null < 0 || dup2(null, STDOUT_FILENO) < 0)
			_exit(127);
		execvp(argv[0], argv);
		perror(argv[0]);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return bench_now() - start;
}

int
main(int argc, char **argv)
{
	int runs;

	if (argc < 3 || (runs = atoi(argv[1])) < 1) {
		fputs("usage: timeit RUNS COMMAND [ARG...]\n", stderr);
		return 64;
	}
	for (int i = 0; i <= runs; i++) {
		double t = s_run(argv + 2);
		if (t < 0) {
			fprintf(stderr, "timeit: %s failed\n", argv[2]);
			return 1;
		}
		if (i > 0)
			printf("%.6f\n", t);
	}
	return 0;
}
