#!/usr/bin/env bats
# Load: 32 watchers follow one hub while a pusher publishes 500 versions of a
# 1 MiB model as fast as it can. Every watcher ends on the last version, none
# ever applies an older version after a newer one, the hub's anonymous memory
# does not grow after warm-up, and it leaks no descriptor. Prints pushes/s,
# applied updates/s and the largest lag seen. WSYNC_LOAD_WATCHERS and
# WSYNC_LOAD_PUSHES scale it down.

load ../test_helper
load ../hub_helper

# Prints the hub's anonymous resident memory in KiB.
hub_anon_kb() {
	awk '/^RssAnon:/ {print $2}' "/proc/$HUB_PID/status"
}

hub_fds() {
	ls "/proc/$HUB_PID/fd" | wc -l
}

fds_at_most() {
	[ "$(hub_fds)" -le "$1" ]
}

all_at() {
	local id
	for id in "${IDS[@]}"; do
		watcher_at "$id" "$1" || return 1
	done
}

# Samples, until $TMP/stop-sampling exists, the largest lag (head minus applied) of any watcher.
sample_lag() {
	local max=0 lag
	while [ ! -e "$TMP/stop-sampling" ]; do
		lag=$(wsync-inspect --hub --json -t 2 2>/dev/null | jq '
			(.models[] | select(.model == "policy") | .head) as $h |
			[.workers[] | select(.alive) | $h - (.applied.policy // 0)] | max // 0')
		[ -n "$lag" ] && [ "$lag" -gt "$max" ] && max=$lag
		echo "$max" >"$TMP/max-lag"
		sleep 0.2
	done
}

@test "32 watchers follow 500 pushes of 1 MiB in order, to the last, with stable memory and descriptors" {
	local watchers=${WSYNC_LOAD_WATCHERS:-32} pushes=${WSYNC_LOAD_PUSHES:-500} n id t0 t1 t2
	local anon_warm anon_mid anon_end fds_before fds_after applied sampler
	local -A pid
	IDS=()
	# 1 MiB of f32: one tensor, a new value per version so that content ids differ.
	"$PY" - "$TMP" <<'PYEOF'
import json, struct, sys
import numpy as np
for v in (1, 2):
    w = np.full(1 << 18, v, dtype="<f4").tobytes()
    h = json.dumps({"w": {"dtype": "F32", "shape": [1 << 18], "data_offsets": [0, len(w)]}}).encode()
    h += b" " * (-len(h) % 8)
    open(f"{sys.argv[1]}/m{v}.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + w)
PYEOF
	wsync-convert -m policy m1.safetensors m1.wsync
	wsync-convert -m policy m2.safetensors m2.wsync
	start_hub --keep 3
	fds_before=$(hub_fds)
	for ((n = 1; n <= watchers; n++)); do
		start_watcher "w$n"
		pid[w$n]=${PIDS[-1]}
		IDS+=("w$n")
	done
	run -0 wsync-push -m policy m1.wsync
	WAIT_S=60 wait_until all_at 1
	sample_lag &
	sampler=$!
	PIDS+=("$sampler")
	t0=$(date +%s.%N)
	for ((n = 2; n <= pushes; n++)); do
		wsync-push -m policy "m$((n % 2 + 1)).wsync" >/dev/null
		[ "$n" -eq 50 ] && anon_warm=$(hub_anon_kb)
		[ "$n" -eq $((pushes / 2)) ] && anon_mid=$(hub_anon_kb)
	done
	t1=$(date +%s.%N)
	WAIT_S=120 wait_until all_at "$pushes"
	t2=$(date +%s.%N)
	touch "$TMP/stop-sampling"
	wait "$sampler" || true
	anon_end=$(hub_anon_kb)
	applied=0
	for id in "${IDS[@]}"; do
		versions_increase "$id"
		applied=$((applied + $(wc -l <"$TMP/$id.out")))
		kill -TERM "${pid[$id]}"
	done
	for id in "${IDS[@]}"; do
		wait "${pid[$id]}" || true
	done
	# What an idle hub holds, plus the descriptors of the 3 versions it keeps.
	wait_until fds_at_most $((fds_before + 3)) || ls -l "/proc/$HUB_PID/fd"
	fds_after=$(hub_fds)
	awk -v p="$((pushes - 1))" -v a="$applied" -v t0="$t0" -v t1="$t1" -v t2="$t2" \
	    -v w="$watchers" -v lag="$(cat "$TMP/max-lag")" -v m0="$anon_warm" -v mm="$anon_mid" -v m1="$anon_end" \
	    -v f0="$fds_before" -v f1="$fds_after" 'BEGIN {
		printf "# %d watchers, %d pushes of 1 MiB in %.1f s: %.1f pushes/s; %d updates applied, %.1f/s until all converged (%.1f s); max lag %d versions\n",
		    w, p, t1 - t0, p / (t1 - t0), a, a / (t2 - t0), t2 - t0, lag
		printf "# hub anonymous RSS %d KiB after warm-up (50 pushes), %d KiB half-way, %d KiB at the end; descriptors %d before (empty store), %d after (3 versions kept)\n", m0, mm, m1, f0, f1
	}' >&3
	[ "$anon_end" -le $((anon_warm + 16384)) ] ||
		{ echo "the hub grew from $anon_warm to $anon_end KiB"; false; }
	[ "$fds_after" -le $((fds_before + 3)) ]
}
