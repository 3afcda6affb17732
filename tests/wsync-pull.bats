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

# A progress line as a terminal shows it, for TOTAL bytes, all of them done.
s_progress_done() {
	echo "^$1: $2 / $2 100% [0-9.]+ (B|KiB|MiB|GiB)/s ETA 0:00"
}

@test "wsync-pull --progress on a terminal redraws one line: bytes, percent, rate, ETA" {
	make_big big.safetensors 12
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull --progress -m big -o big.wsync
	assert_line --index 0 --regexp '^wsync-pull: [0-9.]+ MiB / 12.0 MiB +[0-9]+% '
	assert_line --index $((${#lines[@]} - 2)) --regexp "$(s_progress_done wsync-pull "12.0 MiB")"
	assert_line --index $((${#lines[@]} - 1)) "1"
	run -0 script -qec "wsync-pull --progress -m big -o big.wsync" /dev/null
	assert_output --partial $'\r''wsync-pull: '
	assert_output --partial $'\e[K'
}

@test "a pull shorter than a second shows no progress, even on a terminal" {
	make_big big.safetensors 1
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull -m big -o big.wsync
	assert_output "1"
}

@test "a pull that takes over a second shows its progress on a terminal" {
	make_big big.safetensors 8
	start_hub
	wsync-push -m big big.safetensors
	kill -STOP "$HUB_PID"
	on_tty wsync-pull -m big -o big.wsync >tty.out &
	local pull=$!
	PIDS+=("$pull")
	# The hub holds the pull for longer than the second after which progress shows.
	sleep 1.2
	kill -CONT "$HUB_PID"
	wait "$pull"
	run -0 cat tty.out
	assert_line --regexp "$(s_progress_done wsync-pull "8.0 MiB")"
	assert_line --index $((${#lines[@]} - 1)) "1"
}

@test "--progress writes whole lines on stderr when it is not a terminal" {
	make_big big.safetensors 8
	start_hub
	wsync-push -m big big.safetensors
	run -0 --separate-stderr wsync-pull --progress -m big -o big.wsync
	assert_output "1"
	[[ $stderr != *$'\r'* ]] || fail "a carriage return on a stderr that is no terminal"
	assert_equal "$(grep -cvE '^wsync-pull: [0-9.]+ (B|KiB|MiB) / 8.0 MiB ' <<<"$stderr")" 0
	[[ ${stderr##*$'\n'} =~ $(s_progress_done wsync-pull "8.0 MiB") ]] ||
	    fail "last line: ${stderr##*$'\n'}"
}

@test "--quiet silences the progress line, not the errors" {
	make_big big.safetensors 8
	start_hub
	wsync-push -m big big.safetensors
	run -0 on_tty wsync-pull -q --progress -m big -o big.wsync
	assert_output "1"
	run -66 on_tty wsync-pull --quiet -m nothing -o x.wsync
	assert_output 'wsync-pull: model "nothing" has no version'
}
