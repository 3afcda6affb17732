#!/usr/bin/env bats
# Network faults: a hub and 3 watchers in their own network namespaces, each
# watcher joined to the hub by a veth pair. nftables drops 5% of the hub's
# packets each way, a proxy in each watcher's namespace delays every byte by
# 50 ms each way (the kernel has no netem), and one watcher is cut off for
# 10 s. While it is, push --wait all names it; after, every watcher converges
# on the head with verified bytes. Needs root and ip netns; skipped otherwise.

load ../test_helper
load ../hub_helper

PORT=7355

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "network fault tests need root"
	command -v ip >/dev/null && command -v nft >/dev/null ||
		skip "network fault tests need ip and nft (scripts/deps install long)"
	ip netns add "wsync-probe-$$" 2>/dev/null || skip "ip netns does not work here"
	ip netns del "wsync-probe-$$"
}

setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	STORE="$TMP/store"
	NS="wsync$$"
	local n
	ip netns add "$NS-hub"
	ip -n "$NS-hub" link set lo up
	for n in 1 2 3; do
		ip netns add "$NS-w$n"
		ip -n "$NS-w$n" link set lo up
		ip link add "vh$n" netns "$NS-hub" type veth peer name vw netns "$NS-w$n"
		ip -n "$NS-hub" addr add "10.9.$n.1/24" dev "vh$n"
		ip -n "$NS-hub" link set "vh$n" up
		ip -n "$NS-w$n" addr add "10.9.$n.2/24" dev vw
		ip -n "$NS-w$n" link set vw up
	done
}

teardown() {
	hub_teardown
	local ns
	for ns in hub w1 w2 w3; do
		ip netns del "$NS-$ns" 2>/dev/null || true
	done
}

in_ns() {
	local ns=$1
	shift
	ip netns exec "$NS-$ns" "$@"
}

hub_listening() {
	grep -q 'event=listen' "$TMP/hub.log" 2>/dev/null
}

proxy_ready() {
	grep -q ready "$TMP/proxy-$1.out" 2>/dev/null
}

all_at() {
	watcher_at w1 "$1" && watcher_at w2 "$1" && watcher_at w3 "$1"
}

@test "watchers behind 5% loss, 50 ms delay and a 10 s partition converge, and push --wait names the cut one" {
	local n pub t0 t1 healed cut
	make_versions 3
	# Started by ip itself, not through in_ns: $! must be the process, for teardown.
	# No keys between the namespaces (this test is about the network): --insecure.
	ip netns exec "$NS-hub" wsync-serve -e "tcp://0.0.0.0:$PORT" --insecure --store "$STORE" \
		2>>"$TMP/hub.log" &
	HUB_PID=$!
	PIDS+=("$HUB_PID")
	wait_until hub_listening
	pub=$(sed -n 's/.*event=listen .* pub=tcp:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$TMP/hub.log")
	[ -n "$pub" ]
	# 5% of the hub's packets lost, each way.
	in_ns hub nft -f - <<NFT
table inet wsync_loss {
	chain in { type filter hook input priority 0; iifname "vh*" numgen random mod 100 < 5 drop; }
	chain out { type filter hook output priority 0; oifname "vh*" numgen random mod 100 < 5 drop; }
}
NFT
	for n in 1 2 3; do
		ip netns exec "$NS-w$n" "$PY" "$FIXTURES/delayproxy.py" 50 "10.9.$n.1" "$PORT" \
			"$pub" >"$TMP/proxy-w$n.out" 2>&1 &
		PIDS+=("$!")
		wait_until proxy_ready "w$n"
		ip netns exec "$NS-w$n" wsync-watch --id "w$n" -e "tcp://127.0.0.1:$PORT" \
			-m policy -o "$TMP/w$n.wsync" >"$TMP/w$n.out" 2>"$TMP/w$n.err" &
		PIDS+=("$!")
	done
	run -0 in_ns hub wsync-push -e "tcp://127.0.0.1:$PORT" -m policy v1.wsync
	WAIT_S=60 wait_until all_at 1
	# And the hub has every ack (they cross the lossy link after the watchers print).
	run -0 in_ns hub wsync-push -e "tcp://127.0.0.1:$PORT" -t 30 --wait all --wait-for 1 -m policy

	# Cut w3 off: every packet to or from it dropped at the hub.
	t0=$SECONDS
	in_ns hub nft -f - <<NFT
table inet wsync_cut {
	chain in { type filter hook input priority -1; ip saddr 10.9.3.2 drop; }
	chain out { type filter hook output priority -1; ip daddr 10.9.3.2 drop; }
}
NFT
	run -75 --separate-stderr in_ns hub wsync-push -e "tcp://127.0.0.1:$PORT" -t 4 --wait all \
		-m policy v2.wsync
	assert_output 2
	# The seconds are what was left of -t after the upload.
	[[ "${stderr_lines[0]}" =~ ^"wsync-push: policy version 2: 1 of 3 workers have not applied it after "[0-9.]+" s"$ ]] ||
		{ echo "${stderr_lines[0]}"; false; }
	[[ "${stderr_lines[*]}" == *"w3: has version 1, last seen"* ]] ||
		{ printf '%s\n' "${stderr_lines[@]}"; false; }
	[[ "${stderr_lines[*]}" != *"w1:"* && "${stderr_lines[*]}" != *"w2:"* ]]
	WAIT_S=60 wait_until watcher_at w1 2
	WAIT_S=60 wait_until watcher_at w2 2
	[ "$(last_version w3)" -eq 1 ]
	run -0 in_ns hub wsync-push -e "tcp://127.0.0.1:$PORT" -m policy v3.wsync
	# The partition lasts 10 s: this is the fault's length, not a synchronization.
	sleep $((10 - (SECONDS - t0) > 0 ? 10 - (SECONDS - t0) : 0))
	[ "$(last_version w3)" -eq 1 ]
	cut=$((SECONDS - t0))
	in_ns hub nft delete table inet wsync_cut
	healed=$(date +%s.%N)
	WAIT_S=60 wait_until all_at 3
	t1=$(date +%s.%N)
	for n in 1 2 3; do
		run -0 wsync-inspect --verify "$TMP/w$n.wsync"
		[ "$(content_of "$TMP/w$n.wsync")" = "$(content_of v3.wsync)" ]
		versions_increase "w$n"
	done
	awk -v t="$cut" -v d="$(awk -v a="$healed" -v b="$t1" 'BEGIN {print b - a}')" \
		'BEGIN { printf "# partitioned for %d s; all 3 watchers on version 3, verified, %.2f s after healing (5%% loss and 50 ms delay each way throughout)\n", t, d }' >&3
}
