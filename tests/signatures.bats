#!/usr/bin/env bats
# Signed pushes end to end: a trainer signs with wsync-push --sign-key, and a
# worker that verifies (wsync-watch and wsync-pull --verify-key) applies only
# what the key signed. The malicious hub is a real hub that accepted forged
# versions (pushed unsigned, as a compromised hub would serve them): each is
# refused, nothing is put in place, and the hub's view of the worker says why.

load test_helper
load hub_helper

setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	export WSYNC_ENDPOINT="ipc://$TMP/hub"
	STORE="$TMP/store"
	wsync-keygen --sign key >/dev/null
	wsync-keygen --sign other >/dev/null
}

# forge SRC OUT MODEL [strip]: OUT is SRC with the last byte of its tensors
# flipped and every XXH3 hash and the content id computed afresh (through
# safetensors and back, which keeps the meta: the signature and manifest);
# with strip, the bytes are kept and the signature dropped instead
# (fixtures/forge.py).
forge() {
	wsync-convert "$1" forged.safetensors
	"$PY" "$FIXTURES/forge.py" forged.safetensors "${4:-flip}"
	wsync-convert -m "$3" forged.safetensors "$2"
}

# Version 1 of policy, signed, applied by a verifying watcher w1 and pulled
# into p.wsync; copies of both kept to show that nothing changes them.
signed_v1_in_place() {
	make_versions 2
	start_hub
	run -0 wsync-push -q --sign-key key.key -m policy v1.wsync
	assert_output "1"
	start_watcher w1 --verify-key key.pub
	wait_until watcher_at w1 1
	run -0 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	assert_output "1"
	cp w1.wsync w1.before
	cp p.wsync p.before
}

# refused VERSION WHY: the watcher w1 refused VERSION, and the hub shows
# "refused WHY"; a pull into p.wsync exits 77 saying the same.
refused() {
	wait_until has_failure w1
	run -0 hub_failure w1
	assert_output "$1 refused $2"
	run -77 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	assert_output "wsync-pull: refused $2"
}

# Nothing new in place: the watcher's and the pull's outputs are as before,
# the watcher printed version 1 only, and no temporary file is left.
nothing_applied() {
	cmp w1.wsync w1.before
	cmp p.wsync p.before
	run -0 cat w1.out
	assert_output "policy 1 $TMP/w1.wsync"
	run -1 compgen -G "$TMP/*.tmp.*"
}

@test "a signed push is applied by a verifying watcher and pull; inspect shows who signed it" {
	signed_v1_in_place
	run -0 cat key.key.seq
	assert_output "1"
	key=$(sed -n 's/^untrusted comment: minisign public key //p' key.pub)
	run -0 wsync-inspect --verify-key key.pub p.wsync
	assert_line --regexp "^signed    key $key seq 1 at [0-9T:-]+Z, 1 model$"
	assert_line "signature holds"
	run -0 wsync-inspect --json --verify-key key.pub p.wsync
	run -0 jq -c '[.signed.key, .signed.seq, .signed.models, .signature]' <<<"$output"
	assert_output "[\"$key\",1,[\"policy\"],{\"holds\":true,\"reason\":\"ok\"}]"
	run -0 wsync-inspect --verify --verify-key key.pub p.wsync
	assert_output "p.wsync: OK"
}

@test "a flipped byte with recomputed hashes and content id is refused by watch and pull" {
	signed_v1_in_place
	forge "$STORE/policy/1.wsync" bad.wsync policy
	# The hub takes it: its XXH3 hashes and content id hold.
	run -0 wsync-push -q -m policy bad.wsync
	assert_output "2"
	# The content id it carries (recomputed, as the hashes) is not the signed one.
	forged=$(wsync-inspect --json bad.wsync | jq -r .content_id)
	signed=$(wsync-inspect --json p.wsync | jq -r .content_id)
	refused 2 "(content-mismatch): policy version 2: content id $forged, but the manifest (seq 1) signs $signed"
	nothing_applied
	run -0 grep -c 'event=fail worker=w1 model=policy version=2 reason="refused (content-mismatch)' hub.log
}

