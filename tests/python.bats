#!/usr/bin/env bats
# python.bats - the wsync Python package (python/wsync), through its pytest suite
# in tests/python/: one test per pytest file, each asserting pytest's exit status
# and how many of its tests passed. The torch files skip without python3-torch.

load test_helper

# s_pytest FILE N: runs tests/python/FILE; it must pass exactly N tests.
s_pytest() {
	run with_libwsync "$PY" -m pytest -q -p no:cacheprovider --basetemp="$TMP/pytest" \
	    "$ROOT/tests/python/$1"
	assert_success
	assert_line --regexp "^$2 passed in [0-9.]+s\$"
}

s_need() {
	"$PY" -c "import $1" 2>/dev/null ||
	    skip "python3-$1 is not installed (scripts/deps install torch, as root)"
}

@test "the package writes and reads every numpy dtype, bf16 and fp8 as bits (test_files.py)" {
	s_need pytest
	s_pytest test_files.py 10
}

@test "sharded ranks publish one version together with Publisher(part=...) (test_parts.py)" {
	s_need pytest
	s_pytest test_parts.py 6
}

@test "the package writes and reads torch state_dicts without a copy (test_torch_files.py)" {
	s_need pytest
	s_need torch
	s_pytest test_torch_files.py 4
}

@test "Publisher, watch, push and pull work against a real hub (test_publish_watch.py)" {
	s_need pytest
	s_pytest test_publish_watch.py 7
}

@test "a signed Publisher's versions are taken by verifying workers (test_signed_publish.py)" {
	s_need pytest
	s_pytest test_signed_publish.py 7
}

@test "3 torch workers hold the trainer's bf16 module at every version (test_torch_publish_watch.py)" {
	s_need pytest
	s_need torch
	s_pytest test_torch_publish_watch.py 2
}

@test "the package raises the exit status's class with the program's reason, NotInstalled, and clear errors for meta and keys (test_errors.py)" {
	s_need pytest
	s_pytest test_errors.py 7
}
