#!/usr/bin/env bats
# Checkpoint directories: pushed and converted in, written out as safetensors
# directories swapped behind a symlink, read back by a reader that knows only
# the safetensors spec (tests/fixtures/mkckpt.py dump).

load test_helper
load hub_helper

mkckpt() {
	"$PY" "$FIXTURES/mkckpt.py" "$@"
}

@test "a checkpoint directory pushed comes out of a watcher tensor for tensor, small files byte for byte" {
	mkckpt make ck --layers 3 --shards 3
	start_hub
	run -0 wsync-push -m policy ck
	assert_output 1
	mkdir out
	run -0 --separate-stderr wsync-watch --once -m policy -o out/policy --format safetensors \
		--shard-size 40000
	assert_output "policy 1 out/policy.v1"
	assert_equal "$(readlink out/policy)" policy.v1
	assert_equal "$(mkckpt dump out/policy --files)" "$(mkckpt dump ck --files)"
	run -0 jq -r '.weight_map | [.[]] | unique | length' out/policy/model.safetensors.index.json
	(( output > 3 ))
}

@test "wsync-pull --format safetensors writes the same directory behind a symlink" {
	mkckpt make ck
	start_hub
	wsync-push -m policy ck
	run -0 wsync-pull -m policy -o pulled --format safetensors
	assert_output 1
	assert_equal "$(readlink pulled)" pulled.v1
	assert_equal "$(mkckpt dump pulled --files)" "$(mkckpt dump ck --files)"
}

@test "wsync-convert turns a directory into a .wsync file and back" {
	mkckpt make ck --no-index
	run -0 wsync-convert -m policy ck policy.wsync
	run -0 wsync-inspect --verify policy.wsync
	run -0 wsync-convert --shard-size 30000 policy.wsync back/
	assert_equal "$(mkckpt dump back --files)" "$(mkckpt dump ck --files)"
	run -0 jq -r .metadata.wsync_model back/model.safetensors.index.json
	assert_output policy
}

@test "wsync-convert turns a directory into one safetensors file and back" {
	mkckpt make ck
	run -0 wsync-convert ck one.safetensors
	run -0 wsync-convert one.safetensors back/
	assert_equal "$(mkckpt dump back --files)" "$(mkckpt dump ck --files)"
	run -0 jq -r .metadata.wsync_model back/model.safetensors.index.json
	assert_output model
}

@test "a directory whose index names a missing shard is refused, nothing pushed" {
	mkckpt make ck --bad missing-shard
	start_hub
	run -65 wsync-push -m policy ck
	assert_output "wsync-push: ck/model.safetensors.index.json: tensor model.layers.1.mlp.down_proj.weight: its shard model-00003-of-00003.safetensors is missing"
	run -66 wsync-pull -m policy -o x.wsync
	assert_output 'wsync-pull: model "policy" has no version'
}

@test "a shard with a tensor the index does not list is refused, nothing pushed" {
	mkckpt make ck --bad unlisted
	start_hub
	run -65 wsync-push -m policy ck
	assert_output "wsync-push: ck/model-00003-of-00003.safetensors: tensor model.extra.weight: not listed in the index model.safetensors.index.json"
	run -66 wsync-pull -m policy -o x.wsync
}

@test "two shards holding the same tensor are refused, nothing pushed" {
	mkckpt make ck --bad duplicate
	start_hub
	run -65 wsync-push -m policy ck
	assert_output "wsync-push: ck/model-00003-of-00003.safetensors: tensor model.embed_tokens.weight: also in model-00001-of-00003.safetensors"
	run -66 wsync-pull -m policy -o x.wsync
}

@test "an empty tensor name is refused, naming the shard" {
	mkckpt make ck --bad empty-name
	start_hub
	run -65 wsync-push -m policy ck
	assert_output "wsync-push: ck/model-00001-of-00003.safetensors: a tensor name is empty"
	run -66 wsync-pull -m policy -o x.wsync
}

