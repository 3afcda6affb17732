#!/usr/bin/env bats
# Crashes: a hub, a watcher or a pusher killed with SIGKILL, then started again.
# Nothing committed is lost, nothing uncommitted shows, nothing torn is left.
# The long random run (50 pushes) is tests/long/crash-random.bats (make check-long).

load test_helper
load hub_helper

# The head of MODEL, pulled and verified: "VERSION" on stdout, or fails.
verified_head() {
	wsync-pull -t 5 -m "$1" -o "$TMP/head-$1.wsync" >"$TMP/head-$1.version" &&
		wsync-inspect --verify "$TMP/head-$1.wsync" >/dev/null &&
		cat "$TMP/head-$1.version"
}

# Kills the hub with SIGKILL (once it has died on its own, just reaps it).
kill_hub() {
	kill -KILL "$HUB_PID" 2>/dev/null || true
	wait "$HUB_PID" 2>/dev/null || true
}

uploads_left() {
	find "$STORE/.uploads" -mindepth 1 | wc -l
}

@test "a hub killed at each step of a two-model push restarts with both versions or neither" {
	need_test_hooks WSYNC_TEST_CRASH_AT
	make_versions 2
	start_hub
	run -0 wsync-push -m policy=v1.safetensors -m critic=v1.safetensors
	stop_hub
	local step p0 c0 p1 c1 forward=0 back=0 pusher
	for step in 1 2 3 4 5 6 7 8 9 10; do
		WSYNC_TEST_CRASH_AT=$step start_hub
		p0=$(verified_head policy)
		c0=$(verified_head critic)
		wsync-push -t 10 -m policy=v2.safetensors -m critic=v2.safetensors &
		pusher=$!
		# The hub kills itself in the commit: the pusher gets no reply.
		wait "$HUB_PID" && { echo "step $step: the hub exited on its own"; false; }
		kill -TERM "$pusher"
		wait "$pusher" || true
		start_hub
		p1=$(verified_head policy)
		c1=$(verified_head critic)
		[ $((p1 - p0)) -eq $((c1 - c0)) ] ||
			{ echo "step $step: policy $p0 -> $p1 but critic $c0 -> $c1"; false; }
		[ "$p1" -ge "$p0" ] && [ "$p1" -le $((p0 + 1)) ]
		[ "$(uploads_left)" -eq 0 ] || { echo "step $step: uploads left"; false; }
		if [ "$p1" -gt "$p0" ]; then forward=$((forward + 1)); else back=$((back + 1)); fi
		# The next push gets a number never given before.
		run -0 wsync-push -m policy=v1.safetensors -m critic=v1.safetensors
		assert_output "policy $((p1 + 1))
critic $((c1 + 1))"
		stop_hub
	done
	echo "rolled back $back, forward $forward" >&3
	[ "$back" -ge 3 ] && [ "$forward" -ge 3 ]
	run -0 grep -c 'event=recover' "$TMP/hub.log"
}

@test "a restarted hub serves nothing of a push killed before its commit point, and numbers on" {
	need_test_hooks WSYNC_TEST_CRASH_AT
	make_versions 2
	start_hub
	run -0 wsync-push -m policy v1.wsync
	stop_hub
	WSYNC_TEST_CRASH_AT=1 start_hub
	run -75 wsync-push -t 1 -m policy v2.wsync
	kill_hub
	start_hub
	run -0 wsync-pull -m policy -o p.wsync
	assert_output 1
	run -0 wsync-push -m policy v2.wsync
	assert_output 2
}

@test "a hub killed with -9 after a push was acknowledged restarts with it as the head" {
	make_versions 3
	start_hub
	run -0 wsync-push -m policy v1.wsync
	run -0 wsync-push -m policy v2.wsync
	kill_hub
	rm "$STORE/policy/2.wsync" "$STORE/policy/2.json"
	start_hub
	run -0 verified_head policy
	assert_output 1
	# Version 2 is gone from the disk, but its number stays given.
	run -0 wsync-push -m policy v3.wsync
	assert_output 3
}

