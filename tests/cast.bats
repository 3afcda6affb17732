#!/usr/bin/env bats
# cast.bats - weights cast on the way out (--cast; wsync-format(5), CASTS):
# the bytes of every cast against a reference written apart from the C
# (fixtures/fp8ref.py), the refusals, the checkpoint's quantization_config,
# and casting workers that receive the same deltas as every other worker.

load test_helper
load hub_helper

BLOCK=('f32.*=bf16' '*layernorm.weight=bf16' '*.weight=f8e4m3:block128')

# ref_check IN OUT RULE...: OUT (a .wsync or safetensors file) holds IN's
# tensors cast by the RULEs, byte for byte as fixtures/fp8ref.py computes them.
ref_check() {
	local in=$1 out=$2
	shift 2
	[[ $in == *.safetensors ]] || wsync-convert "$in" ref-in.safetensors
	[[ $in == *.safetensors ]] || in=ref-in.safetensors
	[[ $out == *.safetensors ]] || wsync-convert "$out" ref-out.safetensors
	[[ $out == *.safetensors ]] || out=ref-out.safetensors
	"$PY" "$FIXTURES/fp8ref.py" check "$in" "$out" "$@"
}

# cast_args RULE...: the --cast options for RULEs.
cast_args() {
	printf -- '--cast=%s\n' "$@"
}

@test "block128 casts of a bf16 model equal the rule, tensor by tensor and scale by scale" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	mapfile -t opts < <(cast_args "${BLOCK[@]}")
	run -0 wsync-convert "${opts[@]}" in.safetensors out.safetensors
	run -0 ref_check in.safetensors out.safetensors "${BLOCK[@]}"
	assert_output "f32.normal BF16 [3,7] same
f32.ties BF16 [10] same
lm_head.weight F8_E4M3 [40,260] same
lm_head.weight_scale_inv F32 [1,3] same
model.embed_tokens.weight F8_E4M3 [40,260] same
model.embed_tokens.weight_scale_inv F32 [1,3] same
model.experts.w BF16 [2,3,4] same
model.layers.0.input_layernorm.weight BF16 [260] same
model.layers.0.mlp.up_proj.weight F8_E4M3 [300,260] same
model.layers.0.mlp.up_proj.weight_scale_inv F32 [3,3] same
model.layers.0.self_attn.o_proj.weight F8_E4M3 [1,5] same
model.layers.0.self_attn.o_proj.weight_scale_inv F32 [1,1] same
model.layers.0.self_attn.q_proj.weight F8_E4M3 [128,128] same
model.layers.0.self_attn.q_proj.weight_scale_inv F32 [1,1] same
steps I64 [2] same"
}

@test "tensor scaling, f16 and f32 casts equal the rule" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	rules=('f32.*=f16' '*layernorm.weight=f32' 'model.experts.w=f8e4m3:tensor'
		'*.weight=f8e4m3:tensor')
	mapfile -t opts < <(cast_args "${rules[@]}")
	run -0 wsync-convert "${opts[@]}" in.safetensors out.safetensors
	run -0 ref_check in.safetensors out.safetensors "${rules[@]}"
	assert_line "model.experts.w F8_E4M3 [2,3,4] same"
	assert_line "model.experts.w_scale F32 [] same"
	assert_line "model.layers.0.mlp.up_proj.weight_scale F32 [] same"
	assert_line "model.layers.0.input_layernorm.weight F32 [260] same"
	assert_line "f32.ties F16 [10] same"
	refute_output --partial DIFFERENT
}

@test "a .wsync cast keeps the tree and says in its meta what it is a cast of" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	wsync-convert -m policy in.safetensors in.wsync
	content=$(content_of in.wsync)
	mapfile -t opts < <(cast_args "${BLOCK[@]}")
	run -0 wsync-convert "${opts[@]}" in.wsync out.wsync
	run -0 ref_check in.wsync out.wsync "${BLOCK[@]}"
	refute_output --partial DIFFERENT
	run -0 wsync-inspect --json out.wsync
	run -0 jq -r '.meta["wsync.cast_of"], .meta["wsync.cast"], .model' <<<"$output"
	assert_output "{\"model\":\"policy\",\"version\":0,\"content\":\"$content\"}
[\"f32.*=bf16\",\"*layernorm.weight=bf16\",\"*.weight=f8e4m3:block128\"]
policy"
	run -0 wsync-inspect out.wsync
	assert_line --regexp '^model.layers.0.mlp.up_proj.weight_scale_inv +f32 +\[3,3\] '
}

