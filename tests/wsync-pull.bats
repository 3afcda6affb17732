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
