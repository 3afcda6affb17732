# test_helper.bash - loaded by every bats file: assertions, a private temp dir,
# the built programs first on PATH, and the Debian python3 (with msgpack, numpy).

bats_require_minimum_version 1.5.0
bats_load_library bats-support
bats_load_library bats-assert

ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
# tests/long/ is one level deeper.
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

# with_libwsync CMD...: runs CMD, a Python program that loads libwsync.so.0
# through ctypes: a sanitizer build's library needs its runtime loaded first
# (and Python's own leaks are not the library's).
with_libwsync() {
	if [ "${SANITIZE:-}" = 1 ]; then
		LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:exitcode=99 "$@"
	else
		"$@"
	fi
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
