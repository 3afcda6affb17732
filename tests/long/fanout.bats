#!/usr/bin/env bats
# Watchers straight from one hub (issue 18): each gets the version once, and
# none reconnects on the way, however thinly the hub's link is shared.
# bench/hosts-fanout runs 16 watchers over 100 Mbit/s links; this runs 4 over
# 25 Mbit/s links, the same share of the hub's link per watcher (6.25 Mbit/s,
# below the 11 Mbit/s at which a watcher used to start a version over) in a
# quarter of the time. Emulated hosts (tests/hosts.bash); needs root, skipped
# otherwise.

load ../test_helper
load ../hosts

@test "4 watchers sharing a hub's 25 Mbit/s link get 16 MiB once each, with no reconnect" {
	local row copies reconnects
	run -0 env BOUND_S=120 "$ROOT/bench/hosts-fanout" 4 16 25mbit
	echo "$output" | sed 's/^/# /' >&3
	row=${lines[2]}
	copies=$(awk -F'|' '{ gsub(/ /, "", $7); print $7 }' <<<"$row")
	reconnects=$(awk -F'|' '{ gsub(/ /, "", $8); print $8 }' <<<"$row")
	[ "$reconnects" -eq 0 ]
	awk -v c="$copies" 'BEGIN { exit !(c >= 1 && c <= 1.05) }'
}
