#!/usr/bin/env bats
# The sync loop on real processes: a hub, watchers, pushes, pulls, waits.

load test_helper
load hub_helper

@test "4 watchers follow 20 pushes and end on the last pushed bytes, in order" {
	make_versions 20
	start_hub
	for w in w1 w2 w3 w4; do start_watcher "$w"; done
	for ((v = 1; v <= 20; v++)); do
		run -0 wsync-push -m policy "v$v.wsync"
		assert_output "$v"
	done
	for w in w1 w2 w3 w4; do
		wait_until watcher_at "$w" 20
		run -0 versions_increase "$w"
		assert_equal "$(content_of "$w.wsync")" "$(content_of v20.wsync)"
		run -0 wsync-inspect --verify "$w.wsync"
		assert_equal "$(wsync-inspect --json "$w.wsync" | jq .version)" 20
	done
}

@test "a watcher started after 5 pushes gets version 5 at once" {
	make_versions 5
	start_hub
	for ((v = 1; v <= 5; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	run -0 --separate-stderr wsync-watch --once --id late -m policy -o late.wsync
	assert_output "policy 5 late.wsync"
	assert_equal "$(content_of late.wsync)" "$(content_of v5.wsync)"
}

@test "a watcher started before the hub waits, then gets the first push" {
	make_versions 1
	start_watcher early
	wait_until grep -q "waiting for a hub" early.err
	start_hub
	wsync-push -m policy v1.wsync
	wait_until watcher_at early 1
	assert_equal "$(cat early.out)" "policy 1 $TMP/early.wsync"
}

@test "--wait all returns once every watcher applied the version" {
	make_versions 1
	start_hub
	for w in a b c; do start_watcher "$w"; done
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | map(select(.alive)) | length")" = 3 ]'
	run -0 wsync-push --wait all --timeout 10 -m policy v1.wsync
	assert_output "1"
	for w in a b c; do
		assert_equal "$(content_of "$w.wsync")" "$(content_of v1.wsync)"
		run -0 grep -q "^policy 1 " "$w.out"
	done
}

@test "--wait all --timeout 2 with a stopped watcher exits 75 and names it" {
	make_versions 2
	start_hub
	start_watcher runs
	start_watcher stuck
	wsync-push -m policy v1.wsync
	wait_until watcher_at runs 1
	wait_until watcher_at stuck 1
	kill -STOP "${WPID[stuck]}"
	run -75 --separate-stderr wsync-push --wait all --timeout 2 -m policy v2.wsync
	assert_output "2"
	assert_equal "${stderr_lines[0]}" "wsync-push: policy version 2: 1 of 2 workers have not applied it after 2.0 s"
	assert_regex "${stderr_lines[1]}" '^  stuck: has version 1, last seen [0-9.]+ s ago$'
	assert_equal "${#stderr_lines[@]}" 2
}

@test "a multi-model push is never seen half-applied by a watcher of both" {
	"$PY" "$FIXTURES/mkmodel.py" a.safetensors w=float32:2:1,2
	start_hub
	mkdir out
	# The hook checks that both files carry the same pair number when either is applied.
	wsync-watch --id both -m actor,critic -o out \
		-x 'a=$(wsync-inspect --json out/actor.wsync | jq -r .meta.pair)
		    c=$(wsync-inspect --json out/critic.wsync | jq -r .meta.pair)
		    [ "$a" = "$c" ] || { echo "half-applied: actor $a critic $c" >&2; exit 1; }' \
		>both.out 2>both.err &
	PIDS+=($!)
	for ((i = 1; i <= 10; i++)); do
		"$PY" "$FIXTURES/mkmodel.py" "p$i.safetensors" w=float32:2:$i,$i
		"$PY" - "$i" <<'PYEOF'
import json, struct, sys
i = sys.argv[1]
for name in ("actor", "critic"):
    raw = open(f"p{i}.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h["__metadata__"] = {"pair": i}
    t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
    open(f"{name}{i}.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PYEOF
		wsync-push -m "actor=actor$i.safetensors" -m "critic=critic$i.safetensors" >/dev/null
	done
	wait_until bash -c 'grep -q "^critic 10 " both.out'
	run -1 grep -q "half-applied" both.err
	run -0 awk '{print $1}' both.out
	# Every update of the pair printed both lines together.
	[ "$(grep -c '^actor ' both.out)" = "$(grep -c '^critic ' both.out)" ]
}

@test "a failing --exec hook is reported by the hub and fails --wait" {
	make_versions 1
	start_hub
	start_watcher hooked -x 'exit 3'
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | length")" = 1 ]'
	run -75 --separate-stderr wsync-push --wait all --timeout 2 -m policy v1.wsync
	assert_regex "${stderr_lines[1]}" '^  hooked: has no version, last seen [0-9.]+ s ago, last failure: hook exited with status 3$'
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.workers[0].failure.reason' <<<"$output")" "hook exited with status 3"
	run -0 wsync-inspect --hub
	assert_line --regexp '^hooked +policy +0 +1 .* gone|alive .*version 1: hook exited with status 3$'
	[ ! -s hooked.out ]
}

@test "watchers survive a hub restart on the same store and versions keep increasing" {
	make_versions 6
	start_hub
	start_watcher w1
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 3
	stop_hub
	start_hub
	run -0 wsync-push -m policy v4.wsync
	assert_output 4
	wait_until watcher_at w1 4
	kill -KILL "$HUB_PID"
	wait "$HUB_PID" 2>/dev/null || true
	start_hub
	run -0 wsync-push -m policy v5.wsync
	assert_output 5
	wait_until watcher_at w1 5
	run -0 versions_increase w1
	assert_equal "$(content_of w1.wsync)" "$(content_of v5.wsync)"
}

@test "wsync-pull fetches the head, or a given version, verified" {
	make_versions 3
	start_hub
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	run -0 wsync-pull -m policy -o head.wsync
	assert_output 3
	assert_equal "$(content_of head.wsync)" "$(content_of v3.wsync)"
	run -0 wsync-pull -m policy -v 2 -o two.wsync
	assert_output 2
	assert_equal "$(content_of two.wsync)" "$(content_of v2.wsync)"
	run -0 bash -c 'wsync-pull -m policy -o - | wsync-inspect --verify -'
	assert_output "stdin: OK"
}

@test "wsync-pull --if-newer exits 1 without fetching when nothing is newer" {
	make_versions 2
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy v2.wsync
	run -1 wsync-pull -m policy --if-newer 2 -o x.wsync
	assert_output ""
	[ ! -e x.wsync ]
	run -0 wsync-pull -m policy --if-newer 1 -o x.wsync
	assert_output 2
}

@test "an unknown model or version is a clear error, exit 66" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	run -66 wsync-pull -m nope -o x.wsync
	assert_output 'wsync-pull: model "nope" has no version'
	run -66 wsync-pull -m policy -v 9 -o x.wsync
	assert_output 'wsync-pull: model "policy" has no version 9'
	[ ! -e x.wsync ]
}

@test "every program exits 69 with a clear message when no hub answers" {
	make_versions 1
	run -69 wsync-push --timeout 1 -m policy v1.wsync
	assert_output "wsync-push: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 wsync-pull --timeout 1 -m policy
	assert_output "wsync-pull: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 --separate-stderr wsync-watch --timeout 1 -m policy -o w.wsync
	assert_equal "${stderr_lines[-1]}" "wsync-watch: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
	run -69 wsync-inspect -t 1 --hub
	assert_output "wsync-inspect: cannot reach $WSYNC_ENDPOINT after 1.0 s (is wsync-serve running?)"
}

@test "a bad weight file is refused with 65 before anything is sent" {
	start_hub
	"$PY" "$FIXTURES/mkhostile.py" unknown-dtype bad.wsync
	run -65 wsync-push -m policy bad.wsync
	assert_output 'wsync-push: bad.wsync: tensor enc.w: unknown dtype "f17"'
	"$PY" "$FIXTURES/mkhostile.py" valid good.wsync
	printf '\377' | dd of=good.wsync bs=1 seek=128 conv=notrunc status=none
	run -65 wsync-push -m policy good.wsync
	assert_output 'wsync-push: good.wsync: tensor enc.w: data does not match its hash'
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq '.models | length' <<<"$output")" 0
}

