#!/usr/bin/env bats
# A root places the relays that name it (wsync(7), RELAYS): one chain in the
# order they came, each relay taking every version from the one before it,
# the second also from the root until the first is proven beside it (the
# probe); relays that die or pass on bad bytes are placed around, and the
# ones below finish the same version.

load test_helper
load hub_helper

# The parent the root gave relay NAME: "root", a relay's name, or "none" when not placed.
parent_of() {
	local parent
	parent=$(wsync-inspect --hub --json -t 1 2>/dev/null | jq -r --arg e "ipc://$TMP/$1" \
	    '[.relays[]? | select(.endpoint == $e) | .parent][0] // "none"')
	case $parent in
	"") echo root ;;
	ipc://"$TMP"/*) echo "${parent#ipc://"$TMP"/}" ;;
	*) echo "$parent" ;;
	esac
}

# 0 when the root placed relay $1 under $2 (root, or a relay's name).
placed_under() {
	[ "$(parent_of "$1")" = "$2" ]
}

# 0 when the root has a rate for relay $1 (with $2: that rate).
root_knows_rate() {
	wsync-inspect --hub --json -t 1 2>/dev/null | jq -e --arg e "ipc://$TMP/$1" \
	    --argjson r "${2:-0}" '.relays[] | select(.endpoint == $e and .rate > 0 and
	    ($r == 0 or .rate == $r))' >/dev/null
}

# 0 when the root heard (through a relay's report) that worker $1 applied version $2.
root_heard_applied() {
	wsync-inspect --hub --json -t 1 2>/dev/null | jq -e --arg w "$1" --argjson v "$2" \
	    '.workers[] | select(.worker == $w and (.applied.policy // 0) == $v)' >/dev/null
}

# 0 when relay $1 follows what the root said: its log shows it connected to $2.
follows() {
	grep -q "event=relay-connect upstream=ipc://$TMP/$2 " "$TMP/$1.log"
}

# 0 when the root knows worker $1, alive, behind relay $2.
root_has() {
	wsync-inspect --hub --json -t 1 2>/dev/null | jq -e --arg id "$1" --arg via "$2" \
	    '.workers[] | select(.worker == $id and .alive and .via == $via)' >/dev/null
}

# 0 when relay $1 has at least $2 bytes of the version it fetches on disk.
relay_holds() {
	local f blocks
	for f in "$TMP/$1.store/.uploads/relay".tmp.*; do
		[ -f "$f" ] || continue
		blocks=$(stat -c %b "$f") || continue
		[ $((blocks * 512)) -ge "$2" ] && return 0
	done
	return 1
}

# The content id of version 1 at the root.
root_content() {
	wsync-pull -m policy -v 1 -o "$TMP/root.wsync" >/dev/null && content_of "$TMP/root.wsync"
}

# start_chain N: relays r1..rN naming the root, each started once the one
# before is placed, so that they come in that order: r1 under the root, r2
# under it too (the probe: no version has set r1's rate beside r2's yet),
# each other under the one before it.
start_chain() {
	local i prev=root
	for ((i = 1; i <= $1; i++)); do
		start_relay "r$i" "${@:2}"
		wait_until placed_under "r$i" "$prev"
		((i == 1)) || prev="r$i"
	done
}

@test "three relays that name only the root are placed in a chain, in the order they came, the second fed by the root too until a version proves the first" {
	need_test_hooks WSYNC_TEST_RELAY_RATE
	make_big 8
	start_hub
	# Each says it fetched at 1 MB/s: none a third of another.
	export WSYNC_TEST_RELAY_RATE=1000000
	start_chain 3
	wait_until follows r3 r2
	run -0 wsync-inspect --hub
	assert_equal "$(tail -n 4 <<<"$output")" "$(
	    printf '%-24s %-8s %-40s  %s\n' RELAY STATE ENDPOINT PARENT \
	    "$(hostname):${RPID[r1]}" placed "ipc://$TMP/r1" - \
	    "$(hostname):${RPID[r2]}" placed "ipc://$TMP/r2" - \
	    "$(hostname):${RPID[r3]}" placed "ipc://$TMP/r3" "ipc://$TMP/r2")"
	run -1 grep "event=relay-place parent=ipc://$TMP/r1" r2.log
	# r1 and r2 fetch version 1 from the root; once both said their rates,
	# r1 is proven and r2 goes under it.
	wsync-push -m policy big.safetensors >/dev/null
	wait_until placed_under r2 r1
	wait_until follows r2 r1
	run -0 grep -c "event=relay-probe relay=$(hostname):${RPID[r1]} rate=1000000 beside=$(hostname):${RPID[r2]} beside_rate=1000000\$" hub.log
	assert_output 1
	run -0 placed_under r3 r2
	run -0 grep -c "event=relay-place parent=ipc://$TMP/r2" r3.log
	assert_output 1
	run -1 grep "event=relay-slow" hub.log
}

