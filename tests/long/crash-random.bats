#!/usr/bin/env bats
# 50 pushes, the hub killed with SIGKILL at seeded random points among them:
# inside a commit (WSYNC_TEST_CRASH_AT, at any of its writes) or at a random
# instant while a push is in flight. After every restart the head is a
# committed version, verified, of the content pushed for it, and numbers
# never go back. WSYNC_CRASH_SEED reproduces a run (the seed is printed).

load ../test_helper
load ../hub_helper

verified_head() {
	wsync-pull -t 5 -m policy -o "$TMP/head.wsync" >"$TMP/head.version" &&
		wsync-inspect --verify "$TMP/head.wsync" >/dev/null &&
		cat "$TMP/head.version"
}

# The hub has died (a zombie until waited for counts as dead).
hub_gone() {
	[ ! -e "/proc/$HUB_PID" ] || [ "$(awk '{print $3}' "/proc/$HUB_PID/stat" 2>/dev/null)" = Z ]
}

@test "a hub killed at random points during 50 pushes always restarts on a committed, intact head" {
	need_test_hooks WSYNC_TEST_CRASH_AT
	local seed=${WSYNC_CRASH_SEED:-20261122} push kind head v old new got pusher
	local plain=0 steps=0 instants=0 forward=0 back=0
	RANDOM=$seed
	echo "# seed $seed" >&3
	make_versions ${WSYNC_CRASH_PUSHES:-50}
	start_hub
	head=0
	old=
	for ((push = 1; push <= ${WSYNC_CRASH_PUSHES:-50}; push++)); do
		new=$(content_of "$TMP/v$push.wsync")
		kind=$((RANDOM % 3))
		if [ "$kind" -eq 0 ]; then
			run -0 wsync-push -m policy "v$push.wsync"
			[ "$output" -eq $((head + 1)) ] ||
				{ echo "push $push: got version $output after head $head"; false; }
			head=$output
			old=$new
			plain=$((plain + 1))
			continue
		fi
		if [ "$kind" -eq 1 ]; then
			# Die at one of the six writes of a one-file commit.
			stop_hub
			WSYNC_TEST_CRASH_AT=$((1 + RANDOM % 6)) start_hub
			steps=$((steps + 1))
		else
			instants=$((instants + 1))
		fi
		wsync-push -t 10 -m policy "v$push.wsync" >/dev/null 2>&1 &
		pusher=$!
		if [ "$kind" -eq 2 ]; then
			# The fault's timing, not a synchronization: 0 to 60 ms into the push.
			sleep "0.0$((RANDOM % 60 / 10))$((RANDOM % 10))"
			kill -KILL "$HUB_PID" 2>/dev/null || true
		fi
		wait_until hub_gone || { echo "push $push: the hub did not die (kind $kind)"; false; }
		wait "$HUB_PID" 2>/dev/null || true
		kill -TERM "$pusher" 2>/dev/null || true
		wait "$pusher" 2>/dev/null || true
		start_hub
		run -0 verified_head
		v=$output
		got=$(content_of "$TMP/head.wsync")
		if [ "$v" -eq $((head + 1)) ]; then
			[ "$got" = "$new" ] || { echo "push $push: version $v holds $got, not $new"; false; }
			forward=$((forward + 1))
			old=$new
		elif [ "$v" -eq "$head" ]; then
			[ "$got" = "$old" ] || { echo "push $push: head $v changed content"; false; }
			back=$((back + 1))
		else
			echo "push $push: head $v after $head"
			false
		fi
		head=$v
		[ -z "$(ls -A "$STORE/.uploads")" ] || { echo "push $push: uploads left"; false; }
	done
	echo "# ${WSYNC_CRASH_PUSHES:-50} pushes: $plain plain, $steps killed inside a commit, $instants killed at a random instant; $forward rolled forward or done, $back rolled back; head $head" >&3
	[ $((steps + instants)) -ge $((${WSYNC_CRASH_PUSHES:-50} / 3)) ]
}
