# hub_helper.bash - real hubs and watchers for the sync tests: each test gets its
# own ipc endpoint and store in its temp dir, and every process it starts is
# killed by PID in teardown. Waits poll a condition with a bound, never sleep blindly.

PIDS=()
CLEANUP=()

# Loading this file gives a test its own endpoint and store, and a teardown
# that stops every process the test started.
setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	export WSYNC_ENDPOINT="ipc://$TMP/hub"
	STORE="$TMP/store"
}

teardown() {
	hub_teardown
}

# Runs "$@" until it succeeds, at most $WAIT_S seconds (default 10); fails after.
wait_until() {
	local deadline=$((SECONDS + ${WAIT_S:-10}))
	until "$@"; do
		if ((SECONDS >= deadline)); then
			echo "timed out waiting for: $*" >&2
			return 1
		fi
		sleep 0.05
	done
}

# start_hub [wsync-serve options...]: starts a hub on $WSYNC_ENDPOINT with the
# store $STORE, its log appended to $TMP/hub.log; HUB_PID is its PID. Returns
# once it logged that it listens (a probe would add lines to its log).
start_hub() {
	wsync-serve --store "$STORE" "$@" 2>>"$TMP/hub.log" &
	HUB_PID=$!
	PIDS+=("$HUB_PID")
	wait_log "listen.*:$HUB_PID\b"
}

# wait_log REGEX: waits until a line of $TMP/hub.log matches REGEX, at most
# $WAIT_S seconds (default 10); fails at once, showing the log, when the hub
# has exited first.
wait_log() {
	local deadline=$((SECONDS + ${WAIT_S:-10}))
	until grep -q -- "$1" "$TMP/hub.log" 2>/dev/null; do
		if ! kill -0 "$HUB_PID" 2>/dev/null || ((SECONDS >= deadline)); then
			grep -q -- "$1" "$TMP/hub.log" 2>/dev/null && return 0
			echo "the hub's log never showed '$1':" >&2
			cat "$TMP/hub.log" >&2
			return 1
		fi
		sleep 0.01
	done
}

# 0 when a hub answers on $WSYNC_ENDPOINT.
hub_answers() {
	wsync-inspect --hub -t 0.5 >/dev/null 2>&1
}

# stop_hub [SIGNAL]: stops the hub with SIGTERM (or SIGNAL) and waits for it;
# HUB_STATUS is its exit status.
stop_hub() {
	kill -"${1:-TERM}" "$HUB_PID" 2>/dev/null
	HUB_STATUS=0
	wait "$HUB_PID" 2>/dev/null || HUB_STATUS=$?
}

# start_relay NAME [wsync-serve options...]: a relay at ipc://$TMP/NAME with the
# store $TMP/NAME.store, mirroring the hub at $WSYNC_ENDPOINT; its log in
# $TMP/NAME.log; RPID[NAME] is its PID.
declare -gA RPID
start_relay() {
	local name=$1
	shift
	wsync-serve -e "ipc://$TMP/$name" --store "$TMP/$name.store" \
		--upstream "$WSYNC_ENDPOINT" "$@" 2>>"$TMP/$name.log" &
	RPID[$name]=$!
	PIDS+=("$!")
	wait_until grep -q "event=listen" "$TMP/$name.log"
}

# start_watcher ID [wsync-watch options...]: follows "policy" into $TMP/ID.wsync,
# its stdout in $TMP/ID.out; ${WPID[ID]} is its PID.
declare -gA WPID
start_watcher() {
	local id=$1
	shift
	wsync-watch --id "$id" -m policy -o "$TMP/$id.wsync" "$@" \
		>"$TMP/$id.out" 2>"$TMP/$id.err" &
	WPID[$id]=$!
	PIDS+=("$!")
}

# 0 when the hub counts worker $1 as alive (it said hello).
hub_has_worker() {
	wsync-inspect --hub --json -t 1 2>/dev/null |
	    jq -e --arg id "$1" '.workers[] | select(.worker == $id and .alive)' >/dev/null
}

# The failure the hub holds for worker $1, as "VERSION REASON".
hub_failure() {
	wsync-inspect --hub --json | jq -r --arg w "$1" \
		'.workers[] | select(.worker == $w) | .failure | select(. != null) | "\(.version) \(.reason)"'
}

has_failure() {
	[ -n "$(hub_failure "$1")" ]
}

