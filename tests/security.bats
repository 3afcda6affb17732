#!/usr/bin/env bats
# security.bats - CURVE keys and roles, and a hub that hostile peers cannot
# crash or bloat: real hubs on loopback TCP, real clients, real keys.

load test_helper
load hub_helper

# Every test gets keys: the hub's, a pusher's (on the push list), a puller's
# (on the pull list) and a stranger's (on none), and a hub endpoint on a free
# loopback port. The clients use the pusher's key unless told otherwise.
setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	STORE="$TMP/store"
	PORT=$(free_port)
	export WSYNC_ENDPOINT="tcp://127.0.0.1:$PORT"
	mkdir push pull
	local k
	for k in hub pusher puller stranger; do
		wsync-keygen "$k" >/dev/null
	done
	cp pusher push/
	cp puller pull/
	export WSYNC_KEY="$TMP/pusher_secret" WSYNC_HUB_KEY="$TMP/hub"
}

start_secure_hub() {
	start_hub --secret-key hub_secret --allow-push push --allow-pull pull "$@"
}

# The Z85 public key in certificate $1.
public_key() {
	sed -n 's/^    public-key = "\(.*\)"$/\1/p' "$1"
}

# Waits until the hub's log has a line with the fixed string $1.
hub_logged() {
	grep -qF -- "$1" "$TMP/hub.log"
}

@test "a client without keys is refused with 77, the hub logs it and serves others" {
	start_secure_hub
	make_versions 1
	run -77 env -u WSYNC_KEY -u WSYNC_HUB_KEY wsync-pull -m policy -t 5
	assert_output "wsync-pull: the hub at $WSYNC_ENDPOINT only lets in clients with keys: give --key and --hub-key (or \$WSYNC_KEY and \$WSYNC_HUB_KEY)"
	wait_until hub_logged 'event=deny socket=router'
	run -0 wsync-push -m policy v1.wsync
	assert_output 1
}

@test "a key on no allow list is refused with 77 and the hub logs the key" {
	start_secure_hub
	run -77 wsync-pull --key stranger_secret -m policy -t 5
	assert_output "wsync-pull: the hub at $WSYNC_ENDPOINT refused this client's key $(public_key stranger) (status 400): it is on none of the hub's --allow-push or --allow-pull lists"
	wait_until hub_logged "event=deny key=$(public_key stranger) address=127.0.0.1 error=\"the key is on no allow list\""
	run -0 wsync-inspect --hub
}

@test "a wrong hub key is refused with 77 within the timeout" {
	start_secure_hub
	run -77 timeout 10 wsync-watch --hub-key stranger -m policy -o w.wsync
	assert_output "wsync-watch: the CURVE handshake with the hub at $WSYNC_ENDPOINT failed: is --hub-key ($(public_key stranger)) the hub's public key?"
	wait_until hub_logged "event=deny socket=router error=\"a client that does not have the hub's public key\""
}

@test "a pull key cannot push (77); a push key can, and the pull key fetches it" {
	start_secure_hub
	make_versions 1
	run -77 wsync-push --key puller_secret -m policy v1.wsync
	assert_output "wsync-push: the key $(public_key puller) may only pull: put is for keys on the hub's --allow-push list"
	wait_until hub_logged "event=refuse op=put id=2 code=77"
	run -0 wsync-push -m policy v1.wsync
	assert_output 1
	run -0 wsync-pull --key puller_secret -m policy -o got.wsync
	assert_output 1
	cmp <(wsync-inspect --json got.wsync | jq .content_id) <(wsync-inspect --json v1.wsync | jq .content_id)
}

@test "keys come from WSYNC_KEY and WSYNC_HUB_KEY; one without the other is a usage error" {
	start_secure_hub
	run -0 env WSYNC_KEY="$TMP/puller_secret" wsync-inspect --hub --json
	run -64 env -u WSYNC_HUB_KEY wsync-pull -m policy
	assert_output "wsync-pull: --key without --hub-key (or \$WSYNC_HUB_KEY): CURVE needs both this client's secret key and the hub's public key"
}