@test "an old signed version served under a new number is refused as a rollback" {
	signed_v1_in_place
	run -0 wsync-push -q --sign-key key.key -m policy v2.wsync
	assert_output "2"
	wait_until watcher_at w1 2
	run -0 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	cp w1.wsync w1.before
	cp p.wsync p.before
	cp "$STORE/policy/1.wsync" old.wsync
	run -0 wsync-push -q -m policy old.wsync
	assert_output "3"
	refused 3 "(rollback): policy version 3: signed with seq 1, not above seq 2 of the version in place: an old signed version served again"
	cmp w1.wsync w1.before
	cmp p.wsync p.before
	run -0 tail -n 1 w1.out
	assert_output "policy 2 $TMP/w1.wsync"
}

@test "a restarted verifying watcher takes the signed version it has again, not as a rollback" {
	signed_v1_in_place
	kill "${WPID[w1]}"
	wait "${WPID[w1]}" || true
	run -0 wsync-watch -q --once --id w1 --verify-key key.pub -m policy -o w1.wsync
	assert_output "policy 1 w1.wsync"
}

@test "a version with its signature stripped is refused as unsigned" {
	signed_v1_in_place
	forge "$STORE/policy/1.wsync" stripped.wsync policy strip
	run -0 wsync-push -q -m policy stripped.wsync
	assert_output "2"
	refused 2 "(unsigned): policy version 2: not signed (no wsync.signature in its meta)"
	nothing_applied
}

@test "a version signed by another key is refused; a second --verify-key takes it" {
	signed_v1_in_place
	other=$(sed -n 's/^untrusted comment: minisign public key //p' other.pub)
	# A rotated key continues the old key's numbers.
	cp key.key.seq other.key.seq
	run -0 wsync-push -q --sign-key other.key -m policy v2.wsync
	assert_output "2"
	refused 2 "(unknown-key): policy version 2: signed by key $other, which is not the verify key"
	nothing_applied
	run -0 wsync-pull -q --verify-key key.pub --verify-key other.pub -m policy -o p.wsync
	assert_output "2"
}

@test "a verifying watcher and pull refuse an unsigned version; unsigned use is unchanged" {
	make_versions 1
	start_hub
	run -0 wsync-push -q -m policy v1.wsync
	start_watcher w1 --verify-key key.pub
	wait_until has_failure w1
	run -0 hub_failure w1
	assert_output "1 refused (unsigned): policy version 1: not signed (no wsync.signature in its meta)"
	[ ! -e w1.wsync ]
	run -77 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	assert_output "wsync-pull: refused (unsigned): policy version 1: not signed (no wsync.signature in its meta)"
	[ ! -e p.wsync ]
	run -0 wsync-pull -q -m policy -o p.wsync
	cmp p.wsync "$STORE/policy/1.wsync"
}

@test "a signed policy file served as actor is refused by watch and pull as not-listed, and nothing is written" {
	need_test_hooks WSYNC_TEST_FOREIGN_MODEL
	make_versions 1
	# A compromised hub: it serves a file under any model's name.
	WSYNC_TEST_FOREIGN_MODEL=1 start_hub
	run -0 wsync-push -q --sign-key key.key -m policy v1.wsync
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" push actor="$STORE/policy/1.wsync"
	wsync-watch --id w1 --verify-key key.pub -m actor -o a.wsync >w1.out 2>w1.err &
	PIDS+=("$!")
	wait_until has_failure w1
	run -0 hub_failure w1
	assert_output "1 refused (not-listed): actor version 1: the file is a version of model policy, not of actor"
	run -77 wsync-pull -q --verify-key key.pub -m actor -o p.wsync
	assert_output "wsync-pull: refused (not-listed): actor version 1: the file is a version of model policy, not of actor"
	[ ! -e a.wsync ]
	[ ! -e p.wsync ]
	run -0 cat w1.out
	assert_output ""
	run -1 compgen -G "$TMP/*.tmp.*"
}

