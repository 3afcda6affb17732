#!/usr/bin/env bats
# valgrind's memcheck on the main paths, every process a real one: a hub
# serving clients, a push, a pull, a watcher taking one update. Clean means
# no memory error and no leak (definite or indirect), on every one of them.

load ../test_helper
load ../hub_helper

VG=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect
	--show-leak-kinds=definite,indirect --error-exitcode=99 --track-fds=no)

setup_file() {
	command -v valgrind >/dev/null || skip "valgrind is not installed (scripts/deps install long)"
}

@test "push, pull, watch one update and a hub serving them are clean under valgrind" {
	make_versions 2
	"${VG[@]}" --log-file="$TMP/vg-serve.log" wsync-serve --store "$STORE" 2>>"$TMP/hub.log" &
	HUB_PID=$!
	PIDS+=("$HUB_PID")
	WAIT_S=60 wait_until hub_answers
	run -0 "${VG[@]}" --log-file="$TMP/vg-push.log" wsync-push -t 60 -m policy v1.wsync
	assert_output 1
	run -0 "${VG[@]}" --log-file="$TMP/vg-pull.log" wsync-pull -t 60 -m policy -o p.wsync
	assert_output 1
	run -0 --separate-stderr "${VG[@]}" --log-file="$TMP/vg-watch.log" wsync-watch --once --id w1 -m policy -o w.wsync
	assert_output "policy 1 w.wsync"
	run -0 "${VG[@]}" --log-file="$TMP/vg-push2.log" wsync-push -t 60 -w all -m policy=v2.wsync -m critic=v2.safetensors
	run -0 "${VG[@]}" --log-file="$TMP/vg-inspect.log" wsync-inspect -t 60 --hub
	kill -TERM "$HUB_PID"
	local rc=0
	wait "$HUB_PID" || rc=$?
	[ "$rc" -eq 0 ] || { echo "the hub exited $rc"; cat "$TMP/vg-serve.log"; false; }
	for log in "$TMP"/vg-*.log; do
		[ ! -s "$log" ] || { echo "$log:"; cat "$log"; false; }
	done
}
