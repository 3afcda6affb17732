#!/usr/bin/env bats
# wsync-serve: the hub as a process, spoken to with the protocol (tests/fixtures/hubclient.py).

load test_helper
load hub_helper

# The test client: hub req JSON, hub push MODEL=FILE..., hub fetch MODEL V OUT...
hub() {
	"$PY" "$FIXTURES/hubclient.py" "ipc://$TMP/hub" "$@"
}

# A valid .wsync of model policy with one tensor enc.w, as $1 (default v.wsync).
mkfile() {
	"$PY" "$FIXTURES/mkhostile.py" valid "${1:-v.wsync}"
}

# Flips the first data byte of tensor enc.w in file $1.
flip_data_byte() {
	local off
	off=$(wsync-inspect --json "$1" | jq '.tree[0].offset')
	printf '\377' | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

@test "--help prints the usage and the options on stdout" {
	run -0 --separate-stderr wsync-serve --help
	assert_output - <<'EOF'
usage: wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--recycle N] [--log-format text|json]
       wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--recycle N] [--log-format text|json]
           --secret-key FILE [--allow-push DIR|FILE]... [--allow-pull DIR|FILE]...
       wsync-serve [-e ENDPOINT]... [--store DIR] [--keep N] [--log-format text|json]
           --upstream ENDPOINT... [--model MODEL[,MODEL...]] [--key FILE] [--hub-key FILE]
           [--advertise ENDPOINT]

Run a hub: take pushed versions of models, keep them in a store, announce
them to watchers and serve them. Log lines go to stderr.

  -e, --endpoint ENDPOINT  listen on tcp://HOST:PORT or ipc://PATH; may be
                           repeated (default: $WSYNC_ENDPOINT, else
                           ipc://RUNDIR/hub)
      --store DIR          keep versions in DIR (default: RUNDIR/store)
      --keep N             versions kept per model (default 3)
      --recycle N          keep up to N retired version files to be written
                           again by pushes from this host (default 0: none);
                           readers must lease what they hold open (wsync(7))
      --log-format FORMAT  log lines as text (time=... event=... key=value)
                           or json (one object per line)
      --secret-key FILE    the hub's secret key (wsync-keygen): CURVE on every
                           socket, only clients on the allow lists get in
      --allow-push DIR|FILE
                           public keys that may push and pull: a key file or a
                           directory of them; may be repeated
      --allow-pull DIR|FILE
                           public keys that may only pull and watch
      --insecure           listen on non-loopback tcp without keys (warns)
      --upstream ENDPOINT  be a relay: mirror the versions of the hub at ENDPOINT,
                           keeping its numbers; repeated: the next one is used
                           when one is unreachable (failover)
      --model MODEL,...    mirror only these models (default: all); pushes of a
                           mirrored model here are refused (77)
      --key FILE           the relay's secret key for its upstream
      --hub-key FILE       the upstream's public key
      --advertise ENDPOINT where other relays reach this one, told to the
                           upstream, which places relays in a chain (default:
                           the first -e naming a host, else an ipc one)
  -h, --help               show this help
  -V, --version            show the version

SIGTERM or SIGINT stops the hub; SIGHUP rereads the allow lists. Exit status:
0 stopped, 64 usage, 65 bad key file, 66 key file missing, 69 cannot listen,
70 internal error, 74 store error, 77 permission denied. See wsync-serve(1).
EOF
	assert_equal "$stderr" ""
}

@test "the usage line is the man page's SYNOPSIS" {
	run -0 wsync-serve --help
	local synopsis
	synopsis=$(MANWIDTH=200 man -l "$ROOT/man/wsync-serve.1" 2>/dev/null |
		sed -n '/^SYNOPSIS/{n;p;}' | sed 's/^ *//')
	assert_equal "usage: $synopsis" "${lines[0]}"
}

@test "wsync-serve(1) formats with no groff warning" {
	run -0 groff -ww -man -z "$ROOT/man/wsync-serve.1"
	assert_output ""
}

@test "--version prints the program and its version" {
	run -0 --separate-stderr wsync-serve --version
	assert_output "wsync-serve 0.1.0"
}

