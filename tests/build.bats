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

# upward_calls LIB: each call in the archive LIB from a file to a function of
# a client layer above its own, or of a room beside its own, one a line. The
# client's layers as HACKING.md draws them: the connection (1); fetching, the
# push session and the follower, rooms beside each other (2); the watcher, a
# relay's thread and the push grammar over the push session (3). Every other
# library file is below them all (0), but for the hub's side of a relay
# (hub_relay.c), which starts the relay's thread and reads what it mirrored:
# one relay in two files.
upward_calls() {
	nm -A "$1" | awk '
		function room(f) {
			if (f == "client") return "1 conn"
			if (f ~ /^client_(fetch|delta|select)$/) return "2 fetch"
			if (f == "push_session" || f ~ /^client_(upload|slot|sign|pushdelta|commit)$/)
				return "2 push"
			if (f == "follow") return "2 follow"
			if (f ~ /^(watch|relay_follow|batch)$/) return "3 top"
			return "0 below"
		}
		{
			split($1, a, ":"); f = a[2]; sub(/\.o$/, "", f)
			if ($2 == "T") def[$3] = f
			else if ($2 == "U") use[f, $3] = 1
		}
		END {
			for (k in use) {
				split(k, p, SUBSEP)
				if (!(p[2] in def) || def[p[2]] == p[1] ||
				    (p[1] == "hub_relay" && def[p[2]] == "relay_follow"))
					continue
				split(room(p[1]), from, " "); split(room(def[p[2]]), to, " ")
				if (to[1] > from[1] || (to[1] == 2 && from[1] == 2 && to[2] != from[2]))
					print p[1] ".c calls " p[2] " of " def[p[2]] ".c"
			}
		}' | sort
}

@test "no library file calls a client layer above it, nor a room beside its own" {
	local release
	release=$(s_release)
	[ -e "$release/libwsync.a" ] || { echo "no release build in $release (run make)"; false; }
	run -0 upward_calls "$release/libwsync.a"
	assert_output ""
}
