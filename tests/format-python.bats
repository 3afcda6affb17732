#!/usr/bin/env bats
# format-python.bats - wsync-format(5) proven from outside the C code: the man
# page's Python reader and writer run as printed, and they agree with the C
# programs on every path, dtype, shape, hash, offset and content id.

load test_helper

MAN=$ROOT/man/wsync-format.5
DRIVER=$FIXTURES/wsync_py.py

# man_code NAME: the man page's Python block NAME, its roff escapes undone.
man_code() {
	sed -n "/^# --- begin $1 ---\$/,/^# --- end $1 ---\$/p" "$MAN" |
	    sed -e 's/\\&//g' -e 's/\\-/-/g' -e 's/\\e/\\/g'
}

# wpy CMD FILE: the driver, on the man page's reader, writer and content id.
wpy() {
	if [ ! -f "$TMP/wsync_format.py" ]; then
		{ man_code reader; man_code writer; man_code contentid; } \
		    >"$TMP/wsync_format.py"
	fi
	"$PY" "$DRIVER" "$TMP/wsync_format.py" "$@"
}

# py_tensors FILE: the Python reader's tensor lines, without the sha256.
py_tensors() {
	wpy read "$1" | awk '$1 == "tensor" { print $1, $2, $3, $4, $5 }'
}

# c_tensors FILE: the same lines from wsync-inspect --json.
c_tensors() {
	wsync-inspect --json "$1" | jq -r '.tree | sort_by(.path)[] |
	    "tensor \(.path) \(.dtype) \(.shape | tojson) \(.hash)"'
}

@test "wsync-format(5) formats with no groff warning" {
	run groff -ww -man -z "$MAN"
	assert_success
	refute_output
	run -0 man -l "$MAN"
	assert_output --partial "wsync-format - the .wsync weight file format"
}

@test "the man page's Python blocks use no roff escape but \\e, \\- and \\&" {
	sed -n '/^# --- begin /,/^# --- end /p' "$MAN" >blocks
	run grep -c '^# --- begin \(reader\|writer\|contentid\|example\|manifest\) ---$' blocks
	assert_output 5
	run grep -c '^# --- end \(reader\|writer\|contentid\|example\|manifest\) ---$' blocks
	assert_output 5
	run grep -nE "\\\\[^-e&]|\\\\\$|^[.']" blocks
	assert_failure 1
	refute_output
}

@test "the man page's Python writer and reader run on every numpy dtype" {
	wpy write model.wsync
	run wpy read model.wsync
	assert_success
	assert_line --index 0 "model policy"
	assert_line --index 1 "version 0"
	assert_line --index 2 "meta step=7"
	assert_equal "$(grep -c '^tensor ' <<<"$output")" 17
	for dtype in f64 f32 f16 i64 i32 i16 i8 u8 bool; do
		assert_line --regexp "^tensor [a-z0-9.]+ $dtype \[[0-9,]*\] [0-9a-f]{16} [0-9a-f]{64}\$"
	done
	assert_line --regexp '^tensor temperature f32 \[\] [0-9a-f]{16} '
	assert_line "tensor buffers.empty f32 [0,4] 2d06800538d394c2 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	assert_line --regexp '^tensor a\.b\.c\.d\.e\.f\.deep i16 \[2,1,2,1,2,1,2,1\] '
	assert_line --regexp '^tensor actor\.1\.weight f64 \[2,3,4\] '
}

@test "the man page's example prints the content id the page gives" {
	{ man_code reader; man_code writer; man_code contentid; man_code example; } >example.py
	run "$PY" example.py
	assert_success
	assert_output 6d6ef3f8478243b6
	grep -q '^which is$' "$MAN"
	grep -q '^\.BR 6d6ef3f8478243b6 ,$' "$MAN"
}

@test "the man page's example file has the size and offsets its hexdump shows" {
	{ man_code reader; man_code writer; man_code contentid; man_code example; } >example.py
	"$PY" example.py
	assert_equal "$(stat -c %s tiny.wsync)" 264
	run wpy layout tiny.wsync
	assert_success
	assert_output "$(printf 'version_offset 28\nfc.weight 128\nfc.bias 256')"
}

@test "the Python writer follows the writer rules byte by byte" {
	wpy write model.wsync
	run wpy layout model.wsync
	assert_success
	assert_line --index 0 "version_offset 30"
	assert_equal "${#lines[@]}" 18
}

@test "the Python writer streams to a pipe the bytes it writes to a file" {
	wpy write model.wsync
	wpy write /dev/stdout | cat >piped.wsync
	cmp model.wsync piped.wsync
}

@test "a model with no tensors has the content id of empty input" {
	wpy empty empty.wsync
	run wpy contentid empty.wsync
	assert_output 2d06800538d394c2
	run wsync-inspect --json empty.wsync
	assert_success
	assert_equal "$(jq -r .content_id <<<"$output")" 2d06800538d394c2
	assert_equal "$(jq -r .tensors <<<"$output")" 0
}

@test "wsync-inspect --verify accepts the Python writer's file" {
	wpy write model.wsync
	run -0 wsync-inspect --verify model.wsync
	assert_output "model.wsync: OK"
}

@test "wsync-inspect --json lists the paths, dtypes, shapes and hashes the Python reader reads" {
	wpy write model.wsync
	py_tensors model.wsync >py.txt
	c_tensors model.wsync >c.txt
	assert_equal "$(wc -l <py.txt)" 17
	diff py.txt c.txt
}

