#!/usr/bin/env bats
# Several endpoints and relays (wsync(7), RELAYS): each client learns the
# announcements of the endpoint it came in on; watchers fail over between hubs
# of one tree; relays mirror a root's versions with its numbers.

load test_helper
load hub_helper

@test "a hub on ipc and tcp tells a tcp client the tcp announcement address" {
	local port
	make_versions 1
	port=$(free_port)
	start_hub -e "ipc://$TMP/hub" -e "tcp://127.0.0.1:$port"
	wait_log "event=listen endpoint=tcp://127.0.0.1:$port pub=tcp://127.0.0.1:[0-9]\+ hub="
	wsync-push -m policy v1.wsync
	run -0 --separate-stderr wsync-watch --once -e "tcp://127.0.0.1:$port" -m policy -o t.wsync
	assert_output "policy 1 t.wsync"
	assert_regex "$stderr" "^wsync-watch: connected to hub [^ ]+ at tcp://127.0.0.1:$port, announcements from tcp://127.0.0.1:[0-9]+\$"
	run -0 --separate-stderr wsync-watch --once -e "ipc://$TMP/hub" -m policy -o i.wsync
	assert_regex "$stderr" "^wsync-watch: connected to hub [^ ]+ at ipc://$TMP/hub, announcements from ipc://$TMP/hub.pub\$"
}

@test "wsync-watch -e A -e B follows B when A does not answer" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	run -0 --separate-stderr wsync-watch --once -e "ipc://$TMP/nobody" -e "$WSYNC_ENDPOINT" \
		-m policy -o w.wsync
	assert_output "policy 1 w.wsync"
	assert_regex "$stderr" "trying the next hub, at $WSYNC_ENDPOINT"
}

# 0 when the hub at $1 has version $3 of model $2 (its head).
head_at() {
	[ "$(WSYNC_ENDPOINT=$1 wsync-inspect --hub --json -t 1 2>/dev/null |
	    jq -r --arg m "$2" '.models[] | select(.model == $m) | .versions[-1].version')" = "$3" ]
}

@test "a relay keeps the root's numbers and content ids, and serves them to its watchers" {
	make_versions 5
	start_hub
	for v in 1 2; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	start_relay r1
	start_watcher w1 -e "ipc://$TMP/r1"
	wait_until watcher_at w1 2
	for v in 3 4 5; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 5
	run -0 versions_increase w1
	assert_equal "$(content_of w1.wsync)" "$(content_of v5.wsync)"
	assert_equal "$(wsync-inspect --json w1.wsync | jq .version)" 5
	# Latest wins: the relay may skip a version pushed while it fetched another.
	grep "event=commit model=policy version=[0-9]* .*relay=$WSYNC_ENDPOINT" r1.log |
	    sed 's/.*version=\([0-9]*\).*/\1/' >relayed
	run -0 sort -nuc relayed
	assert_equal "$(tail -n 1 relayed)" 5
}

@test "a relay started after 3 pushes numbers the root's head 3, not 1" {
	make_versions 3
	start_hub
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	start_relay r1
	wait_until head_at "ipc://$TMP/r1" policy 3
	run -0 --separate-stderr wsync-pull -e "ipc://$TMP/r1" -m policy -o p.wsync
	assert_equal "$(wsync-inspect --json p.wsync | jq .version)" 3
	assert_equal "$(content_of p.wsync)" "$(content_of v3.wsync)"
}

@test "a relay that cannot write its store's origin says so in its log and still mirrors" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	mkdir -p "$TMP/r1.store/.origin/in-the-way"
	start_relay r1
	wait_until head_at "ipc://$TMP/r1" policy 1
	wait_until grep -q "event=relay-origin" "$TMP/r1.log"
	run -0 grep "event=relay-origin" "$TMP/r1.log"
	assert_output --regexp "event=relay-origin error=\"$TMP/r1.store/.origin: cannot rename into place: Is a directory\"\$"
}