@test "an unknown option, an operand or a bad --keep is a usage error" {
	run -64 wsync-serve --frobnicate
	assert_output "wsync-serve: unknown option '--frobnicate'
Try 'wsync-serve --help'."
	run -64 wsync-serve extra
	assert_output "wsync-serve: unexpected argument \"extra\"
Try 'wsync-serve --help'."
	run -64 wsync-serve --keep 0
	assert_output "wsync-serve: --keep wants a number of versions, at least 1, not \"0\"
Try 'wsync-serve --help'."
	run -64 wsync-serve -e http://x
	assert_output "wsync-serve: endpoint \"http://x\": use tcp://HOST:PORT or ipc://PATH"
}

@test "--advertise without --upstream is a usage error: only a relay is placed" {
	run -64 wsync-serve --advertise tcp://10.0.0.7:7355
	assert_output "wsync-serve: --model, --key, --hub-key and --advertise are for a relay (--upstream)
Try 'wsync-serve --help'."
}

@test "a started hub logs where it listens, after an ISO 8601 UTC timestamp" {
	start_hub
	run -0 grep 'event=listen' "$TMP/hub.log"
	assert_output --regexp "^time=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z event=listen endpoint=ipc://$TMP/hub pub=ipc://$TMP/hub.pub hub=[^ ]+:$HUB_PID\$"
}

# Makes the hub log a store, listen, hello, begin, commit, a refusal with a
# quoted error, and stop.
s_log_events() {
	"$PY" "$FIXTURES/mksafetensors.py" all a.safetensors
	run -0 wsync-push -e "ipc://$TMP/hub" -m policy a.safetensors
	run -66 wsync-pull -e "ipc://$TMP/hub" -m nope -o x.wsync
	stop_hub
}

@test "every log line is key=value pairs after time=, quoted values escaped" {
	start_hub
	s_log_events
	run -0 grep -c . "$TMP/hub.log"
	[ "$output" -ge 8 ]
	run -1 grep -vE '^time=[0-9T:.-]+Z event=[a-z]+( [a-z_]+=([^ "]+|"([^"\\]|\\.)*"))*$' \
	    "$TMP/hub.log"
	run -0 grep -c 'event=refuse op=stat id=2 code=66 error="model \\"nope\\" has no version"$' \
	    "$TMP/hub.log"
}

@test "--log-format json writes one JSON object per line, numbers as numbers" {
	start_hub --log-format json
	s_log_events
	run -0 jq -c 'select(.event == "commit") | [.program, .model, .version, .size,
	    (.content | type), (.time | test("^[0-9-]{10}T[0-9:.]{12}Z$"))]' "$TMP/hub.log"
	assert_output '["wsync-serve","policy",1,1349,"string",true]'
	run -0 jq -r 'select(.event == "refuse") | "\(.code) \(.error)"' "$TMP/hub.log"
	assert_output '66 model "nope" has no version'
	run -0 jq -r '.event' "$TMP/hub.log"
	assert_output $'store\nlisten\nhello\nbegin\ncommit\nhello\nrefuse\nstop'
}

@test "--log-format takes text or json only" {
	run -64 wsync-serve --log-format xml
	assert_output $'wsync-serve: --log-format wants text or json, not "xml"\nTry \'wsync-serve --help\'.'
}

@test "hello tells the PUB endpoint, the hub, its store and its limits" {
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"pull","host":"h","pid":7}'
	run -0 jq -c 'del(.hub)' <<<"$output"
	assert_output "{\"chunk\":4194304,\"heartbeat_ms\":1000,\"id\":1,\"ok\":true,\"proto\":1,\"pub\":\"ipc://$TMP/hub.pub\",\"store\":\"$TMP/store\",\"store_id\":\"$(cat "$TMP/store/.id")\",\"window\":8}"
	run -0 grep -c 'event=hello role=pull host=h pid=7' "$TMP/hub.log"
}

