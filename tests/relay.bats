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