@test "the hub refuses a push whose file names another model" {
	make_versions 1
	start_hub
	run -0 wsync-push -q -m policy v1.wsync
	run -65 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" push actor="$STORE/policy/1.wsync"
	run -0 jq -r .error <<<"$output"
	assert_output 'model "actor": the file is a version of model "policy": a version is pushed under its own model'"'"'s name'
	run -66 wsync-pull -q -m actor -o a.wsync
}

@test "a hub whose store holds a file under another model's name says so at start and serves it no more" {
	make_versions 1
	start_hub
	run -0 wsync-push -q --sign-key key.key -m policy v1.wsync
	stop_hub
	mkdir "$STORE/actor"
	cp "$STORE/policy/1.wsync" "$STORE/actor/1.wsync"
	start_hub
	why='error="a version of model \"policy\" under the name of model \"actor\": served no more"'
	run -0 grep -cF "event=skip path=\"$STORE/actor/1.wsync\" $why" hub.log
	assert_output "1"
	run -66 wsync-pull -q -m actor -o a.wsync
	[ ! -e a.wsync ]
	run -0 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	assert_output "1"
}

# Two versions each of an actor (a1, a2) and a critic (c1, c2), a hub, out/.
actor_critic_hub() {
	"$PY" "$FIXTURES/mkmodel.py" a1.safetensors w=float32:4:1,2,3,4
	"$PY" "$FIXTURES/mkmodel.py" a2.safetensors w=float32:4:5,6,7,8
	"$PY" "$FIXTURES/mkmodel.py" c1.safetensors w=float32:2:1,2
	"$PY" "$FIXTURES/mkmodel.py" c2.safetensors w=float32:2:3,4
	start_hub
	mkdir out
}

@test "the new actor of a signed two-model push beside the old critic is refused by the watcher" {
	actor_critic_hub
	run -0 wsync-push -q --sign-key key.key -m actor=a1.safetensors -m critic=c1.safetensors
	wsync-watch --id w1 --verify-key key.pub -m actor,critic -o out >w1.out 2>w1.err &
	PIDS+=("$!")
	wait_until grep -q "^critic 1 " w1.out
	cp out/actor.wsync actor.before
	# The second push goes to another worker only: w1's heads stay at 1.
	run -0 wsync-push -q --sign-key key.key -W elsewhere -m actor=a2.safetensors \
		-m critic=c2.safetensors
	cp "$STORE/actor/2.wsync" new-actor.wsync
	run -0 wsync-push -q -m actor new-actor.wsync
	assert_output "3"
	wait_until has_failure w1
	critic1=$(wsync-inspect --json out/critic.wsync | jq -r .content_id)
	critic2=$(wsync-inspect --json "$STORE/critic/2.wsync" | jq -r .content_id)
	run -0 hub_failure w1
	assert_output "3 refused (mixed): actor version 3: its signed push (seq 2) has critic at content $critic2, but critic in place is $critic1: the models of one push are applied together or not at all"
	cmp out/actor.wsync actor.before
	run -1 grep "^actor 3" w1.out
}