@test "a watcher with a pull key follows every version over CURVE" {
	start_secure_hub
	make_versions 2
	start_watcher w1 --key puller_secret
	wsync-push -m policy v1.wsync
	wait_until watcher_at w1 1
	wsync-push -m policy v2.wsync
	wait_until watcher_at w1 2
	assert_equal "$(content_of w1.wsync)" "$(content_of v2.wsync)"
}

@test "SIGHUP rereads the allow lists and keeps connected watchers" {
	start_secure_hub
	make_versions 2
	start_watcher w1 --key puller_secret
	wsync-push -m policy v1.wsync
	wait_until watcher_at w1 1
	run -77 wsync-pull --key stranger_secret -m policy -t 5
	cp stranger pull/
	kill -HUP "$HUB_PID"
	wait_until hub_logged 'event=reload allowed=3'
	run -0 wsync-pull --key stranger_secret -m policy -o s.wsync
	wsync-push -m policy v2.wsync
	wait_until watcher_at w1 2
	run -0 grep -c 'connected to hub' w1.err
	assert_output 1
}

@test "SIGHUP with a broken allow list keeps the lists the hub had" {
	start_secure_hub
	echo 'not a key' >pull/broken
	kill -HUP "$HUB_PID"
	wait_until hub_logged "event=reload error=\"pull/broken: no public-key of 40 Z85 characters in its curve section (make one with wsync-keygen)\" allowed=2"
	run -0 env WSYNC_KEY="$TMP/puller_secret" wsync-inspect --hub --json
}

@test "a second hub does not take over the ipc socket of a hub with keys" {
	export WSYNC_ENDPOINT="ipc://$TMP/hub.sock"
	start_secure_hub
	run -69 timeout 10 wsync-serve --store "$TMP/other"
	assert_output "wsync-serve: ipc://$TMP/hub.sock is in use by another hub"
	run -0 wsync-inspect --hub --json
}

@test "a secret key file others can read is refused with 77" {
	chmod 640 hub_secret
	run -77 wsync-serve --store "$STORE" --secret-key hub_secret --allow-pull pull
	assert_output "wsync-serve: hub_secret: the secret key file is open to others (mode 0640): chmod 600 hub_secret"
}

@test "a public key given as a client's secret one is refused with what it is" {
	start_secure_hub
	run -65 timeout 10 wsync-pull --key pusher -m policy -o p.wsync
	assert_output "wsync-pull: pusher: a public key file, where a secret one is wanted (wsync-keygen writes that beside it, as pusher_secret)"
	run -65 timeout 10 wsync-serve --store "$TMP/other" --secret-key hub --allow-pull pull
	assert_output "wsync-serve: hub: a public key file, where a secret one is wanted (wsync-keygen writes that beside it, as hub_secret)"
}

@test "the hub's secret key given as its public one is refused with what it is" {
	start_secure_hub
	run -65 timeout 10 wsync-pull --hub-key hub_secret -m policy -o p.wsync
	assert_output "wsync-pull: hub_secret: a secret key file, where the peer's public one is wanted (the file without _secret; the secret stays with its owner)"
}

@test "keys without allow lists, or lists without keys, are usage errors" {
	run -64 wsync-serve --store "$STORE" --secret-key hub_secret
	assert_output "wsync-serve: --secret-key without --allow-push or --allow-pull would let no client in"
	run -64 wsync-serve --store "$STORE" --allow-pull pull
	assert_output "wsync-serve: --allow-push and --allow-pull need --secret-key (the hub's own key)"
}

