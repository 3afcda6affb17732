#!/usr/bin/env bats
# A fleet on emulated hosts (issue 29, tests/hosts.bash): every host runs a
# relay that names only the root (wsync-serve --upstream ROOT) and a watcher
# on its own relay; the root decides where each relay takes a version from.
# Each test checks what every watcher applied, never how fast: a star (the
# root placing nobody) converges too, slowly, within the generous bounds.
# Needs root, skipped otherwise.

load ../test_helper
load ../hub_helper
load ../hosts

# make_model NAME MIB SEED: $TMP/NAME.wsync, MIB MiB of random bytes drawn
# from SEED, model $FLEET_MODEL.
make_model() {
	make_big "$2" "$3" "$1"
	wsync-convert -m "$FLEET_MODEL" "$TMP/$1.safetensors" "$TMP/$1.wsync"
	rm -f "$TMP/$1.safetensors"
}

# push FILE [wsync-push option...]: pushes FILE at the root from host 1.
push() {
	local file=$1
	shift
	host_exec 1 wsync-push -e "$FLEET_ROOT" -m "$FLEET_MODEL" "$@" "$file"
}

# all_at V FIRST LAST [SKIP]: the watchers of hosts FIRST..LAST, but SKIP,
# printed version V.
all_at() {
	local i
	for ((i = $2; i <= $3; i++)); do
		((i == ${4:-0})) || fleet_applied "$i" "$1" || return 1
	done
}

# holds FILE FIRST LAST [SKIP]: the output of every watcher of hosts
# FIRST..LAST, but SKIP, has FILE's content id.
# (Not i: bats's run clobbers it.)
holds() {
	local host want
	want=$(content_of "$1")
	for ((host = $2; host <= $3; host++)); do
		((host == ${4:-0})) && continue
		run -0 host_exec "$host" wsync-inspect --json "$HOSTS_DIR/h$host/$FLEET_MODEL.wsync"
		assert_equal "host $host $(jq -r .content_id <<<"$output")" "host $host $want"
	done
}

# increasing FIRST LAST: every watcher of hosts FIRST..LAST printed only
# increasing versions, never one older than or the same as one before.
increasing() {
	local host
	for ((host = $1; host <= $2; host++)); do
		run -0 awk 'NR > 1 && $1 <= last { print "version " $1 " after " last; exit 1 }
		    { last = $1 }' < <(fleet_versions "$host")
	done
}

# 0 when the root counts $1 workers alive.
root_sees() {
	[ "$(host_exec 1 wsync-inspect -e "$FLEET_ROOT" --hub --json -t 2 2>/dev/null |
	    jq '[.workers[] | select(.alive)] | length')" = "$1" ]
}

# received_half I BYTES0 MIB: host I's link has received half of MIB MiB
# since it had received BYTES0.
received_half() {
	(($(host_received "$1") - $2 >= ($3 << 19)))
}

# all_apply NAME N: once the root sees the N workers of hosts 2..N+1, pushes
# $TMP/NAME.wsync (the fleet's version 1) with --wait all; each of them has
# applied it when the push returns.
all_apply() {
	WAIT_S=60 wait_until root_sees "$2"
	run -0 push "$TMP/$1.wsync" --wait all --timeout 150
	assert_output 1
	run -0 all_at 1 2 $(($2 + 1))
	holds "$TMP/$1.wsync" 2 $(($2 + 1))
}

# v2_halfway I: a fleet of 8 hosts (2..9) that applied v1 (1 MiB); returns
# once host I has received half of v2 (16 MiB), pushed then.
v2_halfway() {
	local before
	make_model v1 1 1
	make_model v2 16 2
	fleet_up 8 100mbit
	push "$TMP/v1.wsync" >/dev/null
	WAIT_S=60 wait_until all_at 1 2 9
	before=$(host_received "$1")
	push "$TMP/v2.wsync" >/dev/null
	WAIT_S=60 wait_until received_half "$1" "$before" 16
}

@test "16 hosts naming the root all apply a pushed version, and --wait all at the root returns" {
	make_model v1 4 1
	fleet_up 16 100mbit
	all_apply v1 16
}

