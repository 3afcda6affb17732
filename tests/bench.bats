#!/usr/bin/env bats
# The side-by-side benchmark's harness runs and reports in the table's format
# (its figures are make bench's business, never asserted here).

load test_helper

@test "bench/torch_sync.py measures wsync and PyTorch's ways for one small configuration" {
	run -0 --separate-stderr with_libwsync "$PY" "$ROOT/bench/torch_sync.py" --bin "$WSYNC_BIN" \
	    --sizes 256k --counts 1 --rows rows.txt --section section.md --tmp "$BATS_TEST_TMPDIR"
	run -0 cat rows.txt
	assert_line --index 0 --regexp '^\| side by side: memcpy limit, 256 KiB into existing pages \| [0-9.]+ (us|ms) '
	assert_line --index 1 --regexp '^\| side by side: wsync Publisher, 256 KiB to 1 worker, all acked \| [0-9.]+ (us|ms) \| [0-9.]+ (us|ms) \| memcpy limit: .*; raw ZeroMQ floor: .*; shared buffer: .*; torch queues: .*; torch queues, pre-shared \(tears\): .* \| [0-9.]+x; [0-9.]+x; [0-9.]+x; [0-9.]+x; [0-9.]+x \|$'
	# Its columns: wsync, the tear-free queues the target is judged against, the
	# pre-shared queues that tear, then the other ways.
	run -0 grep -F '| model | workers | wsync | torch queues | torch queues, pre-shared (tears) | shared buffer (tears) | gloo broadcast | memcpy limit | raw ZeroMQ floor |' section.md
	run -0 grep -E '^\| 256 KiB \| 1 \| ([0-9.]+ (us|ms) \([0-9.]+ (us|ms)\) \| ){4}' section.md
	# The floor, measured by bench/zmq_raw (make check builds it).
	run -0 grep -E '^\| 256 KiB \| 1 \| ([^|]+\|){6} [0-9.]+ (us|ms) \([0-9.]+ (us|ms)\) \|' section.md
	# Every process it started is gone, and the hub's store with them.
	run -1 pgrep -f "$BATS_TEST_TMPDIR"
}

