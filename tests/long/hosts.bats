#!/usr/bin/env bats
# The emulated hosts of tests/hosts.bash: hosts that reach each other, see
# only their own files, and whose links carry what tbf lets through. Needs
# root and ip netns; skipped otherwise.

load ../test_helper
load ../hosts

# rate_within MBIT BYTES SECONDS: 0 when BYTES in SECONDS is MBIT within 20%.
rate_within() {
	awk -v m="$1" -v b="$2" -v s="$3" 'BEGIN {
		r = b * 8 / s / 1e6
		printf "# %.2f Mbit/s through a %s Mbit/s link\n", r, m
		exit !(r >= 0.8 * m && r <= 1.2 * m) }'
}

@test "three hosts reach each other by TCP at their own addresses" {
	local from to
	hosts_up 3 100mbit
	for from in 1 2 3; do
		for to in 1 2 3; do
			[ "$from" -ne "$to" ] || continue
			run -0 host_tcp_seconds "$from" "$to" 100000
		done
	done
	run -0 host_exec 2 ip -4 -o addr show dev eth0
	[[ "$output" == *" inet 10.77.0.2/24 "* ]]
}

@test "a host sees its own directory and not another host's" {
	hosts_up 3 100mbit
	host_exec 1 sh -c "mkdir '$HOSTS_DIR/h1/store' && echo one >'$HOSTS_DIR/h1/store/v1'"
	host_exec 2 sh -c "echo two >'$HOSTS_DIR/h2/mine'"
	run -0 host_exec 1 cat "$HOSTS_DIR/h1/store/v1"
	assert_output one
	run -0 host_exec 2 ls -A "$HOSTS_DIR/h1"
	assert_output ""
	run -0 host_exec 3 ls -A "$HOSTS_DIR/h1" "$HOSTS_DIR/h2"
	assert_output "$(printf '%s:\n\n%s:' "$HOSTS_DIR/h1" "$HOSTS_DIR/h2")"
	run -0 host_exec 1 ls -A "$HOSTS_DIR/h2"
	assert_output ""
	# Nor does the machine outside the hosts.
	run -0 ls -A "$HOSTS_DIR/h1"
	assert_output ""
}

@test "a 5 Mbit/s link carries plain TCP at 5 Mbit/s within 20%" {
	local s
	hosts_up 2 5mbit
	s=$(host_tcp_seconds 1 2 $((3 << 20)))
	rate_within 5 $((3 << 20)) "$s" >&3
}

@test "a 100 Mbit/s link carries plain TCP at 100 Mbit/s within 20%, and its counters count it" {
	local s sent received
	hosts_up 2 100mbit
	s=$(host_tcp_seconds 1 2 $((32 << 20)))
	rate_within 100 $((32 << 20)) "$s" >&3
	sent=$(host_sent 1)
	received=$(host_received 2)
	# The payload and no more than 5% of headers and acks on top.
	((sent >= 32 << 20 && sent <= (32 << 20) * 105 / 100))
	((received >= 32 << 20 && received <= (32 << 20) * 105 / 100))
}

@test "host_rate slows one host's link to 20 Mbit/s within 20%, both ways, and the others' not" {
	local s
	hosts_up 3 100mbit
	host_rate 2 20mbit
	s=$(host_tcp_seconds 1 2 $((4 << 20)))
	rate_within 20 $((4 << 20)) "$s" >&3
	s=$(host_tcp_seconds 2 1 $((4 << 20)))
	rate_within 20 $((4 << 20)) "$s" >&3
	s=$(host_tcp_seconds 1 3 $((16 << 20)))
	rate_within 100 $((16 << 20)) "$s" >&3
}

@test "two hosts sending to a third share its link" {
	local p1 p2 t0 t1
	hosts_up 3 20mbit
	t0=$(date +%s.%N)
	host_tcp_seconds 1 3 $((4 << 20)) >/dev/null &
	p1=$!
	host_tcp_seconds 2 3 $((4 << 20)) >/dev/null &
	p2=$!
	wait "$p1"
	wait "$p2"
	t1=$(date +%s.%N)
	# 8 MiB into one 20 Mbit/s link: 3.4 s, whatever each sender's share.
	rate_within 20 $((8 << 20)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >&3
}

@test "hosts_down stops what ran on the hosts and leaves no namespace, twice" {
	local pid id
	hosts_up 3 100mbit
	id=$HOSTS_ID
	host_run 2 sleep 1000
	pid=$HOST_PID
	run -0 ip netns list
	[[ "$output" == *"$id-h3"* && "$output" == *"$id-br"* ]]
	hosts_down
	! kill -0 "$pid" 2>/dev/null
	run -0 ip netns list
	[[ "$output" != *"$id-"* ]]
	hosts_down
}