@test "a safetensors file is pushed as .wsync of the named model" {
	"$PY" "$FIXTURES/mkmodel.py" m.safetensors w=float32:2:1,2
	start_hub
	run -0 wsync-push -m critic m.safetensors
	assert_output 1
	wsync-pull -m critic -o c.wsync
	run -0 wsync-inspect diff m.safetensors c.wsync
	assert_equal "$(wsync-inspect --json c.wsync | jq -r .model)" critic
}

@test "--workers announces a version only to the named workers" {
	make_versions 2
	start_hub
	start_watcher chosen
	start_watcher other
	wsync-push -m policy v1.wsync
	wait_until watcher_at chosen 1
	wait_until watcher_at other 1
	run -0 wsync-push --workers chosen --wait chosen --timeout 5 -m policy v2.wsync
	assert_output 2
	assert_equal "$(last_version chosen)" 2
	run -0 wsync-pull -m policy -o any.wsync
	assert_output 1
	assert_equal "$(last_version other)" 1
}

@test "wsync-push --wait-for waits for a version pushed earlier" {
	make_versions 1
	start_hub
	start_watcher w
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | length")" = 1 ]'
	run -0 wsync-push -m policy v1.wsync
	run -0 wsync-push --wait-for 1 --timeout 5 -m policy
	assert_output ""
	assert_equal "$(last_version w)" 1
}

