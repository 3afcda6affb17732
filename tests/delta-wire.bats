#!/usr/bin/env bats
# delta-wire.bats - deltas on the wire (wsync(7), DELTAS): real hubs and
# watchers on the socket, models made by optimizer-like steps
# (fixtures/mkstep.py). What a watcher rebuilds from a delta equals the
# version fetched whole; the bytes on the wire are counted outside wsync, by
# a TCP proxy (fixtures/countproxy.py); every fault gives the whole version,
# never a damaged one.

load test_helper
load hub_helper

DELTA=$WSYNC_BIN/../bench/delta

# steps DTYPE FRACTION BYTES N: $TMP/sV.wsync for V in 1..N, each a step from the one before.
steps() {
	"$PY" "$FIXTURES/mkstep.py" chain "$1" "$2" "$3" "$4" "$TMP/s"
}

# push_step V: pushes $TMP/sV.wsync as the next version of "policy".
push_step() {
	wsync-push -q -m policy "$TMP/s$1.wsync" >/dev/null
}

# 0 when the process PID is stopped (SIGSTOP).
stopped() {
	[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ]
}

# start_counter NAME TARGET_PORT: a counting proxy in front of TARGET_PORT;
# ${CPORT[NAME]} its port, $TMP/NAME.counts its counts.
declare -gA CPORT
start_counter() {
	CPORT[$1]=$(free_port)
	"$PY" "$FIXTURES/countproxy.py" "${CPORT[$1]}" "$2" "$TMP/$1.counts" >"$TMP/$1.proxy" &
	PIDS+=("$!")
	wait_until grep -q ready "$TMP/$1.proxy"
}

# counted NAME: the bytes the proxy NAME carried both ways so far.
counted() {
	awk '{print $1 + $2}' "$TMP/$1.counts"
}