@test "a relay killed with SIGKILL mid-version: every other host applies that version" {
	v2_halfway 3
	kill -9 "${FLEET_RELAY_PID[3]}"
	WAIT_S=150 wait_until all_at 2 2 9 3
	holds "$TMP/v2.wsync" 2 9 3
	increasing 2 9
}

@test "a host that joins while a version flows is placed and applies it" {
	local before i
	make_model v1 16 1
	hosts_up 10 100mbit
	fleet_root
	for ((i = 2; i <= 9; i++)); do fleet_host "$i"; done
	WAIT_S=60 wait_until root_sees 8
	before=$(host_received 2)
	push "$TMP/v1.wsync" >/dev/null
	WAIT_S=60 wait_until received_half 2 "$before" 16
	fleet_host 10
	WAIT_S=150 wait_until all_at 1 2 10
	holds "$TMP/v1.wsync" 2 10
}

@test "a host behind a 20 Mbit/s link among 100 Mbit/s ones applies the version, and so do the others" {
	make_model v1 8 1
	fleet_up 8 100mbit
	host_rate 5 20mbit
	all_apply v1 8
}

@test "a host behind a 20 Mbit/s link that joins first, heading the chain, is found slow beside the second, which the root feeds too: every host applies the version" {
	local i from
	make_model v1 8 1
	hosts_up 9 100mbit
	host_rate 2 20mbit
	fleet_root
	# Each placed before the next starts: host 2 heads the chain.
	for ((i = 2; i <= 9; i++)); do
		from=$(($(wc -l <"$FLEET_LOGS/root.log") + 1))
		fleet_host "$i"
		wait_until fleet_placed "$from" "$i"
	done
	all_apply v1 8
	run -0 grep -c "event=relay-slow relay=[^ ]*:${FLEET_RELAY_PID[2]} " "$FLEET_LOGS/root.log"
	assert_output 1
	run -0 grep -c "event=relay-probe .*beside_rate=" "$FLEET_LOGS/root.log"
	assert_output 1
}

@test "a root restarted from its store mid-version: every host ends on the next version, none ever older after newer" {
	make_model v3 1 3
	v2_halfway 2
	kill -9 "$FLEET_ROOT_PID"
	wait "$FLEET_ROOT_PID" 2>/dev/null || true
	fleet_root
	run -0 push "$TMP/v3.wsync"
	assert_output 3
	WAIT_S=150 wait_until all_at 3 2 9
	holds "$TMP/v3.wsync" 2 9
	increasing 2 9
}

@test "a relay that passes on bytes that do not verify is dropped, and the hosts below fetch that version through another path, none older after newer" {
	local host from
	need_test_hooks WSYNC_TEST_FLIP_GET
	make_model v1 4 1
	make_model v2 4 2
	hosts_up 9 100mbit
	fleet_root
	# Every get host 3's relay serves from its store arrives spoiled (a test
	# build's hook), as a relay whose disk or memory corrupts would serve it.
	# Host 2 heads the chain; host 3, the second, is fed by the root too.
	fleet_host 2
	WAIT_S=60 wait_until root_sees 1
	from=$(($(wc -l <"$FLEET_LOGS/root.log") + 1))
	WSYNC_TEST_FLIP_GET=1 fleet_host 3
	WAIT_S=10 wait_until fleet_placed "$from" 3
	WAIT_S=60 wait_until root_sees 2
	push "$TMP/v1.wsync" >/dev/null
	WAIT_S=60 wait_until all_at 1 2 3
	# Hosts 4 to 9 join once host 3 holds version 1: host 4, placed under
	# it (placed before the others start), fetches that version from its store.
	from=$(($(wc -l <"$FLEET_LOGS/root.log") + 1))
	fleet_host 4
	WAIT_S=10 wait_until fleet_placed "$from" 4
	for ((host = 5; host <= 9; host++)); do fleet_host "$host"; done
	WAIT_S=150 wait_until all_at 1 2 9
	run -0 grep -c "event=relay-fail model=$FLEET_MODEL version=1 upstream=$(fleet_endpoint 3) " \
	    "$FLEET_LOGS/r4.log"
	assert_output 1
	run -0 grep -c "event=relay-drop relay=[^ ]* endpoint=$(fleet_endpoint 3) by=" "$FLEET_LOGS/root.log"
	assert_output 1
	holds "$TMP/v1.wsync" 2 9
	# The next version flows around it: host 3 takes it last, feeding none.
	push "$TMP/v2.wsync" >/dev/null
	WAIT_S=150 wait_until all_at 2 2 9
	holds "$TMP/v2.wsync" 2 9
	increasing 2 9
	run -0 host_exec 1 wsync-inspect -e "$FLEET_ROOT" --hub --json
	assert_equal "$(jq -r '.relays[] | select(.bad) | .endpoint' <<<"$output")" "$(fleet_endpoint 3)"
}