@test "a second hub on the same ipc endpoint exits 69 and the first keeps serving" {
	start_hub
	run -69 --separate-stderr wsync-serve -e "ipc://$TMP/hub" --store "$TMP/store2"
	assert_equal "$stderr" "wsync-serve: ipc://$TMP/hub is in use by another hub"
	run -0 hub req '{"op":"hello","proto":1,"role":"pull"}'
}

@test "a second hub on the same tcp port exits 69" {
	local port
	port=$(free_port)
	WSYNC_ENDPOINT="tcp://127.0.0.1:$port" start_hub
	run -69 --separate-stderr wsync-serve -e "tcp://127.0.0.1:$port" --store "$TMP/store2"
	assert_equal "$stderr" "wsync-serve: tcp://127.0.0.1:$port is in use (by another hub?)"
}

@test "a second hub on the same store exits 69" {
	start_hub
	run -69 --separate-stderr wsync-serve -e "ipc://$TMP/other" --store "$TMP/store"
	assert_equal "$stderr" "wsync-serve: store $TMP/store is in use by another hub"
	[ ! -e "$TMP/other" ]
}

@test "SIGTERM stops the hub: exit 0, event=stop, socket files gone" {
	start_hub
	stop_hub TERM
	assert_equal "$HUB_STATUS" 0
	run -0 tail -n 1 "$TMP/hub.log"
	assert_output --regexp 'Z event=stop waits_dropped=0$'
	[ ! -e "$TMP/hub" ] && [ ! -e "$TMP/hub.pub" ]
}

@test "SIGINT stops the hub too, with exit 0" {
	start_hub
	stop_hub INT
	assert_equal "$HUB_STATUS" 0
	run -0 grep -c 'event=stop' "$TMP/hub.log"
}

@test "stopping drops an upload in progress and its temporary file" {
	mkfile
	start_hub
	run -0 hub req '{"op":"begin","files":[{"model":"policy","size":144}],"pusher":"t:1"}'
	[ "$(ls "$TMP/store/.uploads" | wc -l)" -eq 1 ]
	stop_hub
	assert_equal "$HUB_STATUS" 0
	run -0 grep 'event=abort upload=1 reason="stopping"' "$TMP/hub.log"
	run -0 ls -A "$TMP/store/.uploads"
	assert_output ""
}

@test "the store is a 0700 directory of 0600 files and read-only versions" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -0 stat -c '%a %n' "$TMP/store" "$TMP/store/policy" "$TMP/store/policy/1.wsync" \
		"$TMP/store/policy/1.json" "$TMP/store/.uploads"
	assert_output "700 $TMP/store
700 $TMP/store/policy
444 $TMP/store/policy/1.wsync
600 $TMP/store/policy/1.json
700 $TMP/store/.uploads"
	run -0 jq -c '[.pusher, .targets]' "$TMP/store/policy/1.json"
	assert_output '["hubclient:1",null]'
}

@test "a stale ipc socket file is reclaimed" {
	"$PY" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$TMP/hub"
	[ -S "$TMP/hub" ]
	start_hub
	run -0 grep -c "event=reclaim path=\"$TMP/hub\"" "$TMP/hub.log"
	run -0 hub req '{"op":"hello","proto":1,"role":"pull"}'
}

@test "a file that is not a socket at the ipc path is refused and left alone" {
	echo keep >"$TMP/hub"
	run -69 --separate-stderr wsync-serve -e "ipc://$TMP/hub" --store "$TMP/store"
	assert_equal "$stderr" "wsync-serve: ipc://$TMP/hub: $TMP/hub exists and is not a socket"
	run -0 cat "$TMP/hub"
	assert_output keep
}

