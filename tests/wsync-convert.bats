#!/usr/bin/env bats
# wsync-convert: safetensors <-> .wsync, layouts, pipes, and hostile safetensors.

load test_helper

# The fixture with every dtype, a scalar, a zero-size tensor, dotted names and
# __metadata__, in the canonical form wsync-convert writes: a.safetensors.
mkall() {
	"$PY" "$FIXTURES/mksafetensors.py" all "${1:-a.safetensors}" "${@:2}"
}

# A safetensors file x.safetensors with header $1 verbatim and $2 data bytes.
mkraw() {
	"$PY" "$FIXTURES/mksafetensors.py" raw x.safetensors "$@"
}

stdump() {
	"$PY" "$FIXTURES/mksafetensors.py" dump "$1"
}

wsynctree() {
	"$PY" "$FIXTURES/wsynctree.py" "$1"
}

# One tensor w, f32 of shape [1], with the given entry fields replacing the defaults.
tensor() {
	printf '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]%s}}' "${1:+,$1}"
}

@test "--help prints the usage and the options on stdout" {
	run -0 --separate-stderr wsync-convert --help
	assert_output - <<'EOF'
usage: wsync-convert [-l tree|flat] [-m MODEL] [-t wsync|safetensors|dir] [--shard-size BYTES]
                     [--cast PATTERN=DTYPE[:SCALING]]... IN OUT

Converts IN, a safetensors or .wsync file (told apart by content) or a checkpoint
directory (shards, an index, small files), to OUT. IN and OUT may be - for stdin
and stdout.

  -l, --layout tree|flat   .wsync output: nest keys at each '.' and '/' (tree,
                           the default) or keep each name as one key
  -m, --model MODEL        model id of a .wsync output (default: IN's model,
                           else IN's file name without its extension)
  -t, --to wsync|safetensors|dir
                           output kind (default: dir when OUT ends in '/',
                           else OUT's extension, else the kind IN is not); dir
                           writes a new checkpoint directory OUT
      --shard-size BYTES   dir output: tensor bytes per shard at most (default
                           2 GiB)
      --cast PATTERN=DTYPE[:SCALING]
                           write the tensors whose names match the glob as DTYPE
                           (bf16, f16, f32, or f8e4m3 with block128 or tensor
                           scaling); the first matching rule decides (repeatable)
  -h, --help               show this help
  -V, --version            show the version

Exit status: 0 ok, 64 usage, 65 bad weight file, 66 no input, 70 internal
error, 74 I/O error. See wsync-convert(1).
EOF
	assert_equal "$stderr" ""
}

@test "the usage line is the man page's SYNOPSIS" {
	run -0 wsync-convert --help
	# The usage's lines up to the first empty one, and the SYNOPSIS's, each joined.
	usage=$(sed -n '1,/^$/p' <<<"$output" | sed 's/^usage: //; s/^ *//' | paste -sd ' ' |
		sed 's/ *$//')
	synopsis=$(MANWIDTH=200 man -l "$ROOT/man/wsync-convert.1" 2>/dev/null |
		sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' | sed '1d;$d; s/^ *//' | paste -sd ' ' |
		sed 's/ *$//')
	assert_equal "$synopsis" "$usage"
}

@test "--version prints the program and its version" {
	run -0 --separate-stderr wsync-convert --version
	assert_output "wsync-convert 0.1.0"
	assert_equal "$stderr" ""
}

@test "no operands is a usage error" {
	run -64 --separate-stderr wsync-convert
	assert_output ""
	assert_equal "$stderr" "wsync-convert: needs IN and OUT
Try 'wsync-convert --help'."
}

@test "a third operand is a usage error" {
	run -64 wsync-convert a b c
	assert_output "wsync-convert: too many arguments: needs IN and OUT
Try 'wsync-convert --help'."
}

@test "an unknown option is a usage error" {
	run -64 wsync-convert --bogus a.safetensors a.wsync
	assert_output "wsync-convert: unknown option '--bogus'
Try 'wsync-convert --help'."
}

@test "an option without its argument is a usage error" {
	run -64 wsync-convert a.safetensors a.wsync --layout
	assert_output "wsync-convert: option '--layout' needs a value
Try 'wsync-convert --help'."
}

@test "every program refuses a bad option in the same words" {
	local prog
	for prog in wsync-convert wsync-inspect wsync-keygen wsync-pull wsync-push wsync-serve wsync-watch; do
		run -64 "$prog" --bogus=1
		assert_output "$prog: unknown option '--bogus'
Try '$prog --help'."
		run -64 "$prog" --help=1
		assert_output "$prog: option '--help' takes no value
Try '$prog --help'."
		run -64 "$prog" -Z
		assert_output "$prog: unknown option '-Z'
Try '$prog --help'."
	done
	for prog in wsync-convert wsync-pull wsync-push wsync-watch; do
		run -64 "$prog" -m
		assert_output "$prog: option '-m' needs a value
Try '$prog --help'."
	done
}

@test "an unknown layout is a usage error" {
	mkall
	run -64 wsync-convert -l deep a.safetensors a.wsync
	assert_output "wsync-convert: unknown layout \"deep\" (tree or flat)
Try 'wsync-convert --help'."
	assert [ ! -e a.wsync ]
}

@test "an unknown output kind is a usage error" {
	mkall
	run -64 wsync-convert --to=gguf a.safetensors a.gguf
	assert_output "wsync-convert: unknown output kind \"gguf\" (wsync, safetensors or dir)
Try 'wsync-convert --help'."
}

@test "a bad model id is a usage error, found before the input is opened" {
	run -64 wsync-convert -m .hidden missing.safetensors out.wsync
	assert_output "wsync-convert: bad model id \".hidden\": use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
Try 'wsync-convert --help'."
}

@test "a missing input exits 66" {
	run -66 wsync-convert missing.safetensors out.wsync
	assert_output "wsync-convert: missing.safetensors: cannot open: No such file or directory"
	assert [ ! -e out.wsync ]
}

@test "an output in a missing directory exits 74" {
	mkall
	run -74 wsync-convert a.safetensors nodir/a.wsync
	assert_output "wsync-convert: nodir/a.wsync: cannot create a temporary file: No such file or directory"
}

@test "a safetensors output that cannot be written exits 74" {
	mkall
	run -74 bash -c 'wsync-convert -t safetensors a.safetensors - >/dev/full'
	assert_output "wsync-convert: stdout: write failed: No space left on device"
}

@test "safetensors to .wsync and back gives the same bytes" {
	mkall
	run -0 wsync-convert a.safetensors a.wsync
	assert_output ""
	run -0 wsync-convert a.wsync b.safetensors
	assert_output ""
	cmp a.safetensors b.safetensors
}

@test "a round trip keeps every name, dtype, shape and data byte of a file in another order" {
	mkall a.safetensors --shuffled
	wsync-convert a.safetensors a.wsync
	wsync-convert a.wsync b.safetensors
	assert_equal "$(stdump b.safetensors)" "$(stdump a.safetensors)"
	run -0 stdump b.safetensors
	assert_line --index 0 "embed.weight F32 [5,4] bb3fa84cee66cb90"
	assert_line --index 3 "encoder.layers.0.norm.scale F64 [] e163f8cb0f7067a7"
	assert_line --index 5 "head.bias F32 [0] e3b0c44298fc1c14"
}

@test "a file with no tensors converts both ways" {
	mkraw '{}' 0
	run -0 wsync-convert x.safetensors x.wsync
	run -0 wsynctree x.wsync
	assert_output "model x
version 0"
	run -0 wsync-convert x.wsync y.safetensors
	printf '\010\0\0\0\0\0\0\0{}      ' >want
	cmp want y.safetensors
}

@test "the tree layout nests a map at every dot, every dtype kept" {
	mkall
	run -0 wsync-convert a.safetensors a.wsync
	run -0 wsynctree a.wsync
	assert_output - <<'EOF'
model a
version 0
meta format=pt
meta author=wsync tests
meta note=dots.and/slashes
["embed", "weight"] f32 [5,4]
["encoder", "layers", "0", "attn", "k"] bf16 [3,2]
["encoder", "layers", "0", "attn", "q"] f16 [2,3]
["encoder", "layers", "0", "norm", "scale"] f64 []
["encoder", "layers", "1", "mask"] bool [2,2]
["head", "bias"] f32 [0]
["head", "scale"] f8e5m2 [3]
["head", "weight"] f8e4m3 [4,2]
["stats", "bytes"] u8 [7]
["stats", "count"] i64 [2]
["stats", "ids"] i32 [3]
["stats", "small"] i16 [2,1,2]
["stats", "tiny"] i8 [5]
EOF
}

@test "the flat layout keeps each name as one key" {
	mkall
	run -0 wsync-convert --layout=flat a.safetensors a.wsync
	run -0 wsynctree a.wsync
	assert_line --index 5 '["embed.weight"] f32 [5,4]'
	assert_line --index 8 '["encoder.layers.0.norm.scale"] f64 []'
	assert_equal "${#lines[@]}" 18
}

@test "__metadata__ becomes the .wsync meta in its order, and comes back" {
	mkraw '{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"__metadata__":{"z":"last letter","a":"{\"json\": [1]}","empty":""}}' 2
	wsync-convert x.safetensors x.wsync
	run -0 wsynctree x.wsync
	assert_line --index 2 'meta z=last letter'
	assert_line --index 3 'meta a={"json": [1]}'
	assert_line --index 4 'meta empty='
	wsync-convert x.wsync y.safetensors
	run -0 stdump y.safetensors
	assert_output - <<'EOF'
w U8 [2] b413f47d13ee2fe6
meta z=last letter
meta a={"json": [1]}
meta empty=
EOF
}

@test "the tree layout splits a name at a slash as well" {
	mkraw '{"enc/0.w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}' 1
	wsync-convert x.safetensors x.wsync
	run -0 wsynctree x.wsync
	assert_line --index 2 '["enc", "0", "w"] u8 [1]'
}

@test "a name with an empty part needs the flat layout" {
	mkraw '{"a..b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor a..b: empty key in path (use --layout flat)"
	assert [ ! -e x.wsync ]
	run -0 wsync-convert -l flat x.safetensors x.wsync
	run -0 wsynctree x.wsync
	assert_line --index 2 '["a..b"] f32 [1]'
}

@test "a tensor whose name is the prefix of another needs the flat layout" {
	mkraw '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a.b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}' 2
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor a: is also a subtree (of a.b) (use --layout flat)"
	run -0 wsync-convert -l flat x.safetensors x.wsync
}

@test "a failed conversion leaves OUT as it was and no temporary file" {
	echo old >x.wsync
	mkraw '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a.b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}' 2
	run -65 wsync-convert x.safetensors x.wsync
	assert_equal "$(cat x.wsync)" "old"
	run -0 ls
	assert_output - <<'EOF'
x.safetensors
x.wsync
EOF
}

@test "a safetensors output keeps every name whole, whatever the layout" {
	mkraw '{"a..b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"c/d":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}' 2
	run -0 wsync-convert x.safetensors y.safetensors
	run -0 stdump y.safetensors
	assert_output - <<'EOF'
a..b U8 [1] 6e340b9cffb37a98
c/d U8 [1] 4bf5122f344554c5
EOF
}

@test "an input read from a stdin pipe is converted and its model is named model" {
	mkall
	run -0 bash -c 'cat a.safetensors | wsync-convert - a.wsync'
	run -0 wsynctree a.wsync
	assert_line --index 0 "model model"
	assert_line --index 5 '["embed", "weight"] f32 [5,4]'
}

@test "an output to a stdout pipe is the kind the input is not" {
	mkall
	run -0 bash -c 'wsync-convert a.safetensors - | cat >out'
	run -0 wsynctree out
	assert_line --index 0 "model a"
	assert_line --index 5 '["embed", "weight"] f32 [5,4]'
}

@test "a pipe through two conversions gives the same bytes" {
	mkall
	cat a.safetensors | wsync-convert - - | wsync-convert - - >b.safetensors
	cmp a.safetensors b.safetensors
}

@test "a safetensors file named .wsync is read as safetensors" {
	mkall
	cp a.safetensors x.wsync
	run -0 wsync-convert x.wsync y.safetensors
	cmp a.safetensors y.safetensors
}

@test "OUT's extension picks the output kind, even the input's own" {
	mkall
	run -0 wsync-convert a.safetensors b.safetensors
	cmp a.safetensors b.safetensors
}

@test "--to overrides OUT's extension" {
	mkall
	run -0 wsync-convert -t safetensors a.safetensors b.wsync
	cmp a.safetensors b.wsync
}

@test "a .wsync input with another extension becomes safetensors" {
	mkall
	wsync-convert a.safetensors a.wsync
	run -0 wsync-convert a.wsync out.bin
	cmp a.safetensors out.bin
}

@test "the model id defaults to the input's file name, other characters made _" {
	mkall "my model(v2).tar.safetensors"
	run -0 wsync-convert "my model(v2).tar.safetensors" out.wsync
	run -0 wsynctree out.wsync
	assert_line --index 0 "model my_model_v2_.tar"
}

@test "-m sets the model id" {
	mkall
	run -0 wsync-convert --model=policy-v2 a.safetensors a.wsync
	run -0 wsynctree a.wsync
	assert_line --index 0 "model policy-v2"
}

@test "a .wsync input keeps its model id and its version" {
	mkall
	wsync-convert -m actor a.safetensors a.wsync
	"$PY" - <<'EOF'
data = bytearray(open("a.wsync", "rb").read())
at = data.index(b"\xa7version\xcf") + 9
data[at:at + 8] = (42).to_bytes(8, "big")
open("a.wsync", "wb").write(data)
EOF
	run -0 wsync-convert -l flat a.wsync b.wsync
	run -0 wsynctree b.wsync
	assert_line --index 0 "model actor"
	assert_line --index 1 "version 42"
	assert_line --index 5 '["embed.weight"] f32 [5,4]'
}

@test "a safetensors header of 136 bytes is not mistaken for a msgpack map" {
	# 136 = 0x88, the first byte of the file: a msgpack fixmap header.
	mkraw "$(printf '%-136s' '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')" 1
	assert_equal "$(od -An -tx1 -N1 x.safetensors)" " 88"
	run -0 wsync-convert x.safetensors x.wsync
	run -0 wsynctree x.wsync
	assert_line --index 2 '["w"] u8 [1]'
}

@test "a header length beyond the end of the file is refused" {
	mkraw "$(tensor)" 4 --hlen 300
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: truncated: header needs 308 bytes, file has 66"
}

@test "a header that is not JSON is refused with jansson's position" {
	mkraw '{"w":{"dtype":"F32",}}' 0
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: bad JSON header: line 1, column 21: string or '}' expected near '}'"
}

@test "a header with a name twice is refused" {
	mkraw "{\"w\":0,\"w\":1}" 0
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: bad JSON header: line 1, column 10: duplicate object key near '\"w\"'"
}

@test "a header entry that is not an object is refused" {
	mkraw '{"w":[1,2]}' 0
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: not a JSON object"
}

@test "a dtype wsync does not know is refused by name" {
	mkraw '{"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}' 4
	run -65 --separate-stderr wsync-convert x.safetensors x.wsync
	assert_output ""
	assert_equal "$stderr" 'wsync-convert: x.safetensors: tensor w: unsupported dtype "U16"'
	assert [ ! -e x.wsync ]
}

@test "a missing dtype is refused" {
	mkraw '{"w":{"shape":[1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: dtype missing"
}

@test "a shape that is not an array is refused" {
	mkraw '{"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape is not an array"
}

@test "a negative dimension is refused" {
	mkraw '{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape must be an array of non-negative integers"
}

@test "a fractional dimension is refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape must be an array of non-negative integers"
}

@test "a shape of more than 8 dims is refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape has 9 dims (at most 8)"
}