# The last version a watcher printed (0 if none).
last_version() {
	local v
	v=$(tail -n 1 "$TMP/$1.out" 2>/dev/null | awk '{print $2}')
	echo "${v:-0}"
}

watcher_at() {
	[ "$(last_version "$1")" -ge "$2" ]
}

# Makes $TMP/vN.wsync for N in 1..$1: model "policy", tensor values depend on N.
make_versions() {
	"$PY" - "$TMP" "$1" <<'PYEOF'
import json, struct, sys
import numpy as np
d, n = sys.argv[1], int(sys.argv[2])
for v in range(1, n + 1):
    w = (np.arange(64 * 8, dtype="<f4") * v).tobytes()
    b = np.full(8, v, dtype="<f4").tobytes()
    h = {"__metadata__": {"step": str(v)},
         "actor.0.weight": {"dtype": "F32", "shape": [64, 8], "data_offsets": [0, len(w)]},
         "actor.0.bias": {"dtype": "F32", "shape": [8], "data_offsets": [len(w), len(w) + len(b)]}}
    t = json.dumps(h).encode()
    t += b" " * (-len(t) % 8)
    with open(f"{d}/v{v}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(t)) + t + w + b)
PYEOF
	for ((v = 1; v <= $1; v++)); do
		wsync-convert -m policy "$TMP/v$v.safetensors" "$TMP/v$v.wsync"
	done
}

# make_big MIB [SEED [NAME]]: makes $TMP/NAME.safetensors (default big): one
# uint8 tensor of MIB MiB of random bytes drawn from SEED (default 7).
make_big() {
	"$PY" - "$TMP/${3:-big}.safetensors" "$1" "${2:-7}" <<'PYEOF'
import json, struct, sys
import numpy as np
out, mib, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = np.random.default_rng(seed).integers(0, 256, mib << 20, dtype=np.uint8).tobytes()
head = json.dumps({"w": {"dtype": "U8", "shape": [len(raw)],
                         "data_offsets": [0, len(raw)]}}).encode()
head += b" " * (-len(head) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + raw)
PYEOF
}

# The content id of a file.
content_of() {
	wsync-inspect --json "$1" | jq -r .content_id
}

# Fails if a watcher's printed versions ever went down or repeated.
versions_increase() {
	awk '{ if ($2 <= last) { print "version " $2 " after " last; bad = 1 } last = $2 }
	     END { exit bad }' "$TMP/$1.out"
}

hub_teardown() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	# Directories a test made outside its temp dir (a store on /dev/shm).
	for pid in "${CLEANUP[@]}"; do
		rm -rf -- "$pid"
	done
}

# on_tty CMD...: runs CMD with stdout and stderr on a pseudo-terminal (script
# from bsdutils); prints what the terminal got, carriage returns as newlines,
# without the erase-to-end-of-line sequences.
on_tty() {
	local cmd
	printf -v cmd '%q ' "$@"
	script -qec "$cmd" /dev/null | tr '\r' '\n' | sed -e 's/\x1b\[K//g' -e '/^$/d'
	return "${PIPESTATUS[0]}"
}

# start_reader NAME PATH [--no-lease]: tests/fixtures/lease_reader.py on PATH,
# talked to through fifos NAME.in and NAME.out; READER_FD is the file's
# descriptor in it, READER_PID its PID.
start_reader() {
	local name=$1 line
	shift
	mkfifo "$TMP/$name.in" "$TMP/$name.out"
	"$PY" "$FIXTURES/lease_reader.py" "$@" <"$TMP/$name.in" >"$TMP/$name.out" &
	READER_PID=$!
	PIDS+=("$READER_PID")
	exec {line}>"$TMP/$name.in"
	eval "${name}_IN=$line"
	exec {line}<"$TMP/$name.out"
	eval "${name}_OUT=$line"
	IFS= read -r -t 10 line <&"$(eval echo "\$${name}_OUT")" || fail "$name: not ready"
	READER_FD=${line#ready }
}

# check_reader NAME: "same" or "changed", as the reader finds its mapping.
check_reader() {
	local in out line
	in=$(eval echo "\$${1}_IN")
	out=$(eval echo "\$${1}_OUT")
	echo check >&"$in"
	IFS= read -r -t 10 line <&"$out" || fail "$1: no answer"
	echo "$line"
}