# steps N MIB: $TMP/s1.wsync .. sN.wsync, bf16 models of MIB MiB (model
# $FLEET_MODEL), each an optimizer-like step of 1% of the values from the one
# before (fixtures/mkstep.py).
steps() {
	"$PY" "$FIXTURES/mkstep.py" chain bf16 0.01 $(($2 << 20)) "$1" "$TMP/s" >/dev/null
}

# deltas_at V FIRST LAST: every relay of hosts FIRST..LAST took version V as
# a delta from V - 1 from its parent.
deltas_at() {
	local host
	for ((host = $2; host <= $3; host++)); do
		run -0 grep -c "event=relay-delta model=$FLEET_MODEL base=$(($1 - 1)) version=$1 " \
		    "$FLEET_LOGS/r$host.log"
		assert_equal "host $host $output" "host $host 1"
	done
}

@test "a 1%-changed bf16 update through 16 hosts reaches every one as a delta, made once, at the root" {
	steps 2 4
	fleet_up 16 100mbit
	all_apply s1 16
	sent=$(host_sent 1)
	run -0 push "$TMP/s2.wsync" --wait all --timeout 150
	assert_output 2
	run -0 all_at 2 2 17
	holds "$TMP/s2.wsync" 2 17
	deltas_at 2 2 17
	# The root made one delta, and its link carried about one, not 16 versions.
	run -0 grep -c "event=delta model=$FLEET_MODEL base=1 version=2 state=ready made=1 " \
	    "$FLEET_LOGS/root.log"
	assert_output 1
	delta=$(host_exec 1 stat -c %s "$HOSTS_DIR/h1/store/.deltas/$FLEET_MODEL/1-2.delta")
	(($(host_sent 1) - sent < 2 * delta + (1 << 20)))
	increasing 2 17
}

@test "a forged signed version passed down a fleet is refused by every verifying watcher, as a delta" {
	steps 2 4
	wsync-keygen --sign "$TMP/key" >/dev/null
	hosts_up 9 100mbit
	# The root signs versions 1 and 2. Host 2 tampers: a hub fed version 1
	# as signed, then version 2 with a byte flipped, every hash and the
	# content id made afresh and the signature kept (fixtures/forge.py), as
	# a relay that rewrote what it passes on would serve it.
	fleet_root
	for v in 1 2; do
		run -0 push "$TMP/s$v.wsync" --sign-key "$TMP/key.key"
		assert_output "$v"
		host_exec 1 cat "$HOSTS_DIR/h1/store/$FLEET_MODEL/$v.wsync" >"$TMP/signed$v.wsync"
	done
	wsync-convert "$TMP/signed2.wsync" "$TMP/forged.safetensors"
	"$PY" "$FIXTURES/forge.py" "$TMP/forged.safetensors" flip
	wsync-convert -m "$FLEET_MODEL" "$TMP/forged.safetensors" "$TMP/forged2.wsync"
	host_run 2 wsync-serve -e "$(fleet_endpoint 2)" --insecure --store "$HOSTS_DIR/h2/store" \
	    2>>"$FLEET_LOGS/h2.log"
	s_fleet_wait 10 "$FLEET_LOGS/h2.log" event=listen "$HOST_PID"
	host_exec 2 wsync-push -q -e "$(fleet_endpoint 2)" -m "$FLEET_MODEL" "$TMP/signed1.wsync"
	FLEET_WATCH_OPTS=(--verify-key "$TMP/key.pub")
	for ((host = 3; host <= 9; host++)); do fleet_host "$host" "$(fleet_endpoint 2)"; done
	WAIT_S=60 wait_until all_at 1 3 9
	run -0 host_exec 2 wsync-push -q -e "$(fleet_endpoint 2)" -m "$FLEET_MODEL" \
	    "$TMP/forged2.wsync"
	assert_output 2
	for ((host = 3; host <= 9; host++)); do
		WAIT_S=60 wait_until grep -q "event=fail worker=w$host model=$FLEET_MODEL version=2 reason=\"refused (content-mismatch)" \
		    "$FLEET_LOGS/r$host.log"
	done
	deltas_at 2 3 9
	holds "$TMP/signed1.wsync" 3 9
	for ((host = 3; host <= 9; host++)); do
		run -0 fleet_versions "$host"
		assert_equal "host $host $output" "host $host 1"
	done
}