@test "a push to a relay of a mirrored model is refused with 77, naming the upstream" {
	make_versions 1
	start_hub
	start_relay r1
	run -77 --separate-stderr wsync-push -e "ipc://$TMP/r1" -m policy v1.wsync
	assert_equal "$stderr" "wsync-push: model policy: this relay mirrors every model of the upstream $WSYNC_ENDPOINT, ones it has no version of too: push it there, or start the relay naming the models it mirrors, and push the others here"
}

@test "a relay told which models to mirror refuses a push of one of them, and takes another" {
	make_versions 1
	start_hub
	start_relay r1 --model policy
	run -77 --separate-stderr wsync-push -e "ipc://$TMP/r1" -m policy v1.wsync
	assert_equal "$stderr" "wsync-push: model policy: this relay mirrors it from the upstream $WSYNC_ENDPOINT, as it was told to: push it there"
	run -0 wsync-push -e "ipc://$TMP/r1" -m local v1.wsync
	assert_output 1
}

@test "a watcher failed over to the root goes back to its relay once the relay is back and caught up" {
	make_versions 2
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	start_relay r1
	wait_until head_at "ipc://$TMP/r1" policy 1
	start_watcher w1 -e "ipc://$TMP/r1" -e "$WSYNC_ENDPOINT"
	wait_until watcher_at w1 1
	kill "${RPID[r1]}"
	wait "${RPID[r1]}" || true
	WAIT_S=20 wait_until grep -q "trying the next hub, at $WSYNC_ENDPOINT" w1.err
	wsync-push -m policy v2.wsync >/dev/null
	wait_until watcher_at w1 2
	start_relay r1
	WAIT_S=30 wait_until grep -q "is back with the versions applied" w1.err
	run -0 grep "is back" w1.err
	assert_output "wsync-watch: the first hub, at ipc://$TMP/r1, is back with the versions applied: going back to it"
	wait_until bash -c "grep -c 'event=hello role=watch worker=w1' r1.log | grep -qx 2"
	# Back on the relay, it follows the pushes that reach it.
	wsync-push -m policy v1.wsync >/dev/null
	wait_until watcher_at w1 3
}

@test "a relay of a relay of the root: any depth keeps the numbers" {
	make_versions 3
	start_hub
	start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	start_watcher deep -e "ipc://$TMP/r2"
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at deep 3
	run -0 versions_increase deep
	assert_equal "$(content_of deep.wsync)" "$(content_of v3.wsync)"
}

# 0 when the root counts $1 workers alive and reaches the deepest, w$1, by $2.
root_lists() {
	wsync-inspect --hub --json -t 1 2>/dev/null |
	    jq -e --argjson n "$1" --arg via "$2" '([.workers[] | select(.alive)] | length) == $n and
	    any(.workers[]; .worker == "w\($n)" and .via == $via)' >/dev/null
}

@test "a chain of 8 relays laid by hand: the root lists all 8 workers and --wait all returns once they applied" {
	local i via= up=$WSYNC_ENDPOINT
	make_versions 1
	start_hub
	# Each relay's upstream is the one before it; a watcher on each.
	for ((i = 1; i <= 8; i++)); do
		WSYNC_ENDPOINT=$up start_relay "r$i"
		start_watcher "w$i" -e "ipc://$TMP/r$i"
		via="$via${via:+>}$(hostname):${RPID[r$i]}"
		up="ipc://$TMP/r$i"
	done
	WAIT_S=30 wait_until root_lists 8 "$via"
	run -0 wsync-push --wait all --timeout 60 -m policy v1.wsync
	assert_output 1
	for ((i = 1; i <= 8; i++)); do assert_equal "w$i $(last_version "w$i")" "w$i 1"; done
}

@test "a relay killed with -9 and restarted resumes mirroring from where it was" {
	make_versions 4
	start_hub
	start_relay r1
	wsync-push -m policy v1.wsync >/dev/null
	wsync-push -m policy v2.wsync >/dev/null
	wait_until head_at "ipc://$TMP/r1" policy 2
	kill -9 "${RPID[r1]}"
	wait "${RPID[r1]}" 2>/dev/null || true
	wsync-push -m policy v3.wsync >/dev/null
	wsync-push -m policy v4.wsync >/dev/null
	start_relay r1
	wait_until head_at "ipc://$TMP/r1" policy 4
	# Only the versions it lacked: 1 and 2 before the kill, 4 (the head) after.
	run -0 grep -o "event=commit model=policy version=[0-9]*" r1.log
	assert_output "$(printf 'event=commit model=policy version=%s\n' 1 2 4)"
}

