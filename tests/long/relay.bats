#!/usr/bin/env bats
# Relays on emulated hosts (issue 18): a root on host 1, relays on hosts 2 and
# 3, three watchers behind each on hosts 4 to 9, every link 100 Mbit/s; each
# watcher follows its relay, then the root (-e RELAY -e ROOT). Emulated hosts
# (tests/hosts.bash); needs root, skipped otherwise.

load ../test_helper
load ../hub_helper
load ../hosts

PORT=7355

logged() {
	grep -q -- "$2" "$TMP/$1.log" 2>/dev/null
}

# start_tree: the root, its two relays and six watchers (a1..a3 behind r2 on
# hosts 4..6, b1..b3 behind r3 on hosts 7..9); ROOT, R2, R3 their endpoints,
# RPID[2], RPID[3] the relays' PIDs, WPID[name] the watchers'.
declare -gA RPID
start_tree() {
	local i w
	hosts_up 9 100mbit
	ROOT="tcp://$(host_addr 1):$PORT"
	R2="tcp://$(host_addr 2):$PORT"
	R3="tcp://$(host_addr 3):$PORT"
	host_run 1 wsync-serve -e "$ROOT" --insecure --store "$HOSTS_DIR/h1/store" 2>>"$TMP/root.log"
	wait_until logged root event=listen
	start_relay 2
	start_relay 3
	i=4
	for w in a1 a2 a3 b1 b2 b3; do
		local relay=$R2
		[[ $w == b* ]] && relay=$R3
		host_run "$i" wsync-watch --id "$w" -e "$relay" -e "$ROOT" -m policy \
			-o "$HOSTS_DIR/h$i/policy.wsync" >"$TMP/$w.out" 2>"$TMP/$w.err"
		WPID[$w]=$HOST_PID
		i=$((i + 1))
	done
	WAIT_S=30 wait_until root_sees 6
}

# start_relay I: the relay on host I, mirroring the root.
start_relay() {
	local ep="tcp://$(host_addr "$1"):$PORT"
	host_run "$1" wsync-serve -e "$ep" --insecure --store "$HOSTS_DIR/h$1/store" \
		--upstream "$ROOT" 2>>"$TMP/r$1.log"
	RPID[$1]=$HOST_PID
	wait_until logged "r$1" "event=listen"
}

# 0 when the root counts $1 workers alive.
root_sees() {
	[ "$(host_exec 1 wsync-inspect -e "$ROOT" --hub --json -t 2 2>/dev/null |
	    jq '[.workers[] | select(.alive)] | length')" = "$1" ]
}

@test "6 watchers behind 2 relays: 20 versions, --wait all, a relay killed mid-transfer, failover, restart" {
	local v w host
	make_versions 20
	make_big 24
	start_tree
	for ((v = 1; v <= 9; v++)); do host_exec 1 wsync-push -e "$ROOT" -m policy "$TMP/v$v.wsync" >/dev/null; done
	run -0 host_exec 1 wsync-push -e "$ROOT" --wait all --timeout 60 -m policy "$TMP/v10.wsync"
	assert_output 10
	for w in a1 a2 a3 b1 b2 b3; do assert_equal "$w $(last_version "$w")" "$w 10"; done
	# Version 11 is 24 MiB: the relay on host 2 dies while it passes it on.
	run -0 host_exec 1 wsync-push -e "$ROOT" -m policy "$TMP/big.safetensors"
	assert_output 11
	wait_until logged r2 "event=commit model=policy version=11 "
	kill -9 "${RPID[2]}"
	for ((v = 12; v <= 15; v++)); do host_exec 1 wsync-push -e "$ROOT" -m policy "$TMP/v$v.wsync" >/dev/null; done
	for w in a1 a2 a3; do WAIT_S=60 wait_until watcher_at "$w" 15; done
	start_relay 2
	WAIT_S=30 wait_until logged r2 "event=commit model=policy version=15 "
	for ((v = 16; v <= 19; v++)); do host_exec 1 wsync-push -e "$ROOT" -m policy "$TMP/v$v.wsync" >/dev/null; done
	run -0 host_exec 1 wsync-push -e "$ROOT" --wait all --timeout 60 -m policy "$TMP/v20.wsync"
	assert_output 20
	for w in a1 a2 a3 b1 b2 b3; do
		assert_equal "$w $(last_version "$w")" "$w 20"
		run -0 versions_increase "$w"
	done
	for ((host = 4; host <= 9; host++)); do
		run -0 host_exec "$host" wsync-inspect --json "$HOSTS_DIR/h$host/policy.wsync"
		assert_equal "$(jq -r .content_id <<<"$output")" "$(content_of "$TMP/v20.wsync")"
	done
}

@test "a watcher stopped behind a relay is named in the root's timeout with its relay" {
	make_versions 1
	start_tree
	kill -STOP "${WPID[b2]}"
	run -75 --separate-stderr host_exec 1 wsync-push -e "$ROOT" --wait all --timeout 8 -m policy "$TMP/v1.wsync"
	assert_output 1
	assert_equal "${stderr_lines[0]}" "wsync-push: policy version 1: 1 of 6 workers have not applied it after 8.0 s"
	assert_regex "${stderr_lines[1]}" "^  b2: has no version, last seen [0-9.]+ s ago, behind relay [^ ]+:${RPID[3]}\$"
	kill -CONT "${WPID[b2]}"
}

@test "bench/hosts-relay: 8 hosts through a binary relay tree cost the root's link 2 copies, hub-direct 8" {
	local row direct tree
	[ -x "$ROOT/${BUILD:-build/cc}/bench/mkmodel" ] || skip "no bench/mkmodel in ${BUILD:-build/cc}"
	run -0 env BOUND_S=120 "$ROOT/bench/hosts-relay" 8 25mbit 8
	echo "$output" | sed 's/^/# /' >&3
	row=$(grep '^| 8 |' <<<"$output")
	read -r direct tree < <(grep -o 'root sent [0-9.]* copies' <<<"$row" | awk '{ print $3 }' | paste -sd ' ')
	# Bytes, not time: each watcher once from the root, or the root's two children once each.
	awk -v d="$direct" -v t="$tree" 'BEGIN { exit !(d >= 8 && d <= 8.4 && t >= 2 && t <= 2.1) }'
}