@test "a pull of actor and critic refuses the new actor beside an old critic, and writes neither" {
	actor_critic_hub
	run -0 wsync-push -q --sign-key key.key -m actor=a1.safetensors -m critic=c1.safetensors
	run -0 wsync-pull -q --verify-key key.pub -m actor -m critic -o out
	assert_output "actor 1
critic 1"
	cp out/actor.wsync actor.before
	cp out/critic.wsync critic.before
	run -0 wsync-push -q --sign-key key.key -m actor=a2.safetensors -m critic=c2.safetensors
	# The hub serves the old critic, signed in the first push, as critic 3.
	run -0 wsync-push -q -m critic "$STORE/critic/1.wsync"
	assert_output "3"
	critic1=$(wsync-inspect --json out/critic.wsync | jq -r .content_id)
	critic2=$(wsync-inspect --json "$STORE/critic/2.wsync" | jq -r .content_id)
	run -77 wsync-pull -q --verify-key key.pub -m actor -m critic -o out
	assert_output "wsync-pull: refused (mixed): actor version 2: its signed push (seq 2) has critic at content $critic2, but critic comes at $critic1: the models of one push are applied together or not at all"
	cmp out/actor.wsync actor.before
	cmp out/critic.wsync critic.before
	run -1 compgen -G "$TMP/out/*.tmp.*"
	# Pulled one by one, each model alone is a whole signed version.
	run -0 wsync-pull -q --verify-key key.pub -m actor -o out/actor.wsync
	assert_output "2"
	# Once the hub serves the second push's critic again, the pair is taken.
	run -0 wsync-push -q -m critic "$STORE/critic/2.wsync"
	assert_output "4"
	run -0 wsync-pull -q --verify-key key.pub -m critic -m actor -o out
	assert_output "critic 4
actor 2"
	cmp out/critic.wsync "$STORE/critic/4.wsync"
	cmp out/actor.wsync "$STORE/actor/2.wsync"
}

@test "a signed version keeps its signature through a relay; a forged one is refused behind it, and the root shows why" {
	signed_v1_in_place
	start_relay r1
	start_watcher w2 -e "ipc://$TMP/r1" --verify-key key.pub
	wait_until watcher_at w2 1
	cmp r1.store/policy/1.wsync "$STORE/policy/1.wsync"
	run -0 wsync-inspect --verify-key key.pub w2.wsync
	assert_line "signature holds"
	cp w2.wsync w2.before
	forge "$STORE/policy/1.wsync" bad.wsync policy
	run -0 wsync-push -q -m policy bad.wsync
	assert_output "2"
	forged=$(wsync-inspect --json bad.wsync | jq -r .content_id)
	signed=$(wsync-inspect --json p.wsync | jq -r .content_id)
	# The relay mirrors it (its hashes hold); the worker behind it refuses it,
	# and the root, told by the relay, shows why.
	wait_until has_failure w2
	run -0 hub_failure w2
	assert_output "2 refused (content-mismatch): policy version 2: content id $forged, but the manifest (seq 1) signs $signed"
	run -77 wsync-pull -q -e "ipc://$TMP/r1" --verify-key key.pub -m policy -o p.wsync
	assert_output "wsync-pull: refused (content-mismatch): policy version 2: content id $forged, but the manifest (seq 1) signs $signed"
	cmp w2.wsync w2.before
	run -0 cat w2.out
	assert_output "policy 1 $TMP/w2.wsync"
	# The next signed push reaches it through the relay.
	run -0 wsync-push -q --sign-key key.key -m policy v2.wsync
	assert_output "3"
	wait_until watcher_at w2 3
	assert_equal "$(content_of w2.wsync)" "$(content_of v2.wsync)"
}

@test "wsync-push --seq takes the trainer's step, only above the counter beside the key" {
	make_versions 2
	start_hub
	run -0 wsync-push -q --sign-key key.key --seq 100 -m policy v1.wsync
	run -0 cat key.key.seq
	assert_output "100"
	run -65 wsync-push -q --sign-key key.key --seq 100 -m policy v2.wsync
	assert_output "wsync-push: --seq 100 is not above 100, the last sequence number signed with key.key (kept in key.key.seq): workers refuse a number not above the one they applied"
	run -0 wsync-push -q --sign-key key.key -m policy v2.wsync
	assert_output "2"
	run -0 wsync-inspect --json "$STORE/policy/2.wsync"
	run -0 jq .signed.seq <<<"$output"
	assert_output "101"
	run -64 wsync-push -q --seq 5 -m policy v2.wsync
	assert_output "wsync-push: --seq goes with --sign-key: an unsigned push has no sequence number
Try 'wsync-push --help'."
}