@test "missing data_offsets are refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: data_offsets missing"
}

@test "data_offsets that are not 2 integers are refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}' 8
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: data_offsets must be 2 non-negative integers"
}

@test "a negative data offset is refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: data_offsets must be 2 non-negative integers"
}

@test "data_offsets that end before they begin are refused" {
	mkraw '{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: data_offsets [4,0] end before begin"
}

@test "data_offsets beyond the data buffer are refused" {
	mkraw '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 6
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: data_offsets [0,8] beyond the data buffer of 6 bytes"
}

@test "data_offsets that disagree with the shape are refused" {
	mkraw '{"w":{"dtype":"F32","shape":[64,8],"data_offsets":[0,2040]}}' 2048
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape [64,8] of f32 needs 2048 bytes, data_offsets give 2040"
}

@test "a shape whose byte size overflows 64 bits is refused" {
	mkraw '{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor w: shape [4294967296,4294967296] of f32 is too large"
}

@test "an empty tensor name is refused" {
	mkraw '{"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: a tensor name is empty"
}

@test "a tensor name longer than 1024 bytes is refused" {
	name=$(printf 'n%.0s' {1..1025})
	mkraw "{\"$name\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}" 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: tensor ${name:0:56}...: name longer than 1024 bytes"
}

@test "more than 1000000 tensors are refused" {
	"$PY" - <<'EOF'
import struct
header = ("{" + ",".join('"%d":0' % i for i in range(1000001)) + "}").encode()
open("x.safetensors", "wb").write(struct.pack("<Q", len(header)) + header)
EOF
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: 1000001 tensors (at most 1000000)"
}

@test "__metadata__ that is not an object is refused" {
	mkraw '{"__metadata__":["format","pt"]}' 0
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: __metadata__ is not a JSON object"
}

@test "a __metadata__ value that is not a string is refused" {
	mkraw '{"__metadata__":{"format":"pt","epoch":3}}' 0
	run -65 wsync-convert x.safetensors x.wsync
	assert_output "wsync-convert: x.safetensors: __metadata__ epoch: value is not a string"
}

@test "control characters of a hostile name are escaped in the message" {
	mkraw '{"w\u001b[2J":{"dtype":"Q\n","shape":[1],"data_offsets":[0,4]}}' 4
	run -65 wsync-convert x.safetensors x.wsync
	assert_output 'wsync-convert: x.safetensors: tensor w\x1b[2J: unsupported dtype "Q\x0a"'
}