# 0 when the hub at $WSYNC_ENDPOINT counts worker $1 alive, reached by relays $2.
root_has() {
	wsync-inspect --hub --json -t 1 2>/dev/null |
	    jq -e --arg id "$1" --arg via "$2" \
	    '.workers[] | select(.worker == $id and .alive and .via == $via)' >/dev/null
}

@test "the root's --wait all returns only once the watchers behind a relay applied" {
	make_versions 1
	start_hub
	start_relay r1
	start_watcher a -e "ipc://$TMP/r1"
	start_watcher b -e "ipc://$TMP/r1"
	wait_until root_has a "$(hostname):${RPID[r1]}"
	wait_until root_has b "$(hostname):${RPID[r1]}"
	run -0 wsync-push --wait all --timeout 20 -m policy v1.wsync
	assert_output 1
	# A watcher prints a version before it acks it: both lines are there already.
	assert_equal "$(last_version a) $(last_version b)" "1 1"
}

@test "a watcher stopped behind a relay is named in the root's timeout with its relay" {
	make_versions 1
	start_hub
	start_relay r1
	start_watcher a -e "ipc://$TMP/r1"
	start_watcher b -e "ipc://$TMP/r1"
	wait_until root_has b "$(hostname):${RPID[r1]}"
	wait_until root_has a "$(hostname):${RPID[r1]}"
	kill -STOP "${WPID[b]}"
	run -75 --separate-stderr wsync-push --wait all --timeout 3 -m policy v1.wsync
	assert_output 1
	# The figure is what was left of -t 3 after the push: less on a busy machine.
	assert_regex "${stderr_lines[0]}" '^wsync-push: policy version 1: 1 of 2 workers have not applied it after (2\.[0-9]|3\.0) s$'
	assert_regex "${stderr_lines[1]}" "^  b: has no version, last seen [0-9.]+ s ago, behind relay $(hostname):${RPID[r1]}\$"
	kill -CONT "${WPID[b]}"
}

@test "wsync-inspect --hub at the root shows the workers behind two levels of relays with their path" {
	start_hub
	start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	start_watcher deep -e "ipc://$TMP/r2"
	wait_until root_has deep "$(hostname):${RPID[r1]}>$(hostname):${RPID[r2]}"
	run -0 wsync-inspect --hub
	assert_line --regexp "^deep +policy +0 +0 .* alive  - +- +$(hostname):${RPID[r1]}>$(hostname):${RPID[r2]} +-\$"
}

@test "the workers of a relay killed with -9 go stale at the root" {
	start_hub
	start_relay r1
	start_watcher a -e "ipc://$TMP/r1"
	wait_until root_has a "$(hostname):${RPID[r1]}"
	kill -9 "${RPID[r1]}"
	# Within the liveness window (5 s), 1.5 s for the relay on its path, and a heartbeat.
	WAIT_S=10 wait_until bash -c "wsync-inspect --hub --json | jq -e '.workers[] | select(.worker == \"a\" and (.alive | not))'"
}

@test "with keys, a relay whose key is on the root's pull list mirrors and reports over CURVE" {
	make_versions 1
	mkdir push pull rpull
	for k in root pusher relay rhub worker; do wsync-keygen "$k" >/dev/null; done
	cp pusher push/
	cp relay pull/
	cp worker rpull/
	start_hub --secret-key root_secret --allow-push push --allow-pull pull
	start_relay r1 --key relay_secret --hub-key root --secret-key rhub_secret --allow-pull rpull
	start_watcher w --key worker_secret --hub-key rhub -e "ipc://$TMP/r1"
	WSYNC_KEY=pusher_secret WSYNC_HUB_KEY=root wait_until root_has w "$(hostname):${RPID[r1]}"
	run -0 wsync-push --key pusher_secret --hub-key root --wait all --timeout 20 -m policy v1.wsync
	assert_output 1
	assert_equal "$(content_of w.wsync)" "$(content_of v1.wsync)"
	# The relay's key may read and report, not push.
	run -77 --separate-stderr wsync-push --key relay_secret --hub-key root -m other v1.wsync
	assert_regex "$stderr" "may only pull: put is for keys on the hub's --allow-push list"
}

