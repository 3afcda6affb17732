# hosts.bash - emulated hosts on one machine for the long tests and the benches.
#
# hosts_up N RATE builds N hosts. Each host is a network namespace with one
# interface, eth0 (10.77.0.I/24 for host I, I from 1), joined by a veth pair to
# a bridge that lives in a namespace of its own, and a mount namespace in which
# the host's directory $HOSTS_DIR/hI is a private tmpfs: what one host writes
# there no other host sees (a watcher on host 2 cannot link host 1's store), and
# nothing outside the host sees it either (read it with host_exec). Every
# address is in 10.77.0.0/24, inside namespaces made here: no traffic leaves them.
#
# Each host's link carries at most RATE each way (tc tbf on both ends of its
# veth: eth0's egress is what the host sends, the bridge port's egress what it
# receives). RATE is a tc rate: 5mbit, 100mbit, 1gbit. The token buckets:
#   burst   max(RATE x 4 ms, 128 KiB): a GSO packet of 64 KiB passes whole at
#           any rate, as a real NIC's TSO sends it, and at 1 Gbit/s the bucket
#           covers a few timer ticks. tbf counts a GSO packet as its payload
#           and a set of headers per segment (about 68 KiB for 64 KiB): a
#           bucket of 64 KiB cut every such packet into 1448-byte frames, each
#           one more pass through the bridge and one more tbf timer, and 16
#           emulated relays spent these 2 cores on that alone
#           (bench/journal.md, 2026-11-27);
#   limit   4 MiB on eth0, what the host sends: a real host's own queue does
#           not drop what its TCP sends (byte queue limits push back), and the
#           kernel's TCP small queues hold each connection to a few packets
#           in it, so the queue stays short; with a short limit instead, a hub
#           sending to 16 hosts drops its own packets and some connections
#           stall for seconds in retransmission back-off, which no network
#           of real hosts does to a sender;
#   latency 20 ms on the bridge port, what the host receives: a switch port's
#           buffer; beyond it packets drop and the senders' TCP slows down.
# A plain TCP stream measures within a few per cent of RATE from 5 Mbit/s to
# 1 Gbit/s (tests/long/hosts.bats checks 20%). The byte counters count frames
# as the veth passes them, one set of headers per GSO packet of up to 64 KiB:
# about 0.5% over the payload.
#
# Functions:
#   hosts_up N RATE        builds hosts 1..N; HOSTS_N is N
#   host_rate I RATE       host I's link carries RATE each way from now on (a
#                          slow host among fast ones)
#   host_addr I            prints host I's address
#   host_run I CMD...      runs CMD on host I (its network and mount namespace)
#                          in the background; HOST_PID is its PID, recorded
#                          for hosts_down. Redirect the call to keep its output.
#   host_exec I CMD...     runs CMD on host I in the foreground, its status
#   host_sent I            bytes host I's link has sent so far (all frames)
#   host_received I        bytes host I's link has received so far
#   host_tcp_seconds F T BYTES
#                          sends BYTES of plain TCP from host F to host T and
#                          prints the seconds the receiver took, first byte of
#                          the connection to the last
#   hosts_down             stops every process host_run started (by PID),
#                          deletes the namespaces; safe to call twice
#
# A fleet on the hosts: host 1 runs the root hub, every other host a relay
# (wsync-serve --upstream) and a watcher of $FLEET_MODEL (default policy) on
# its own relay, which links the version from the relay's store (the watcher
# costs the link nothing). Endpoints are tcp://ADDRESS:$FLEET_PORT; logs and
# watcher output go to $FLEET_LOGS (default $HOSTS_DIR/logs, outside every
# host): root.log, rI.log (relay), wI.out and wI.err (watcher, id wI).
#   fleet_up N RATE        builds hosts 1..N+1 at RATE, starts the root on
#                          host 1 and hosts 2..N+1, each naming the root
#   fleet_root [OPTION...] starts the root hub on host 1 (store
#                          $HOSTS_DIR/h1/store: a restart keeps it);
#                          FLEET_ROOT is its endpoint, FLEET_ROOT_PID its PID
#   fleet_host I [UP [OPT...]]  host I's relay (upstream UP, default the root,
#                          wsync-serve's OPTs) and its watcher;
#                          FLEET_RELAY_PID[I] and
#                          FLEET_WATCH_PID[I] their PIDs
#   fleet_endpoint I       prints host I's hub endpoint
#   fleet_applied I V      0 when host I's watcher printed version V
#   fleet_versions I       the versions host I's watcher printed, in order
#   fleet_stop I           stops host I's relay and watcher, removing what
#                          they wrote on the host
#   hosts_setup_file       skips the bats file where hosts cannot be made
#   hosts_setup            a test's own directory, and no default endpoint
# Loaded by a bats file (load ../hosts, after the other helpers), it gives the
# file setup_file, setup and teardown made of these and hosts_down; a file that
# needs more defines its own, calling them.
# Needs root, ip (iproute2) with netns, tc, unshare and nsenter (util-linux).

