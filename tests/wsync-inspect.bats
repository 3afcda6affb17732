#!/usr/bin/env bats
# wsync-inspect on files: listing, JSON, verification, diff, and hostile input.

load test_helper

# all.wsync: every dtype, a scalar, a zero-size tensor, meta (see mksafetensors.py).
make_all() {
	"$PY" "$FIXTURES/mksafetensors.py" all all.safetensors
	wsync-convert -m policy all.safetensors all.wsync
}

# Flips one byte of tensor number $2 (0-based, file order) of file $1.
flip_tensor_byte() {
	local off
	off=$(wsync-inspect --json "$1" | jq ".tree[$2].offset")
	printf '\377' | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

@test "a .wsync file is listed with its header and aligned columns" {
	make_all
	run -0 wsync-inspect all.wsync
	assert_output "$(cat "$FIXTURES/all.inspect")"
}

@test "--json prints one document with every field and tensor" {
	make_all
	run -0 wsync-inspect --json all.wsync
	assert_output "$(cat "$FIXTURES/all.inspect.json")"
	run -0 jq -r '.tree | map(.path) | join(" ")' <<<"$output"
	assert_output "embed.weight encoder.layers.0.attn.k encoder.layers.0.attn.q encoder.layers.0.norm.scale encoder.layers.1.mask head.bias head.scale head.weight stats.bytes stats.count stats.ids stats.small stats.tiny"
}

@test "every tensor of a written file starts at a multiple of 64" {
	make_all
	run -0 jq '[.tree[] | select(.bytes > 0) | .offset % 64] | add' \
		< <(wsync-inspect --json all.wsync)
	assert_output 0
}

@test "- reads the file from stdin, a pipe" {
	make_all
	run -0 bash -c 'cat all.wsync | wsync-inspect -'
	assert_output "$(sed 's/^file      all.wsync$/file      stdin/' "$FIXTURES/all.inspect")"
}

@test "a safetensors file is listed without hashes" {
	"$PY" "$FIXTURES/mkmodel.py" m.safetensors w=float32:2,2:1,2,3,4
	run -0 wsync-inspect m.safetensors
	assert_output "file      m.safetensors
kind      safetensors
tensors   1
params    4
bytes     16

PATH  DTYPE  SHAPE  BYTES  HASH
w     f32    [2,2]     16  -"
}

@test "--verify of an intact file prints OK and exits 0" {
	make_all
	run -0 wsync-inspect --verify all.wsync
	assert_output "all.wsync: OK"
}

@test "--verify names each tensor whose bytes changed and exits 65" {
	make_all
	flip_tensor_byte all.wsync 0
	flip_tensor_byte all.wsync 2
	run -65 --separate-stderr wsync-inspect --verify all.wsync
	assert_output "all.wsync: FAILED"
	assert_equal "${#stderr_lines[@]}" 2
	assert_regex "${stderr_lines[0]}" '^wsync-inspect: all.wsync: tensor embed.weight: hash mismatch: stored b9286bbe8627a1c2, computed [0-9a-f]{16}$'
	assert_regex "${stderr_lines[1]}" '^wsync-inspect: all.wsync: tensor encoder.layers.0.attn.q: hash mismatch: stored cf8d3b8aacaceb4e, computed [0-9a-f]{16}$'
}

@test "--verify refuses a safetensors file, which has no hashes" {
	"$PY" "$FIXTURES/mkmodel.py" m.safetensors w=float32:1:1
	run -65 wsync-inspect --verify m.safetensors
	assert_output "wsync-inspect: m.safetensors: a safetensors file has no hashes to verify (convert it with wsync-convert)"
}

@test "diff of a file with itself says equal and exits 0" {
	make_all
	run -0 wsync-inspect diff all.wsync all.safetensors
	assert_output "= 13 unchanged"
}

@test "diff lists added, removed and changed tensors and exits 1" {
	"$PY" "$FIXTURES/mkmodel.py" a.safetensors w=float32:2:1,2 gone=uint8:1:3 \
		s=float32:2:1,1 same=int64:2:5,6 d=float32:1:1
	"$PY" "$FIXTURES/mkmodel.py" b.safetensors w=float32:2:1,2.5 new=uint8:1:3 \
		s=float32:1,2:1,1 same=int64:2:5,6 d=float16:1:1
	wsync-convert -m m a.safetensors a.wsync
	run -1 wsync-inspect diff a.wsync b.safetensors
	assert_output "~ d dtype f32 -> f16
- gone u8 [1]
+ new u8 [1]
~ s shape [2] -> [1,2]
~ w values max_abs_diff=0.5
= 1 unchanged"
}

@test "diff --json reports the same differences as one document" {
	"$PY" "$FIXTURES/mkmodel.py" a.safetensors w=float32:2:1,2 gone=uint8:1:3
	"$PY" "$FIXTURES/mkmodel.py" b.safetensors w=float32:2:1,-2 new=uint8:1:3
	run -1 wsync-inspect diff --json a.safetensors b.safetensors
	run -0 jq -c . <<<"$output"
	assert_output '{"equal":false,"added":[{"path":"new","dtype":"u8","shape":[1]}],"removed":[{"path":"gone","dtype":"u8","shape":[1]}],"changed":[{"path":"w","max_abs_diff":4}],"unchanged":0}'
}

@test "diff reports a NaN on one side as nan" {
	"$PY" "$FIXTURES/mkmodel.py" a.safetensors w=float32:2:1,2
	"$PY" "$FIXTURES/mkmodel.py" b.safetensors w=float32:2:1,nan
	run -1 wsync-inspect diff a.safetensors b.safetensors
	assert_output "~ w values max_abs_diff=nan
= 0 unchanged"
}

@test "a missing file exits 66 and says so" {
	run -66 wsync-inspect nope.wsync
	assert_output "wsync-inspect: nope.wsync: cannot open: No such file or directory"
}

@test "a directory that is no checkpoint exits 66, saying what it lacks" {
	mkdir d
	run -66 wsync-inspect d
	assert_output "wsync-inspect: d: no shard: neither model.safetensors.index.json nor a *.safetensors file"
}

@test "an empty file exits 65" {
	: >empty.wsync
	run -65 wsync-inspect empty.wsync
	assert_output "wsync-inspect: empty.wsync: not a weight file (it is empty)"
}

# Each hostile case: the file mkhostile.py writes, then the exact message.
hostile() {
	"$PY" "$FIXTURES/mkhostile.py" "$1" "$1.wsync"
	run -65 wsync-inspect "$1.wsync"
	assert_output "wsync-inspect: $1.wsync: $2"
}

@test "a truncated file is refused with the byte it ends at" {
	hostile truncated "truncated: the object at byte 126 needs 18 bytes, 8 are left"
}
@test "a bin that lies about its length is refused" {
	hostile lying-bin "truncated: the object at byte 126 needs 2147483652 bytes, 21 are left"
}
@test "a map that claims 4 billion entries is refused before any allocation" {
	hostile lying-map "truncated: the container at byte 0 declares 8589934590 objects; only 143 bytes are left"
}
@test "a shape that does not match the data size is refused" {
	hostile shape-mismatch "tensor enc.w: shape needs 24 bytes of f32, data has 16"
}
@test "a shape whose size overflows 64 bits is refused" {
	hostile huge-shape "tensor enc.w: shape overflows 64 bits"
}
@test "a tensor with nine dims is refused" {
	hostile nine-dims "tensor enc.w: shape is not an array of at most 8 sizes"
}
@test "an unknown dtype is refused with its name" {
	hostile unknown-dtype 'tensor enc.w: unknown dtype "f17"'
}
@test "a tree nested deeper than 16 levels is refused" {
	hostile deep "d.d.d.d.d.d.d.d.d.d.d.d.d.d.d.d.d: nested deeper than 16 levels"
}
@test "a duplicate key is refused" {
	hostile duplicate-key 'tree: duplicate key "enc"'
}
@test "a non-string key is refused" {
	hostile non-string-key "tree: a key is an integer, not a string"
}
@test "data that is not 64-byte aligned is refused" {
	hostile misaligned "tensor enc.w: data at offset 105 is not 64-byte aligned"
}
@test "an unknown tensor field is refused" {
	hostile unknown-field 'tensor enc.w: unknown field "colour"'
}
@test "a model id with a path in it is refused" {
	hostile bad-model "model is not a valid model id (1 to 64 of A-Z a-z 0-9 . _ -)"
}
@test "a newer format version is refused" {
	hostile format-2 "format version 2 is not supported (this wsync reads version 1)"
}
@test "bytes after the document are refused" {
	hostile trailing "trailing data after the document (1 bytes)"
}
@test "a text file is refused as no weight file" {
	hostile not-msgpack "not a weight file (neither .wsync nor safetensors)"
}

@test "no file is a usage error, exit 64" {
	run -64 wsync-inspect
	assert_output "wsync-inspect: no file given (use - for stdin)
Try 'wsync-inspect --help'."
}

@test "an unknown option is a usage error, exit 64" {
	run -64 --separate-stderr wsync-inspect --frobnicate x
	assert_equal "${stderr_lines[0]}" "wsync-inspect: unknown option '--frobnicate'"
}

@test "diff with one file is a usage error" {
	run -64 wsync-inspect diff a
	assert_line -n 0 "wsync-inspect: diff needs two files"
}

@test "--help prints the usage and exits 0" {
	run -0 wsync-inspect --help
	assert_line -n 0 "usage: wsync-inspect [--json] [--verify] [--verify-key FILE]... FILE|DIR|-"
	assert_line -n 1 "       wsync-inspect diff [--json] A B"
}

@test "--version prints the program and version" {
	run -0 wsync-inspect --version
	assert_output "wsync-inspect 0.1.0"
}

@test "a manifest whose time no calendar holds is shown, not a crash" {
	# A canonical manifest (shortest forms, fields in order) signed at 2^62 s,
	# carried in the meta of a safetensors file converted to .wsync.
	"$PY" - <<-'PYEOF'
	import base64, json, struct, msgpack
	m = msgpack.packb({"manifest": 1, "seq": 1, "time": 1 << 62, "key": bytes(8),
	    "models": [{"model": "policy", "content": 0, "digest": bytes(32),
	    "meta": bytes(32)}]}, use_bin_type=True)
	head = json.dumps({"__metadata__": {"wsync.manifest": base64.b64encode(m).decode()},
	    "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
	open("far.safetensors", "wb").write(struct.pack("<Q", len(head)) + head + bytes(4))
	PYEOF
	wsync-convert -m policy far.safetensors far.wsync
	run -0 wsync-inspect far.wsync
	assert_line "signed    key 0 seq 1 at 4611686018427387904 s, 1 model"
	run -0 wsync-inspect --json far.wsync
	run -0 jq -r .signed.at <<<"$output"
	assert_output "4611686018427387904 s"
}

@test "a checkpoint directory is shown as the document a push of it makes" {
	"$PY" "$FIXTURES/mkckpt.py" make ck --layers 1 >/dev/null
	run -0 wsync-convert ck ck.wsync
	run -0 bash -c 'diff <(wsync-inspect --json ck | jq "del(.file)") <(wsync-inspect --json ck.wsync | jq "del(.file)")'
	run -0 --separate-stderr wsync-inspect --verify ck
	assert_output "ck: OK"
}

@test "diff reads two checkpoint directories: 0 when the same, 1 naming what differs" {
	"$PY" "$FIXTURES/mkckpt.py" make a --layers 1 >/dev/null
	cp -r a b
	run -0 wsync-inspect diff a b
	assert_output "= 15 unchanged"
	"$PY" "$FIXTURES/mkckpt.py" make b --layers 1 --seed 3 >/dev/null
	run -1 wsync-inspect diff a b
	assert_line --regexp '^~ lm_head\.weight values max_abs_diff=[0-9.]+$'
}