@test "a push becomes version 1, shown by stat and heads" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	assert_output '{"id":3,"ok":true,"versions":[{"content":"e911155f651e4978","model":"policy","size":144,"version":1}]}'
	# mtime: the store file's, in ns, once the hub verified it.
	local mtime
	mtime=$(stat -c %.9Y "$TMP/store/policy/1.wsync" | tr -d .)
	# (jq rounds integers this large: the raw text holds the exact one.)
	run -0 hub req '{"op":"stat","model":"policy","version":0}'
	assert_regex "$output" "\"mtime\": ?$mtime[,}]"
	run -0 jq -c 'del(.time, .mtime)' <<<"$output"
	assert_output '{"content":"e911155f651e4978","id":1,"model":"policy","ok":true,"size":144,"version":1}'
	run -0 hub req '{"op":"heads","models":["policy","other"]}'
	assert_regex "$output" "\"mtime\": ?$mtime[,}]"
	run -0 jq -c '.heads | map_values(del(.time, .mtime))' <<<"$output"
	assert_output '{"policy":{"content":"e911155f651e4978","size":144,"version":1}}'
	run -0 grep -c 'event=commit model=policy version=1 size=144 content=e911155f651e4978 pusher=hubclient:1 upload=1$' "$TMP/hub.log"
}

@test "get returns the pushed bytes, with only the version stamped in" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -0 hub fetch policy 1 got.wsync
	run -1 cmp -l v.wsync got.wsync
	assert_output --regexp '^ *38 +0 +1$'
	run -0 wsync-inspect --verify got.wsync
	run -0 jq .version < <(wsync-inspect --json got.wsync)
	assert_output 1
}

@test "get of a range past the end, or over the chunk size, is refused with 64" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -64 hub req '{"op":"get","model":"policy","version":1,"off":145,"len":1}'
	assert_output '{"code":64,"error":"offset 145 is beyond the end of model \"policy\" version 1 (144 bytes)","id":1,"ok":false}'
	run -64 hub req '{"op":"get","model":"policy","version":1,"off":0,"len":4194305}'
	assert_output '{"code":64,"error":"get of 4194305 bytes is over the chunk size of 4194304","id":1,"ok":false}'
	run -0 hub req '{"op":"get","model":"policy","version":1,"off":100,"len":1000}'
	assert_output '{"id":1,"len":44,"off":100,"ok":true}'
}

@test "numbering continues after a hub restart on the same store" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -0 hub push policy=v.wsync
	stop_hub
	start_hub
	run -0 hub req '{"op":"heads","models":["policy"]}'
	run -0 jq .heads.policy.version <<<"$output"
	assert_output 2
	run -0 hub push policy=v.wsync
	run -0 jq '.versions[0].version' <<<"$output"
	assert_output 3
}

@test "a corrupted upload is refused with 65 naming the tensor, and nothing becomes visible" {
	mkfile
	flip_data_byte v.wsync
	start_hub
	run -65 hub push policy=v.wsync
	assert_output '{"code":65,"error":"model \"policy\": tensor enc.w: data does not match its hash","id":3,"ok":false}'
	run -0 hub req '{"op":"heads","models":["policy"]}'
	assert_equal "$(jq -c .heads <<<"$output")" '{}'
	run -66 hub req '{"op":"stat","model":"policy","version":0}'
	run -0 ls -A "$TMP/store" "$TMP/store/.uploads"
	assert_output "$TMP/store:
.id
.lock
.uploads

$TMP/store/.uploads:"
}

@test "a multi-model push with one bad file commits neither" {
	mkfile good.wsync
	mkfile bad.wsync
	flip_data_byte bad.wsync
	start_hub
	run -0 hub push policy=good.wsync
	run -65 hub push policy=good.wsync value=bad.wsync
	assert_output '{"code":65,"error":"model \"value\": tensor enc.w: data does not match its hash","id":4,"ok":false}'
	run -0 hub req '{"op":"heads","models":["policy","value"]}'
	run -0 jq -c '.heads | map_values(.version)' <<<"$output"
	assert_output '{"policy":1}'
	# A version is pushed under its own model's name: value's file says value.
	wsync-convert -m value good.wsync value.wsync
	run -0 hub push policy=good.wsync value=value.wsync
	run -0 jq -c '[.versions[] | [.model, .version]]' <<<"$output"
	assert_output '[["policy",2],["value",1]]'
}

