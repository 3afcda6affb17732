#!/usr/bin/env bats
# metrics.bats - wsync-inspect --hub --prometheus on a live hub: promtool accepts
# it, and every value is the one wsync-inspect --hub --json shows.

load test_helper
load hub_helper

# s_metric NAME{LABELS}: the value of one sample of wsync-inspect --hub --prometheus.
s_metric() {
	awk -v name="$1" '$1 == name { print $2 }' metrics.txt
}

@test "--hub --prometheus passes promtool on a hub with workers, a failure and a pending wait" {
	command -v promtool >/dev/null || skip "promtool is not installed (Debian's prometheus)"
	make_versions 2
	start_hub
	start_watcher w1
	start_watcher bad -x false
	wait_until hub_has_worker w1
	wait_until hub_has_worker bad
	wsync-push -m policy v1.wsync
	wsync-push -m policy v2.wsync
	wait_until watcher_at w1 2
	wait_until grep -q "event=fail worker=bad model=policy version=2" hub.log
	wsync-push --wait-for 2 -m policy -w ghost, -t 60 2>/dev/null &
	PIDS+=("$!")
	wait_until grep -q "event=wait model=policy version=2 mode=ids" hub.log
	run -64 wsync-pull -m 'bad!' -o x.wsync
	wsync-inspect --hub --prometheus >metrics.txt
	wsync-inspect --hub --json >status.json
	run -0 promtool check metrics <metrics.txt
	assert_output ""
	# Every value against the JSON status taken just after.
	local w
	assert_equal "$(s_metric 'wsync_model_head_version{model="policy"}')" \
	    "$(jq '.models[0].head' status.json)"
	assert_equal "$(s_metric 'wsync_model_versions_kept{model="policy"}')" \
	    "$(jq '.models[0].versions | length' status.json)"
	assert_equal "$(s_metric 'wsync_model_head_bytes{model="policy"}')" \
	    "$(jq '.models[0].versions[-1].size' status.json)"
	for w in w1 bad; do
		assert_equal "$(s_metric "wsync_worker_applied_version{worker=\"$w\",model=\"policy\"}")" \
		    "$(jq --arg w "$w" '.workers[] | select(.worker == $w) | .applied.policy // 0' status.json)"
		assert_equal "$(s_metric "wsync_worker_failures_total{worker=\"$w\",model=\"policy\"}")" \
		    "$(jq --arg w "$w" '.workers[] | select(.worker == $w) | .failures.policy // 0' status.json)"
		assert_equal "$(s_metric "wsync_worker_alive{worker=\"$w\"}")" 1
	done
	assert_equal "$(s_metric 'wsync_worker_applied_version{worker="w1",model="policy"}')" 2
	assert_equal "$(s_metric 'wsync_worker_lag_versions{worker="w1",model="policy"}')" 0
	assert_equal "$(s_metric 'wsync_worker_applied_version{worker="bad",model="policy"}')" 0
	assert_equal "$(s_metric 'wsync_worker_lag_versions{worker="bad",model="policy"}')" 2
	assert_equal "$(s_metric 'wsync_worker_failures_total{worker="bad",model="policy"}')" 2
	assert_equal "$(s_metric wsync_hub_waits_pending)" 1
	assert_equal "$(s_metric wsync_hub_waits_pending)" "$(jq .counters.waits_pending status.json)"
	assert_equal "$(s_metric wsync_hub_waits_total)" 1
	assert_equal "$(s_metric wsync_hub_commits_total)" 2
	assert_equal "$(s_metric wsync_hub_uploads_total)" 2
	assert_equal "$(s_metric wsync_hub_refused_requests_total)" "$(jq .counters.refused status.json)"
	assert_equal "$(s_metric wsync_hub_received_bytes_total)" \
	    "$(jq '[.models[0].versions[].size] | add' status.json)"
	run -0 grep -c '^# TYPE wsync_' metrics.txt
	assert_output 20
}

@test "--prometheus escapes a worker id's quotes and backslashes in its labels" {
	make_versions 1
	start_hub
	wsync-watch --id 'a"b\c' -m policy -o p.wsync >/dev/null 2>&1 &
	PIDS+=("$!")
	wait_until hub_has_worker 'a"b\c'
	run -0 sh -c 'wsync-inspect --hub --prometheus | grep "^wsync_worker_alive"'
	assert_output 'wsync_worker_alive{worker="a\"b\\c"} 1'
}

@test "--prometheus without a hub, or with --json, is a usage error" {
	run -64 --separate-stderr wsync-inspect --prometheus x.wsync
	assert_equal "${stderr_lines[0]}" "wsync-inspect: --prometheus shows a hub's metrics: give -e or --hub"
	run -64 --separate-stderr wsync-inspect --hub --json --prometheus
	assert_equal "${stderr_lines[0]}" "wsync-inspect: --json or --prometheus, not both"
}
