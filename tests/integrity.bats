#!/usr/bin/env bats
# Integrity end to end: bytes spoiled on the hub's disk or on the way to a
# worker are caught before any worker applies them, and the hub hears of it.

load test_helper
load hub_helper

# Flips the lowest bit of the last byte of FILE (the end of its last tensor's data).
flip_last_byte() {
	"$PY" - "$1" <<'PYEOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
size = os.lseek(fd, 0, os.SEEK_END)
b = os.pread(fd, 1, size - 1)
os.pwrite(fd, bytes([b[0] ^ 1]), size - 1)
PYEOF
}

# Version 1 of policy is refused by a pull (65) and by a new watcher ID,
# which applies nothing and tells the hub why. Arguments: ID, then pull's and
# watch's options (a --transfer mode).
refused_everywhere() {
	local id=$1
	shift
	run -65 wsync-pull "$@" -m policy -o p.wsync
	assert_output "wsync-pull: policy: tensor actor.0.weight: data does not match its hash"
	[ ! -e p.wsync ]
	start_watcher "$id" "$@"
	wait_until has_failure "$id"
	run -0 hub_failure "$id"
	assert_output "1 policy: tensor actor.0.weight: data does not match its hash"
	[ ! -e "$TMP/$id.wsync" ]
	run -0 cat "$TMP/$id.out"
	assert_output ""
	run -1 compgen -G "$TMP/$id.wsync.tmp.*"
}

@test "a byte flipped in a store file is refused by pull and watch, not applied, and reported" {
	make_versions 1
	start_hub
	run -0 wsync-push -m policy v1.wsync
	flip_last_byte "$STORE/policy/1.wsync"
	refused_everywhere w1 --transfer socket
	# A link to the store's file is checked too: it changed since the hub verified it.
	refused_everywhere w2 --transfer link
	run -0 grep -c 'event=fail worker=w1 model=policy version=1 reason="policy: tensor actor.0.weight: data does not match its hash"$' "$TMP/hub.log"
}

@test "a restarted hub does not serve a version whose bytes changed on disk" {
	make_versions 2
	start_hub
	run -0 wsync-push -m policy v1.wsync
	run -0 wsync-push -m policy v2.wsync
	stop_hub
	flip_last_byte "$STORE/policy/2.wsync"
	start_hub
	run -0 grep -c "event=skip path=\"$STORE/policy/2.wsync\" error=\".*actor.0.weight" "$TMP/hub.log"
	run -0 wsync-pull -m policy -o p.wsync
	assert_output 1
	run -0 wsync-inspect --verify p.wsync
	assert_output "p.wsync: OK"
}

@test "data spoiled in transit is refused by pull and watch, not applied, and reported" {
	need_test_hooks WSYNC_TEST_FLIP_GET
	make_versions 1
	WSYNC_TEST_FLIP_GET=1 start_hub
	run -0 wsync-push -m policy v1.wsync
	# Through the socket: a link (same host) has no transit to spoil.
	refused_everywhere w1 --transfer socket
}

@test "data spoiled in transit is refused by a pull over an older version laid out the same, which hashes it as it arrives" {
	need_test_hooks WSYNC_TEST_FLIP_GET
	make_versions 2
	start_hub
	run -0 wsync-push -m policy v1.wsync
	run -0 wsync-pull --transfer socket -m policy -o p.wsync
	stop_hub
	WSYNC_TEST_FLIP_GET=1 start_hub
	run -0 wsync-push -m policy v2.wsync
	assert_output 2
	run -65 wsync-pull --transfer socket -m policy -o p.wsync
	assert_output "wsync-pull: policy: tensor actor.0.weight: data does not match its hash"
	# The output still holds version 1, whole.
	run -0 wsync-inspect --verify p.wsync
	assert_output "p.wsync: OK"
	run -0 bash -c 'wsync-inspect --json p.wsync | jq .version'
	assert_output 1
}

@test "a first pull of a large version (hashed as it arrives, where the hub's layout says) refuses data spoiled in transit" {
	need_test_hooks WSYNC_TEST_FLIP_GET
	# 32 MiB of bf16: over the size from which a fetch asks the hub for the layout.
	"$PY" "$FIXTURES/mkstep.py" chain bf16 0.01 33554432 1 "$TMP/s"
	WSYNC_TEST_FLIP_GET=1 start_hub
	run -0 wsync-push -q -m big s1.wsync
	run -65 wsync-pull --transfer socket -m big -o p.wsync
	assert_output --regexp '^wsync-pull: big: tensor [^ ]+: data does not match its hash( \(and more tensors\))?$'
	[ ! -e p.wsync ]
	# The same pull from an honest hub: the layout it gives is the version's.
	stop_hub
	start_hub
	run -0 wsync-pull -q --transfer socket -m big -o p.wsync
	assert_output 1
	run -1 grep 'event=refuse op=layout' hub.log
}
