#!/usr/bin/env bats
# examples.bats - what examples/ shows works as shown: the Python package
# (python/wsync, the helper's successor), the PyTorch trainer and workers, the shell pipeline, a
# sharded trainer's ranks pushing one version in parts, the cron line and the
# systemd unit, each against real hubs.

load test_helper
load hub_helper

EX="$ROOT/examples"

# py CODE: runs CODE with the Python package (python/) on the module path; the
# package loads libwsync through ctypes, which a sanitizer build's needs libasan for.
py() {
	PYTHONPATH="$ROOT/python" with_libwsync "$PY" -c "$1"
}

# The arrays the helper tests write: every dtype the helper knows, a scalar
# and a zero-size tensor, with PyTorch-style names.
ARRAYS='
import numpy as np, wsync
a = {"actor.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
     "actor.0.bias": np.linspace(0, 1, 3), "half": np.ones(2, np.float16),
     "steps": np.array(5, np.int64), "i32": np.arange(3, dtype=np.int32),
     "i16": np.arange(2, dtype=np.int16), "i8": np.zeros((0, 3), np.int8),
     "u8": np.arange(4, dtype=np.uint8), "mask": np.array([True, False])}
def same(b):
    return sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and
        a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in a)
'

@test "the Python package writes and reads back safetensors and .wsync files" {
	run -0 py "$ARRAYS"'
wsync.write("a.safetensors", a, meta={"step": 7})
wsync.write("a.wsync", a, meta={"step": 7}, model="policy")
for p in ("a.safetensors", "a.wsync"):
    b, meta = wsync.read(p)
    print(p, same(b), meta)'
	assert_output - <<'EOF'
a.safetensors True {'step': '7'}
a.wsync True {'step': '7'}
EOF
	run -0 wsync-inspect --verify a.wsync
	run -0 wsync-inspect --json a.safetensors
	run -0 wsync-inspect diff a.safetensors a.wsync
}

# A Python function for the slot tests: a file of size zero bytes, open read-write.
SLOT='
import os
def slot(name, size):
    open(name, "wb").close()
    os.truncate(name, size)
    return os.open(name, os.O_RDWR)
'

@test "the Python package writes into a file of wsync_size bytes what write() and wsync-convert write" {
	run -0 py "$ARRAYS$SLOT"'
a["strided"] = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
a["big_endian"] = np.arange(3, dtype=">i4")
meta = {"step": 7, "lr": "0.1"}
size = wsync.wsync_size(a, "policy", meta=meta)
for keep in (4, 0):
    wsync.slots.KEEP_MAPPED = keep
    fd = slot(f"slot{keep}.wsync", size)
    wsync.write_into(fd, a, "policy", meta=meta)
    os.close(fd)
wsync.write("ref.wsync", a, meta=meta, model="policy")
print(size, os.path.getsize("ref.wsync"), len(wsync.slots.maps))'
	assert_output "964 964 1"
	run -0 wsync-inspect --verify slot4.wsync
	assert_output "slot4.wsync: OK"
	run -0 cmp slot4.wsync ref.wsync
	run -0 cmp slot0.wsync ref.wsync
}

@test "the Python package writes into a slot again through the mapping it kept, unless told not to" {
	run -0 py "$ARRAYS$SLOT"'
fd = slot("slot.wsync", wsync.wsync_size(a, "policy"))
for step in (1, 2, 3):
    wsync.slots.KEEP_MAPPED = 0 if step == 3 else 4
    a["steps"] = np.array(step, np.int64)
    wsync.write_into(fd, a, "policy")
    print(step, wsync.read("slot.wsync")[0]["steps"], len(wsync.slots.maps))
wsync.write("ref.wsync", a, model="policy")'
	assert_output $'1 1 1\n2 2 1\n3 3 0'
	run -0 cmp slot.wsync ref.wsync
}