HOSTS_NET=10.77.0
HOSTS_PIDS=()
HOSTS_KEEPERS=()
HOSTS_N=0

# 0 when this machine can build hosts; otherwise says why on stderr.
hosts_supported() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "emulated hosts need root" >&2
		return 1
	fi
	local tool
	for tool in ip tc unshare nsenter; do
		command -v "$tool" >/dev/null || {
			echo "emulated hosts need $tool (scripts/deps install long)" >&2
			return 1
		}
	done
	ip netns add "wsync-probe-$$" 2>/dev/null || {
		echo "ip netns does not work here" >&2
		return 1
	}
	ip netns del "wsync-probe-$$"
}

# The tbf parameters for a tc rate (5mbit, 100mbit, 1gbit, 800kbit).
s_hosts_tbf() {
	local bits
	bits=$(awk -v r="$1" 'BEGIN {
		n = r + 0; u = tolower(substr(r, length(n "") + 1))
		m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : u == "bit" ? 1 : 0
		if (n <= 0 || m == 0) exit 1
		printf "%.0f", n * m }') || {
		echo "hosts: rate $1 is not N followed by bit, kbit, mbit or gbit" >&2
		return 64
	}
	local burst=$((bits / 8 * 4 / 1000))
	((burst >= 131072)) || burst=131072
	echo "rate $1 burst $burst"
}

# hosts_up N RATE: builds hosts 1..N behind one bridge, each link at RATE.
hosts_up() {
	local n=$1 rate=$2 tbf i ns
	tbf=$(s_hosts_tbf "$rate") || return
	# Names unique to this run: concurrent tests and a crashed earlier run never meet.
	HOSTS_ID=${HOSTS_ID:-wsh$$-$RANDOM}
	HOSTS_DIR=${HOSTS_DIR:-${BATS_TEST_TMPDIR:-$(mktemp -d)}/hosts}
	mkdir -p "$HOSTS_DIR"
	ip netns add "$HOSTS_ID-br" || return
	ip -n "$HOSTS_ID-br" link set lo up
	ip -n "$HOSTS_ID-br" link add br0 type bridge
	ip -n "$HOSTS_ID-br" link set br0 up
	for ((i = 1; i <= n; i++)); do
		ns="$HOSTS_ID-h$i"
		ip netns add "$ns" || return
		HOSTS_N=$i
		ip -n "$ns" link set lo up
		ip link add "h$i" netns "$HOSTS_ID-br" type veth peer name eth0 netns "$ns" || return
		ip -n "$HOSTS_ID-br" link set "h$i" master br0
		ip -n "$HOSTS_ID-br" link set "h$i" up
		ip -n "$ns" addr add "$HOSTS_NET.$i/24" dev eth0
		ip -n "$ns" link set eth0 up
		# shellcheck disable=SC2086
		tc -n "$ns" qdisc add dev eth0 root tbf $tbf limit 4mb || return
		# shellcheck disable=SC2086
		tc -n "$HOSTS_ID-br" qdisc add dev "h$i" root tbf $tbf latency 20ms || return
		mkdir -p "$HOSTS_DIR/h$i"
		s_hosts_keeper "$i" || return
	done
}

# host_rate I RATE: host I's link at RATE each way, replacing both tbfs.
host_rate() {
	local tbf
	tbf=$(s_hosts_tbf "$2") || return
	# shellcheck disable=SC2086
	tc -n "$HOSTS_ID-h$1" qdisc replace dev eth0 root tbf $tbf limit 4mb || return
	# shellcheck disable=SC2086
	tc -n "$HOSTS_ID-br" qdisc replace dev "h$1" root tbf $tbf latency 20ms
}

# Starts host I's keeper: a process that holds the host's mount namespace (a
# private tmpfs on $HOSTS_DIR/hI) for host_run and host_exec to enter.
s_hosts_keeper() {
	local i=$1 ready="$HOSTS_DIR/.h$1.ready" deadline=$((SECONDS + 10))
	ip netns exec "$HOSTS_ID-h$i" unshare --mount --propagation private sh -c '
		mount -t tmpfs -o mode=0755 "wsync-h$1" "$2" && : >"$3" && exec sleep 2147483647' \
		sh "$i" "$HOSTS_DIR/h$i" "$ready" </dev/null >/dev/null 2>&1 &
	HOSTS_KEEPERS[$i]=$!
	until [ -e "$ready" ]; do
		if ((SECONDS >= deadline)) || ! kill -0 "${HOSTS_KEEPERS[$i]}" 2>/dev/null; then
			echo "hosts: host $i's mount namespace did not come up" >&2
			return 1
		fi
		sleep 0.02
	done
}