@test "a version pushed at the root reaches the watchers of every relay of the chain, and --wait all returns" {
	make_big 8
	start_hub
	start_chain 3
	wait_until follows r3 r2
	for i in 1 2 3; do start_watcher "w$i" -e "ipc://$TMP/r$i"; done
	for i in 1 2 3; do wait_until root_has "w$i" "$(hostname):${RPID[r$i]}"; done
	run -0 wsync-push --wait all --timeout 30 -m policy big.safetensors
	assert_output 1
	for i in 1 2 3; do
		assert_equal "$(content_of "w$i.wsync")" "$(root_content)"
	done
	# r3 took it from r2, which passed it on while it arrived.
	wait_until grep -q "event=commit model=policy version=1 .*relay=ipc://$TMP/r2\$" r3.log
	run -0 grep -q "event=pass-on model=policy version=1 " r2.log
}

@test "a middle relay killed with -9 mid-version: the one below resumes that version from the one above" {
	need_test_hooks WSYNC_TEST_RELAY_GATE
	make_big 16
	start_hub
	start_chain 2
	WSYNC_TEST_RELAY_GATE="$TMP/gate" start_relay r3
	wait_until placed_under r3 r2
	start_relay r4
	wait_until placed_under r4 r3
	wait_until follows r4 r3
	start_watcher w4 -e "ipc://$TMP/r4"
	wsync-push -m policy big.safetensors >/dev/null
	# r3 holds at half the version; r4 has some of it when r3 dies: a quarter
	# on disk (its "arriving" line comes before the first byte), so that with
	# 8 pieces of 128 KiB in flight the part in without a gap is not empty.
	wait_until relay_holds r4 $((4 << 20))
	kill -9 "${RPID[r3]}"
	wait_until watcher_at w4 1
	assert_equal "$(content_of w4.wsync)" "$(root_content)"
	run -0 grep "event=relay-resume model=policy version=1 " r4.log
	assert_output --regexp "upstream=ipc://$TMP/r2 from=[1-9][0-9]*\$"
	# It knew at once: r3's connection closed with it, no 3 s of silence waited.
	run -0 grep "event=relay-lost upstream=ipc://$TMP/r3 " r4.log
	assert_output --partial "error=\"ipc://$TMP/r3 closed the connection\""
	run -0 placed_under r4 r2
	run -0 grep -c "event=commit model=policy version=1 " r4.log
	assert_output 1
}

@test "a relay that reads a version as it arrives at its parent hashes it as it comes: it reads none of it back to verify" {
	need_test_hooks WSYNC_TEST_RELAY_GATE
	make_big 16
	start_hub
	start_chain 1
	WSYNC_TEST_RELAY_GATE="$TMP/gate" start_relay r2
	wait_until placed_under r2 root
	start_relay r3
	wait_until placed_under r3 r2
	wait_until follows r3 r2
	wsync-push -m policy big.safetensors >/dev/null
	# r2 holds at half the version: r3 has read a quarter of it there, arriving.
	wait_until relay_holds r3 $((4 << 20))
	touch "$TMP/gate"
	wait_until grep -q "event=commit model=policy version=1 " r3.log
	# What r3 read with read(2) and pread(2): its store's headers, not the
	# 16 MiB again (reading it back to verify it: 16.9 MB).
	rchar=$(awk '$1 == "rchar:" { print $2 }' "/proc/${RPID[r3]}/io")
	echo "r3 read $rchar bytes" >&2
	((rchar < 8 << 20))
	run -0 grep -q "event=pass-on model=policy version=1 " r2.log
}