@test "wsync-inspect --json gives the model, version, meta and content id the Python side computes" {
	wpy write model.wsync
	wpy read model.wsync | grep -v '^tensor ' >py.txt
	wpy contentid model.wsync >>py.txt
	wsync-inspect --json model.wsync | jq -r '"model \(.model)", "version \(.version)",
	    (.meta | to_entries[] | "meta \(.key)=\(.value)"), .content_id' >c.txt
	diff py.txt c.txt
	run jq -r '"\(.format) \(.tensors)"' < <(wsync-inspect --json model.wsync)
	assert_output "1 17"
}

@test "wsync-inspect --json gives the data offsets the Python side finds" {
	wpy write model.wsync
	# wsync-inspect gives offset 0 for a zero-size tensor, which has no data.
	wpy layout model.wsync | grep -v '^version_offset \|^buffers\.empty ' | sort >py.txt
	wsync-inspect --json model.wsync |
	    jq -r '.tree[] | select(.bytes > 0) | "\(.path) \(.offset)"' | sort >c.txt
	assert_equal "$(wc -l <py.txt)" 16
	diff py.txt c.txt
}

@test "wsync-convert's tree and flat files follow the writer rules" {
	wpy write model.wsync
	wsync-convert model.wsync tree.wsync
	wsync-convert --layout flat model.wsync flat.wsync
	for f in tree.wsync flat.wsync; do
		run wpy layout "$f"
		assert_success
		assert_line --index 0 "version_offset 30"
		assert_equal "${#lines[@]}" 18
		for line in "${lines[@]:1}"; do
			(( ${line##* } % 64 == 0 )) || fail "$f: $line: not 64-byte aligned"
		done
	done
}

@test "the Python reader reads wsync-convert's tree and flat files with identical values" {
	wpy write model.wsync
	wsync-convert model.wsync tree.wsync
	wsync-convert --layout flat model.wsync flat.wsync
	wpy read model.wsync >model.txt
	wpy read tree.wsync >tree.txt
	wpy read flat.wsync >flat.txt
	diff model.txt tree.txt
	diff model.txt flat.txt
	run "$PY" -c 'import msgpack, sys; print(len(msgpack.unpackb(open(sys.argv[1], "rb").read())["tree"]))' flat.wsync
	assert_output 17
}

@test "the tree and flat layouts of the same weights have the same content id" {
	wpy write model.wsync
	wsync-convert --layout flat model.wsync flat.wsync
	id=$(wpy contentid model.wsync)
	assert_equal "$(wpy contentid flat.wsync)" "$id"
	assert_equal "$(wsync-inspect --json model.wsync | jq -r .content_id)" "$id"
	assert_equal "$(wsync-inspect --json flat.wsync | jq -r .content_id)" "$id"
}

@test "the Python reader reads a safetensors file converted by wsync-convert" {
	"$PY" "$FIXTURES/mksafetensors.py" all all.safetensors
	wsync-convert all.safetensors all.wsync
	run wpy layout all.wsync
	assert_success
	"$PY" "$FIXTURES/mksafetensors.py" dump all.safetensors | grep -v '^meta ' >st.txt
	wpy read all.wsync | awk '$1 == "tensor" {
		dtype = toupper($3)
		if (dtype == "F8E4M3") dtype = "F8_E4M3"
		if (dtype == "F8E5M2") dtype = "F8_E5M2"
		print $2, dtype, $4, substr($6, 1, 16)
	}' >py.txt
	assert_equal "$(wc -l <py.txt)" 13
	diff st.txt py.txt
	"$PY" "$FIXTURES/mksafetensors.py" dump all.safetensors | grep '^meta ' | sort >st-meta.txt
	wpy read all.wsync | grep '^meta ' | sort >py-meta.txt
	diff st-meta.txt py-meta.txt
	py_tensors all.wsync >py-hash.txt
	c_tensors all.wsync >c-hash.txt
	diff py-hash.txt c-hash.txt
}

@test "stamping 8 bytes at the version offset changes only the version" {
	wpy write model.wsync
	wpy read model.wsync >before.txt
	id=$(wsync-inspect --json model.wsync | jq -r .content_id)
	offset=$(wpy layout model.wsync | awk '$1 == "version_offset" { print $2 }')
	printf '\0\0\0\0\0\0\1\52' | dd of=model.wsync bs=1 seek="$offset" conv=notrunc status=none
	wpy read model.wsync >after.txt
	run diff before.txt after.txt
	assert_output "$(printf '2c2\n< version 0\n---\n> version 298')"
	run -0 wsync-inspect --json model.wsync
	assert_equal "$(jq -r .version <<<"$output")" 298
	assert_equal "$(jq -r .content_id <<<"$output")" "$id"
	run -0 wsync-inspect --verify model.wsync
	assert_output "model.wsync: OK"
}

@test "a changed data byte fails the Python reader and wsync-inspect --verify" {
	wpy write model.wsync
	printf '\377' | dd of=model.wsync bs=1 seek=128 conv=notrunc status=none
	run wpy read model.wsync
	assert_failure 1
	assert_output "wsync_py.py: model.wsync: tensor actor.0.weight: bad hash"
	run -65 wsync-inspect --verify model.wsync
	assert_output --partial "tensor actor.0.weight"
}

@test "the man page's Python manifest is byte for byte the one libwsync signs" {
	wsync-keygen --sign trainer >/dev/null
	sign_helper sign trainer.key signed.wsync
	{ man_code reader; man_code contentid; man_code manifest; } >fmt.py
	run -0 "$PY" - <<'PY'
import base64
exec(open("fmt.py").read())
head, arrays = read_wsync("signed.wsync")
signed = base64.b64decode(head["meta"]["wsync.manifest"])
m = msgpack.unpackb(signed)
mine = manifest(m["seq"], m["time"], m["key"], [(head, arrays)])
print("same" if mine == signed else "differ: %r" % msgpack.unpackb(mine))
PY
	assert_output "same"
}