@test "bench/update measures a small model's update beside memcpy and its floors, every row with its target" {
	run -0 --separate-stderr env BUILD="${WSYNC_BIN%/bin}" TMPDIR="$BATS_TEST_TMPDIR" \
	    BENCH_SHM="$BATS_TEST_TMPDIR" "$ROOT/bench/update" 16 1 16
	assert_line --index 0 "## A large model's update (bench/update)"
	assert_line --index 1 '| benchmark | median | p90 | baseline (same run) | ratio | target | met |'
	t='[0-9.]+ (us|ms|s)'
	assert_line --index 3 --regexp "^\| memcpy of the model into existing pages \(the unit\) \| $t \| $t \| - \| - \| - \| - \|$"
	assert_line --index 4 --regexp "^\| floor of the delta push: hash and diff the two inputs \([0-9]+ threads?\) \| $t \| $t \| memcpy: $t \| [0-9.]+x \| - \| - \|$"
	assert_line --index 5 --regexp "^\| floor of a rebuild: copy, patch and hash \([0-9]+ threads?\) \| $t \| $t \| memcpy: $t \| [0-9.]+x \| - \| - \|$"
	assert_line --index 6 --regexp "^\| floor of the delta push, its two files read as a process reads them \(pread, 1 MiB pieces, [0-9]+ threads?\) \| $t \| $t \| memcpy: $t \| [0-9.]+x \| - \| - \|$"
	# The timed rows, then (as root) the same on a huge-page tmpfs the bench mounts.
	local on i=7
	for on in '' ', on a huge-page tmpfs'; do
		# Where it cannot mount one (not root, no huge pages), a row says so.
		if [ -n "$on" ] && [[ ${lines[$i]} == "| the rows above, on a huge-page tmpfs | skipped: "* ]]; then
			[ "$(id -u)" != 0 ] || [[ ${lines[$i]} == *"cannot mount a tmpfs with huge=within_size"* ]]
			i=$((i + 1))
			continue
		fi
		assert_line --index $i --regexp "^\| commit to ack, the update pushed whole on the hub's host \(the hub's log; the watcher fetched [0-9.]+ MiB\)$on \| $t \| $t \| memcpy: $t \| [0-9.]+x \| <= 3x memcpy \| (met|missed) \|$"
		assert_line --index $((i + 1)) --regexp "^\| the same pushes, push until acked \(context\)$on \| $t \| $t \| memcpy: $t \| [0-9.]+x \| - \| - \|$"
		i=$((i + 2))
		for how in '--batch --transfer socket' '--base its file before --transfer socket'; do
			assert_line --index $i --regexp "^\| the trainer's delta push alone \($how\)$on \| $t \| $t \| memcpy: $t; floor, hash\+diff: $t \| [0-9.]+x; [0-9.]+x \| <= 2x memcpy, or <= 1.2x the floor \| (met|missed) \|$"
			assert_line --index $((i + 1)) --regexp "^\| the trainer's delta push until acked \($how, -w all\)$on \| $t \| $t \| memcpy: $t; floor, diff \+ 2 rebuilds: $t \| [0-9.]+x; [0-9.]+x \| <= 4x memcpy, or <= 1.2x the floor \| (met|missed) \|$"
			i=$((i + 2))
		done
		assert_line --index $i --regexp "^\| one rank, the whole model \(--transfer socket --base\), until acked, 1 thread each$on \| $t \| $t \| memcpy: $t \| [0-9.]+x \| - \| - \|$"
		assert_line --index $((i + 1)) --regexp "^\| two ranks, a half each \(--part R/2 --group KEY( --base its half before|; whole parts: --base per part not yet)\), until acked, 1 thread each$on \| $t \| $t \| one rank: $t \| [0-9.]+x \| <= 0.7x one rank \| (met|missed) \|$"
		i=$((i + 2))
	done
	for pass in 'pusher diff \(--base a \.wsync file\)' \
	    'pusher diff as --batch makes it \(the safetensors file read where it lies, the version kept patched\)' \
	    'hub diff' 'hub rebuild \(into a spare, --recycle\)' 'watcher rebuild'; do
		assert_line --index "$i" --regexp "^\| $pass on 2 threads \(bench/passes, best of runs\) \| [0-9.]+ s \| - \| 1 thread: [0-9.]+ s \| [0-9.]+x faster \| >= 1.6x faster \| (met|missed) \|$"
		i=$((i + 1))
	done
	# The floors, then the hub without a spare: context, no target.
	i=$((i + 2))
	assert_line --index "$i" --regexp "^\| hub rebuild, new file on 2 threads \(bench/passes, best of runs\) \| [0-9.]+ s \| - \| 1 thread: [0-9.]+ s \| [0-9.]+x faster \| - \| - \|$"
	i=$((i + 1))
	for who in 'wsync-push --transfer socket --base \(a 1% delta\)' \
	    'wsync-push --part R/2 --base \(its safetensors half before' \
	    "wsync-serve \\(the hub: .*, the second's union rebuilt from the parts' deltas\\)" \
	    'wsync-serve --upstream \(a relay' 'wsync-watch --transfer socket --recycle'; do
		assert_line --index "$i" --regexp "^\| peak RSS, $who.*, 16 MiB model on disk, 2 threads \| [0-9.]+ MiB \| - \| bound: 64 MiB \| [0-9.]+x \| <= 64 MiB \| (met|missed) \|$"
		i=$((i + 1))
	done
	# Every process it started is gone, and its files with them.
	run -1 pgrep -f "$BATS_TEST_TMPDIR"
	run -0 find "$BATS_TEST_TMPDIR" -mindepth 1 -name 'wsync-update*'
	assert_output ''
	run -1 grep -F "$BATS_TEST_TMPDIR" /proc/mounts
}
