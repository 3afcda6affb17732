#!/usr/bin/env bats
# install.bats - `make install` puts every file where man, pkg-config and the
# shells find it, a C program builds and runs against the installed library,
# and `make uninstall` takes every file away again.

load test_helper

# The build the suite runs against (tests/run sets BUILD and SANITIZE).
: "${BUILD:=build/cc}"

# s_make TARGET...: make in the source tree against the suite's build, staged
# into $DEST with PREFIX=/usr.
s_make() {
	make -s --no-print-directory -C "$ROOT" BUILD="$BUILD" SANITIZE="${SANITIZE:-}" \
	    DESTDIR="$DEST" PREFIX=/usr "$@"
}

# Every file and link under $DEST, relative to it, sorted.
s_files() {
	(cd "$DEST" && find . ! -type d | sed 's|^\./|/|' | LC_ALL=C sort)
}

setup() {
	TMP="$BATS_TEST_TMPDIR"
	cd "$TMP" || return 1
	DEST="$TMP/dest"
	# A library built with the sanitizers needs them in the program too.
	SAN=()
	[ "${SANITIZE:-}" != 1 ] || SAN=(-fsanitize=address,undefined)
	VERSION=$(sed -n 's/^#define WSYNC_VERSION "\(.*\)"/\1/p' "$ROOT/lib/wsync.h")
}

@test "make install puts every file in its standard place under DESTDIR and PREFIX" {
	run -0 s_make install
	run -0 s_files
	local p expected=""
	for p in wsync-convert wsync-inspect wsync-keygen wsync-pull wsync-push wsync-serve wsync-watch; do
		expected+="/usr/bin/$p"$'\n'
	done
	expected+="/usr/include/wsync.h
/usr/lib/libwsync.a
/usr/lib/libwsync.so
/usr/lib/libwsync.so.0
/usr/lib/libwsync.so.$VERSION
/usr/lib/pkgconfig/libwsync.pc
/usr/lib/python3/dist-packages/wsync/__init__.py
/usr/lib/python3/dist-packages/wsync/_lib.py
/usr/lib/python3/dist-packages/wsync/errors.py
/usr/lib/python3/dist-packages/wsync/files.py
/usr/lib/python3/dist-packages/wsync/programs.py
/usr/lib/python3/dist-packages/wsync/publisher.py
/usr/lib/python3/dist-packages/wsync/py.typed
/usr/lib/python3/dist-packages/wsync/signing.py
/usr/lib/python3/dist-packages/wsync/slots.py
/usr/lib/python3/dist-packages/wsync/tensors.py
/usr/lib/python3/dist-packages/wsync/watch.py
/usr/share/bash-completion/completions/wsync"$'\n'
	for p in wsync-convert wsync-inspect wsync-keygen wsync-pull wsync-push wsync-serve wsync-watch; do
		expected+="/usr/share/bash-completion/completions/$p"$'\n'
	done
	for p in wsync-convert wsync-inspect wsync-keygen wsync-pull wsync-push wsync-serve wsync-watch; do
		expected+="/usr/share/fish/vendor_completions.d/$p.fish"$'\n'
	done
	expected+="/usr/share/fish/vendor_completions.d/wsync.fish"$'\n'
	for p in wsync-convert.1 wsync-inspect.1 wsync-keygen.1 wsync-pull.1 wsync-push.1 wsync-serve.1 \
	    wsync-watch.1; do
		expected+="/usr/share/man/man1/$p"$'\n'
	done
	expected+="/usr/share/man/man5/wsync-format.5
/usr/share/man/man7/wsync.7
/usr/share/zsh/vendor-completions/_wsync"
	assert_output "$expected"
}

@test "the installed library has its soname and links to the real file" {
	s_make install
	run -0 readlink "$DEST/usr/lib/libwsync.so"
	assert_output "libwsync.so.0"
	run -0 readlink "$DEST/usr/lib/libwsync.so.0"
	assert_output "libwsync.so.$VERSION"
	run -0 sh -c "LC_ALL=C readelf -d '$DEST/usr/lib/libwsync.so.$VERSION' | grep SONAME"
	assert_output --partial "Library soname: [libwsync.so.0]"
}