@test "bench/hosts-fleet runs every mode, TCP storing, a killed relay and a slow host second and first too, and writes a row each" {
	[ -x "$ROOT/${BUILD:-build/cc}/bench/mkmodel" ] || skip "no bench/mkmodel in ${BUILD:-build/cc}"
	run -0 env BOUND_S=120 ROWS="$TMP/rows" "$ROOT/bench/hosts-fleet" 4 100mbit 4
	echo "$output" | sed 's/^/# /' >&3
	# The root's link sends one copy down a chain, two down a binary tree. The
	# chain's first version also pays the probe: the root feeds the second
	# relay too until both told their rates, 768 KiB or more each, which at
	# 4 MiB is a third of the version or more (1.3 to 1.6 copies measured).
	row=$(grep '^| 4 | [0-9.]* s | [0-9.]* s (' <<<"$output")
	read -r chain tree tcpchain tcpstore tcptree < <(grep -o 'root sent [0-9.]* copies' <<<"$row" |
	    awk '{ print $3 }' | paste -sd ' ')
	awk -v c="$chain" -v t="$tree" -v tc="$tcpchain" -v ts="$tcpstore" -v tt="$tcptree" \
	    'BEGIN { exit !(c < 1.9 && t >= 2 && t < 2.2 && tc < 1.1 && ts < 1.1 && tt >= 2 && tt < 2.2) }'
	assert_line --regexp "^\\| 4 \\| [0-9.]+ s \\| [0-9.]+ s \\([0-9.]+x T\\) \\| version 1: the others [0-9.]+ s \\([0-9.]+x T\\), host 3 [0-9.]+ s; version 2: the others [0-9.]+ s \\([0-9.]+x T\\), host 3 [0-9.]+ s \\| version 1: the others [0-9.]+ s \\([0-9.]+x T\\), host 2 [0-9.]+ s; version 2: the others [0-9.]+ s \\([0-9.]+x T\\), host 2 [0-9.]+ s \\|\$"
	run -0 cut -f 1 "$TMP/rows"
	assert_output "4 MiB to 4 hosts, relays naming the root (root sent $chain copies)
4 MiB to 4 hosts, a binary relay tree (root sent $tree copies)
4 MiB to 4 hosts, plain TCP down a chain (root sent $tcpchain copies)
4 MiB to 4 hosts, plain TCP down a chain, each host storing (root sent $tcpstore copies)
4 MiB to 4 hosts, plain TCP down a binary tree (root sent $tcptree copies)
4 MiB to 4 hosts, the middle relay killed at half: every other host
4 MiB to 4 hosts, host 3 (the second to join) at 20mbit, version 1: every other host
4 MiB to 4 hosts, host 3 (the second to join) at 20mbit, version 2: every other host
4 MiB to 4 hosts, host 2 (the first to join) at 20mbit, version 1: every other host
4 MiB to 4 hosts, host 2 (the first to join) at 20mbit, version 2: every other host"
}