@test "the Python package's write_into fills a hub's slot that commits with --trust-hashes" {
	start_hub --keep 1 --recycle 2
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	run -0 --separate-stderr py "$ARRAYS"'
import os, subprocess
batch = subprocess.Popen(["wsync-push", "--batch"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
def ask(line):
    batch.stdin.write(line + "\n")
    batch.stdin.flush()
    return batch.stdout.readline().split()
for step in (1, 2, 3):
    a["steps"] = np.array(step, np.int64)
    size = wsync.wsync_size(a, "policy", meta={"step": step})
    _, upload, path = ask(f"--slot -m policy={size}")
    fd = os.open(path, os.O_RDWR)
    wsync.write_into(fd, a, "policy", meta={"step": step})
    os.close(fd)
    print(*ask(f"--commit {upload} --trust-hashes -w all -t 10"))
batch.stdin.close()
batch.wait()
wsync.write("ref.wsync", a, meta={"step": 3}, model="policy")'
	assert_output $'ok policy 1\nok policy 2\nok policy 3'
	run -0 wsync-inspect --verify w1.wsync
	assert_equal "$(content_of w1.wsync)" "$(content_of ref.wsync)"
}

@test "the Python package's write_into raises WsyncError 64 for a file of another size" {
	run -0 py "$ARRAYS$SLOT"'
fd = slot("slot.wsync", wsync.wsync_size(a, "policy") + 1)
try:
    wsync.write_into(fd, a, "policy")
except wsync.WsyncError as e:
    print(e.status, e)'
	assert_output "64 model policy: the document is 772 bytes, the file to write it into has 773"
	run -0 cmp slot.wsync <(head -c 773 /dev/zero)
}

@test "the Python package's wsync_size raises WsyncError 65 for a dtype wsync lacks" {
	run -0 py '
import numpy as np, wsync
try:
    wsync.wsync_size({"z": np.zeros(2, np.complex64)}, "policy")
except wsync.WsyncError as e:
    print(e.status, e)'
	assert_output "65 tensor z: no wsync dtype for complex64 (wsync has f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool, f8e4m3, f8e5m2)"
}

@test "the Python package writes PyTorch tensors into a slot as their numpy arrays" {
	"$PY" -c 'import torch' 2>/dev/null ||
	    skip "python3-torch is not installed (scripts/deps install torch, as root)"
	run -0 py "$SLOT"'
import torch, wsync
t = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3).requires_grad_(),
     "b": torch.ones(3, dtype=torch.float16)}
fd = slot("slot.wsync", wsync.wsync_size(t, "policy"))
wsync.write_into(fd, t, "policy")
wsync.write("ref.wsync", {k: v.detach().numpy() for k, v in t.items()}, model="policy")'
	run -0 cmp slot.wsync ref.wsync
}

@test "the Python package pushes, pulls and watches through a real hub" {
	start_hub
	run -0 --separate-stderr py "$ARRAYS"'
wsync.write("a.safetensors", a, meta={"step": 1})
print(wsync.push("policy", "a.safetensors", wait="all"))
a["steps"] = np.array(6, np.int64)
wsync.write("b.wsync", a, model="policy")
print(wsync.push("policy", "b.wsync"))
print(wsync.pull("policy", "got.wsync"), same(wsync.read("got.wsync")[0]))
print(wsync.pull("policy", "old.wsync", version=1), wsync.read("old.wsync")[1])
with wsync.watch("policy", "w.wsync", worker="py1") as updates:
    for update in updates:
        print(update)
        update.ack()
        break'
	assert_output - <<'EOF'
1
2
2 True
1 {'step': '1'}
Update('policy', 2, 'w.wsync')
EOF
	run -0 wsync-inspect diff w.wsync got.wsync
}

@test "the Python package raises WsyncError with the program's exit status and message" {
	start_hub
	run -0 py '
import wsync
try:
    wsync.pull("nothing", "x.wsync", timeout=5)
except wsync.WsyncError as e:
    print(e.status, e)'
	assert_output '66 wsync-pull: model "nothing" has no version'
}