@test "a chunk that leaves a gap or passes the declared size is refused with 64" {
	mkfile
	start_hub
	head -c 100 v.wsync >part
	tail -c 44 v.wsync >rest
	run -66 hub session <<-'EOF'
	{"op":"begin","files":[{"model":"policy","size":144}],"pusher":"t:1","id":5}
	{"op":"chunk","upload":1,"file":0,"off":10} v.wsync
	{"op":"chunk","upload":1,"file":0,"off":0} part
	{"op":"chunk","upload":1,"file":0,"off":50} part
	{"op":"commit","upload":1}
	{"op":"chunk","upload":1,"file":0,"off":100} rest
	{"op":"commit","upload":1}
	{"op":"chunk","upload":1,"file":0,"off":0} part
	EOF
	assert_line --index 0 '{"id":5,"ok":true,"upload":1,"window":8}'
	assert_line --index 1 '{"code":64,"error":"upload 1 file 0: a chunk at offset 10 leaves a gap (0 bytes received)","id":1,"ok":false}'
	assert_line --index 2 '{"id":2,"ok":true}'
	assert_line --index 3 '{"code":64,"error":"upload 1 file 0: a chunk of 100 bytes at offset 50 goes past its size of 144","id":3,"ok":false}'
	assert_line --index 4 '{"code":64,"error":"upload 1 file 0 (model policy) has 100 of its 144 bytes","id":4,"ok":false}'
	assert_line --index 5 '{"id":5,"ok":true}'
	assert_line --index 7 '{"code":66,"error":"upload 1 does not exist (it expired, was aborted or committed)","id":7,"ok":false}'
	run -0 jq -c '[.ok, .versions[0].version]' <<<"${lines[6]}"
	assert_output '[true,1]'
}

@test "a begin refused before its files' deltas are read closes none of the hub's descriptors" {
	start_hub
	assert_equal "$(readlink "/proc/$HUB_PID/fd/0")" /dev/null
	run -64 hub req '{"op":"begin","local":true,"files":[{"model":"policy","size":100,"delta":50,"base_content":1}]}'
	assert_output '{"code":64,"error":"file 0 (model policy): a slot is written in place, not sent as a delta","id":1,"ok":false}'
	assert_equal "$(readlink "/proc/$HUB_PID/fd/0")" /dev/null
}

@test "a delta declared larger than its version is refused with 64" {
	start_hub
	run -64 hub req '{"op":"begin","files":[{"model":"policy","size":100,"delta":200,"base_content":1}]}'
	assert_output '{"code":64,"error":"model policy: a delta of 200 bytes for a version of 100: a delta is smaller than its version (send the version whole)","id":1,"ok":false}'
}

@test "abort removes the upload's temporary file" {
	start_hub
	run -0 hub session <<-'EOF'
	{"op":"begin","files":[{"model":"policy","size":10}]}
	EOF
	[ "$(ls "$TMP/store/.uploads" | wc -l)" -eq 1 ]
	run -0 hub session <<-'EOF'
	{"op":"begin","files":[{"model":"policy","size":10}]}
	{"op":"abort","upload":2}
	EOF
	# The first connection's upload stays its own (until it expires); the second's is gone.
	[ "$(ls "$TMP/store/.uploads" | wc -l)" -eq 1 ]
	run -77 hub req '{"op":"abort","upload":1}'
	assert_output '{"code":77,"error":"upload 1 is another client'"'"'s","id":1,"ok":false}'
}

@test "an unknown model, or a version not there, is refused with 66" {
	mkfile
	start_hub
	run -66 hub req '{"op":"stat","model":"nope","version":0}'
	assert_output '{"code":66,"error":"model \"nope\" has no version","id":1,"ok":false}'
	run -66 hub req '{"op":"get","model":"nope","version":1,"off":0,"len":10}'
	assert_output '{"code":66,"error":"model \"nope\" has no version","id":1,"ok":false}'
	run -0 hub push policy=v.wsync
	run -66 hub req '{"op":"stat","model":"policy","version":7}'
	assert_output '{"code":66,"error":"model \"policy\" has no version 7","id":1,"ok":false}'
	run -66 hub req '{"op":"wait","model":"nope","version":1,"mode":"all","timeout_ms":10}'
	assert_output '{"code":66,"error":"model \"nope\" has no version","id":1,"ok":false}'
}