@test "a checkpoint directory cast gets the quantization_config engines read, the rest of config.json unchanged" {
	"$PY" "$FIXTURES/mkckpt.py" make ck --layers 2 --hidden 64 --vocab 100 --inter 160
	wsync-convert -m policy ck/ in.wsync
	run -0 wsync-convert --cast '*_proj.weight=f8e4m3:block128' in.wsync out/
	run -0 diff <(jq -S 'del(.quantization_config)' ck/config.json) <(jq -S 'del(.quantization_config)' out/config.json)
	run -0 jq -c .quantization_config out/config.json
	assert_output '{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128],"modules_to_not_convert":["lm_head","model.embed_tokens"]}'
	run -0 tail -c 200 out/config.json
	assert_output --partial '"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "model.embed_tokens"]}
}'
	run -0 jq -r '.weight_map | keys[]' out/model.safetensors.index.json
	assert_line model.layers.0.mlp.down_proj.weight_scale_inv
	assert_line model.layers.1.self_attn.q_proj.weight_scale_inv
	refute_line model.embed_tokens.weight_scale_inv
	cmp ck/tokenizer.json out/tokenizer.json
}

@test "a checkpoint directory as input is cast, its config.json included" {
	"$PY" "$FIXTURES/mkckpt.py" make ck --layers 1 --hidden 64 --vocab 100 --inter 160
	run -0 wsync-convert --cast '*_proj.weight=f8e4m3:block128' ck/ out.wsync
	wsync-convert ck/ in.safetensors
	# Every tensor as the rule makes it; only config.json, a small file, differs.
	run -1 ref_check in.safetensors out.wsync '*_proj.weight=f8e4m3:block128'
	assert_line "model.layers.0.mlp.gate_proj.weight_scale_inv F32 [2,1] same"
	run -0 grep -v ' same$' <<<"$output"
	assert_output --regexp '^__files__.config.json U8 \[[0-9]+\] DIFFERENT$'
	wsync-convert out.wsync back/
	run -0 jq -c .quantization_config.modules_to_not_convert back/config.json
	assert_output '["lm_head","model.embed_tokens"]'
}

@test "tensor scaling's quantization_config has no weight_block_size" {
	"$PY" "$FIXTURES/mkckpt.py" make ck --layers 1 --hidden 64 --vocab 100 --inter 160
	wsync-convert -m policy ck/ in.wsync
	run -0 wsync-convert --cast '*_proj.weight=f8e4m3:tensor' in.wsync out/
	run -0 jq -c .quantization_config out/config.json
	assert_output '{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","modules_to_not_convert":["lm_head","model.embed_tokens"]}'
}

# refusal CODE MESSAGE RULE...: the cast of in.safetensors by the RULEs exits
# CODE with MESSAGE and writes nothing.
refusal() {
	local code=$1 msg=$2
	shift 2
	mapfile -t opts < <(cast_args "$@")
	run "-$code" wsync-convert "${opts[@]}" in.safetensors out.safetensors
	assert_output "wsync-convert: $msg"
	run -0 ls
	assert_output "in.safetensors"
}

@test "block scaling of a tensor that is not 2-D is refused (65), nothing written" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	refusal 65 "in.safetensors: tensor model.experts.w: cast *.w=f8e4m3:block128: block128 scaling needs a 2-D tensor, this one is 3-D" \
		'*.w=f8e4m3:block128'
}

@test "a cast of an integer tensor is refused (65), nothing written" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	refusal 65 "in.safetensors: tensor steps: cast s*=bf16: i64 is not a float dtype (f64, f32, f16 or bf16)" 's*=bf16'
}

@test "a NaN where a scale is computed is refused (65), nothing written" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	refusal 65 "in.safetensors: tensor f32.ties: cast f32.*=f8e4m3:tensor: element 9 is NaN: no scale can be computed" \
		'f32.*=f8e4m3:tensor'
}