@test "the PyTorch trainer's versions reach 3 workers, each loading the trainer's weights" {
	"$PY" -c 'import torch' 2>/dev/null ||
	    skip "python3-torch is not installed (scripts/deps install torch, as root)"
	start_hub
	local i pid
	local -a workers=()
	for i in 1 2 3; do
		LD_PRELOAD=$(libasan_preload) ASAN_OPTIONS=detect_leaks=0:exitcode=99 \
		    "$PY" "$EX/pytorch/worker.py" --id "w$i" --dir "$TMP" --ref "$TMP/ref" \
		    >"$TMP/w$i.out" 2>"$TMP/w$i.err" &
		workers+=("$!")
		PIDS+=("$!")
	done
	# Each push returns once 3 workers have loaded it: every worker sees each version.
	run -0 --separate-stderr with_libwsync timeout 180 "$PY" "$EX/pytorch/trainer.py" --steps 60 \
	    --every 20 --workers 3 \
	    --ref "$TMP/ref"
	assert_output $'version 1 step 20\nversion 2 step 40\nversion 3 step 60'
	for pid in "${workers[@]}"; do
		kill -TERM "$pid"
		wait "$pid" || fail "worker $pid exited with status $?"
	done
	for i in 1 2 3; do
		assert_equal "$(cat "$TMP/w$i.out")" "w$i 1 20 ok
w$i 2 40 ok
w$i 3 60 ok"
	done
	run -0 sh -c 'wsync-inspect --hub --json | jq -r ".workers[] | \"\(.worker) \(.applied.policy)\"" | sort'
	assert_output $'w1 3\nw2 3\nw3 3'
}

@test "relay.sh pipes the newest version from one hub to another in the flat layout" {
	make_versions 2
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy v2.wsync
	local from=$WSYNC_ENDPOINT
	WSYNC_ENDPOINT=ipc://$TMP/hub2 STORE=$TMP/store2 start_hub
	run -0 "$EX/shell/relay.sh" "$from" "ipc://$TMP/hub2" policy
	assert_output 1
	run -0 wsync-pull -e "ipc://$TMP/hub2" -m policy -o relayed.wsync
	run -0 wsync-inspect diff relayed.wsync v2.wsync
	# Flat: each name is one key of the tree.
	run -0 "$PY" -c 'import msgpack, sys
print(*msgpack.unpackb(open(sys.argv[1], "rb").read())["tree"])' relayed.wsync
	assert_output "actor.0.bias actor.0.weight"
}

@test "relay.sh fails with wsync-pull's status when the source has no such model" {
	start_hub
	WSYNC_ENDPOINT=ipc://$TMP/hub2 STORE=$TMP/store2 start_hub
	run -66 --separate-stderr "$EX/shell/relay.sh" "$WSYNC_ENDPOINT" "ipc://$TMP/hub2" nothing
	assert_output ""
	assert_equal "${stderr%%$'\n'*}" 'wsync-pull: model "nothing" has no version'
}

@test "push-ranks.sh pushes three shards as one version, each rank printing it" {
	"$PY" "$FIXTURES/mkparts.py" m 3
	start_hub
	run -0 "$EX/sharded/push-ranks.sh" policy 100 m.0.safetensors m.1.safetensors m.2.safetensors
	assert_output "1
1
1"
	run -0 wsync-pull -m policy -o pulled.safetensors
	run -0 wsync-inspect diff pulled.safetensors m.safetensors
}

@test "push-ranks.sh with SIGN_KEY signs every part: a verifying pull takes the version" {
	"$PY" "$FIXTURES/mkparts.py" m 2
	wsync-keygen --sign trainer >/dev/null
	start_hub
	SIGN_KEY=trainer.key run -0 "$EX/sharded/push-ranks.sh" policy 100 m.0.safetensors \
		m.1.safetensors
	run -0 wsync-pull -q --verify-key trainer.pub -m policy -o pulled.wsync
	assert_output "1"
}

@test "push-ranks.sh exits 65 when two shards hold one tensor, and nothing is committed" {
	"$PY" "$FIXTURES/mkparts.py" m 2
	start_hub
	run -65 "$EX/sharded/push-ranks.sh" policy 100 m.0.safetensors m.0.safetensors
	run -66 wsync-pull -m policy -o pulled.safetensors
}