@test "man finds the installed pages by name and section" {
	s_make install
	run -0 env MANPATH="$DEST/usr/share/man" man -w wsync-push wsync-format wsync
	assert_output "$DEST/usr/share/man/man1/wsync-push.1
$DEST/usr/share/man/man5/wsync-format.5
$DEST/usr/share/man/man7/wsync.7"
}

# Writes hello.c: a one-tensor tree written to a file and read back.
s_hello_c() {
	cat >hello.c <<'EOF'
#include <stdio.h>
#include <wsync.h>

int
main(void)
{
	static const float w[4] = { 1, 2, 3, 4 };
	const uint64_t shape[1] = { 4 };
	wsync_err_t err;
	wsync_tree_t *t = wsync_tree_new("policy", &err);
	wsync_file_t *f;

	if (t == NULL || wsync_tree_add(t, "actor.weight", WSYNC_F32, 1, shape, w,
	    sizeof(w), &err) < 0 || wsync_tree_write_file(t, "hello.wsync", &err) < 0)
		return fprintf(stderr, "%s\n", err.msg), 1;
	wsync_tree_destroy(&t);
	if ((f = wsync_file_open("hello.wsync", &err)) == NULL)
		return fprintf(stderr, "%s\n", err.msg), 1;
	printf("%s %s %zu %s\n", WSYNC_VERSION, wsync_file_model(f), wsync_file_count(f),
	    wsync_file_tensor(f, 0)->path);
	wsync_file_close(&f);
	return 0;
}
EOF
	export PKG_CONFIG_PATH="$DEST/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$DEST"
}

@test "a C program builds with pkg-config --cflags --libs libwsync and runs" {
	s_make install
	s_hello_c
	run -0 pkg-config --cflags --libs libwsync
	# pkg-config ends its line with a space.
	assert_equal "${output% }" "-I$DEST/usr/include -L$DEST/usr/lib -lwsync"
	# shellcheck disable=SC2046 # pkg-config prints separate words
	run -0 cc -std=c11 -Wall -Wextra -Werror "${SAN[@]}" -o hello hello.c \
	    $(pkg-config --cflags --libs libwsync)
	LD_LIBRARY_PATH="$DEST/usr/lib" run -0 ./hello
	assert_output "$VERSION policy 1 actor.weight"
	run -0 wsync-inspect --verify hello.wsync
	LD_LIBRARY_PATH="$DEST/usr/lib" run -0 ldd ./hello
	assert_output --partial "libwsync.so.0 => $DEST/usr/lib/libwsync.so.0"
}

