#!/usr/bin/env bats
# Network faults: a hub and 3 watchers, each on its own emulated host
# (tests/hosts.bash; the hub's store on its own host, so every version crosses
# the network). nftables drops 5% of the hub's packets each way, a proxy on
# each watcher's host delays every byte by 50 ms each way (the kernel has no
# netem), and one watcher is cut off for 10 s. While it is, push --wait all
# names it; after, every watcher converges on the head with verified bytes.
# Needs root, ip netns and nft; skipped otherwise.

load ../test_helper
load ../hub_helper
load ../hosts

PORT=7355

setup_file() {
	hosts_setup_file
	command -v nft >/dev/null ||
		skip "network fault tests need nft (scripts/deps install long)"
}

setup() {
	hosts_setup
	hosts_up 4 1gbit
	STORE="$HOSTS_DIR/h1/store"
}

# Watcher wN runs on host N + 1.
on_watcher() {
	local n=${1#w}
	shift
	host_exec $((n + 1)) "$@"
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
	# No keys between the hosts (this test is about the network): --insecure.
	host_run 1 wsync-serve -e "tcp://0.0.0.0:$PORT" --insecure --store "$STORE" \
		2>>"$TMP/hub.log"
	wait_until hub_listening
	pub=$(sed -n 's/.*event=listen .* pub=tcp:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$TMP/hub.log")
	[ -n "$pub" ]
	# 5% of the hub's packets lost, each way.
	host_exec 1 nft -f - <<NFT
table inet wsync_loss {
	chain in { type filter hook input priority 0; iifname "eth0" numgen random mod 100 < 5 drop; }
	chain out { type filter hook output priority 0; oifname "eth0" numgen random mod 100 < 5 drop; }
}
NFT
	for n in 1 2 3; do
		host_run $((n + 1)) "$PY" "$FIXTURES/delayproxy.py" 50 "$(host_addr 1)" "$PORT" \
			"$pub" >"$TMP/proxy-w$n.out" 2>&1
		wait_until proxy_ready "w$n"
		host_run $((n + 1)) wsync-watch --id "w$n" -e "tcp://127.0.0.1:$PORT" \
			-m policy -o "$HOSTS_DIR/h$((n + 1))/w$n.wsync" >"$TMP/w$n.out" 2>"$TMP/w$n.err"
	done
	run -0 host_exec 1 wsync-push -e "tcp://127.0.0.1:$PORT" -m policy v1.wsync
	WAIT_S=60 wait_until all_at 1
	# And the hub has every ack (they cross the lossy link after the watchers print).
	run -0 host_exec 1 wsync-push -e "tcp://127.0.0.1:$PORT" -t 30 --wait all --wait-for 1 -m policy

	# Cut w3 off: every packet to or from it dropped at the hub.
	t0=$SECONDS
	host_exec 1 nft -f - <<NFT
table inet wsync_cut {
	chain in { type filter hook input priority -1; ip saddr $(host_addr 4) drop; }
	chain out { type filter hook output priority -1; ip daddr $(host_addr 4) drop; }
}
NFT
	run -75 --separate-stderr host_exec 1 wsync-push -e "tcp://127.0.0.1:$PORT" -t 4 --wait all \
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
	run -0 host_exec 1 wsync-push -e "tcp://127.0.0.1:$PORT" -m policy v3.wsync
	# The partition lasts 10 s: this is the fault's length, not a synchronization.
	sleep $((10 - (SECONDS - t0) > 0 ? 10 - (SECONDS - t0) : 0))
	[ "$(last_version w3)" -eq 1 ]
	cut=$((SECONDS - t0))
	host_exec 1 nft delete table inet wsync_cut
	healed=$(date +%s.%N)
	WAIT_S=60 wait_until all_at 3
	t1=$(date +%s.%N)
	for n in 1 2 3; do
		run -0 on_watcher "w$n" wsync-inspect --verify "$HOSTS_DIR/h$((n + 1))/w$n.wsync"
		run -0 on_watcher "w$n" wsync-inspect --json "$HOSTS_DIR/h$((n + 1))/w$n.wsync"
		[ "$(jq -r .content_id <<<"$output")" = "$(content_of v3.wsync)" ]
		versions_increase "w$n"
	done
	awk -v t="$cut" -v d="$(awk -v a="$healed" -v b="$t1" 'BEGIN {print b - a}')" \
		'BEGIN { printf "# partitioned for %d s; all 3 watchers on version 3, verified, %.2f s after healing (5%% loss and 50 ms delay each way throughout)\n", t, d }' >&3
}