@test "without keys a non-loopback tcp endpoint needs --insecure, which warns" {
	run -64 wsync-serve --store "$STORE" -e "tcp://0.0.0.0:$PORT"
	assert_output "wsync-serve: tcp://0.0.0.0:$PORT is reachable from other hosts: give --secret-key and --allow-push/--allow-pull, or --insecure to serve it unauthenticated and unencrypted"
	unset WSYNC_KEY WSYNC_HUB_KEY
	start_hub -e "tcp://0.0.0.0:$PORT" --insecure
	run -0 grep -c "event=warning endpoint=tcp://0.0.0.0:$PORT error=\"--insecure: anyone who reaches this endpoint may push and read weights, in clear text\"" hub.log
	assert_output 1
}

# capture NAME: records loopback traffic of port $PORT into NAME.pcap until stop_capture.
capture() {
	# Immediate mode: in a VM the capture ring may never time out and hand packets over.
	tcpdump -i lo --immediate-mode -U -w "$TMP/$1.pcap" "tcp port $PORT" 2>"$TMP/$1.tcpdump" &
	CAP_PID=$!
	PIDS+=("$CAP_PID")
	wait_until grep -q 'listening on' "$TMP/$1.tcpdump"
}

stop_capture() {
	kill -INT "$CAP_PID"
	wait "$CAP_PID" || true
}

# A weight file whose one u8 tensor repeats the text "wsync-canary-".
make_canary() {
	"$PY" - "$TMP/canary.safetensors" <<'PYEOF'
import json, struct, sys
data = b"wsync-canary-" * 2000
h = json.dumps({"canary": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
	wsync-convert -m policy canary.safetensors canary.wsync
}

@test "with keys the tensors cross the wire encrypted; without, in clear" {
	[ "$(id -u)" -eq 0 ] || skip "capturing loopback traffic needs root"
	command -v tcpdump >/dev/null || skip "tcpdump is not installed (scripts/deps installs it)"
	make_canary
	start_secure_hub
	capture curve
	wsync-push --transfer socket -m policy canary.wsync
	wsync-pull --transfer socket --key puller_secret -m policy -o got.wsync
	stop_capture
	# The capture holds both transfers (the file is 26 kB each way), and not its bytes.
	[ "$(stat -c %s curve.pcap)" -gt 52000 ]
	run -1 grep -c -a -F 'wsync-canary-wsync-canary-' curve.pcap
	stop_hub
	unset WSYNC_KEY WSYNC_HUB_KEY
	STORE="$TMP/plain-store"
	start_hub
	capture plain
	wsync-push --transfer socket -m policy canary.wsync
	stop_capture
	run -0 grep -c -a -F 'wsync-canary-wsync-canary-' plain.pcap
}

# The resident memory of process $1, in KiB.
rss_kib() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

@test "a hostile client neither crashes nor bloats the hub, and watchers keep receiving" {
	unset WSYNC_KEY WSYNC_HUB_KEY
	# Under ASan, freed memory waits in a quarantine (256 MiB) that RSS would measure.
	ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0" start_hub
	make_versions 2
	start_watcher w1
	wsync-push -m policy v1.wsync
	wait_until watcher_at w1 1
	local before after
	before=$(rss_kib "$HUB_PID")
	run -0 "$PY" "$FIXTURES/hostile.py" --rounds 2 "$WSYNC_ENDPOINT"
	# The second round's connection makes 256 workers known and refreshes the first's 256.
	assert_output '{"frames":{"none":7},"ids":{"76":18},"oversize":{"none":10},"uploads":{"rewrite":{"0":48,"64":1},"slots":{"0":4,"69":1},"space":{"74":1}},"workers":{"0":512,"69":5488}}'
	kill -0 "$HUB_PID"
	after=$(rss_kib "$HUB_PID")
	echo "# hub RSS before ${before} KiB, after two rounds ${after} KiB" >&3
	[ "$after" -lt $((before + 65536)) ]
	wsync-push -m policy v2.wsync
	wait_until watcher_at w1 2
	# Nothing of the hostile uploads or ids reached the store (its own files are hidden).
	run -0 ls "$STORE"
	assert_output "policy"
	run -0 ls -A "$STORE/.uploads"
	assert_output ""
	run -0 grep -c 'event=drop peer=conn:' hub.log
	[ "$output" -ge 14 ]
}