@test "an infinity where a scale is computed is refused (65), nothing written" {
	"$PY" - <<'PYEOF'
import json, struct
import numpy as np
data = np.array([[1.0, np.inf], [2.0, 3.0]], "<f4").tobytes()
head = json.dumps({"w.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
head += b" " * (-len(head) % 8)
open("in.safetensors", "wb").write(struct.pack("<Q", len(head)) + head + data)
PYEOF
	refusal 65 "in.safetensors: tensor w.weight: cast *=f8e4m3:block128: element 1 is infinite: no scale can be computed" \
		'*=f8e4m3:block128'
}

@test "an f16 cast of a value beyond f16's range is refused (65), nothing written" {
	"$PY" - <<'PYEOF'
import json, struct
import numpy as np
data = np.array([1.0, -65520.0], "<f4").tobytes()
head = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
head += b" " * (-len(head) % 8)
open("in.safetensors", "wb").write(struct.pack("<Q", len(head)) + head + data)
PYEOF
	refusal 65 "in.safetensors: tensor w: cast w=f16: element 1 (-65520) is beyond f16's range (65504)" 'w=f16'
}

@test "f8e4m3 with no scaling is a usage error (64)" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	mapfile -t opts < <(cast_args '*.weight=f8e4m3')
	run -64 wsync-convert "${opts[@]}" in.safetensors out.safetensors
	assert_output "wsync-convert: --cast \"*.weight=f8e4m3\": f8e4m3 needs a scaling: f8e4m3:block128 or f8e4m3:tensor
Try 'wsync-convert --help'."
	[ ! -e out.safetensors ]
}

@test "a --cast that is not PATTERN=DTYPE[:SCALING] is a usage error (64)" {
	run -64 wsync-convert --cast '*=i8' a.wsync b.wsync
	assert_line "wsync-convert: --cast \"*=i8\": cannot cast to \"i8\" (bf16, f16, f32 or f8e4m3)"
	run -64 wsync-convert --cast '*=bf16:block128' a.wsync b.wsync
	assert_line "wsync-convert: --cast \"*=bf16:block128\": only f8e4m3 takes a scaling"
	run -64 wsync-convert --cast '*=f8e4m3:block64' a.wsync b.wsync
	assert_line "wsync-convert: --cast \"*=f8e4m3:block64\": unknown scaling \"block64\" (block128 or tensor)"
	run -64 wsync-convert --cast 'bf16' a.wsync b.wsync
	assert_line "wsync-convert: --cast \"bf16\": want PATTERN=DTYPE[:SCALING]"
	run -64 wsync-convert --cast 'a=f8e4m3:block128' --cast 'b=f8e4m3:tensor' a.wsync b.wsync
	assert_line "wsync-convert: --cast: block128 and tensor scaling in one cast: a checkpoint's quantization_config has one weight_block_size"
}

@test "wsync-pull --cast writes the cast and keeps the version as pushed beside it" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	wsync-convert -m policy in.safetensors in.wsync
	start_hub
	run -0 wsync-push -q -m policy in.wsync
	mapfile -t opts < <(cast_args "${BLOCK[@]}")
	run -0 wsync-pull -q "${opts[@]}" -m policy -o p.wsync
	assert_output "1"
	run -0 ref_check in.wsync p.wsync "${BLOCK[@]}"
	refute_output --partial DIFFERENT
	[ "$(content_of .p.wsync.wsync)" = "$(content_of in.wsync)" ]
	run -0 wsync-inspect --json p.wsync
	run -0 jq -r '.meta["wsync.cast_of"]' <<<"$output"
	assert_output "{\"model\":\"policy\",\"version\":1,\"content\":\"$(content_of in.wsync)\"}"
	run -64 wsync-pull -q "${opts[@]}" -m policy -o -
	assert_output "wsync-pull: --cast writes a file, not stdout
Try 'wsync-pull --help'."
}

@test "a cast the rule refuses fails the pull (65) and leaves the output as it was" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	wsync-convert -m policy in.safetensors in.wsync
	start_hub
	run -0 wsync-push -q -m policy in.wsync
	run -65 wsync-pull -q --cast 'f32.*=f8e4m3:tensor' -m policy -o p.wsync
	assert_output "wsync-pull: .p.wsync.wsync: tensor f32.ties: cast f32.*=f8e4m3:tensor: element 9 is NaN: no scale can be computed"
	[ ! -e p.wsync ]
}

STEP=('*norm.weight=bf16' '*.weight=f8e4m3:block128')

@test "a pull of several models with --cast writes none of them when one cast is refused" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	wsync-convert -m policy in.safetensors policy.wsync
	wsync-convert -m critic in.safetensors critic.wsync
	start_hub
	wsync-push -q -m policy=policy.wsync -m critic=critic.wsync >/dev/null
	mkdir out
	run -65 wsync-pull -q --cast 'model.*=bf16' --cast 'f32.*=f8e4m3:tensor' -m policy -m critic -o out
	assert_output "wsync-pull: out/.policy.wsync: tensor f32.ties: cast f32.*=f8e4m3:tensor: element 9 is NaN: no scale can be computed"
	run -0 ls out
	assert_output ""
	run -0 wsync-pull -q --cast 'f32.*=f16' -m policy -m critic -o out
	assert_output "policy 1
