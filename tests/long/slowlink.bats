#!/usr/bin/env bats
# A slow link slows a transfer down; it never restarts it (issue 16): a
# watcher behind a 5 Mbit/s link receives a 32 MiB version over the socket in
# one go, about as fast as plain TCP on the same link measured in the same
# run. Emulated hosts (tests/hosts.bash); needs root, skipped otherwise.

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