@test "--keep retires old versions: they are gone from the store and refused with 66" {
	mkfile
	start_hub --keep 1
	run -0 hub push policy=v.wsync
	run -0 hub push policy=v.wsync
	run -0 grep -c 'event=retire model=policy version=1$' "$TMP/hub.log"
	run -66 hub req '{"op":"get","model":"policy","version":1,"off":0,"len":10}'
	assert_output '{"code":66,"error":"model \"policy\" has no version 1 any more (retired: the hub keeps the last 1)","id":1,"ok":false}'
	run -0 ls "$TMP/store/policy"
	assert_output "2.json
2.wsync"
}

@test "a malformed request with an id is refused with 76; one without is dropped" {
	start_hub
	run -76 hub req '{"op":"stat","model":"../x","version":0}'
	assert_output '{"code":76,"error":"field \"model\" is not a model id (1 to 64 of A-Z a-z 0-9 . _ -)","id":1,"ok":false}'
	run -76 hub req '{"op":"teleport"}'
	assert_output '{"code":76,"error":"unknown op \"teleport\"","id":1,"ok":false}'
	run -76 hub req '{"op":"hello","proto":2,"role":"pull"}'
	assert_output '{"code":76,"error":"protocol version 2 is not supported (this hub speaks 1)","id":1,"ok":false}'
	run -76 hub req '{"op":"fail","worker":"w 1","model":"policy","version":1,"reason":"x"}'
	assert_output '{"code":76,"error":"field \"worker\" is not an id (1 to 128 printable ASCII bytes, no space)","id":1,"ok":false}'
	run -69 "$PY" "$FIXTURES/hubclient.py" --timeout 0.3 "ipc://$TMP/hub" frames "" dc7fffffff
	run -0 grep -c 'event=drop peer=conn:[0-9a-f]* error="bad message: ' "$TMP/hub.log"
	run -0 hub req '{"op":"hello","proto":1,"role":"pull"}'
}

@test "a reason over 512 bytes is refused with 76" {
	start_hub
	local long
	long=$(printf 'x%.0s' {1..513})
	run -76 hub req "{\"op\":\"fail\",\"worker\":\"w1\",\"model\":\"policy\",\"version\":1,\"reason\":\"$long\"}"
	assert_output '{"code":76,"error":"field \"reason\" is not a string of the right size","id":1,"ok":false}'
}

@test "a version pushed to named workers is their head only" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -0 hub push --workers w1,w2 policy=v.wsync
	run -0 hub req '{"op":"heads","models":["policy"]}'
	assert_equal "$(jq .heads.policy.version <<<"$output")" 1
	run -0 hub req '{"op":"heads","models":["policy"],"worker":"w2"}'
	assert_equal "$(jq .heads.policy.version <<<"$output")" 2
	run -0 hub req '{"op":"stat","model":"policy","version":0,"worker":"w3"}'
	assert_equal "$(jq .version <<<"$output")" 1
	run -0 jq -c .targets "$TMP/store/policy/2.json"
	assert_output '["w1","w2"]'
}

@test "a commit is announced on the PUB socket with topic = model" {
	mkfile
	start_hub
	run -0 hub announce policy=v.wsync
	local pushes
	pushes=$(jq .pushes <<<"$output")
	local mtime
	mtime=$(stat -c %.9Y "$TMP/store/policy/$pushes.wsync" | tr -d .)
	assert_regex "$output" "\"mtime\": ?$mtime[,}]"
	run -0 jq -c '.announcement | del(.mtime)' <<<"$output"
	assert_output "{\"content\":\"e911155f651e4978\",\"group\":[\"policy\"],\"model\":\"policy\",\"size\":144,\"topic\":\"policy\",\"version\":$pushes,\"workers\":null}"
}