host_addr() {
	echo "$HOSTS_NET.$1"
}

# host_run I CMD...: CMD on host I in the background; HOST_PID is its PID.
host_run() {
	local i=$1
	shift
	# nsenter execs CMD itself (no pid namespace): $! is CMD's PID.
	nsenter --target "${HOSTS_KEEPERS[$i]}" --mount --net --wd="$PWD" -- "$@" &
	HOST_PID=$!
	HOSTS_PIDS+=("$HOST_PID")
}

# host_exec I CMD...: CMD on host I in the foreground.
host_exec() {
	local i=$1
	shift
	nsenter --target "${HOSTS_KEEPERS[$i]}" --mount --net --wd="$PWD" -- "$@"
}

# Bytes host I's link has sent (the bridge port received them), frames whole.
host_sent() {
	ip netns exec "$HOSTS_ID-br" cat "/sys/class/net/h$1/statistics/rx_bytes"
}

# Bytes host I's link has received (the bridge port sent them).
host_received() {
	ip netns exec "$HOSTS_ID-br" cat "/sys/class/net/h$1/statistics/tx_bytes"
}

# host_tcp_seconds FROM TO BYTES: plain TCP from host FROM to host TO; prints
# the receiver's seconds from accepting the connection to its last byte.
host_tcp_seconds() {
	local from=$1 to=$2 bytes=$3 out deadline pid
	out=$(mktemp "$HOSTS_DIR/.tcp.XXXXXX")
	host_run "$to" /usr/bin/python3 "$HOSTS_LIB/tcpblast.py" recv "$(host_addr "$to")" \
		>"$out" 2>&1
	pid=$HOST_PID
	deadline=$((SECONDS + 10))
	until grep -q '^listening ' "$out"; do
		if ((SECONDS >= deadline)) || ! kill -0 "$pid" 2>/dev/null; then
			echo "hosts: the TCP receiver on host $to did not start: $(cat "$out")" >&2
			return 1
		fi
		sleep 0.02
	done
	host_exec "$from" /usr/bin/python3 "$HOSTS_LIB/tcpblast.py" send "$(host_addr "$to")" \
		"$(awk '/^listening /{print $2}' "$out")" "$bytes" || return
	# The sender returns once the receiver closed: it has printed or is about to.
	wait "$pid" || return
	awk -v b="$bytes" '$1 == "received" && $2 == b { print $3; ok = 1 } END { exit !ok }' \
		"$out" || { echo "hosts: TCP receiver: $(cat "$out")" >&2; return 1; }
}

# hosts_down: stops every process started on the hosts, then the hosts.
hosts_down() {
	local pid i deadline
	# Every step may find its object gone already (a second call, a process that
	# ended): none of them fails the caller.
	for pid in "${HOSTS_PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	deadline=$((SECONDS + 10))
	for pid in "${HOSTS_PIDS[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.02
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	HOSTS_PIDS=()
	# A keeper's end unmounts its host's tmpfs (its mount namespace goes with it).
	for pid in "${HOSTS_KEEPERS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	HOSTS_KEEPERS=()
	[ -n "${HOSTS_ID:-}" ] || return 0
	for ((i = 1; i <= HOSTS_N; i++)); do
		ip netns del "$HOSTS_ID-h$i" 2>/dev/null || true
	done
	# The bridge's namespace goes last: deleting it deletes its veth ends and br0.
	ip netns del "$HOSTS_ID-br" 2>/dev/null || true
	HOSTS_N=0
}

FLEET_PORT=7355
FLEET_MODEL=${FLEET_MODEL:-policy}
declare -gA FLEET_RELAY_PID FLEET_WATCH_PID
declare -ga FLEET_WATCH_OPTS

fleet_endpoint() {
	echo "tcp://$(host_addr "$1"):$FLEET_PORT"
}

# s_fleet_wait SECONDS FILE PATTERN PID: until FILE has a line matching
# PATTERN; fails at once when PID has ended, at the bound otherwise.
s_fleet_wait() {
	local deadline=$((SECONDS + $1))
	until grep -q -- "$3" "$2" 2>/dev/null; do
		if ((SECONDS >= deadline)) || ! kill -0 "$4" 2>/dev/null; then
			grep -q -- "$3" "$2" 2>/dev/null && return 0
			echo "fleet: $2 never showed '$3':" >&2
			tail -n 5 "$2" >&2 2>/dev/null
			return 1
		fi
		sleep 0.02
	done
}

