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