@test "wait times out with 75, naming each missing worker, its version and failure" {
	mkfile
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w1","host":"h","pid":1,"models":["policy"]}'
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w2","host":"h","pid":2,"models":["policy"]}'
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w3","host":"h","pid":3,"models":["policy"]}'
	run -0 hub push policy=v.wsync
	run -0 hub req '{"op":"ack","worker":"w1","model":"policy","version":1}'
	run -0 hub req '{"op":"fail","worker":"w2","model":"policy","version":1,"reason":"hook exited 3"}'
	run -75 hub req '{"op":"wait","model":"policy","version":1,"mode":"all","timeout_ms":200}'
	run -0 jq -c '[.code, .error, [.missing[] | [.worker, .version, .failure, (.seen | type)]]]' <<<"$output"
	assert_output '[75,"policy version 1: 2 of 3 workers have not applied it after 0.2 s",[["w2",0,"hook exited 3","number"],["w3",0,null,"number"]]]'
	run -0 grep -c 'event=fail worker=w2 model=policy version=1 reason="hook exited 3"' "$TMP/hub.log"
}

@test "a wait whose workers all answered, one with a failure, is refused at once with 65" {
	mkfile
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w1","host":"h","pid":1,"models":["policy"]}'
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w2","host":"h","pid":2,"models":["policy"]}'
	run -0 hub push policy=v.wsync
	run -0 hub req '{"op":"ack","worker":"w1","model":"policy","version":1}'
	run -0 hub req '{"op":"fail","worker":"w2","model":"policy","version":1,"reason":"hook exited 3"}'
	# The hour it could wait is not waited: a failed version is never retried.
	run -65 timeout 20 "$PY" "$FIXTURES/hubclient.py" "ipc://$TMP/hub" req '{"op":"wait","model":"policy","version":1,"mode":"all","timeout_ms":3600000}'
	run -0 jq -c '[.code, .error, [.missing[] | [.worker, .version, .failure]]]' <<<"$output"
	assert_output '[65,"policy version 1: 1 of 2 workers could not apply it (a failed version is never retried)",[["w2",0,"hook exited 3"]]]'
	run -0 grep -c "event=waited model=policy version=1 failed=1 " "$TMP/hub.log"
}

@test "wait for named ids lists one never seen with a nil seen" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -75 hub req '{"op":"wait","model":"policy","version":1,"mode":"ids","ids":["ghost"],"timeout_ms":50}'
	run -0 jq -c .missing <<<"$output"
	assert_output '[{"seen":null,"version":0,"worker":"ghost"}]'
}

@test "a pending wait is answered when the last worker acks" {
	mkfile
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w1","models":["policy"]}'
	run -0 hub push policy=v.wsync
	hub req '{"op":"wait","model":"policy","version":1,"mode":"all","timeout_ms":5000}' >wait.out &
	local waiter=$!
	wait_log 'event=wait model=policy version=1 mode=all workers=1'
	run -0 hub req '{"op":"ack","worker":"w1","model":"policy","version":1}'
	wait "$waiter"
	run -0 cat wait.out
	assert_output '{"id":1,"ok":true,"workers":[{"version":1,"worker":"w1"}]}'
}

@test "wait count is answered by that many distinct workers" {
	mkfile
	start_hub
	run -0 hub push policy=v.wsync
	run -0 hub req '{"op":"heads","models":["policy"],"worker":"a","applied":{"policy":1}}'
	run -75 hub req '{"op":"wait","model":"policy","version":1,"mode":"count","count":2,"timeout_ms":100}'
	assert_equal "$(jq -r .error <<<"$output")" 'policy version 1: 1 of 2 workers have applied it after 0.1 s'
	run -0 hub req '{"op":"ack","worker":"b","model":"policy","version":1}'
	run -0 hub req '{"op":"wait","model":"policy","version":1,"mode":"count","count":2,"timeout_ms":100}'
	assert_output '{"id":1,"ok":true,"workers":[{"version":1,"worker":"a"},{"version":1,"worker":"b"}]}'
}