@test "a relay that joins while a version flows is placed at the end of the chain and gets it" {
	need_test_hooks WSYNC_TEST_RELAY_GATE
	make_big 8
	start_hub
	start_chain 1
	WSYNC_TEST_RELAY_GATE="$TMP/gate" start_relay r2
	wait_until placed_under r2 root
	wsync-push -m policy big.safetensors >/dev/null
	wait_until grep -q "event=arriving model=policy version=1 " r2.log
	start_relay r3
	wait_until placed_under r3 r2
	start_watcher w3 -e "ipc://$TMP/r3"
	touch gate
	wait_until watcher_at w3 1
	assert_equal "$(content_of w3.wsync)" "$(root_content)"
	wait_until grep -q "event=commit model=policy version=1 .*relay=ipc://$TMP/r2\$" r3.log
}

@test "a relay whose upstream is another relay keeps that parent, and the root places only the first" {
	make_versions 1
	start_hub
	start_chain 1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	start_watcher w2 -e "ipc://$TMP/r2"
	wsync-push -m policy v1.wsync >/dev/null
	wait_until watcher_at w2 1
	run -1 grep -c "event=relay-place" r2.log
	assert_output 0
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -c '[.relays[] | .endpoint]' <<<"$output")" "[\"ipc://$TMP/r1\"]"
}

@test "a relay whose bytes do not verify below it is dropped from the chain, and the one below fetches the version again" {
	need_test_hooks WSYNC_TEST_FLIP_GET
	make_versions 1
	start_hub
	start_chain 1
	# Every get r2 serves from its store arrives spoiled (a test build's hook).
	WSYNC_TEST_FLIP_GET=1 start_relay r2
	wait_until placed_under r2 root
	wsync-push -m policy v1.wsync >/dev/null
	wait_until grep -q "event=commit model=policy version=1 " r2.log
	start_relay r3
	start_watcher w3 -e "ipc://$TMP/r3"
	wait_until watcher_at w3 1
	assert_equal "$(content_of w3.wsync)" "$(content_of v1.wsync)"
	run -0 grep -q "event=relay-fail model=policy version=1 upstream=ipc://$TMP/r2 " r3.log
	wait_until grep -q "event=relay-drop relay=$(hostname):${RPID[r2]} endpoint=ipc://$TMP/r2 by=$(hostname):${RPID[r3]}\$" hub.log
	# The chain is r1, r3 now: r3 takes versions from the root too (the probe).
	run -0 placed_under r3 root
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.relays[] | select(.bad) | .endpoint' <<<"$output")" "ipc://$TMP/r2"
}

@test "with keys, a relay lets in the relay the root placed under it, with no key copied between relays" {
	local relay3_key
	make_versions 1
	mkdir push pull r1pull r2pull r3pull
	for k in root pusher relay1 relay2 r1hub r2hub r3hub worker; do wsync-keygen "$k" >/dev/null; done
	relay3_key=$(wsync-keygen relay3)
	cp pusher push/
	cp relay1 relay2 relay3 pull/
	for d in r1pull r2pull r3pull; do cp worker "$d/"; done
	start_hub --secret-key root_secret --allow-push push --allow-pull pull
	export WSYNC_KEY=pusher_secret WSYNC_HUB_KEY=root
	start_relay r1 --key relay1_secret --hub-key root --secret-key r1hub_secret --allow-pull r1pull
	wait_until placed_under r1 root
	start_relay r2 --key relay2_secret --hub-key root --secret-key r2hub_secret --allow-pull r2pull
	wait_until placed_under r2 root
	start_relay r3 --key relay3_secret --hub-key root --secret-key r3hub_secret --allow-pull r3pull
	wait_until placed_under r3 r2
	start_watcher w3 --key worker_secret --hub-key r3hub -e "ipc://$TMP/r3"
	wsync-push -m policy v1.wsync >/dev/null
	wait_until watcher_at w3 1
	assert_equal "$(content_of w3.wsync)" "$(content_of v1.wsync)"
	run -0 grep -c "event=relay-connect upstream=ipc://$TMP/r2 " r3.log
	assert_output 1
	# r2's lists hold no key of r3: the root told r2 to let it in.
	run -0 grep -qF "event=admit key=$relay3_key role=pull " r2.log
	run -0 grep -q "event=relay-admit keys=1\$" r2.log
}

