#!/usr/bin/env bats
# wsync-pull on real processes: fetching, verifying, --if-newer, errors.

load test_helper
load hub_helper

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

@test "a pull of a model the hub lacks names the close ids it has" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy2 v1.wsync
	run -66 wsync-pull -m Policy -o x.wsync
	assert_output 'wsync-pull: model "Policy" has no version (the hub has policy, policy2)'
	run -66 wsync-pull -m polcy -o x.wsync
	assert_output 'wsync-pull: model "polcy" has no version (the hub has policy, policy2)'
}

@test "wsync-pull of several models writes each into the directory, or none when one is missing" {
	make_versions 2
	start_hub
	wsync-push -q -m policy=v1.wsync -m critic=v2.wsync
	mkdir out
	run -0 wsync-pull -q -m policy -m critic -o out
	assert_output "policy 1
critic 1"
	cmp out/policy.wsync "$STORE/policy/1.wsync"
	cmp out/critic.wsync "$STORE/critic/1.wsync"
	run -66 wsync-pull -q -m policy -m nope -o out
	assert_output 'wsync-pull: model "nope" has no version'
	run -1 compgen -G "$TMP/out/*.tmp.*"
	run -0 ls out
	assert_output "critic.wsync
policy.wsync"
}

@test "wsync-pull of several models refuses options that name one model's file or version" {
	run -64 wsync-pull -m a -m b -v 2
	assert_output "wsync-pull: -v names one model's version: pull several models one by one
Try 'wsync-pull --help'."
	run -64 wsync-pull -m a -m b --base x.wsync
	assert_line -n 0 "wsync-pull: --base names one model's version: pull several models one by one"
	run -64 wsync-pull -m a -m b -o -
	assert_line -n 0 "wsync-pull: several models are written into a directory, not stdout"
	run -64 wsync-pull -m a -m a
	assert_line -n 0 'wsync-pull: model "a" given twice'
	run -66 wsync-pull -m a -m b -o nodir
	assert_output "wsync-pull: nodir: no such directory (with several models, -o names one)"
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
	wsync-pull -m policy --transfer socket -o out/p.wsync 2>pull.err &
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

# A progress line as a terminal shows it, for TOTAL bytes, all of them done.
s_progress_done() {
	echo "^$1: $2 / $2 100% [0-9.]+ (B|KiB|MiB|GiB)/s ETA 0:00"
}

# Runs "$@" in the background with the hub stopped for 1.2 s, longer than the
# second after which progress shows, then waits for it.
s_hub_held() {
	kill -STOP "$HUB_PID"
	"$@" &
	local pid=$!
	PIDS+=("$pid")
	sleep 1.2
	kill -CONT "$HUB_PID"
	wait "$pid"
}

@test "wsync-pull --progress on a terminal redraws one line: bytes, percent, rate, ETA" {
	make_big 12
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull --transfer socket --progress -m big -o big.wsync
	assert_line --index 0 --regexp '^wsync-pull: [0-9.]+ MiB / 12.0 MiB +[0-9]+% '
	assert_line --index $((${#lines[@]} - 2)) --regexp "$(s_progress_done wsync-pull "12.0 MiB")"
	assert_line --index $((${#lines[@]} - 1)) "1"
	run -0 script -qec "wsync-pull --transfer socket --progress -m big -o big.wsync" /dev/null
	assert_output --partial $'\r''wsync-pull: '
	assert_output --partial $'\e[K'
}

@test "a pull shorter than a second shows no progress, even on a terminal" {
	make_big 1
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull --transfer socket -m big -o big.wsync
	assert_output "1"
}

@test "a pull that takes over a second shows its progress on a terminal" {
	make_big 8
	start_hub
	wsync-push -m big big.safetensors
	s_hub_held on_tty wsync-pull --transfer socket -m big -o big.wsync >tty.out
	run -0 cat tty.out
	assert_line --regexp "$(s_progress_done wsync-pull "8.0 MiB")"
	assert_line --index $((${#lines[@]} - 1)) "1"
}

@test "a pull over a second shows nothing when stderr is not a terminal" {
	make_big 8
	start_hub
	wsync-push -m big big.safetensors
	s_hub_held wsync-pull --transfer socket -m big -o big.wsync >pull.out 2>pull.err
	assert_equal "$(cat pull.out)" "1"
	assert_equal "$(cat pull.err)" ""
}

@test "--progress writes whole lines on stderr when it is not a terminal" {
	make_big 8
	start_hub
	wsync-push -m big big.safetensors
	run -0 --separate-stderr wsync-pull --transfer socket --progress -m big -o big.wsync
	assert_output "1"
	[[ $stderr != *$'\r'* ]] || fail "a carriage return on a stderr that is no terminal"
	assert_equal "$(grep -cvE '^wsync-pull: [0-9.]+ (B|KiB|MiB) / 8.0 MiB ' <<<"$stderr")" 0
	[[ ${stderr##*$'\n'} =~ $(s_progress_done wsync-pull "8.0 MiB") ]] ||
	    fail "last line: ${stderr##*$'\n'}"
}

@test "--quiet silences the progress line, not the errors" {
	make_big 8
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull --transfer socket -q --progress -m big -o big.wsync
	assert_output "1"
	run -66 on_tty wsync-pull --quiet -m nothing -o x.wsync
	assert_output 'wsync-pull: model "nothing" has no version'
}

inode() { stat -c %i "$1"; }

@test "--transfer link makes the output the store's own file; copy and socket copy it" {
	make_versions 2
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	wsync-push -m policy v2.wsync >/dev/null
	run -0 wsync-pull -m policy --transfer link -o linked.wsync
	assert_output 2
	assert_equal "$(inode linked.wsync)" "$(inode "$STORE/policy/2.wsync")"
	# Read-only: it is the version everyone gets. Pulled again: nothing left over.
	assert_equal "$(stat -c %a linked.wsync)" 444
	run -0 wsync-pull -m policy --transfer link -o linked.wsync
	assert_equal "$(stat -c %h linked.wsync)" 2
	for mode in copy socket auto; do
		run -0 wsync-pull -m policy -v 1 --transfer "$mode" -o "$mode.wsync"
		assert_output 1
		cmp "$mode.wsync" "$STORE/policy/1.wsync"
	done
	[ "$(inode copy.wsync)" != "$(inode "$STORE/policy/1.wsync")" ]
	[ "$(inode socket.wsync)" != "$(inode "$STORE/policy/1.wsync")" ]
	# auto links when it can.
	assert_equal "$(inode auto.wsync)" "$(inode "$STORE/policy/1.wsync")"
	run -0 bash -c "wsync-pull -m policy --transfer copy -o - | cmp - '$STORE/policy/2.wsync'"
	ls -a | grep -c '\.tmp\.' | grep -qx 0
}

@test "--transfer link across file systems exits 64; auto copies instead" {
	[ "$(stat -c %d /dev/shm)" != "$(stat -c %d "$TMP")" ] ||
	    skip "/dev/shm and $TMP are one file system here"
	STORE=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	CLEANUP+=("$STORE")
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	run -64 wsync-pull -m policy --transfer link -o l.wsync
	assert_output "wsync-pull: --transfer link: cannot link $STORE/policy/1.wsync to l.wsync: Invalid cross-device link (--transfer copy works across file systems)"
	[ ! -e l.wsync ]
	run -0 wsync-pull -m policy -o a.wsync
	cmp a.wsync "$STORE/policy/1.wsync"
}

@test "link and copy exit 64 where the hub's store is not visible; socket works" {
	[ "$(id -u)" = 0 ] && command -v unshare >/dev/null ||
	    skip "needs root and unshare to hide the store in a mount namespace"
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	make_big 5
	# A tmpfs over the store: the hub's socket is still there, its files are not.
	hidden() { unshare -m sh -c 'mount -t tmpfs none "$0" && exec "$@"' "$STORE" "$@"; }
	run -64 hidden wsync-pull -m policy --transfer link -o x.wsync
	assert_output "wsync-pull: --transfer link: the hub's store is not visible from here (another host, user or mount namespace); use socket or auto"
	run -64 hidden wsync-push -m policy --transfer copy big.safetensors
	assert_output "wsync-push: --transfer copy: the hub's store is not visible from here (another host, user or mount namespace); use socket or auto"
	run -0 hidden wsync-pull -m policy -o x.wsync
	cmp x.wsync "$STORE/policy/1.wsync"
	run -0 hidden wsync-push -m policy big.safetensors
	assert_output 2
	run -0 grep -c "event=begin.*transfer=socket" hub.log
}

@test "a push of more than one message on the hub's host is handed over through the store" {
	make_big 6
	start_hub
	run -0 wsync-push -m policy big.safetensors
	assert_output 1
	run -0 wsync-push -m policy --transfer socket big.safetensors
	assert_output 2
	run -0 grep -o "event=begin.*transfer=[a-z]*" hub.log
	assert_line --index 0 --regexp 'transfer=copy$'
	assert_line --index 1 --regexp 'transfer=socket$'
	wsync-pull -m policy -v 1 -o one.wsync >/dev/null
	run -0 wsync-inspect diff big.safetensors one.wsync
	assert_equal "$(content_of one.wsync)" "$(content_of "$STORE/policy/2.wsync")"
	run -0 find "$STORE/.uploads" -type f
	assert_output ""
}

@test "a 5 GiB model of two 2.5 GiB tensors round-trips; a tensor over 4 GiB is refused" {
	local free_kib
	free_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	((free_kib > 11 * 1024 * 1024)) || skip "needs 11 GiB of free memory, has $((free_kib / 1048576)) GiB"
	[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || skip "needs a tmpfs at /dev/shm"
	# Sparse inputs: zeros that take no room until written.
	"$PY" - <<'PYEOF'
import json, struct
def sparse(path, tensors):
    head, off = {}, 0
    for name, n in tensors:
        head[name] = {"dtype": "U8", "shape": [n], "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
half = 5 << 29
sparse("five.safetensors", [("a", half), ("b", half)])
sparse("huge.safetensors", [("w", (4 << 30) + 4096)])
PYEOF
	run -65 wsync-convert huge.safetensors huge.wsync
	assert_output "wsync-convert: huge.safetensors: tensor w: 4294971392 bytes: a .wsync tensor holds at most 4294967295 (one msgpack bin, see wsync-format(5))"
	STORE=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	out=$STORE.out
	CLEANUP+=("$STORE" "$out")
	start_hub
	run -0 wsync-push -t 300 -m policy five.safetensors
	assert_output 1
	run -0 wsync-pull -t 300 -m policy -o "$out"
	assert_output 1
	run -0 wsync-inspect --json "$out"
	assert_equal "$(jq -c '[.bytes, .tensors]' <<<"$output")" "[5368709120,2]"
	run -0 wsync-inspect diff five.safetensors "$out"
}

@test "--progress counts a kernel copy and a push handed over through the store too" {
	make_big 8
	start_hub
	run -0 --separate-stderr wsync-push --progress -m big big.safetensors
	assert_output "1"
	run -0 grep -c "event=begin.*transfer=copy" hub.log
	[[ ${stderr##*$'\n'} =~ $(s_progress_done wsync-push "8.0 MiB") ]] ||
	    fail "push, last line: ${stderr##*$'\n'}"
	run -0 --separate-stderr wsync-pull --transfer copy --progress -m big -o big.wsync
	assert_output "1"
	[[ ${stderr##*$'\n'} =~ $(s_progress_done wsync-pull "8.0 MiB") ]] ||
	    fail "pull, last line: ${stderr##*$'\n'}"
}

# The size of the first temporary file beside $1, or nothing when there is none.
temp_size() {
	local t
	for t in "$1".tmp.*; do
		[ -e "$t" ] && stat -c %s "$t"
		return 0
	done
}

# 0 once a temporary file beside $1 holds more than $2 bytes (and less than $3).
temp_grew_past() {
	local n
	n=$(temp_size "$1")
	[ -n "$n" ] && ((n > $2 && n < $3))
}

@test "SIGINT stops a local copy of a large version early: exit 130, no file left" {
	local free_kib size pid status seen
	free_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	((free_kib > 7 * 1024 * 1024)) || skip "needs 7 GiB of free memory, has $((free_kib / 1048576)) GiB"
	[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || skip "needs a tmpfs at /dev/shm"
	# A sparse 2 GiB input: zeros that take no room until written.
	"$PY" - <<'PYEOF'
import json, struct
n = 2 << 30
h = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
h += b" " * (-len(h) % 8)
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + n)
PYEOF
	STORE=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	CLEANUP+=("$STORE" "$STORE.src.wsync")
	wsync-convert -m big big.safetensors "$STORE.src.wsync"
	start_hub
	run -0 wsync-push -t 120 -m big "$STORE.src.wsync"
	assert_output 1
	size=$(stat -c %s "$STORE/big/1.wsync")
	wsync-pull -t 120 --transfer copy -m big -o out.wsync 2>pull.err &
	pid=$!
	PIDS+=("$pid")
	# Under way: a temporary file holding some bytes, not yet all of them.
	WAIT_S=30 wait_until temp_grew_past out.wsync 0 "$size"
	seen=$(temp_size out.wsync)
	WAIT_S=30 wait_until temp_grew_past out.wsync "$seen" "$size"
	kill -INT "$pid"
	status=0
	wait "$pid" || status=$?
	assert_equal "$status" 130
	run -0 cat pull.err
	assert_output "wsync-pull: interrupted by signal 2"
	run -0 ls -a
	refute_output --partial "out.wsync"
}