@test "the systemd unit verifies clean and its ExecStart keeps the store in the state directory" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
	make -s --no-print-directory -C "$ROOT" BUILD="${BUILD:-build/cc}" \
	    SANITIZE="${SANITIZE:-}" DESTDIR="$TMP/dest" PREFIX=/usr/local install
	sed "s|/usr/local/bin/|$TMP/dest/usr/local/bin/|" "$EX/systemd/wsync-serve.service" \
	    >wsync-serve.service
	MANPATH="$TMP/dest/usr/local/share/man" run -0 systemd-analyze verify wsync-serve.service
	assert_output ""
	run -0 grep -E '^(StateDirectory|Restart)=' "$EX/systemd/wsync-serve.service"
	assert_output $'StateDirectory=wsync\nRestart=on-failure'
	# What systemd runs, with %S (the state root), %d (the credentials), /etc
	# and the address made local, and keys where the unit looks for them.
	local cmd
	cmd=$(sed -n 's/^ExecStart=//p' "$EX/systemd/wsync-serve.service")
	cmd=${cmd//%S/$TMP/state}
	cmd=${cmd//\/etc\//$TMP/etc/}
	cmd=${cmd//%d/$TMP/etc/wsync}
	cmd=${cmd//tcp:\/\/0.0.0.0:7355/$WSYNC_ENDPOINT}
	mkdir -p "$TMP/state/wsync" "$TMP/etc/wsync/push" "$TMP/etc/wsync/pull"
	wsync-keygen "$TMP/etc/wsync/hub" >/dev/null
	wsync-keygen "$TMP/etc/wsync/push/trainer" >/dev/null
	mv "$TMP/etc/wsync/push/trainer_secret" "$TMP/etc/wsync/"
	export WSYNC_KEY="$TMP/etc/wsync/trainer_secret" WSYNC_HUB_KEY="$TMP/etc/wsync/hub"
	${cmd/\/usr\/local\/bin\//} 2>"$TMP/hub.log" &
	PIDS+=("$!")
	wait_until hub_answers
	make_versions 1
	run -0 wsync-push -m policy v1.wsync
	[ -f "$TMP/state/wsync/policy/1.wsync" ] || fail "no version in the state directory"
}

@test "the cron line's command publishes the checkpoint and waits for the workers" {
	local line
	line=$(grep -vE '^(#|[A-Z_]+=|$)' "$EX/cron/wsync-nightly")
	# minute hour day month weekday user command, as /etc/cron.d wants.
	read -r min hour day month wday user cmd <<<"$line"
	assert_equal "$min $hour $day $month $wday $user" "30 2 * * * trainer"
	run -0 grep -c '^WSYNC_ENDPOINT=tcp://' "$EX/cron/wsync-nightly"
	start_hub
	start_watcher gpu0
	wait_until grep -q "event=hello role=watch worker=gpu0" "$TMP/hub.log"
	make_versions 1
	cp v1.safetensors nightly.safetensors
	run -0 sh -c "${cmd//\/srv\/ckpt\//}"
	assert_output 1
	wait_until watcher_at gpu0 1
}

@test "the Python package's Publisher keeps one wsync-push --batch for every push" {
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	run -0 --separate-stderr py "$ARRAYS"'
with wsync.Publisher("policy") as pub:
    for step in (1, 2, 3):
        a["steps"] = np.array(step, np.int64)
        print(pub.publish(a, meta={"step": step}, wait="all", timeout=10))
try:
    with wsync.Publisher("bad!") as pub:
        pub.publish(a)
except wsync.WsyncError as e:
    print(e.status, e)
print(same(wsync.read("w1.wsync")[0]), wsync.read("w1.wsync")[1])'
	assert_output - <<'EOF'
1
2
3
64 bad model id "bad!": use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
True {'step': '3'}
EOF
	run -0 grep -c "event=hello role=push" hub.log
	assert_output 1
	run -1 compgen -G "/dev/shm/wsync-publisher.*"
}

@test "the Python package's Publisher writes each version into a slot of a recycling hub, asking for the next ahead" {
	start_hub --keep 1 --recycle 4
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	run -0 --separate-stderr py "$ARRAYS"'
with wsync.Publisher("policy") as pub:
    for step in range(1, 7):
        a["steps"] = np.array(step, np.int64)
        print(pub.publish(a, meta={"step": step}, wait="all", timeout=10))
        assert same(wsync.read("w1.wsync")[0])
print(wsync.read("w1.wsync")[1])'
	assert_output - <<'EOF'
1
2
3
4
5
6
{'step': '6'}
EOF
	# Each went through a slot and committed on the hashes the helper computed...
	run -0 grep -c "event=commit model=policy version=.* verified=no" hub.log
	assert_output 6
	# ...the first two into new files (nothing was retired yet), most later ones
	# into retired versions' files: each slot is asked for when the version
	# before it is committed, so whether the watcher has let go of the one
	# before that already is a race for the third and fourth. The slot asked
	# for with the last was given back at close.
	run -0 grep -o "recycled=[0-9]" hub.log
	assert_line --index 0 recycled=0
	assert_line --index 1 recycled=0
	assert_equal "${#lines[@]}" 7
	run -0 grep -c "recycled=1" hub.log
	(( output >= 4 ))
	wait_until grep -q "event=abort upload=7" hub.log
	run -0 wsync-inspect --verify w1.wsync
}

@test "the metrics timer's command writes promtool-clean metrics of a live hub, atomically" {
	command -v promtool >/dev/null || skip "promtool is not installed (Debian's prometheus)"
	local unit=$EX/prometheus/wsync-metrics.service cmd
	if command -v systemd-analyze >/dev/null; then
		run -0 systemd-analyze verify "$unit" "$EX/prometheus/wsync-metrics.timer"
	fi
	run -0 grep -c '^OnUnitActiveSec=15s$' "$EX/prometheus/wsync-metrics.timer"
	start_hub
	start_watcher w1
	make_versions 1
	wsync-push -m policy -w w1, -t 10 v1.wsync
	# What systemd runs, with the file in this test's directory, this build's
	# wsync-inspect and the test's hub (no keys).
	cmd=$(sed -n "s/^ExecStart=\/bin\/sh -c '\(.*\)'\$/\1/p" "$unit")
	cmd=${cmd//\/usr\/local\/bin\//}
	OUT=$TMP/wsync.prom run -0 sh -c "$cmd"
	run -0 promtool check metrics <wsync.prom
	run -0 grep '^wsync_worker_applied_version' wsync.prom
	assert_output 'wsync_worker_applied_version{worker="w1",model="policy"} 1'
	[ ! -e wsync.prom.tmp ]
}

# start_engine [STATUS [BODY]]: fixtures/fakeengine.py in $TMP answering STATUS
# with BODY; ENGINE_URL is its reload endpoint.
start_engine() {
	"$PY" "$FIXTURES/fakeengine.py" "$TMP" "$@" &
	PIDS+=("$!")
	wait_until test -e "$TMP/engine.port"
	export ENGINE_URL="http://127.0.0.1:$(cat "$TMP/engine.port")/update_weights_from_disk"
}

# The request SGLang documents for /update_weights_from_disk (its
# UpdateWeightFromDiskReqInput: model_path, and weight_version a string),
# as fixtures/sglang-update-weights.json holds it, for a path that needs escaping.
ENGINE_PATH='/srv/ckpt/policy "v7" \ ü.v7'

@test "the engine hook posts what SGLang's update_weights_from_disk reads, escaped" {
	start_engine
	WSYNC_PATH=$ENGINE_PATH WSYNC_VERSION=7 run -0 "$EX/engine/reload-hook.sh"
	assert_output ""
	run -0 jq -cS . "$TMP/requests.jsonl"
	assert_output "$(jq -cS . "$FIXTURES/sglang-update-weights.json")"
}

@test "the engine hook fails with the engine's message when it refuses" {
	start_engine 400 '{"success": false, "message": "Failed to get weights iterator: no such directory"}'
	WSYNC_PATH=$ENGINE_PATH WSYNC_VERSION=7 run -1 "$EX/engine/reload-hook.sh"
	assert_output "reload-hook: the engine refused version 7 (HTTP 400): Failed to get weights iterator: no such directory"
}

@test "the engine hook fails when the engine answers 200 without success" {
	start_engine 200 '{"success": false, "message": "weights are being updated"}'
	WSYNC_PATH=$ENGINE_PATH WSYNC_VERSION=8 run -1 "$EX/engine/reload-hook.sh"
	assert_output "reload-hook: the engine refused version 8 (HTTP 200): weights are being updated"
}

@test "the engine hook fails when no engine answers" {
	ENGINE_URL="http://127.0.0.1:$(free_port)/update_weights_from_disk" \
		WSYNC_PATH=$ENGINE_PATH WSYNC_VERSION=9 run -1 "$EX/engine/reload-hook.sh"
	assert_line --partial "reload-hook: http://127.0.0.1:"
	assert_line --partial "/update_weights_from_disk: no answer from the engine"
}

@test "make demo runs on a hub and store of its own beside a hub on the default endpoint" {
	export XDG_RUNTIME_DIR="$TMP/run"
	mkdir -m 700 run
	unset WSYNC_ENDPOINT
	wsync-serve --store "$TMP/mine" 2>mine.log &
	PIDS+=($!)
	wait_until grep -q "event=listen" mine.log
	local build=${WSYNC_BIN%/bin}
	run -0 env BUILD="${build#"$ROOT"/}" "$ROOT/scripts/demo"
	assert_line --regexp "^== hub: wsync-serve on ipc://[^ ]+/hub, store in [^ ]+/store$"
	assert_line "trainer: step 5 pushed as version 5; all 3 workers applied it"
	# The hub on the default endpoint saw nothing of it.
	run -0 bash -c 'wsync-inspect --hub --json | jq -c "[.models, .workers]"'
	assert_output "[[],[]]"
}

@test "a PyTorch worker reports the whole reason a version does not load, not its first line" {
	"$PY" -c 'import torch' 2>/dev/null ||
	    skip "python3-torch is not installed (scripts/deps install torch, as root)"
	start_hub
	LD_PRELOAD=$(libasan_preload) ASAN_OPTIONS=detect_leaks=0:exitcode=99 \
	    "$PY" "$EX/pytorch/worker.py" --id w1 --dir "$TMP" --ref "$TMP/ref" \
	    >"$TMP/w1.out" 2>"$TMP/w1.err" &
	PIDS+=("$!")
	wait_until hub_has_worker w1
	run -0 py 'import numpy as np, wsync
wsync.write("odd.safetensors", {"nope": np.ones(2, np.float32)})'
	run -65 --separate-stderr wsync-push --wait w1 --timeout 30 -m policy odd.safetensors
	assert_regex "${stderr_lines[1]}" 'last failure: load_state_dict: Error\(s\) in loading state_dict for [A-Za-z]+: Missing key\(s\) in state_dict: .* Unexpected key\(s\) in state_dict: "nope"\.$'
}

@test "make demo stops, showing its hub's log and store, when its hub does not start" {
	mkdir -p fake/bin
	for p in "$WSYNC_BIN"/wsync-*; do ln -s "$p" fake/bin/; done
	rm fake/bin/wsync-serve
	printf '#!/bin/sh\necho "wsync-serve: cannot start" >&2\nexit 69\n' >fake/bin/wsync-serve
	chmod +x fake/bin/wsync-serve
	run -1 --separate-stderr env BUILD="$(realpath --relative-to="$ROOT" "$TMP/fake")" \
	    timeout 30 "$ROOT/scripts/demo"
	assert_regex "${stderr_lines[0]}" '^demo: the hub did not start \(store /[^ ]+/store\):$'
	assert_equal "${stderr_lines[1]}" "wsync-serve: cannot start"
	refute_output --partial "3 workers"
}