@test "a slow relay that came first is found slow beside the second, which the root feeds too, and moved to the end of the chain, where it slows no one" {
	need_test_hooks WSYNC_TEST_RELAY_RATE
	make_big 8
	start_hub
	# r1 says it fetched at 100 kB/s: a slow link, without shaping one.
	WSYNC_TEST_RELAY_RATE=100000 start_relay r1
	wait_until placed_under r1 root
	start_relay r2
	wait_until placed_under r2 root
	start_relay r3
	wait_until placed_under r3 r2
	start_watcher w1 -e "ipc://$TMP/r1"
	wsync-push -m policy big.safetensors >/dev/null
	wait_until placed_under r1 r3
	run -0 placed_under r2 root
	run -0 placed_under r3 r2
	run -0 grep -c "event=relay-slow relay=$(hostname):${RPID[r1]} rate=100000\$" hub.log
	assert_output 1
	run -0 wsync-inspect --hub
	assert_equal "$(tail -n 1 <<<"$output")" "$(printf '%-24s %-8s %-40s  %s' \
	    "$(hostname):${RPID[r1]}" slow "ipc://$TMP/r1" "ipc://$TMP/r3")"
	wait_until watcher_at w1 1
	assert_equal "$(content_of w1.wsync)" "$(root_content)"
}

@test "a relay fed by a slow one, as slow as it, keeps its place: only the slow one moves to the end" {
	need_test_hooks WSYNC_TEST_RELAY_RATE
	make_big 8
	start_hub
	# r2 fetched at 100 kB/s, and so did r3, which took every byte from r2.
	start_relay r1
	wait_until placed_under r1 root
	WSYNC_TEST_RELAY_RATE=100000 start_relay r2
	wait_until placed_under r2 root
	WSYNC_TEST_RELAY_RATE=100000 start_relay r3
	wait_until placed_under r3 r2
	start_relay r4
	wait_until placed_under r4 r3
	wsync-push -m policy big.safetensors >/dev/null
	wait_until placed_under r2 r4
	# r3's report says its rate, measured from r2: as fast as what fed it. (A
	# fetch cut off when r2 moved resumes from r1 and says no rate.)
	wait_until grep -q "event=commit model=policy version=1 " r3.log
	grep -q "event=relay-resume" r3.log || wait_until root_knows_rate r3 100000
	wait_until placed_under r3 r1
	run -0 placed_under r4 r3
	run -0 grep -c "event=relay-slow" hub.log
	assert_output 1
}

@test "a head no rate judged while three versions were committed keeps its place, and the root feeds the second no more" {
	make_versions 3
	start_hub
	start_chain 3
	start_watcher w2 -e "ipc://$TMP/r2"
	# Versions of 2 KiB: no fetch measures a link. After two, r2 is still fed
	# by the root (its report of w2's ack came after the second commit).
	for v in 1 2; do
		wsync-push -m policy "v$v.wsync" >/dev/null
		wait_until root_heard_applied w2 "$v"
	done
	run -0 placed_under r2 root
	run -1 grep "reason=\"no rate beside it" hub.log
	wsync-push -m policy v3.wsync >/dev/null
	wait_until placed_under r2 r1
	run -0 grep -c "event=relay-probe relay=$(hostname):${RPID[r1]} reason=\"no rate beside it over 3 versions: it keeps its place\"\$" hub.log
	assert_output 1
	run -0 placed_under r3 r2
	start_watcher w3 -e "ipc://$TMP/r3"
	wait_until watcher_at w3 3
	assert_equal "$(content_of w3.wsync)" "$(content_of v3.wsync)"
}

@test "with keys, the head lets in the second while the root probes it, before it moves under it" {
	need_test_hooks WSYNC_TEST_RELAY_RATE
	local relay2_key
	make_big 8
	mkdir push pull r1pull r2pull
	for k in root pusher relay1 r1hub r2hub worker; do wsync-keygen "$k" >/dev/null; done
	relay2_key=$(wsync-keygen relay2)
	cp pusher push/
	cp relay1 relay2 pull/
	cp worker r1pull/
	cp worker r2pull/
	start_hub --secret-key root_secret --allow-push push --allow-pull pull
	export WSYNC_KEY=pusher_secret WSYNC_HUB_KEY=root WSYNC_TEST_RELAY_RATE=1000000
	start_relay r1 --key relay1_secret --hub-key root --secret-key r1hub_secret --allow-pull r1pull
	wait_until placed_under r1 root
	start_relay r2 --key relay2_secret --hub-key root --secret-key r2hub_secret --allow-pull r2pull
	wait_until placed_under r2 root
	# Before any version: r1 was told to let r2 in already.
	wait_until grep -q "event=relay-admit keys=1\$" r1.log
	start_watcher w2 --key worker_secret --hub-key r2hub -e "ipc://$TMP/r2"
	wsync-push -m policy big.safetensors >/dev/null
	wait_until placed_under r2 r1
	wait_until follows r2 r1
	wait_until watcher_at w2 1
	assert_equal "$(content_of w2.wsync)" "$(root_content)"
	run -0 grep -c "event=relay-connect upstream=ipc://$TMP/r1 " r2.log
	assert_output 1
	run -0 grep -qF "event=admit key=$relay2_key role=pull " r1.log
}