@test "wsync-push --batch --sign-key signs each push, a request's --seq included" {
	make_versions 2
	start_hub
	run -0 wsync-push --sign-key key.key --batch <<-EOF
		-m policy v1.wsync
		--seq 7 -m policy v2.wsync
		--seq 7 -m policy v1.wsync
	EOF
	assert_output "ok policy 1
ok policy 2
error 65 --seq 7 is not above 7, the last sequence number signed with key.key (kept in key.key.seq): workers refuse a number not above the one they applied"
	run -0 wsync-pull -q --verify-key key.pub -m policy -o p.wsync
	assert_output "2"
	run -0 jq .signed.seq < <(wsync-inspect --json p.wsync)
	assert_output "7"
}

@test "wsync-pull and wsync-watch take a --max-age of 30 days, refused without --verify-key" {
	run -64 wsync-pull -q --max-age 2592000 -m policy -o p.wsync
	assert_line --index 0 "wsync-pull: --max-age goes with --verify-key: only a signed version has an age"
	run -64 wsync-watch -q --max-age 2592000 -m policy -o p.wsync
	assert_line --index 0 "wsync-watch: --max-age goes with --verify-key: only a signed version has an age"
}

@test "wsync-pull --max-age warns when the signed version is older" {
	make_versions 1
	start_hub
	run -0 wsync-push -q --sign-key key.key -m policy v1.wsync
	run -64 wsync-pull -q --max-age 1 -m policy -o p.wsync
	assert_line --index 0 "wsync-pull: --max-age goes with --verify-key: only a signed version has an age"
	# Poll until the version is more than a second old: the warning comes, exit 0.
	pull_warns() {
		wsync-pull -q --verify-key key.pub --max-age 1 -m policy -o p.wsync 2>err >/dev/null &&
		    grep -q "more than --max-age" err
	}
	wait_until pull_warns
	run -0 cat err
	assert_output --regexp "^wsync-pull: policy version 1 \(seq 1\) was signed [0-9]+ s ago, more than --max-age 1: is the trainer or the hub stuck\?$"
}

@test "without a usable libcrypto, signing and verifying use libsodium's SHA-256: the same signatures" {
	make_versions 2
	start_hub
	# A libcrypto.so.3 that has none of OpenSSL's functions, found first.
	mkdir lib
	echo 'int wsync_not_openssl;' >lib/empty.c
	cc -shared -fPIC -o lib/libcrypto.so.3 lib/empty.c
	# v1.wsync is small (libsodium's SHA-256 either way); big.safetensors, 2 MiB,
	# large enough that OpenSSL is loaded for it when it can be.
	"$PY" - <<'PYEOF'
import numpy as np, struct, json
w = np.arange(512 * 1024, dtype="<f4").tobytes()
h = {"w": {"dtype": "F32", "shape": [512, 1024], "data_offsets": [0, len(w)]}}
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open("big.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + w)
PYEOF
	for f in v1.wsync big.safetensors; do
		run -0 env LD_LIBRARY_PATH="$TMP/lib" wsync-push -q --sign-key key.key -m policy "$f"
		v=$output
		# Signed without OpenSSL, verified with it; and the other way round.
		run -0 wsync-inspect --verify --verify-key key.pub "$STORE/policy/$v.wsync"
		assert_output "$STORE/policy/$v.wsync: OK"
		run -0 wsync-push -q --sign-key key.key -m policy "$f"
		v=$output
		run -0 env LD_LIBRARY_PATH="$TMP/lib" wsync-inspect --verify --verify-key key.pub \
		    "$STORE/policy/$v.wsync"
		assert_output "$STORE/policy/$v.wsync: OK"
	done
	[ "$(stat -c %s v1.wsync)" -lt 1048576 ]
}