@test "a watcher killed with -9 mid-transfer leaves no partial file, and cleans up and resumes" {
	make_versions 1
	local port
	port=$(free_port)
	export WSYNC_ENDPOINT="tcp://127.0.0.2:$port"
	start_hub
	# A model of 48 MiB: several gets, so that the transfer can be caught in the middle.
	"$PY" - "$TMP/big.safetensors" <<'PYEOF'
import json, struct, sys
import numpy as np
w = np.arange(12 << 20, dtype="<f4").tobytes()
h = json.dumps({"w": {"dtype": "F32", "shape": [12 << 20], "data_offsets": [0, len(w)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + w)
PYEOF
	run -0 wsync-push -m policy big.safetensors
	# Through the socket (a same-host link is one atomic step with no transfer
	# to interrupt), over tcp through a proxy that holds every byte 100 ms:
	# the transfer takes many round trips, so it is caught in the middle
	# however fast the machine (over ipc it could end between two polls).
	"$PY" "$FIXTURES/delayproxy.py" 100 127.0.0.2 "$port" >"$TMP/proxy.out" 2>&1 &
	PIDS+=("$!")
	wait_until grep -q ready "$TMP/proxy.out"
	start_watcher w1 --transfer socket -e "tcp://127.0.0.1:$port"
	# The transfer has begun once its temporary file exists; stop the hub so it cannot end.
	wait_until compgen -G "$TMP/w1.wsync.tmp.??????"
	kill -STOP "$HUB_PID"
	kill -KILL "${WPID[w1]}"
	wait "${WPID[w1]}" 2>/dev/null || true
	kill -CONT "$HUB_PID"
	[ ! -e "$TMP/w1.wsync" ]
	run -0 compgen -G "$TMP/w1.wsync.tmp.??????"
	start_watcher w1 --transfer socket -e "tcp://127.0.0.1:$port"
	WAIT_S=30 wait_until watcher_at w1 1
	run -0 wsync-inspect --verify "$TMP/w1.wsync"
	assert_output "$TMP/w1.wsync: OK"
	run -1 compgen -G "$TMP/w1.wsync.tmp.??????"
}

@test "a pusher killed with -9 mid-upload leaves no version, and the hub serves on" {
	make_versions 2
	start_hub
	run -0 wsync-push -m policy v1.wsync
	# A pusher that began an upload and sent its first chunk, then died.
	"$PY" - "ipc://$TMP/hub" "$TMP/v2.wsync" "$TMP/began" <<'PYEOF' &
import sys, time, msgpack, zmq
s = zmq.Context().socket(zmq.DEALER)
s.connect(sys.argv[1])
data = open(sys.argv[2], "rb").read()
s.send_multipart([b"", msgpack.packb({"id": 1, "op": "begin",
    "files": [{"model": "policy", "size": len(data)}]})])
reply = msgpack.unpackb(s.recv_multipart()[1])
s.send_multipart([b"", msgpack.packb({"id": 2, "op": "chunk", "upload": reply["upload"],
    "file": 0, "off": 0}), data[:100]])
open(sys.argv[3], "w").close()
time.sleep(600)
PYEOF
	local pusher=$!
	PIDS+=("$pusher")
	wait_until test -e "$TMP/began"
	wait_until test "$(uploads_left)" -eq 1
	kill -KILL "$pusher"
	wait "$pusher" 2>/dev/null || true
	run -0 wsync-pull -m policy -o p.wsync
	assert_output 1
	run -0 wsync-push -m policy v2.wsync
	assert_output 2
	run -0 verified_head policy
	assert_output 2
	# The half upload is dropped when it idles out, or at the latest when the hub restarts.
	kill_hub
	start_hub
	[ "$(uploads_left)" -eq 0 ]
	run -0 verified_head policy
	assert_output 2
}