@test "a relay that stops says so: the root places around it at once, and one started again at its endpoint is not taken for a second" {
	start_hub
	start_chain 5
	kill "${RPID[r3]}"
	wait "${RPID[r3]}" || true
	run -0 grep -c "event=relay-leave relay=$(hostname):${RPID[r3]} endpoint=ipc://$TMP/r3\$" hub.log
	assert_output 1
	# Not the 5 seconds of silence a relay killed takes: r4 is under r2 now,
	# and the others keep their order.
	run -0 placed_under r4 r2
	run -0 placed_under r5 r4
	start_relay r3
	wait_until placed_under r3 r5
	run -1 grep "event=relay-shared" hub.log
}

@test "a relay started again at the endpoint of one lost takes a place at once, at the end of the chain" {
	start_hub
	start_chain 4
	local dead=${RPID[r3]}
	kill -9 "$dead"
	wait "$dead" || true
	# r4 finds its parent gone at its next round (a heartbeat) and says so.
	wait_until grep -q "event=relay-drop relay=$(hostname):$dead endpoint=ipc://$TMP/r3 by=" hub.log
	start_relay r3
	wait_until grep -q "event=relay-join relay=$(hostname):${RPID[r3]} " hub.log
	# Forgotten as the new one came (reason="lost, and ... says its endpoint
	# since"; on a machine so loaded that the dead one's 5 s of silence ran
	# out first, by its silence): never two saying one endpoint.
	wait_until grep -q "event=relay-gone relay=$(hostname):$dead endpoint=ipc://$TMP/r3" hub.log
	run -1 grep "event=relay-shared" hub.log
	# Placed at once, where a relay that comes goes.
	wait_until placed_under r3 r4
	run -0 placed_under r4 r2
}

@test "a relay lost after another started at its endpoint is forgotten at the word, and the new one placed at the end" {
	start_hub
	cat >"$TMP/reports" <<-EOF
	{"op": "subtree", "relay": "a:1", "workers": [], "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": true, "advertise": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "b:1", "workers": [], "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": true, "advertise": "ipc://$TMP/b"}
	{"op": "subtree", "relay": "c:1", "workers": [], "advertise": "ipc://$TMP/c"}
	{"op": "subtree", "relay": "a:2", "workers": [], "advertise": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "b:1", "workers": [], "advertise": "ipc://$TMP/b", "lost": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "a:2", "workers": [], "advertise": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "c:1", "workers": [], "advertise": "ipc://$TMP/c"}
	EOF
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <"$TMP/reports"
	run -0 jq -sc '[.[] | [.ok, .parent]]' <<<"$output"
	# a and b said rates from the root alike: a is proven, and b goes under it.
	# a:2 says a:1's endpoint: the two feed none until b's word that it lost
	# a:1. Then a:1 is forgotten, b comes first, c after it, a:2 last.
	assert_output "[[true,\"\"],[true,\"ipc://$TMP/a\"],[true,\"ipc://$TMP/b\"],[true,\"ipc://$TMP/c\"],[true,\"\"],[true,\"ipc://$TMP/c\"],[true,\"ipc://$TMP/b\"]]"
	run -0 grep -c "event=relay-shared relay=a:2 " hub.log
	assert_output 1
	run -0 grep -c "event=relay-gone relay=a:1 endpoint=ipc://$TMP/a reason=\"lost, and a:2 says its endpoint since\"" hub.log
	assert_output 1
}