@test "with keys, a relay whose key is on none of the root's lists is refused, saying which key, and mirrors nothing" {
	local relay_key
	make_versions 1
	mkdir push pull rpull
	for k in root pusher rhub worker; do wsync-keygen "$k" >/dev/null; done
	relay_key=$(wsync-keygen relay)
	cp pusher push/
	cp worker rpull/
	start_hub --secret-key root_secret --allow-push push --allow-pull pull
	start_relay r1 --key relay_secret --hub-key root --secret-key rhub_secret --allow-pull rpull
	wait_until grep -q "event=relay-wait" r1.log
	run -0 grep -F "event=relay-wait upstream=$WSYNC_ENDPOINT error=\"the hub at $WSYNC_ENDPOINT refused this client's key $relay_key (status 400): it is on none of the hub's --allow-push or --allow-pull lists\"" r1.log
	wait_until grep -qF "event=deny key=$relay_key " hub.log
	wsync-push --key pusher_secret --hub-key root -m policy v1.wsync >/dev/null
	run -66 --separate-stderr wsync-pull --key worker_secret --hub-key rhub -e "ipc://$TMP/r1" \
		-m policy -o p.wsync
	assert_equal "$stderr" "wsync-pull: model \"policy\" has no version"
	# Each hop checks its own lists: a key the root lets push is no key of the relay's.
	run -77 --separate-stderr wsync-pull --key pusher_secret --hub-key rhub -e "ipc://$TMP/r1" \
		-m policy -o p.wsync
	assert_regex "$stderr" "refused this client's key .* it is on none of the hub's --allow-push or --allow-pull lists"
}

