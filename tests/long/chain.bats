#!/usr/bin/env bats
# A chain of relays laid by hand on emulated hosts (issue 29, tests/hosts.bash):
# each relay's upstream is the relay before it, a watcher on each. Whatever the
# depth, the root knows every worker of the chain and --wait all waits for
# them all (wsync(7) RELAYS). Needs root, skipped otherwise.

load ../test_helper
load ../hub_helper
load ../hosts

# 0 when the root counts $1 workers alive, the deepest, w$(($1 + 1)), among them.
root_lists() {
	host_exec 1 wsync-inspect -e "$FLEET_ROOT" --hub --json -t 2 2>/dev/null |
	    jq -e --argjson n "$1" '([.workers[] | select(.alive)] | length) == $n and
	    any(.workers[]; .worker == "w\($n + 1)" and .alive)' >/dev/null
}

@test "a chain of 32 relays laid by hand: the root lists all 32 workers and --wait all returns once they applied" {
	local i
	make_versions 1
	hosts_up 33 100mbit
	fleet_root
	for ((i = 2; i <= 33; i++)); do fleet_host "$i" "$(fleet_endpoint $((i - 1)))"; done
	WAIT_S=90 wait_until root_lists 32
	run -0 host_exec 1 wsync-push -e "$FLEET_ROOT" --wait all --timeout 120 -m policy "$TMP/v1.wsync"
	assert_output 1
	for ((i = 2; i <= 33; i++)); do assert_equal "w$i $(fleet_versions "$i")" "w$i 1"; done
	# The deepest is reached through all 32 relays.
	run -0 host_exec 1 wsync-inspect -e "$FLEET_ROOT" --hub --json
	assert_equal "$(jq -r '.workers[] | select(.worker == "w33") | .via | split(">") | length' \
	    <<<"$output")" 32
}