@test "a model larger than one chunk goes up in chunks and comes back intact" {
	"$PY" - <<'PYEOF'
import json, struct
import numpy as np
w = np.arange(3 * 1024 * 1024, dtype="<f4").tobytes()   # 12 MiB: three chunks and more
h = json.dumps({"w": {"dtype": "F32", "shape": [3 * 1024 * 1024], "data_offsets": [0, len(w)]}}).encode()
h += b" " * (-len(h) % 8)
open("big.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + w)
PYEOF
	wsync-convert -m policy big.safetensors big.wsync
	start_hub
	run -0 wsync-push -m policy big.wsync
	assert_output 1
	run -0 grep -c "event=begin" hub.log
	assert_output 1
	run -0 wsync-pull -m policy -o back.wsync
	assert_equal "$(content_of back.wsync)" "$(content_of big.wsync)"
	run -0 wsync-inspect diff big.safetensors back.wsync
}

@test "a watcher follows a hub restarted on a new store from its first version" {
	make_versions 4
	start_hub
	start_watcher w1
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 3
	stop_hub
	STORE="$TMP/store2"
	start_hub
	run -0 wsync-push --wait all --timeout 10 -m policy v4.wsync
	assert_output 1
	wait_until bash -c '[ "$(wc -l <w1.out)" -ge 4 ]'
	assert_equal "$(tail -n 1 w1.out)" "policy 1 $TMP/w1.wsync"
	assert_equal "$(content_of w1.wsync)" "$(content_of v4.wsync)"
	run -0 grep -c "the hub keeps another store" w1.err
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -c '.workers[] | select(.worker == "w1") | .applied' <<<"$output")" '{"policy":1}'
}

@test "--wait all waits for a worker whose hook runs longer than the liveness window" {
	make_versions 2
	start_hub
	start_watcher slow -x 'if [ "$WSYNC_VERSION" = 2 ]; then sleep 7; fi'
	wsync-push -m policy v1.wsync
	wait_until watcher_at slow 1
	run -0 wsync-push --wait all --timeout 20 -m policy v2.wsync
	assert_output 2
	assert_equal "$(last_version slow)" 2
}

@test "a watcher that cannot write its output reports the failure and keeps running" {
	make_versions 1
	start_hub
	wsync-watch --id nowhere -m policy -o "$TMP/missing/p.wsync" >nowhere.out 2>nowhere.err &
	PIDS+=($!)
	run -75 --separate-stderr wsync-push --wait all --timeout 3 -m policy v1.wsync
	assert_regex "${stderr_lines[1]}" "^  nowhere: has no version, last seen [0-9.]+ s ago, last failure: $TMP/missing/p.wsync: cannot create a temporary file: No such file or directory$"
	kill -0 "${PIDS[-1]}"
	run -0 grep -c "event=hello role=watch" hub.log
	assert_output 1
}

@test "SIGTERM stops a watcher while its hook runs, and the hook with it" {
	make_versions 1
	start_hub
	start_watcher hooked -x 'touch "$WSYNC_PATH.started"; exec sleep 30'
	wsync-push -m policy v1.wsync
	wait_until test -e hooked.wsync.started
	kill -TERM "${WPID[hooked]}"
	WAIT_S=5 wait_until bash -c "! kill -0 ${WPID[hooked]} 2>/dev/null"
	run -1 pgrep -f "sleep 30" -P "${WPID[hooked]}"
}

@test "an interrupted pull exits 130 and leaves no temporary file" {
	"$PY" - <<'PYEOF'
import json, struct
n = 64 * 1024 * 1024                       # 256 MiB of f32: long enough to catch mid-way
h = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
h += b" " * (-len(h) % 8)
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + 4 * n)
PYEOF
	start_hub
	wsync-push -m policy big.safetensors
	mkdir out
	wsync-pull -m policy -o out/p.wsync 2>pull.err &
	local pull=$!
	PIDS+=("$pull")
	# Hold the transfer in the middle: the pull waits for data that does not come.
	until compgen -G "out/p.wsync.tmp.*" >/dev/null; do
		kill -0 "$pull" || fail "the pull ended before it could be interrupted"
	done
	kill -STOP "$HUB_PID"
	kill -INT "$pull"
	local rc=0
	wait "$pull" || rc=$?
	kill -CONT "$HUB_PID"
	assert_equal "$rc" 130
	assert_equal "$(cat pull.err)" "wsync-pull: interrupted by signal 2"
	run -0 ls -A out
	assert_output ""
}

@test "--exec-timeout stops a hook that hangs and reports it failed" {
	make_versions 1
	start_hub
	start_watcher hung -x 'exec sleep 60' --exec-timeout 1
	run -75 --separate-stderr wsync-push --wait all --timeout 4 -m policy v1.wsync
	assert_regex "${stderr_lines[1]}" '^  hung: has no version, last seen [0-9.]+ s ago, last failure: hook timed out after 1.0 s$'
	kill -0 "${WPID[hung]}"
}
