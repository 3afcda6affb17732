#!/usr/bin/env bats
# A slow link slows a transfer down; it never restarts it (issue 16): a
# watcher behind a 5 Mbit/s link receives a 32 MiB version over the socket in
# one go, about as fast as plain TCP on the same link measured in the same
# run; a watcher behind 100 Mbit/s follows each step as a delta that it
# rebuilds while it arrives (bench/hosts-delta, issue 28). Emulated hosts
# (tests/hosts.bash); needs root, skipped otherwise.

load ../test_helper
load ../hub_helper
load ../hosts

PORT=7355

hub_listening() {
	grep -q 'event=listen' "$TMP/hub.log" 2>/dev/null
}

@test "a watcher behind a 5 Mbit/s link receives 32 MiB with no reconnect, within 1.2x plain TCP" {
	local hub tcp t0 t1 secs
	hosts_up 2 5mbit
	hub="tcp://$(host_addr 1):$PORT"
	make_big 32
	host_run 1 wsync-serve -e "$hub" --insecure --store "$HOSTS_DIR/h1/store" 2>>"$TMP/hub.log"
	wait_until hub_listening
	run -0 host_exec 1 wsync-push -e "$hub" -m policy "$TMP/big.safetensors"
	tcp=$(host_tcp_seconds 1 2 "$(stat -c %s "$TMP/big.safetensors")")
	t0=$(date +%s.%N)
	host_run 2 wsync-watch --id w -e "$hub" -m policy -o "$HOSTS_DIR/h2/w.wsync" \
		>"$TMP/w.out" 2>"$TMP/w.err"
	# Bounded at three times plain TCP: a watcher that restarts never gets there.
	WAIT_S=$(awk -v t="$tcp" 'BEGIN { printf "%d", 3 * t + 10 }') wait_until watcher_at w 1 ||
		{ tail -n 4 "$TMP/w.err"; false; }
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	echo "# plain TCP $tcp s, the watcher $secs s, $(grep -c 'lost the hub' "$TMP/w.err") reconnects" >&3
	run -0 grep -c 'event=hello role=watch worker=w ' "$TMP/hub.log"
	assert_output 1
	run -1 grep 'lost the hub' "$TMP/w.err"
	awk -v w="$secs" -v t="$tcp" 'BEGIN { exit !(w <= 1.2 * t) }'
	run -0 host_exec 2 wsync-inspect --json "$HOSTS_DIR/h2/w.wsync"
	[ "$(jq -r .content_id <<<"$output")" = "$(wsync-convert -m policy big.safetensors - |
		wsync-inspect --json - | jq -r .content_id)" ]
}

@test "bench/hosts-delta: a watcher behind 100 Mbit/s follows each step as a delta, rebuilt while it arrives" {
	[ -x "$ROOT/${BUILD:-build/cc}/bench/mkstep" ] || skip "no bench/mkstep in ${BUILD:-build/cc}"
	# Exits 0 only when every step was acked, each as a delta (the hub's log says so).
	run -0 --separate-stderr env BOUND_S=60 "$ROOT/bench/hosts-delta" 32 100mbit 1
	echo "$output" | sed 's/^/# /' >&3
	assert_line --index 0 "| row | seconds | against |"
	assert_line --index 2 --regexp '^\| commit to ack, links at 100mbit \(best of runs\) \| [0-9.]+ \| [0-9.]+x diff \+ wire \+ rebuild; [0-9.]+x diff \+ the larger of wire and rebuild \|$'
	assert_line --index 3 --regexp "^\\| the hub's diff in it \\| [0-9.]+ \\| - \\|\$"
	assert_line --index 4 --regexp '^\| commit to ack, links at 10gbit \(best of runs\) \| [0-9.]+ \| - \|$'
	assert_line --index 5 --regexp '^\| the rebuild: that, less its diff \([0-9.]+ s\) \| -?[0-9.]+ \| - \|$'
	assert_line --index 6 --regexp '^\| the delta \([0-9]+ bytes\) over plain TCP at 100mbit: the wire \| [0-9.]+ \| - \|$'
	assert_line --index 7 --regexp '^\| diff \+ wire \+ rebuild: the rebuild after the delta is in \| [0-9.]+ \| - \|$'
	assert_line --index 8 --regexp '^\| diff \+ the larger of wire and rebuild: the rebuild while it arrives \| [0-9.]+ \| - \|$'
}