@test "a tensor name that is not UTF-8 is refused, naming the shard and the tensor" {
	mkckpt make ck --bad non-utf8
	start_hub
	run -65 wsync-push -m policy ck
	assert_output 'wsync-push: ck/model-00001-of-00003.safetensors: tensor "model.bad\xffname": the name is not UTF-8'
	run -66 wsync-pull -m policy -o x.wsync
}

@test "a reader holding the previous directory while 10 versions arrive reads only whole versions" {
	for ((v = 1; v <= 10; v++)); do mkckpt make "v$v" --seed "$v"; done
	start_hub
	wsync-push -m policy v1 >/dev/null
	mkdir out
	wsync-watch -m policy -o out/policy --format safetensors >watch.out 2>watch.err &
	PIDS+=($!)
	wait_until grep -q "^policy 1 " watch.out
	"$PY" "$FIXTURES/ckptlease.py" out/policy stop v{1..10} >reader.out 2>&1 &
	READER=$!
	PIDS+=($READER)
	for ((v = 2; v <= 10; v++)); do
		wsync-push -m policy "v$v" >/dev/null
		wait_until grep -q "^policy $v " watch.out
	done
	touch stop
	rc=0
	wait "$READER" || rc=$?
	assert_equal "$rc $(cat reader.out)" "0 ok"
	assert_equal "$(mkckpt dump out/policy --files)" "$(mkckpt dump v10 --files)"
	# Once no reader holds them, the next swap removes every older directory (--keep 0).
	wsync-push -m policy v1 >/dev/null
	wait_until grep -q "^policy 11 " watch.out
	assert_equal "$(cd out && echo policy*)" "policy policy.v11"
}

@test "--select writes only the matching tensors and the small files" {
	mkckpt make ck --layers 4
	start_hub
	wsync-push -m policy ck >/dev/null
	run -0 --separate-stderr wsync-watch --once -m policy -o sel --format safetensors \
		--select 'model.layers.1.*' --select 'lm_head.*'
	assert_output "policy 1 sel.v1"
	assert_equal "$(mkckpt dump sel --files)" \
		"$(mkckpt dump ck --files | grep -e '^model.layers.1\.' -e '^lm_head' -e '^file ')"
}

@test "--select of a quarter of the layers fetches about a quarter of the bytes, each tensor verified" {
	mkckpt make ck --layers 8 --hidden 256 --inter 640 --shards 3
	start_hub
	wsync-push -m policy ck >/dev/null
	run -0 --separate-stderr wsync-watch --once -m policy -o sel --format safetensors \
		--transfer socket --select 'model.layers.[01].*'
	assert_output "policy 1 sel.v1"
	assert_equal "$(mkckpt dump sel --files)" \
		"$(mkckpt dump ck --files | grep -e '^model.layers.[01]\.' -e '^file ')"
	[[ $stderr =~ "policy version 1: fetched "([0-9]+)" of "([0-9]+)" bytes for the selection" ]]
	fetched=${BASH_REMATCH[1]} size=${BASH_REMATCH[2]}
	# The two layers' data is 2/8 of the weights; the headers and small files add little.
	(( fetched * 100 < size * 30 && fetched * 100 > size * 24 ))
	run -0 jq -r .metadata.wsync_content sel/model.safetensors.index.json
	assert_output "$(wsync-inspect --json "$STORE/policy/1.wsync" | jq -r .content_id)"
}

# flip_in PATH: flips a byte in the middle of tensor PATH's data in the store's version 1.
flip_in() {
	local off
	off=$(wsync-inspect --json "$STORE/policy/1.wsync" |
		jq --arg p "$1" '.tree[] | select(.path == $p) | .offset + (.bytes / 2 | floor)')
	printf '\377' | dd of="$STORE/policy/1.wsync" bs=1 seek="$off" conv=notrunc status=none
}

