#!/usr/bin/env bats
# build.bats - what `make` builds: a release holds none of the library's
# test-only fault hooks; only the test build that `make check` runs has them.

load test_helper

# The release build beside the suite's test build (tests/run sets BUILD to
# BUILD-test; by hand, build/cc).
s_release() {
	local build=${BUILD:-build/cc}
	echo "$ROOT/${build%-test}"
}

@test "a release build's programs and library hold no WSYNC_TEST_ string" {
	local release f files=()
	release=$(s_release)
	for f in "$release"/bin/wsync-* "$release"/libwsync.so.* "$release"/libwsync.a; do
		[ -e "$f" ] && files+=("$f")
	done
	[ "${#files[@]}" -ge 3 ] || { echo "no release build in $release (run make)"; false; }
	run -0 bash -c 'for f; do strings -a "$f" | grep -H --label="$f" WSYNC_TEST_; done; true' \
	    _ "${files[@]}"
	assert_output ""
}

@test "the test build's hub has the crash, spoiled-get, delta-stop, foreign-model, push-gate, relay-gate and relay-rate hooks" {
	[[ ${BUILD:-} == *-test ]] || skip "the suite runs against a release build"
	run -0 bash -c 'strings -a "$1" | grep -o "WSYNC_TEST_[A-Z_]*" | sort -u' _ \
	    "$WSYNC_BIN/wsync-serve"
	assert_output $'WSYNC_TEST_CRASH_AT\nWSYNC_TEST_DELTA_STOP\nWSYNC_TEST_FLIP_GET\nWSYNC_TEST_FOREIGN_MODEL\nWSYNC_TEST_PUSH_GATE\nWSYNC_TEST_RELAY_GATE\nWSYNC_TEST_RELAY_RATE'
}