@test "status shows models, versions, workers, what they applied and their failures" {
	mkfile
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w1","host":"h","pid":9,"models":["policy"]}'
	run -0 hub push policy=v.wsync
	run -0 hub push --workers w1 policy=v.wsync
	run -0 hub req '{"op":"fail","worker":"w1","model":"policy","version":2,"reason":"disk full"}'
	run -0 hub req '{"op":"ack","worker":"w1","model":"policy","version":1}'
	run -0 hub req '{"op":"status"}'
	run -0 jq -c '[.models[] | [.model, .head, [.versions[] | [.version, .pusher, .workers]]]]' <<<"$output"
	assert_output '[["policy",2,[[1,"hubclient:1",null],[2,"hubclient:1",["w1"]]]]]'
	run -0 hub req '{"op":"status"}'
	run -0 jq -c '.workers[] | [.worker, .host, .pid, .models, .applied, .alive, .failure]' <<<"$output"
	assert_output '["w1","h",9,["policy"],{"policy":1},true,{"model":"policy","reason":"disk full","version":2}]'
	run -0 hub req '{"op":"ack","worker":"w1","model":"policy","version":2}'
	run -0 hub req '{"op":"status"}'
	run -0 jq -c '.workers[0] | [.applied, .failure]' <<<"$output"
	assert_output '[{"policy":2},null]'
}

@test "bye marks a worker as no longer alive" {
	start_hub
	run -0 hub req '{"op":"hello","proto":1,"role":"watch","worker":"w1","models":["policy"]}'
	run -0 hub req '{"op":"bye","worker":"w1"}'
	run -0 hub req '{"op":"status"}'
	run -0 jq -c '.workers[] | [.worker, .alive]' <<<"$output"
	assert_output '["w1",false]'
}

@test "a commit may wait in the same request: one file's, answered with its versions and workers; the wait's fields are checked before anything is committed" {
	mkfile
	start_hub
	run -76 hub session <<-'EOF'
	{"op":"begin","files":[{"model":"policy","size":144},{"model":"value","size":144}]}
	{"op":"chunk","upload":1,"file":0,"off":0} v.wsync
	{"op":"chunk","upload":1,"file":1,"off":0} v.wsync
	{"op":"commit","upload":1,"mode":"all","timeout_ms":1000}
	{"op":"commit","upload":1,"mode":"some","timeout_ms":1000}
	{"op":"begin","files":[{"model":"policy","size":144}]}
	{"op":"chunk","upload":2,"file":0,"off":0} v.wsync
	{"op":"commit","upload":2,"mode":"all","timeout_ms":3600001}
	{"op":"commit","upload":2,"mode":"all"}
	EOF
	assert_line --index 3 '{"code":64,"error":"upload 1 has 2 files: a commit waits for one model'"'"'s version (wait for each after the commit)","id":4,"ok":false}'
	assert_line --index 4 '{"code":64,"error":"upload 1 has 2 files: a commit waits for one model'"'"'s version (wait for each after the commit)","id":5,"ok":false}'
	assert_line --index 7 '{"code":64,"error":"a wait of 3600001 ms is longer than the hub keeps one (3600000 ms)","id":8,"ok":false}'
	assert_line --index 8 '{"code":76,"error":"field \"timeout_ms\" is missing","id":9,"ok":false}'
	# Nothing was committed: the uploads are still open (the first connection's
	# are gone with it), and commit as asked.
	[ ! -e "$TMP/store/policy" ] && [ ! -e "$TMP/store/value" ]
	run -0 hub session <<-'EOF'
	{"op":"begin","files":[{"model":"policy","size":144}]}
	{"op":"chunk","upload":3,"file":0,"off":0} v.wsync
	{"op":"commit","upload":3,"mode":"some","timeout_ms":1000}
	{"op":"commit","upload":3,"mode":"count","count":0,"timeout_ms":1000}
	EOF
	assert_line --index 2 '{"code":76,"error":"wait mode \"some\" is not all, count or ids","id":3,"ok":false}'
	run -0 jq -c '[.ok, .versions[0].model, .versions[0].version, .versions[0].size, .workers]' <<<"${lines[3]}"
	assert_output '[true,"policy",1,144,[]]'
	run -0 grep -c "event=wait model=policy version=1 mode=count workers=0 timeout_ms=1000" "$TMP/hub.log"
}