critic 1"
	run -0 ls out
	assert_output "critic.wsync
policy.wsync"
}

@test "on the hub's host a cast output is a copy where --transfer link gave a link" {
	"$PY" "$FIXTURES/fp8ref.py" make in.safetensors
	wsync-convert -m policy in.safetensors in.wsync
	start_hub
	wsync-push -q -m policy in.wsync >/dev/null
	run -0 wsync-pull -q --transfer link --cast 'f32.*=f16' -m policy -o p.wsync
	run -0 stat -c %h .p.wsync.wsync p.wsync
	assert_output "2
1"
}

# steps N: $TMP/sV.wsync for V in 1..N, bf16, each 1% changed from the one before.
steps() {
	"$PY" "$FIXTURES/mkstep.py" chain bf16 0.01 262144 "$1" "$TMP/s"
}

@test "a casting watcher over tcp gets 1%-changed bf16 updates as deltas and writes each cast" {
	steps 4
	port=$(free_port)
	export WSYNC_ENDPOINT=tcp://127.0.0.1:$port
	start_hub
	wsync-push -q -m policy s1.wsync >/dev/null
	mkdir applied
	start_watcher w --transfer socket --cast "${STEP[0]}" --cast "${STEP[1]}" \
		-x 'cp "$WSYNC_PATH" "applied/$WSYNC_VERSION.wsync"'
	wait_until watcher_at w 1
	for v in 2 3 4; do
		wsync-push -q -m policy "s$v.wsync" >/dev/null
		wait_until watcher_at w "$v"
	done
	for v in 2 3 4; do
		run -0 grep -c "event=ack worker=w model=policy version=$v transfer=delta " hub.log
		assert_output 1
	done
	for v in 1 2 3 4; do
		run -0 ref_check "s$v.wsync" "applied/$v.wsync" "${STEP[@]}"
		refute_output --partial DIFFERENT
	done
	run -0 cat w.out
	assert_output "policy 1 $TMP/w.wsync
policy 2 $TMP/w.wsync
policy 3 $TMP/w.wsync
policy 4 $TMP/w.wsync"
	[ "$(content_of .w.wsync.wsync)" = "$(content_of s4.wsync)" ]
	run -0 ls "$STORE/policy"
	refute_output --partial cast
}

@test "a casting watcher that verifies still refuses a forged update" {
	make_versions 1
	wsync-keygen --sign key >/dev/null
	start_hub
	wsync-push -q --sign-key key.key -m policy v1.wsync >/dev/null
	start_watcher w --verify-key key.pub --cast '*=bf16'
	wait_until watcher_at w 1
	cp w.wsync w.before
	# The hub's copy with a byte flipped and its hashes made again, pushed unsigned.
	wsync-convert "$STORE/policy/1.wsync" forged.safetensors
	"$PY" - forged.safetensors <<'PYEOF'
import sys
raw = bytearray(open(sys.argv[1], "rb").read())
raw[-1] ^= 1
open(sys.argv[1], "wb").write(raw)
PYEOF
	wsync-convert -m policy forged.safetensors forged.wsync
	wsync-push -q -m policy forged.wsync >/dev/null
	wait_until has_failure w
	run -0 hub_failure w
	assert_output --regexp '^2 refused \(content-mismatch\)'
	cmp w.wsync w.before
	run -0 cat w.out
	assert_output "policy 1 $TMP/w.wsync"
}

@test "--select and --cast together: only the selected tensors, cast, in the checkpoint" {
	steps 2
	start_hub
	wsync-push -q -m policy s1.wsync >/dev/null
	start_watcher w --format safetensors --select 'layers.0.*' --cast "${STEP[0]}" \
		--cast "${STEP[1]}"
	wait_until watcher_at w 1
	run -0 jq -r '.weight_map | keys[]' w.wsync/model.safetensors.index.json
	assert_output "layers.0.attn.weight
layers.0.attn.weight_scale_inv
layers.0.mlp.weight
layers.0.mlp.weight_scale_inv
layers.0.norm.weight"
	wsync-push -q -m policy s2.wsync >/dev/null
	wait_until watcher_at w 2
	wsync-convert w.wsync/ got.safetensors
	run -1 ref_check s2.wsync got.safetensors "${STEP[@]}"
	assert_line "layers.0.mlp.weight F8_E4M3 [512,64] same"
	assert_line "layers.0.mlp.weight_scale_inv F32 [4,1] same"
}