@test "a C program links libwsync.a with pkg-config --static and runs without the .so" {
	s_make install
	s_hello_c
	local libs
	libs=$(pkg-config --static --libs libwsync)
	# shellcheck disable=SC2086 # pkg-config prints separate words
	run -0 cc -std=c11 -Wall -Wextra -Werror "${SAN[@]}" -o hello hello.c \
	    $(pkg-config --cflags libwsync) -Wl,-Bstatic ${libs%%-lwsync*} -lwsync \
	    -Wl,-Bdynamic ${libs#*-lwsync}
	run -0 ./hello
	assert_output "$VERSION policy 1 actor.weight"
	run -0 ldd ./hello
	refute_output --partial libwsync
}

@test "the installed Python package loads the installed libwsync beside the installed programs" {
	s_make install
	local pre=()
	[ "${SANITIZE:-}" != 1 ] ||
	    pre=(env LD_PRELOAD="$(cc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
	PATH="$DEST/usr/bin:$PATH" PYTHONPATH="$DEST/usr/lib/python3/dist-packages" run -0 \
	    "${pre[@]}" "$PY" -c '
import numpy as np, wsync
print(wsync.wsync_size({"w": np.zeros(3, np.float32)}, "policy"), wsync._lib.lib()._name,
      wsync.__file__)'
	assert_output "140 $DEST/usr/bin/../lib/libwsync.so.0 $DEST/usr/lib/python3/dist-packages/wsync/__init__.py"
}

@test "python3 imports wsync from where make install puts it for /usr/local, until make uninstall" {
	# Debian's python3 searches /usr/local/lib/python3.X/dist-packages (its version).
	local site
	site=$("$PY" -c 'import sys; print("/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2])')
	run -0 "$PY" -c "import sys; print('$site' in sys.path)"
	assert_output True
	make -s --no-print-directory -C "$ROOT" BUILD="$BUILD" SANITIZE="${SANITIZE:-}" \
	    DESTDIR="$DEST" PREFIX=/usr/local install
	PYTHONPATH=$DEST$site run -0 "$PY" -c 'import wsync; print(wsync.__file__)'
	assert_output "$DEST$site/wsync/__init__.py"
	make -s --no-print-directory -C "$ROOT" BUILD="$BUILD" SANITIZE="${SANITIZE:-}" \
	    DESTDIR="$DEST" PREFIX=/usr/local uninstall
	PYTHONPATH=$DEST$site run -1 "$PY" -c 'import wsync'
	assert_output --partial "ModuleNotFoundError: No module named 'wsync'"
}

@test "pip installs the package from python/ offline with Debian's setuptools" {
	"$PY" -m pip --version >/dev/null 2>&1 || skip "python3-pip is not installed"
	# A copy: setuptools writes its egg-info beside setup.py.
	cp -r "$ROOT/python" "$TMP/src"
	run -0 "$PY" -m pip install --no-index --no-deps --no-build-isolation \
	    --target "$TMP/site" "$TMP/src"
	PYTHONPATH="$TMP/site" run -0 "$PY" -c 'import wsync; print(wsync.__file__, wsync.__version__)'
	assert_output "$TMP/site/wsync/__init__.py 0.1.0"
	[ -f "$TMP/site/wsync/py.typed" ]
}

@test "the README's route installs the Python package into a scratch venv offline, writing nothing into the tree" {
	"$PY" -c 'import ensurepip' 2>/dev/null || skip "python3-venv is not installed"
	sed -n '/^The Python package alone, into a virtual environment/,/^It copies/p' \
	    "$ROOT/README.md" | sed -n 's/^    //p' >route.sh
	assert_equal "$(cat route.sh)" $'python3 -m venv --system-site-packages ~/venv\nmake install-python VENV=~/venv'
	local before
	before=$(git -C "$ROOT" status --porcelain --ignored python)
	# As pasted at the top of the tree, offline, HOME a scratch directory.
	(cd "$ROOT" && HOME="$TMP" PIP_NO_INDEX=1 PATH="/usr/bin:/bin" sh -e "$TMP/route.sh" >/dev/null)
	assert_equal "$(git -C "$ROOT" status --porcelain --ignored python)" "$before"
	PATH="$WSYNC_BIN:$PATH" run -0 with_libwsync "$TMP/venv/bin/python" -c '
import numpy as np, wsync
print(wsync.__file__.startswith("'"$TMP"'/venv/lib/"), wsync.wsync_size({"w": np.zeros(3, np.float32)}, "policy"))'
	assert_output "True 140"
}

@test "the installed bash completion is found by program name and completes" {
	s_make install
	run -0 bash -c "source '$DEST/usr/share/bash-completion/completions/wsync-pull'
	    COMP_WORDS=(wsync-pull --if-n) COMP_CWORD=1 COMP_LINE='wsync-pull --if-n'
	    COMP_POINT=\${#COMP_LINE}; _wsync; printf '%s\n' \"\${COMPREPLY[@]}\""
	assert_output "--if-newer"
}

@test "make uninstall removes every file make install put in place" {
	s_make install
	run -0 s_files
	[ "${#lines[@]}" -ge 25 ]
	run -0 s_make uninstall
	run -0 s_files
	assert_output ""
}
