#!/usr/bin/env bats
# What every sync program does alike, on real processes.

load test_helper
load hub_helper

@test "push, pull and inspect exit 69 at once when the ipc endpoint has no socket" {
	make_versions 1
	# Their default bound is 5 s: the answer must come well before.
	run -69 timeout 4 wsync-push -m policy v1.wsync
	assert_output "wsync-push: cannot reach $WSYNC_ENDPOINT: no socket there (is wsync-serve running?)"
	run -69 timeout 4 wsync-pull -m policy
	assert_output "wsync-pull: cannot reach $WSYNC_ENDPOINT: no socket there (is wsync-serve running?)"
	run -69 timeout 4 wsync-inspect --hub
	assert_output "wsync-inspect: cannot reach $WSYNC_ENDPOINT: no socket there (is wsync-serve running?)"
}

@test "every program exits 69 with a clear message when no hub answers" {
	make_versions 1
	WSYNC_ENDPOINT="tcp://127.0.0.1:$(free_port)"
	run -69 wsync-push --timeout 1 -m policy v1.wsync
	assert_output "wsync-push: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 wsync-pull --timeout 1 -m policy
	assert_output "wsync-pull: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 --separate-stderr wsync-watch --timeout 1 -m policy -o w.wsync
	assert_equal "${stderr_lines[-1]}" "wsync-watch: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 wsync-inspect -t 1 --hub
	assert_output "wsync-inspect: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
}