# fleet_root [wsync-serve option...]: the root hub on host 1.
# shellcheck disable=SC2120
fleet_root() {
	FLEET_LOGS=${FLEET_LOGS:-$HOSTS_DIR/logs}
	mkdir -p "$FLEET_LOGS"
	FLEET_ROOT=$(fleet_endpoint 1)
	# A restart's log goes on after the last's: wait for a listen line of its own.
	local from=$(($(cat "$FLEET_LOGS/root.log" 2>/dev/null | wc -l) + 1))
	host_run 1 wsync-serve -e "$FLEET_ROOT" --insecure --store "$HOSTS_DIR/h1/store" "$@" \
		2>>"$FLEET_LOGS/root.log"
	FLEET_ROOT_PID=$HOST_PID
	local deadline=$((SECONDS + 10))
	until tail -n +"$from" "$FLEET_LOGS/root.log" | grep -q 'event=listen'; do
		if ((SECONDS >= deadline)) || ! kill -0 "$FLEET_ROOT_PID" 2>/dev/null; then
			echo "fleet: the root did not start:" >&2
			tail -n 5 "$FLEET_LOGS/root.log" >&2
			return 1
		fi
		sleep 0.02
	done
}

# fleet_host I [UPSTREAM [OPTION...]]: host I's relay (upstream the root unless
# given, with the wsync-serve OPTIONs given) and its watcher, which follows
# only the relay, with the wsync-watch options of the array FLEET_WATCH_OPTS
# (none unless set).
fleet_host() {
	local i=$1 up=${2:-$FLEET_ROOT} ep
	ep=$(fleet_endpoint "$i")
	host_run "$i" wsync-serve -e "$ep" --insecure --store "$HOSTS_DIR/h$i/relay" \
		--upstream "$up" --model "$FLEET_MODEL" "${@:3}" 2>>"$FLEET_LOGS/r$i.log"
	FLEET_RELAY_PID[$i]=$HOST_PID
	s_fleet_wait 10 "$FLEET_LOGS/r$i.log" event=listen "$HOST_PID" || return
	host_run "$i" wsync-watch --id "w$i" -e "$ep" -m "$FLEET_MODEL" "${FLEET_WATCH_OPTS[@]}" \
		-o "$HOSTS_DIR/h$i/$FLEET_MODEL.wsync" >>"$FLEET_LOGS/w$i.out" 2>>"$FLEET_LOGS/w$i.err"
	FLEET_WATCH_PID[$i]=$HOST_PID
}

# fleet_placed FROM I: the root's log, from its line FROM on, shows host
# I's relay placed (its first report). FROM: the log's line count before the
# relay started plus one, so that a line of an earlier relay with the same
# PID never counts.
fleet_placed() {
	tail -n +"$1" "$FLEET_LOGS/root.log" |
	    grep -q "event=relay-join relay=[^ ]*:${FLEET_RELAY_PID[$2]} "
}

# fleet_up N RATE: hosts 1..N+1 at RATE, the root on host 1, hosts 2..N+1
# each a relay naming the root and a watcher.
fleet_up() {
	local i
	hosts_up $(($1 + 1)) "$2" || return
	fleet_root || return
	for ((i = 2; i <= $1 + 1; i++)); do
		fleet_host "$i" || return
	done
}

# Read with the shell's own read, no process started: the benches ask it of
# every host twenty times a second while the version flows, and 32 greps at
# a time took a fifth of the processors the hosts share.
fleet_applied() {
	local model version rest
	[ -r "$FLEET_LOGS/w$1.out" ] || return 1
	while read -r model version rest; do
		[ "$model" = "$FLEET_MODEL" ] && [ "$version" = "$2" ] && return 0
	done <"$FLEET_LOGS/w$1.out"
	return 1
}

fleet_versions() {
	awk -v m="$FLEET_MODEL" '$1 == m { print $2 }' "$FLEET_LOGS/w$1.out" 2>/dev/null
}

# fleet_stop I: ends host I's relay and watcher (by PID), then removes the
# relay's store and the watcher's output from the host.
fleet_stop() {
	local pid
	# Either may have ended already (a test killed the relay): neither fails the caller.
	for pid in "${FLEET_WATCH_PID[$1]:-}" "${FLEET_RELAY_PID[$1]:-}"; do
		[ -n "$pid" ] || continue
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	unset "FLEET_WATCH_PID[$1]" "FLEET_RELAY_PID[$1]"
	host_exec "$1" rm -rf "$HOSTS_DIR/h$1/relay" "$HOSTS_DIR/h$1/$FLEET_MODEL.wsync"
}

HOSTS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fixtures

hosts_setup_file() {
	hosts_supported || skip "$(hosts_supported 2>&1)"
}

hosts_setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	unset WSYNC_ENDPOINT
}

setup_file() {
	hosts_setup_file
}

setup() {
	hosts_setup
}

teardown() {
	hosts_down
}
