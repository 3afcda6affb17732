#!/usr/bin/env bats
# helpers.bats - the shared helpers (tests/test_helper.bash): a test's outcome
# does not depend on the caller's environment.

load test_helper

@test "a caller's stray WSYNC_ENDPOINT, keys and XDG_RUNTIME_DIR change no test's outcome" {
	mkdir -m 700 stray
	run -0 env WSYNC_ENDPOINT="ipc://$TMP/stray/hub" WSYNC_KEY=/nonexistent/key \
	    WSYNC_HUB_KEY=/nonexistent/hub XDG_RUNTIME_DIR="$TMP/stray" \
	    XDG_CONFIG_HOME=/nonexistent XDG_CACHE_HOME=/nonexistent \
	    bats --tap "$FIXTURES/scrubbed.bats"
	assert_line "ok 1 no WSYNC_* or XDG_* variable of the caller's is left"
	assert_line "ok 2 a push and a pull through the default hub reach this test's own hub"
	[ ! -e "$TMP/stray/hub" ] && [ ! -e "$TMP/stray/wsync" ]
}