@test "a root, 2 relays, 6 watchers, 20 versions: --wait all, a relay killed with -9, failover, restart" {
	local w v
	make_versions 20
	start_hub
	start_relay r1
	start_relay r2
	for w in a1 a2 a3; do start_watcher "$w" -e "ipc://$TMP/r1" -e "$WSYNC_ENDPOINT"; done
	for w in b1 b2 b3; do start_watcher "$w" -e "ipc://$TMP/r2" -e "$WSYNC_ENDPOINT"; done
	for w in a1 a2 a3; do wait_until root_has "$w" "$(hostname):${RPID[r1]}"; done
	for w in b1 b2 b3; do wait_until root_has "$w" "$(hostname):${RPID[r2]}"; done
	for ((v = 1; v <= 9; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	run -0 wsync-push --wait all --timeout 30 -m policy v10.wsync
	assert_output 10
	for w in a1 a2 a3 b1 b2 b3; do assert_equal "$w $(last_version "$w")" "$w 10"; done
	kill -9 "${RPID[r1]}"
	for ((v = 11; v <= 15; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	for w in a1 a2 a3; do WAIT_S=30 wait_until watcher_at "$w" 15; done
	start_relay r1
	WAIT_S=20 wait_until head_at "ipc://$TMP/r1" policy 15
	for ((v = 16; v <= 19; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	run -0 wsync-push --wait all --timeout 30 -m policy v20.wsync
	assert_output 20
	for w in a1 a2 a3 b1 b2 b3; do
		assert_equal "$w $(last_version "$w")" "$w 20"
		run -0 versions_increase "$w"
		assert_equal "$(content_of "$w.wsync")" "$(content_of v20.wsync)"
	done
	WAIT_S=20 wait_until head_at "ipc://$TMP/r1" policy 20
}

@test "a relay with two upstreams mirrors from the second when the first dies, with the same numbers" {
	local root=$WSYNC_ENDPOINT
	make_versions 3
	start_hub
	start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2 --upstream "$root"
	wsync-push -m policy v1.wsync >/dev/null
	wsync-push -m policy v2.wsync >/dev/null
	wait_until head_at "ipc://$TMP/r2" policy 2
	kill -9 "${RPID[r1]}"
	wsync-push -m policy v3.wsync >/dev/null
	WAIT_S=20 wait_until head_at "ipc://$TMP/r2" policy 3
	run -0 grep -c "event=relay-connect upstream=$root " r2.log
	assert_output 1
	# Latest wins: r2 may skip 1 for 2, on its way to r1 already; the numbers only rise.
	grep -o "event=commit model=policy version=[0-9]*" r2.log | sed 's/.*=//' >committed
	run -0 sort -nuc committed
	assert_equal "$(tail -n 2 committed | paste -sd ' ')" "2 3"
	# Each commit names the upstream it came from.
	run -0 grep -c "event=commit model=policy version=3 .* relay=$root\$" r2.log
	assert_output 1
}

@test "wsync-push --wait ID at the root waits for a worker two relays down" {
	make_versions 1
	start_hub
	start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	start_watcher deep -e "ipc://$TMP/r2"
	wait_until root_has deep "$(hostname):${RPID[r1]}>$(hostname):${RPID[r2]}"
	run -0 --separate-stderr wsync-push --wait deep --timeout 20 -m policy v1.wsync
	assert_output 1
	assert_equal "$(last_version deep)" 1
}

# line_of FILE REGEX: the number of the first line of $TMP/FILE matching REGEX (empty: none).
line_of() {
	grep -n -m 1 -- "$2" "$TMP/$1" | cut -d: -f1
}

# gated_chain: the root (started) -> r1 -> r2, a watcher on each relay, and
# an 8 MiB version pushed; r1 holds it at half until $TMP/gate exists (a test
# build's hook).
gated_chain() {
	make_big 8
	WSYNC_TEST_RELAY_GATE="$TMP/gate" start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	start_watcher w1 -e "ipc://$TMP/r1"
	start_watcher w2 -e "ipc://$TMP/r2"
	wsync-push -m policy big.safetensors >/dev/null
}

@test "a relay passes a version on to its downstream relay while it arrives; workers see it only whole" {
	start_hub
	gated_chain
	# r2 reads what r1 has of version 1 while r1 has half of it...
	wait_until grep -q "event=pass-on model=policy version=1 " r1.log
	wait_until grep -q "event=arriving model=policy version=1 " r2.log
	run -1 grep -q "event=commit model=policy version=1 " r1.log
	# ...and no worker sees it, at either relay, before it is whole.
	run -66 --separate-stderr wsync-pull -e "ipc://$TMP/r1" -m policy -o p.wsync
	assert_equal "$stderr" "wsync-pull: model \"policy\" has no version"
	assert_equal "$(cat w1.out w2.out)" ""
	touch gate
	wait_until watcher_at w1 1
	wait_until watcher_at w2 1
	assert_equal "$(content_of w2.wsync)" "$(content_of w1.wsync)"
	assert_equal "$(wsync-inspect --json w2.wsync | jq .version)" 1
	# r1 served r2 before it committed the version itself.
	(($(line_of r1.log "event=pass-on model=policy version=1 ") < \
	    $(line_of r1.log "event=commit model=policy version=1 ")))
}

# 0 once r2 failed version 1 itself, or r1 refused r2's gets of it with 66.
r2_saw_it_fail() {
	grep -q "event=relay-fail model=policy version=1 " r2.log ||
	    grep -qF 'code=66 error="model \"policy\" version 1 did not arrive whole at this relay: it failed verification' r1.log
}

@test "a version that fails verification at a relay while passed on never reaches a worker" {
	# Every get the root serves arrives spoiled (a test build's hook).
	WSYNC_TEST_FLIP_GET=1 start_hub
	gated_chain
	wait_until grep -q "event=pass-on model=policy version=1 " r1.log
	touch gate
	wait_until grep -q "event=relay-fail model=policy version=1 " r1.log
	# r2 got the same bytes: it failed them itself, or r1 told it to ask again (66).
	wait_until r2_saw_it_fail
	run -1 grep -q "event=commit" r1.log r2.log
	assert_equal "$(cat w1.out w2.out)" ""
	run -66 wsync-pull -e "ipc://$TMP/r2" -m policy -o p.wsync
}

@test "only a connection that said hello as a relay may read versions still arriving" {
	make_versions 1
	start_hub
	wsync-push -q -m policy v1.wsync
	run -77 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <<-'EOF'
	{"op": "hello", "proto": 1, "role": "pull"}
	{"op": "get", "model": "policy", "version": 1, "off": 0, "len": 16, "arriving": true}
	EOF
	assert_line -n 1 --partial '"code":77'
	assert_line -n 1 --partial 'get with arriving: versions not yet verified here are for relays (hello with role relay), not for workers'
	run -77 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <<-'EOF'
	{"op": "hello", "proto": 1, "role": "watch", "worker": "w1"}
	{"op": "heads", "models": ["policy"], "arriving": true}
	EOF
	assert_line -n 1 --partial '"code":77'
	run -0 "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session <<-'EOF'
	{"op": "hello", "proto": 1, "role": "relay"}
	{"op": "heads", "models": ["policy"], "arriving": true}
	EOF
	assert_line -n 1 --partial '"arriving":{}'
}

# pairs_through ENDPOINT: 20 signed pushes of actor and critic together to the
# root; behind ENDPOINT a watcher with a hook and a verifying watcher take
# every pair whole: the hook sees the actor and critic of one push, never a
# new one beside an old one, and the verifying watcher refuses nothing.
pairs_through() {
	wsync-keygen --sign key >/dev/null
	cat >hook <<-'EOF2'
	#!/bin/sh
	a=$(wsync-inspect --json "$OUT/actor.wsync" | jq -r '.tree[0].hash')
	c=$(wsync-inspect --json "$OUT/critic.wsync" | jq -r '.tree[0].hash')
	echo "$a $c" >>"$OUT/../seen"
	EOF2
	chmod +x hook
	mkdir hooked verifying
	for n in $(seq 1 20); do
		"$PY" "$FIXTURES/mkmodel.py" "a$n.safetensors" w=float32:2:$n,1
		"$PY" "$FIXTURES/mkmodel.py" "c$n.safetensors" w=float32:2:$n,2
		wsync-convert -m actor "a$n.safetensors" "a$n.wsync"
		wsync-convert -m critic "c$n.safetensors" "c$n.wsync"
	done
	OUT="$TMP/hooked" wsync-watch --id hooked -e "$1" -m actor,critic -o hooked -x ./hook \
		>hooked.out 2>hooked.err &
	PIDS+=("$!")
	wsync-watch --id verifying -e "$1" --verify-key key.pub -m actor,critic -o verifying \
		>verifying.out 2>verifying.err &
	PIDS+=("$!")
	for n in $(seq 1 20); do
		wsync-push -q --sign-key key.key -m actor="a$n.wsync" -m critic="c$n.wsync" >/dev/null
	done
	wait_until grep -q "^critic 20 " hooked.out
	wait_until grep -q "^critic 20 " verifying.out
	# Each line the hook wrote: the actor and critic of one push (their first
	# elements are the push's number, so their hashes go in pairs).
	"$PY" - seen <<-'PYEOF'
	import json, subprocess, sys
	def first_hash(f):
	    out = subprocess.run(["wsync-inspect", "--json", f], capture_output=True,
	                         text=True, check=True).stdout
	    return json.loads(out)["tree"][0]["hash"]
	pairs = {(first_hash(f"a{n}.wsync"), first_hash(f"c{n}.wsync")) for n in range(1, 21)}
	seen = [tuple(l.split()) for l in open(sys.argv[1]) if l.strip()]
	bad = [s for s in seen if s not in pairs]
	assert seen and not bad, f"torn pairs seen by the hook: {bad}"
	PYEOF
	run -1 grep "refused" verifying.err
	cmp verifying/actor.wsync hooked/actor.wsync
	cmp verifying/critic.wsync hooked/critic.wsync
}

@test "20 two-model pushes reach a hooked and a verifying watcher behind a relay together" {
	start_hub
	start_relay r1
	pairs_through "ipc://$TMP/r1"
}

@test "20 two-model pushes reach a hooked and a verifying watcher behind two relays together" {
	start_hub
	start_relay r1
	WSYNC_ENDPOINT="ipc://$TMP/r1" start_relay r2
	pairs_through "ipc://$TMP/r2"
}