@test "fifty steps with skips: every version a watcher rebuilt from a delta equals it fetched whole" {
	steps bf16 0.01 262144 50
	start_hub --keep 64
	mkdir applied
	push_step 1
	start_watcher w --transfer socket -x 'cp "$WSYNC_PATH" "applied/$WSYNC_VERSION.wsync"'
	wait_until watcher_at w 1
	v=1
	RANDOM=17
	while ((v < 50)); do
		if ((v % 12 == 5)); then
			# Stopped for a while: the versions pushed meanwhile are skipped.
			before=$v
			kill -STOP "${WPID[w]}"
			wait_until stopped "${WPID[w]}"
			for _ in 1 2 3 4; do
				push_step $((++v))
			done
			kill -CONT "${WPID[w]}"
			wait_until watcher_at w "$v"
			# One delta from what it held straight to the head, nothing in between.
			run -0 awk -v a="$before" -v b="$v" '$2 > a && $2 < b' "$TMP/w.out"
			assert_output ""
			run -0 grep -c "event=ack worker=w model=policy version=$v transfer=delta " hub.log
			assert_output 1
			run -0 grep -c "event=delta model=policy base=$before version=$v state=ready" hub.log
			assert_output 1
			continue
		fi
		# One to three versions at once: latest wins, some are skipped.
		for ((k = RANDOM % 3 + 1; k > 0 && v < 50; k--)); do
			push_step $((++v))
		done
		wait_until watcher_at w "$v"
	done
	versions_increase w
	deltas=0
	for f in applied/*.wsync; do
		n=$(basename "$f" .wsync)
		wsync-pull -q -m policy -v "$n" --transfer socket --no-delta -o whole.wsync >/dev/null
		cmp "$f" whole.wsync
		if grep -q "event=ack worker=w model=policy version=$n transfer=delta " hub.log; then
			deltas=$((deltas + 1))
		fi
	done
	# All but the first came as deltas.
	applied=$(find applied -name '*.wsync' | wc -l)
	((applied >= 20))
	[ "$deltas" -eq $((applied - 1)) ]
	run -1 grep "event=fail" hub.log
}

# wire_test FRACTION RATIO: a bf16 step of FRACTION reaches a watcher through
# a counting proxy in at most 1/RATIO of the bytes that a watcher fetching it
# whole needs through another, and in no more than xor+zstd-1 of the changed
# tensors (bench/delta: what NeMo-RL, slime and verl send).
wire_test() {
	"$PY" "$FIXTURES/mkstep.py" bf16 "$1" 8000000 "$TMP/s1.wsync" "$TMP/s2.wsync" >/dev/null
	hub_port=$(free_port)
	export WSYNC_ENDPOINT=tcp://127.0.0.1:$hub_port
	start_hub
	start_counter delta "$hub_port"
	start_counter whole "$hub_port"
	push_step 1
	start_watcher d -e "tcp://127.0.0.1:${CPORT[delta]}" --transfer socket
	start_watcher w -e "tcp://127.0.0.1:${CPORT[whole]}" --transfer socket --no-delta
	wait_until watcher_at d 1
	wait_until watcher_at w 1
	d1=$(counted delta)
	w1=$(counted whole)
	push_step 2
	wait_until watcher_at d 2
	wait_until watcher_at w 2
	delta=$(($(counted delta) - d1))
	whole=$(($(counted whole) - w1))
	peers=$("$DELTA" "$TMP/s1.wsync" "$TMP/s2.wsync" "$TMP/d" | awk '/^xor\+zstd-1/ {print $3}')
	echo "# fraction $1: delta $delta bytes, whole $whole, peers $peers" >&3
	((delta > 0 && peers > 0))
	grep -q "event=ack worker=d model=policy version=2 transfer=delta wire=" hub.log
	grep -q "event=ack worker=w model=policy version=2 transfer=socket wire=" hub.log
	((delta * $2 <= whole))
	((delta <= peers))
	cmp "$TMP/d.wsync" "$TMP/w.wsync"
}

@test "with --recycle a watcher rebuilds each delta into a file it replaced before, byte for byte" {
	steps bf16 0.01 262144 5
	start_hub --keep 8
	push_step 1
	start_watcher w --transfer socket --recycle
	wait_until watcher_at w 1
	first=$(stat -c %i "$TMP/w.wsync")
	push_step 2
	wait_until watcher_at w 2
	second=$(stat -c %i "$TMP/w.wsync")
	# Versions 3 and 4 are rebuilt into the files versions 1 and 2 were in.
	push_step 3
	wait_until watcher_at w 3
	assert_equal "$(stat -c %i "$TMP/w.wsync")" "$first"
	cmp "$TMP/w.wsync" "$STORE/policy/3.wsync"
	push_step 4
	wait_until watcher_at w 4
	assert_equal "$(stat -c %i "$TMP/w.wsync")" "$second"
	cmp "$TMP/w.wsync" "$STORE/policy/4.wsync"
	for v in 2 3 4; do
		run -0 grep -c "event=ack worker=w model=policy version=$v transfer=delta " hub.log
		assert_output 1
	done
	# A spare that held more than the head is cut to it: version 5 is version
	# 4 less its last tensor, rebuilt into the file version 3 was in.
	wsync-convert "$TMP/s4.wsync" s4.safetensors
	"$PY" "$FIXTURES/droplast.py" s4.safetensors small.safetensors
	wsync-push -q -m policy small.safetensors
	wait_until watcher_at w 5
	assert_equal "$(stat -c %i "$TMP/w.wsync")" "$first"
	cmp "$TMP/w.wsync" "$STORE/policy/5.wsync"
	run -0 grep -c "event=ack worker=w model=policy version=5 transfer=delta " hub.log
	assert_output 1
}

@test "at 1% changed a delta is at most 1/40 of the whole version on the wire, and no more than xor+zstd-1" {
	wire_test 0.01 40
}

@test "at 3% changed a delta is at most 1/15 of the whole version on the wire, and no more than xor+zstd-1" {
	wire_test 0.03 15
}

@test "a watcher killed while it applies a delta keeps its old file and completes on restart" {
	need_test_hooks WSYNC_TEST_DELTA_STOP
	steps bf16 0.01 262144 2
	start_hub
	push_step 1
	start_watcher w --transfer socket --once
	wait_until watcher_at w 1
	wait "${WPID[w]}"
	push_step 2
	WSYNC_TEST_DELTA_STOP=1 start_watcher w --transfer socket --once
	# Stopped with version 2 rebuilt beside the output, not yet renamed: killed there.
	wait_until stopped "${WPID[w]}"
	ls w.wsync.tmp.*
	kill -KILL "${WPID[w]}"
	wait "${WPID[w]}" || true
	cmp w.wsync "$STORE/policy/1.wsync"
	start_watcher w --transfer socket --once
	wait_until watcher_at w 2
	wait "${WPID[w]}"
	cmp w.wsync "$STORE/policy/2.wsync"
	run -0 grep -c "event=ack worker=w model=policy version=2 transfer=delta " hub.log
	assert_output 1
	run ls w.wsync.tmp.*
	assert_failure
}

# held_v1 ID: gives watcher ID's output version 1 of "policy", as if it had applied it.
held_v1() {
	cp "$STORE/policy/1.wsync" "$TMP/$1.wsync"
	chmod 644 "$TMP/$1.wsync"
}

@test "a flipped byte in the hub's delta is detected, never applied: the version comes whole and the hub logs why" {
	steps bf16 0.01 262144 2
	start_hub
	push_step 1
	push_step 2
	held_v1 first
	# A first worker makes the hub make the delta; then a byte of it flips in the store.
	run -0 wsync-pull -q -m policy --transfer socket -o first.wsync
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready" hub.log
	assert_output 1
	"$PY" - "$STORE/.deltas/policy/1-2.delta" <<-'PYEOF'
	import os, sys
	with open(sys.argv[1], "r+b") as f:
	    f.seek(os.path.getsize(sys.argv[1]) - 100)
	    b = f.read(1)
	    f.seek(-1, 1)
	    f.write(bytes([b[0] ^ 0x10]))
	PYEOF
	held_v1 w
	start_watcher w --transfer socket --once
	wait_until watcher_at w 2
	wait "${WPID[w]}"
	cmp w.wsync "$STORE/policy/2.wsync"
	run -0 grep "fetched whole" w.err
	assert_output --regexp '^wsync-watch: policy version 2 fetched whole: the delta from version 1 did not apply: '
	run -0 grep -c "event=delta model=policy base=1 version=2 state=failed worker=w reason=\"the delta from version 1 did not apply: " hub.log
	assert_output 1
	run -0 grep -c "event=ack worker=w model=policy version=2 transfer=socket " hub.log
	assert_output 1
	# Dropped: the next worker on that base gets a delta made anew, and sound.
	held_v1 x
	start_watcher x --transfer socket --once
	wait_until watcher_at x 2
	cmp x.wsync "$STORE/policy/2.wsync"
	run -0 grep -c "event=ack worker=x model=policy version=2 transfer=delta " hub.log
	assert_output 1
}

@test "a flipped byte in the watcher's base is detected, never applied: the version comes whole and the hub logs why" {
	steps bf16 0.01 262144 2
	start_hub
	push_step 1
	push_step 2
	held_v1 w
	# In the data of a tensor: the header, and so the content id, stays as it was.
	size=$(stat -c %s w.wsync)
	printf '\x55' | dd of=w.wsync bs=1 seek=$((size / 2)) conv=notrunc status=none
	start_watcher w --transfer socket --once
	wait_until watcher_at w 2
	wait "${WPID[w]}"
	cmp w.wsync "$STORE/policy/2.wsync"
	run -0 grep "fetched whole" w.err
	assert_output --regexp 'fetched whole: the delta from version 1 did not apply: .*damaged base'
	run -0 grep -c "event=delta model=policy base=1 version=2 state=failed worker=w reason=.*damaged base" hub.log
	assert_output 1
}

@test "a base the hub retired gives the whole version" {
	steps bf16 0.01 262144 3
	start_hub --keep 2
	push_step 1
	held_v1 w
	push_step 2
	push_step 3
	start_watcher w --transfer socket --once
	wait_until watcher_at w 3
	wait "${WPID[w]}"
	cmp w.wsync "$STORE/policy/3.wsync"
	run -0 grep "fetched whole" w.err
	assert_output 'wsync-watch: policy version 3 fetched whole: model "policy" has no version 1 any more (retired: the hub keeps the last 2)'
	run -0 grep -c 'event=refuse op=delta .*code=66 error="model \\"policy\\" has no version 1 any more' hub.log
	assert_output 1
	run -0 grep -c "event=ack worker=w model=policy version=3 transfer=socket " hub.log
	assert_output 1
}

@test "a version in which every element changed comes whole: the hub's estimate stops the delta before any encoding" {
	"$PY" "$FIXTURES/mkstep.py" bf16 1 262144 "$TMP/s1.wsync" "$TMP/s2.wsync" >/dev/null
	start_hub
	push_step 1
	run -0 wsync-pull -q -m policy --transfer socket -o p.wsync
	push_step 2
	run -0 wsync-pull -m policy --transfer socket -o p.wsync
	cmp p.wsync "$STORE/policy/2.wsync"
	run -0 grep -c 'event=delta model=policy base=1 version=2 state=whole reason="not worth it (estimated [0-9]* bytes, more than half the version.s 262[0-9]*)"' hub.log
	assert_output 1
	run -1 grep "state=ready" hub.log
}

# collide: c1.safetensors and c2.safetensors, a float32 tensor "big" with one
# element changed between them, and a 16-byte tensor "w" whose bytes differ
# but whose XXH3-64 is the same: at 9 to 16 bytes XXH3-64 folds the product
# of the input's two halves, each xored with the default secret's words; a
# low half of 1 makes the sum twice the high half, so a high half and the
# same with its top bit flipped collide.
collide() {
	"$PY" - <<'PYEOF'
import json, struct
secret = bytes.fromhex("7240a4a4b7b3671fcb79e64eccc0e578825ad07dccff7221b8084674f743248e")
word = lambda o: struct.unpack_from("<Q", secret, o)[0]
lo = 1 ^ word(0) ^ word(8)
for name, hi, big0 in (("c1", 0, 0.0), ("c2", 1 << 63, 1.0)):
    w = struct.pack("<QQ", lo, hi ^ word(16) ^ word(24))
    big = struct.pack("<f", big0) + bytes(4 * 65535)
    head = json.dumps({"big": {"dtype": "F32", "shape": [65536], "data_offsets": [0, len(big)]},
                       "w": {"dtype": "U8", "shape": [16],
                             "data_offsets": [len(big), len(big) + 16]}}).encode()
    head += b" " * (-len(head) % 8)
    open(name + ".safetensors", "wb").write(struct.pack("<Q", len(head)) + head + big + w)
PYEOF
}

@test "two tensors with one XXH3-64 but other bytes reach a watcher through a delta byte for byte" {
	collide
	# The collision is real: the same hash for other bytes.
	run -0 wsync-inspect --json c1.safetensors
	h1=$(jq -r '.tree[] | select(.path == "w") | .hash' <<<"$output")
	run -0 wsync-inspect --json c2.safetensors
	assert_equal "$(jq -r '.tree[] | select(.path == "w") | .hash' <<<"$output")" "$h1"
	run -1 cmp -s c1.safetensors c2.safetensors
	start_hub
	run -0 wsync-push -q -m policy c1.safetensors
	start_watcher w1 --transfer socket
	wait_until watcher_at w1 1
	run -0 wsync-push -q -m policy c2.safetensors
	wait_until watcher_at w1 2
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready" hub.log
	assert_output 1
	cmp w1.wsync "$STORE/policy/2.wsync"
}

@test "pull takes a delta from the file it replaces, or from --base; --no-delta fetches whole" {
	steps bf16 0.01 262144 3
	start_hub
	push_step 1
	run -0 wsync-pull -q -m policy --transfer socket -o p.wsync
	cp p.wsync base1.wsync
	push_step 2
	run -0 wsync-pull -q -m policy --transfer socket -o p.wsync
	assert_output 2
	cmp p.wsync "$STORE/policy/2.wsync"
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready" hub.log
	assert_output 1
	push_step 3
	run -0 wsync-pull -q -m policy --transfer socket --base base1.wsync -o q.wsync
	cmp q.wsync "$STORE/policy/3.wsync"
	run -0 grep -c "event=delta model=policy base=1 version=3 state=ready" hub.log
	assert_output 1
	run -0 wsync-pull -q -m policy --transfer socket --no-delta -o p.wsync
	run -1 grep "event=delta model=policy base=2 version=3" hub.log
	run -64 wsync-pull -m policy --base base1.wsync --no-delta
	assert_output "wsync-pull: --base and --no-delta exclude each other
Try 'wsync-pull --help'."
}

@test "inspect --hub shows how each worker's last update came and its bytes on the wire" {
	steps bf16 0.01 262144 2
	start_hub
	push_step 1
	start_watcher d --transfer socket
	start_watcher w --transfer socket --no-delta
	wait_until watcher_at d 1
	wait_until watcher_at w 1
	push_step 2
	wait_until watcher_at d 2
	wait_until watcher_at w 2
	wait_until grep -q "event=ack worker=w model=policy version=2" hub.log
	run -0 wsync-inspect --hub --json
	whole=$(stat -c %s "$STORE/policy/2.wsync")
	delta=$(stat -c %s "$STORE/.deltas/policy/1-2.delta")
	run -0 jq -c '[.workers[] | {worker, transfer, wire}] | sort_by(.worker)' <<<"$output"
	assert_output "[{\"worker\":\"d\",\"transfer\":\"delta\",\"wire\":$delta},{\"worker\":\"w\",\"transfer\":\"socket\",\"wire\":$whole}]"
	run -0 wsync-inspect --hub
	assert_line --regexp "^d +policy +2 +0 +[0-9.]+s +alive +delta +$delta +- +-$"
	assert_line --regexp "^w +policy +2 +0 +[0-9.]+s +alive +socket +$whole +- +-$"
}

@test "a relay takes a delta from its upstream and serves it on as it came to a watcher on the same base" {
	steps bf16 0.01 262144 2
	start_hub
	start_relay r1
	push_step 1
	start_watcher w --transfer socket -e "ipc://$TMP/r1"
	wait_until watcher_at w 1
	push_step 2
	wait_until watcher_at w 2
	assert_equal "$(content_of w.wsync)" "$(content_of s2.wsync)"
	# The root made the delta once, for the relay; the relay made none: it
	# serves the one it got, byte for byte.
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready made=1 " hub.log
	assert_output 1
	delta=$(stat -c %s "$STORE/.deltas/policy/1-2.delta")
	run -0 grep "event=relay-delta model=policy base=1 version=2 " r1.log
	assert_output --regexp " bytes=$delta upstream=ipc://$TMP/hub\$"
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready made=0 pushed=1 bytes=$delta " r1.log
	assert_output 1
	run -1 grep -c "made=1" r1.log
	cmp "$STORE/.deltas/policy/1-2.delta" "$TMP/r1.store/.deltas/policy/1-2.delta"
	run -0 grep -c "event=ack worker=w model=policy version=2 transfer=delta " r1.log
	assert_output 1
	# Nothing of the delta is left beside the relay's store.
	run -0 find "$TMP/r1.store/.uploads" -type f
	assert_output ""
}
