# test_helper.bash - loaded by every bats file: assertions, a private temp dir,
# the built programs first on PATH, and the Debian python3 (with msgpack, numpy).

bats_require_minimum_version 1.5.0
bats_load_library bats-support
bats_load_library bats-assert

# A test must not pass or fail because of the caller's environment (rbenv's
# test_helper does the same): every WSYNC_* and XDG_* variable goes, except
# what tests/run sets (WSYNC_BIN) and the long tests' knobs (WSYNC_CRASH_*,
# WSYNC_LOAD_*). XDG_RUNTIME_DIR, where the default hub and store live, is
# the test's temp dir (its wsync/ made only when a program uses it), and so
# is XDG_CACHE_HOME, where wsync-push remembers the files it pushed (below
# cache/).
for var in $(compgen -e); do
	case $var in
	WSYNC_BIN | WSYNC_CRASH_* | WSYNC_LOAD_*) ;;
	WSYNC_* | XDG_*) unset "$var" ;;
	esac
done
unset var
[ -z "${BATS_TEST_TMPDIR:-}" ] || export XDG_RUNTIME_DIR="$BATS_TEST_TMPDIR" \
    XDG_CACHE_HOME="$BATS_TEST_TMPDIR/cache"

ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
# tests/long/ and tests/fixtures/ are one level deeper.
[ -e "$ROOT/Makefile" ] || ROOT=$(cd "$ROOT/.." && pwd)
FIXTURES="$ROOT/tests/fixtures"
: "${WSYNC_BIN:=$ROOT/build/cc/bin}"
PATH="$WSYNC_BIN:$PATH"
# The python3 first on PATH may be another install without msgpack and numpy.
PY=/usr/bin/python3
export PY ROOT FIXTURES

setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
}

# need_test_hooks NAME: for a test that uses the fault hook NAME (say
# WSYNC_TEST_CRASH_AT), which only a test build has (make check builds one in
# BUILD-test). Skips against a release build run by hand; under tests/run
# (BUILD set), a build without it fails the test.
need_test_hooks() {
	grep -q "$1" "$WSYNC_BIN/wsync-serve" && return 0
	if [ -n "${BUILD:-}" ]; then
		echo "$WSYNC_BIN/wsync-serve has no $1: not a test build" >&2
		return 1
	fi
	skip "$1 needs a test build (make check; or WSYNC_BIN=build/cc-test/bin)"
}

# with_libwsync CMD...: runs CMD, a Python program that loads libwsync.so.0
# through ctypes: a sanitizer build's library needs its runtime loaded first
# (and Python's own leaks are not the library's).
with_libwsync() {
	if [ "${SANITIZE:-}" = 1 ]; then
		LD_PRELOAD=$(libasan_preload) ASAN_OPTIONS=detect_leaks=0:exitcode=99 "$@"
	else
		"$@"
	fi
}

# The ASan runtime a program that loads a sanitizer build's libwsync must
# preload; nothing for a plain build. For a command started in the background,
# where with_libwsync's function would stand between $! and the program.
libasan_preload() {
	[ "${SANITIZE:-}" != 1 ] || cc -print-file-name=libasan.so
}

# sign_helper ARGS...: tests/sign_helper.py, which signs and verifies .wsync
# files through libwsync.
sign_helper() {
	LIBDIR="$WSYNC_BIN/.." with_libwsync "$PY" "$ROOT/tests/sign_helper.py" "$@"
}

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