@test "--select verifies the selected tensors it fetches, and never reads the others" {
	mkckpt make ck --layers 4
	start_hub
	wsync-push -m policy ck >/dev/null
	# A flipped byte outside the selection is never fetched, so never seen.
	flip_in model.layers.3.mlp.up_proj.weight
	run -0 --separate-stderr wsync-watch --once -m policy -o sel --format safetensors \
		--transfer socket --select 'model.layers.1.*'
	assert_output "policy 1 sel.v1"
	# One inside it is caught: the version is not applied and the hub hears why.
	flip_in model.layers.1.mlp.up_proj.weight
	wsync-watch --id w2 -m policy -o sel2 --format safetensors --transfer socket \
		--select 'model.layers.1.*' >w2.out 2>w2.err &
	PIDS+=($!)
	wait_until grep -q "not applied" w2.err
	run -0 cat w2.err
	assert_line --partial "wsync-watch: policy version 1 not applied: policy version 1: tensor model.layers.1.mlp.up_proj.weight: hash "
	[ ! -e sel2 ]
	run -0 bash -c "wsync-inspect --hub --json | jq '.workers[] | select(.worker == \"w2\") | .failure.version'"
	assert_output 1
}

# change NAME DIR [STEP]: flips the low bit of every STEPth byte (default 97)
# of tensor NAME in the checkpoint directory DIR, in place; STEP 0: every
# byte becomes a random one (nothing a delta could compress).
change() {
	"$PY" - "$2" "$1" "${3:-97}" <<'PYEOF'
import glob, json, os, struct, sys
d, name, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
for shard in sorted(glob.glob(d + "/*.safetensors")):
    raw = bytearray(open(shard, "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    if name in head:
        a, b = head[name]["data_offsets"]
        if step == 0:
            raw[8 + n + a:8 + n + b] = os.urandom(b - a)
        for i in range(8 + n + a, 8 + n + b, step or b - a):
            raw[i] ^= 1
        open(shard, "wb").write(raw)
PYEOF
}

@test "--select takes a delta smaller than the selection, and writes only the selected tensors" {
	mkckpt make ck --layers 8 --hidden 256 --inter 640 --shards 3
	start_hub
	wsync-push -q -m policy ck
	run -0 wsync-watch -q --once --id w -m policy -o sel --format safetensors --transfer socket \
		--select 'model.layers.[01].*'
	assert_output "policy 1 sel.v1"
	cp -r ck ck2
	change model.layers.1.mlp.up_proj.weight ck2
	change model.layers.5.mlp.up_proj.weight ck2
	wsync-push -q -m policy ck2
	run -0 --separate-stderr wsync-watch -q --once --id w -m policy -o sel --format safetensors \
		--transfer socket --select 'model.layers.[01].*'
	assert_output "policy 2 sel.v2"
	assert_equal "$stderr" ""
	assert_equal "$(mkckpt dump sel --files)" \
		"$(mkckpt dump ck2 --files | grep -e '^model.layers.[01]\.' -e '^file ')"
	run -0 jq -r .metadata.wsync_content sel/model.safetensors.index.json
	assert_output "$(wsync-inspect --json "$STORE/policy/2.wsync" | jq -r .content_id)"
	run -0 grep -c 'event=ack worker=w model=policy version=2 transfer=delta ' hub.log
	# On the wire: the delta, under 1/80 of the version (the two layers are 1/4 of it).
	wire=$(wsync-inspect --hub --json | jq '.workers[] | select(.worker == "w") | .wire')
	size=$(stat -c %s "$STORE/policy/2.wsync")
	(( wire > 0 && wire * 80 < size )) || fail "$wire bytes on the wire for $size"
	# Every byte of three other layers changed: a delta larger than the selection.
	for l in 2 3 4; do
		for t in mlp.up_proj mlp.gate_proj mlp.down_proj; do
			change "model.layers.$l.$t.weight" ck2 0
		done
	done
	wsync-push -q -m policy ck2
	run -0 wsync-watch --once --id w -m policy -o sel --format safetensors \
		--transfer socket --select 'model.layers.[01].*'
	assert_line "policy 3 sel.v3"
	assert_line --regexp '^wsync-watch: policy version 3 fetched whole: the delta \([0-9]+ bytes\) is not smaller than the selection \([0-9]+ bytes\)$'
	assert_equal "$(mkckpt dump sel --files)" \
		"$(mkckpt dump ck2 --files | grep -e '^model.layers.[01]\.' -e '^file ')"
}

@test "the hub shows a watcher's selection in wsync-inspect --hub" {
	mkckpt make ck
	start_hub
	wsync-push -m policy ck >/dev/null
	wsync-watch --id rank3 -m policy -o sel --format safetensors --select 'model.layers.1.*' \
		--select 'lm_head.*' >watch.out 2>watch.err &
	PIDS+=($!)
	wait_until grep -q "^policy 1 " watch.out
	run -0 wsync-inspect --hub
	assert_line "worker rank3 selects: model.layers.1.* lm_head.*"
	run -0 bash -c "wsync-inspect --hub --json | jq -c '.workers[0].select'"
	assert_output '["model.layers.1.*","lm_head.*"]'
}

# sparse_ckpt: $CK, a checkpoint directory on tmpfs of two 512 MiB shards
# whose every tensor's data is a hole; $BEFORE, its du in KiB.
sparse_ckpt() {
	[ -w /dev/shm ] || skip "no writable /dev/shm (tmpfs)"
	CK=$(mktemp -d /dev/shm/wsync-sparse.XXXXXX)
	CLEANUP+=("$CK")
	"$PY" - "$CK" <<'PYEOF'
import json, struct, sys
for s in (1, 2):
    head, off = {}, 0
    for i in range(4):
        head[f"model.layers.{s}.{i}.weight"] = {"dtype": "BF16", "shape": [64 << 20],
                                                "data_offsets": [off, off + (128 << 20)]}
        off += 128 << 20
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(f"{sys.argv[1]}/model-0000{s}-of-00002.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
PYEOF
	BEFORE=$(du -k "$CK" | cut -f1)
}

@test "a sparse 1 GiB checkpoint directory on tmpfs is pushed in bounded memory and stays sparse" {
	sparse_ckpt
	start_hub
	run -0 /usr/bin/time -f "%M" -o rss wsync-push -q -m big "$CK"
	assert_output 1
	# Peak RSS in KiB: under 64 MiB (the pages of the holes were never filled).
	(( $(cat rss) < 65536 ))
	assert_equal "$(du -k "$CK" | cut -f1)" "$BEFORE"
}

@test "a signed push of a sparse 1 GiB checkpoint directory digests it in bounded memory, leaves it sparse, and verifies" {
	sparse_ckpt
	wsync-keygen --sign key >/dev/null
	start_hub
	run -0 /usr/bin/time -f "%M" -o rss wsync-push -q --sign-key key.key -m big "$CK"
	assert_output 1
	(( $(cat rss) < 65536 ))
	assert_equal "$(du -k "$CK" | cut -f1)" "$BEFORE"
	run -0 wsync-pull -q --verify-key key.pub -m big -o big.wsync
	assert_output 1
}

@test "--select with --verify-key over the socket is refused at start, naming both options" {
	wsync-keygen --sign key >/dev/null
	run -64 timeout 10 wsync-watch -m policy -o sel --format safetensors --select 'a.*' \
		--verify-key key.pub
	assert_output "wsync-watch: --select with --verify-key needs --transfer link or copy: a signature covers every tensor, and over the socket only the selected ones come
Try 'wsync-watch --help'."
}

@test "--select with --verify-key and a copy transfer applies a signed version and refuses an unsigned one" {
	mkckpt make ck --layers 2
	wsync-keygen --sign key >/dev/null
	start_hub
	wsync-push -q --sign-key key.key -m policy ck >/dev/null
	run -0 --separate-stderr wsync-watch --once --transfer copy -m policy -o sel \
		--format safetensors --select 'model.layers.1.*' --verify-key key.pub
	assert_output "policy 1 sel.v1"
	assert_equal "$(mkckpt dump sel --files)" \
		"$(mkckpt dump ck --files | grep -e '^model.layers.1\.' -e '^file ')"
	# The same tensors, unsigned, as a hub could serve them: refused.
	wsync-push -q -m policy ck >/dev/null
	wsync-watch --id w1 --transfer copy -m policy -o sel --format safetensors \
		--select 'model.layers.1.*' --verify-key key.pub >w1.out 2>w1.err &
	PIDS+=("$!")
	wait_until has_failure w1
	run -0 hub_failure w1
	assert_output "2 refused (unsigned): policy version 2: not signed (no wsync.signature in its meta)"
	assert_equal "$(readlink sel)" sel.v1
}

@test "--select without --format safetensors is a usage error" {
	run -64 wsync-watch -m policy -o x.wsync --select 'a.*'
	assert_output "wsync-watch: --select and --shard-size need --format safetensors
Try 'wsync-watch --help'."
}

# start_engine: a mock engine (python3 http.server) whose reload endpoint
# appends each request's body to reloads.log; ENGINE_URL points at it.
start_engine() {
	"$PY" -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open("reloads.log", "ab") as f:
            f.write(body + b"\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{\"success\": true}")
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open("engine.port.tmp", "w").write(str(s.server_port))
__import__("os").rename("engine.port.tmp", "engine.port")
s.serve_forever()' &
	PIDS+=($!)
	wait_until test -e engine.port
	export ENGINE_URL="http://127.0.0.1:$(cat engine.port)/update_weights_from_disk"
}

@test "the engine hook example points a mock engine at each version's directory" {
	mkckpt make v1 --seed 1
	mkckpt make v2 --seed 2
	start_hub
	start_engine
	wsync-push -m policy v1 >/dev/null
	mkdir out
	wsync-watch -m policy -o out/policy --format safetensors \
		-x "$ROOT/examples/engine/reload-hook.sh" >watch.out 2>watch.err &
	PIDS+=($!)
	wait_until grep -q "^policy 1 " watch.out
	wsync-push -m policy v2 >/dev/null
	wait_until grep -q "^policy 2 " watch.out
	run -0 cat reloads.log
	assert_output "{\"model_path\":\"out/policy.v1\",\"weight_version\":\"1\"}
{\"model_path\":\"out/policy.v2\",\"weight_version\":\"2\"}"
	assert_equal "$(mkckpt dump out/policy.v2 --files)" "$(mkckpt dump v2 --files)"
}

@test "a push of a directory says what it leaves out: subdirectories and shards the index does not name" {
	mkckpt make ck
	mkdir ck/global_step10
	cp ck/config.json ck/global_step10/
	cp "$(ls ck/*.safetensors | head -1)" ck/stale.safetensors
	start_hub
	run -0 --separate-stderr wsync-push -m policy ck
	assert_output 1
	assert_equal "$stderr" "wsync-push: ck: left out: global_step10 (a directory: only the files at the top are read), stale.safetensors (a shard the index does not name)"
}

@test "a file beside the weights over 16 MiB is refused, and pushed with --exclude or a higher --max-file" {
	mkckpt make ck
	head -c $((17 << 20)) /dev/zero >ck/optimizer.pt
	start_hub
	run -65 wsync-push -m policy ck
	assert_output "wsync-push: ck/optimizer.pt: 17825792 bytes, over the bound of 16777216 for a file beside the weights (wsync-format(5), CHECKPOINT DIRECTORIES): leave it out, or raise the bound"
	run -0 wsync-push --exclude 'optimizer.*' -m policy ck
	assert_output 1
	run -0 wsync-pull -m policy -o pulled --format safetensors
	[ ! -e pulled/optimizer.pt ]
	assert_equal "$(mkckpt dump pulled --files)" "$(mkckpt dump ck --files | grep -v optimizer.pt)"
	run -0 wsync-push --max-file $((32 << 20)) -m policy ck
	assert_output 2
	run -0 wsync-pull -m policy -o pulled --format safetensors
	cmp ck/optimizer.pt pulled/optimizer.pt
}