@test "relays that say one endpoint (an ipc path or a loopback address on two hosts) feed none, and both take versions from the root" {
	start_hub
	start_relay r1 --advertise "ipc://$TMP/same"
	start_relay r2 --advertise "ipc://$TMP/same"
	wait_until grep -q "event=relay-shared relay=$(hostname):${RPID[r2]} endpoint=ipc://$TMP/same " hub.log
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -c '[.relays[] | [.endpoint, .parent]]' <<<"$output")" \
	    "[[\"ipc://$TMP/same\",\"\"],[\"ipc://$TMP/same\",\"\"]]"
}

@test "a relay's word that it lost a relay is taken only of its own parent" {
	start_hub
	start_chain 1
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" req \
	    "{\"op\":\"subtree\",\"relay\":\"other:1\",\"workers\":[],\"advertise\":\"ipc://$TMP/other\",\"lost\":\"ipc://$TMP/r1\"}"
	# Fed by the root too: no version proved r1 (the probe).
	run -0 jq -c '[.ok, .parent]' <<<"$output"
	assert_output '[true,""]'
	run -1 grep "event=relay-drop" hub.log
	run -0 placed_under r1 root
}

@test "a relay's word that it lost its parent is not taken of another relay started since at that endpoint" {
	start_hub
	cat >"$TMP/reports" <<-EOF
	{"op": "subtree", "relay": "a:1", "workers": [], "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": true, "advertise": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "b:1", "workers": [], "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": true, "advertise": "ipc://$TMP/b"}
	{"op": "subtree", "relay": "a:1", "workers": [], "advertise": "ipc://$TMP/a", "leaving": true}
	{"op": "subtree", "relay": "a:2", "workers": [], "advertise": "ipc://$TMP/a"}
	{"op": "subtree", "relay": "b:1", "workers": [], "advertise": "ipc://$TMP/b", "lost": "ipc://$TMP/a"}
	EOF
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <"$TMP/reports"
	run -0 jq -sc '[.[] | [.ok, .parent]]' <<<"$output"
	# a and b said rates from the root alike: a is proven, and b goes under it.
	# b was told a:1's endpoint; a:2, there since, comes after b; b's word is of a:1.
	assert_output "[[true,\"\"],[true,\"ipc://$TMP/a\"],[true,null],[true,\"ipc://$TMP/b\"],[true,\"\"]]"
	run -0 grep -c "event=relay-leave relay=a:1 " hub.log
	run -1 grep "event=relay-drop" hub.log
}

@test "a root whose registry of workers is full still places the relays that report, and says so once" {
	start_hub
	"$PY" - >"$TMP/reports" <<'PYEOF'
import json
workers = [{"worker": "w%d" % i, "ago": 0, "models": {}} for i in range(4096)]
# Both say rates from the root alike: big is proven, and small goes under it.
print(json.dumps({"op": "subtree", "relay": "big:1", "workers": workers, "advertise": "ipc://big",
                  "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": True}))
for _ in range(2):
    print(json.dumps({"op": "subtree", "relay": "small:2", "advertise": "ipc://small",
                      "rate": 1000000, "rate_from": "tcp://root:1", "rate_root": True,
                      "workers": [{"worker": "extra", "ago": 0, "models": {}}]}))
PYEOF
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <"$TMP/reports"
	run -0 jq -sc '[.[] | [.ok, .parent]]' <<<"$output"
	assert_output '[[true,""],[true,"ipc://big"],[true,"ipc://big"]]'
	run -0 grep -c 'event=subtree-full relay=small:2 reason="the hub already follows 4096 live workers"' hub.log
	assert_output 1
}

@test "a relay that got bad bytes while passing them on is not blamed by the one below: only the relay that sent them is dropped" {
	need_test_hooks WSYNC_TEST_RELAY_GATE
	make_big 16
	start_hub
	start_chain 1
	# r2 serves every get from its store spoiled: r3 fetches version 1 bad.
	WSYNC_TEST_FLIP_GET=1 start_relay r2
	wait_until placed_under r2 root
	wsync-push -m policy big.safetensors >/dev/null
	wait_until grep -q "event=commit model=policy version=1 " r2.log
	# r3 holds at half; r4, under it, reads what came while it arrives.
	WSYNC_TEST_RELAY_GATE="$TMP/gate" start_relay r3
	wait_until placed_under r3 r2
	start_relay r4
	wait_until placed_under r4 r3
	start_watcher w4 -e "ipc://$TMP/r4"
	wait_until grep -q "event=pass-on model=policy version=1 " r3.log
	touch "$TMP/gate"
	wait_until watcher_at w4 1
	assert_equal "$(content_of w4.wsync)" "$(root_content)"
	wait_until grep -q "event=commit model=policy version=1 " r3.log
	run -0 grep "event=relay-drop" hub.log
	assert_output --partial "event=relay-drop relay=$(hostname):${RPID[r2]} endpoint=ipc://$TMP/r2 by=$(hostname):${RPID[r3]}"
	assert_equal "${#lines[@]}" 1
	run -0 placed_under r4 r3
}
