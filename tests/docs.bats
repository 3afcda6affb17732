#!/usr/bin/env bats
# docs.bats - the man pages render cleanly and say what the programs say;
# the shell completions complete what a user types; wsync(7)'s Python client
# speaks to a real hub.

load test_helper
load hub_helper

# render PAGE: the page as man(1) prints it, without hyphenation or wrapping.
render() {
	MANROFFOPT=-rHY=0 MANWIDTH=200 LC_ALL=C man -l "$1" 2>/dev/null
}

# The programs that have a man page in section 1.
programs() {
	local page
	for page in "$ROOT"/man/wsync-*.1; do
		basename "$page" .1
	done
}

# forms_help PROG: the usage forms of PROG's --help (the "usage: " line and its
# continuation lines, up to the first empty line), one per line, spaces squeezed.
forms_help() {
	"$1" --help | awk '
		/^usage: / { on = 1; sub(/^usage: /, "") }
		on && /^$/ { exit }
		on { print }' | s_forms "$1"
}

# forms_man PROG: the SYNOPSIS forms of man/PROG.1, one per line, spaces squeezed.
forms_man() {
	render "$ROOT/man/$1.1" | awk '
		/^SYNOPSIS$/ { on = 1; next }
		on && /^[A-Z]/ { exit }
		on { print }' | s_forms "$1"
}

# Joins lines into forms: a form starts at a line that starts with PROG.
s_forms() {
	awk -v prog="$1" '
		{ gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ $/, "") }
		$0 == "" { next }
		$1 == prog { if (form != "") print form; form = $0; next }
		{ form = form " " $0 }
		END { if (form != "") print form }'
}

# complete_bash LINE: what the bash completion offers for LINE, the cursor at
# its end, one candidate per line, sorted; run in its own bash, bounded.
complete_bash() {
	timeout 20 bash -c "$(declare -f s_complete_bash); s_complete_bash \"\$@\"" _ \
	    "$ROOT/completions/wsync.bash" "$1"
}

# Sources the completion, splits LINE into COMP_WORDS as bash does (at spaces,
# and around runs of = and :), calls _wsync and prints COMPREPLY.
s_complete_bash() {
	local line=$2 w="" kind="" k c i
	# shellcheck source=/dev/null
	source "$1"
	COMP_WORDBREAKS=$' \t\n"\'><=;|&(:'
	COMP_WORDS=()
	for ((i = 0; i < ${#line}; i++)); do
		c=${line:i:1}
		if [[ $c == [[:space:]] ]]; then
			[[ -n $w ]] && COMP_WORDS+=("$w")
			w="" kind=""
			continue
		fi
		[[ $c == [=:] ]] && k="break" || k="word"
		if [[ -n $w && $k != "$kind" ]]; then
			COMP_WORDS+=("$w")
			w=""
		fi
		w+=$c kind=$k
	done
	COMP_WORDS+=("$w")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMP_LINE=$line
	COMP_POINT=${#line}
	COMPREPLY=()
	_wsync
	((${#COMPREPLY[@]} == 0)) || printf '%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort
}

# complete_fish LINE: what the fish completion offers, sorted, without descriptions.
complete_fish() {
	# shellcheck disable=SC2016 # fish expands $argv
	timeout 20 fish -c 'source $argv[1]; complete -C $argv[2]' "$ROOT/completions/wsync.fish" "$1" |
	    sed 's/\t.*//' | LC_ALL=C sort
}

# complete_zsh LINE: what the zsh completion offers (every compadd), sorted.
# An interactive zsh in a pseudo-terminal gets LINE and a TAB once its line
# editor is up (after the prompt "ZP> "), then a command that prints DONE_42.
complete_zsh() {
	cat >"$TMP/capture.zsh" <<'EOF'
zmodload zsh/zpty || exit 1
out=$1/zsh-candidates
rm -f $out
zpty z zsh -f -i
zpty -w z "PROMPT=\$'\\x5a\\x50> '; fpath=($2 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "compadd() { local -a h; builtin compadd -O h \"\$@\"; print -rl -- \$h >>$out; builtin compadd \"\$@\"; }"
zpty -w z 'print -r -- READY_$((6*7))'
zpty -r z text '*READY_42*ZP> *'
zpty -w -n z "$3"$'\t'
zpty -w z $'\C-u''print -r -- DONE_$((6*7))'
zpty -r z text '*DONE_42*'
zpty -d z
[[ -f $out ]] && LC_ALL=C sort -u $out | sed '/^$/d'
exit 0
EOF
	timeout 20 zsh -f "$TMP/capture.zsh" "$TMP" "$ROOT/completions" "$1"
}

# A directory with two weight files, another file and a subdirectory.
make_fixtures_dir() {
	mkdir -p fixtures-dir/sub
	: >fixtures-dir/a.wsync
	: >fixtures-dir/b.safetensors
	: >fixtures-dir/notes.txt
}

@test "every man page formats with groff -ww and no warning" {
	local page n=0 bad=""
	for page in "$ROOT"/man/*.[1-8]; do
		run groff -ww -man -z "$page"
		[ "$status" -eq 0 ] && [ -z "$output" ] || bad+="$(basename "$page"): $output"$'\n'
		n=$((n + 1))
	done
	[ -z "$bad" ] || fail "$bad"
	[ "$n" -ge 7 ]
}

@test "every man page is clean under mandoc -T lint" {
	command -v mandoc >/dev/null || skip "mandoc is not installed (apt-get install mandoc)"
	local page bad=""
	for page in "$ROOT"/man/*.[1-8]; do
		run mandoc -T lint "$page"
		[ "$status" -eq 0 ] && [ -z "$output" ] || bad+="$(basename "$page"): $output"$'\n'
	done
	[ -z "$bad" ] || fail "$bad"
}

@test "every program has a man page in section 1" {
	local prog
	for prog in "$WSYNC_BIN"/wsync-*; do
		[ -f "$ROOT/man/$(basename "$prog").1" ] || fail "no man/$(basename "$prog").1"
	done
}

@test "each man page's SYNOPSIS is the program's --help usage" {
	local prog
	for prog in $(programs); do
		command -v "$prog" >/dev/null || fail "$prog is not built"
		run forms_man "$prog"
		local man=$output
		[ -n "$man" ] || fail "$prog.1: no SYNOPSIS found"
		run forms_help "$prog"
		[ "$man" = "$output" ] ||
		    fail "$(printf '%s.1 SYNOPSIS:\n%s\n--help usage:\n%s' "$prog" "$man" "$output")"
	done
}

@test "each man page names every long option its program's --help lists" {
	local prog opt
	for prog in $(programs); do
		local text
		text=$(render "$ROOT/man/$prog.1")
		for opt in $("$prog" --help | grep -E '^ +-' | grep -oE -- '--[a-z][a-z-]*'); do
			grep -qE -- "(^|[^a-z-])$opt([^a-z-]|\$)" <<<"$text" ||
			    fail "$prog.1 does not mention $opt"
		done
	done
}

@test "each section 1 page lists every exit status of the common table" {
	local prog code
	for prog in $(programs); do
		local status
		status=$(render "$ROOT/man/$prog.1" | awk '/^EXIT STATUS$/ { on = 1; next }
		    on && /^[A-Z]/ { exit } on { print $1 }')
		for code in 0 1 64 65 66 69 70 74 75 76 77; do
			grep -qx "$code" <<<"$status" || fail "$prog.1: exit status $code missing"
		done
	done
}

@test "every man page has an EXAMPLES section with at least one example" {
	local page bad=""
	for page in "$ROOT"/man/*.[1-8]; do
		render "$page" | awk '/^EXAMPLES$/ { on = 1; next } on && /^[A-Z]/ { exit }
		    on && NF { n++ } END { exit n < 1 }' || bad+=" $(basename "$page")"
	done
	[ -z "$bad" ] || fail "no EXAMPLES in:$bad"
}

@test "the hook's environment is documented in wsync-watch(1)" {
	run render "$ROOT/man/wsync-watch.1"
	local var
	for var in WSYNC_MODEL WSYNC_VERSION WSYNC_PATH WSYNC_WORKER WSYNC_ENDPOINT; do
		assert_output --partial "$var"
	done
}

@test "wsync(7) documents every op the hub serves" {
	local text op
	text=$(render "$ROOT/man/wsync.7")
	ops=$(sed -n 's/^\t{ "\([a-z]*\)", hub_op_.*/\1/p' "$ROOT/lib/hub_request.c")
	[ "$(wc -w <<<"$ops")" -ge 14 ]
	for op in $ops; do
		grep -qE "^ {7}$op\$" <<<"$text" || fail "wsync.7 has no entry for op $op"
	done
}

@test "wsync(7)'s Python client fetches the head from a real hub" {
	"$PY" -c 'import zmq' 2>/dev/null || skip "python3-zmq is not installed"
	make_versions 2
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy v2.wsync
	sed -n '/^\.\\" begin python-client$/,/^\.\\" end python-client$/p' "$ROOT/man/wsync.7" |
	    sed -e '/^\.\\"/d' -e '/^\.EX$/d' -e '/^\.EE$/d' \
	    -e 's/\\&//g' -e 's/\\-/-/g' -e 's/\\e/\\/g' >client.py
	[ -s client.py ]
	run -0 "$PY" client.py
	assert_output 2
	assert_equal "$(content_of policy.wsync)" "$(content_of v2.wsync)"
	run -0 wsync-inspect --verify policy.wsync
}

@test "bash completes wsync-push --wa to --wait and --wait-for" {
	run -0 complete_bash "wsync-push --wa"
	assert_output $'--wait\n--wait-for'
}

@test "bash completes wsync-inspect di to the diff subcommand" {
	run -0 complete_bash "wsync-inspect di"
	assert_output "diff"
}

@test "bash completes weight files and directories where a file goes" {
	make_fixtures_dir
	run -0 complete_bash "wsync-push -m policy ./fixtures-dir/"
	assert_output - <<'EOF'
./fixtures-dir/a.wsync
./fixtures-dir/b.safetensors
./fixtures-dir/sub
EOF
}

@test "bash completes every file when no weight file matches" {
	make_fixtures_dir
	run -0 complete_bash "wsync-convert ./fixtures-dir/n"
	assert_output "./fixtures-dir/notes.txt"
}

@test "bash completes the file of -m MODEL=FILE after the =" {
	make_fixtures_dir
	run -0 complete_bash "wsync-push -m policy=./fixtures-dir/a"
	assert_output "./fixtures-dir/a.wsync"
}

@test "bash completes every option of every program" {
	local prog opt
	for prog in wsync-serve wsync-push wsync-pull wsync-watch wsync-inspect wsync-convert; do
		run -0 complete_bash "$prog -"
		for opt in $("$prog" --help | grep -E '^ +-' | grep -oE -- '(^| )-[a-zA-Z]|--[a-z][a-z-]*' | tr -d ' '); do
			grep -qx -- "$opt" <<<"$output" || fail "bash: $prog $opt not offered"
		done
	done
}

@test "bash completes option values: layouts, output kinds, endpoints" {
	run -0 complete_bash "wsync-convert -l "
	assert_output $'flat\ntree'
	run -0 complete_bash "wsync-convert --to=s"
	assert_output "safetensors"
	run -0 complete_bash "wsync-serve --log-format "
	assert_output $'json\ntext'
	run -0 complete_bash "wsync-watch --log-format=j"
	assert_output "json"
	WSYNC_ENDPOINT="" run -0 complete_bash "wsync-pull -e "
	assert_output $'ipc://\ntcp://'
	run -0 complete_bash "wsync-pull --endpoint=tcp:"
	assert_output "//"
}

@test "bash completes model ids and worker ids from a live hub" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m critic v1.wsync
	start_watcher gpu0
	wait_until watcher_at gpu0 1
	run -0 complete_bash "wsync-pull -m "
	assert_output $'critic\npolicy'
	run -0 complete_bash "wsync-watch -m policy,c"
	assert_output "policy,critic"
	run -0 complete_bash "wsync-push -w "
	assert_output $'all\ngpu0'
	local ep=$WSYNC_ENDPOINT
	WSYNC_ENDPOINT=ipc://$TMP/elsewhere run -0 complete_bash "wsync-pull -e $ep -m p"
	assert_output "policy"
}

@test "bash completes the versions of the model on the command line from a live hub" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy v1.wsync
	wsync-push -m policy v1.wsync
	wsync-push -m critic v1.wsync
	run -0 complete_bash "wsync-pull -m policy -v "
	assert_output $'1\n2\n3'
	run -0 complete_bash "wsync-pull --model=critic --if-newer "
	assert_output "1"
	run -0 complete_bash "wsync-push -m policy -w all --wait-for 3"
	assert_output "3"
	run -0 complete_bash "wsync-pull --pull-version="
	assert_output $'1\n2\n3'
}

@test "zsh and fish complete versions of the model on the command line from a live hub" {
	command -v zsh >/dev/null || skip "zsh is not installed"
	command -v fish >/dev/null || skip "fish is not installed"
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	wsync-push -m policy v1.wsync
	wsync-push -m critic v1.wsync
	run -0 complete_fish "wsync-pull -m policy -v "
	assert_output $'1\n2'
	run -0 complete_fish "wsync-pull -m critic --if-newer "
	assert_output "1"
	local ep=$WSYNC_ENDPOINT
	WSYNC_ENDPOINT=ipc://$TMP/elsewhere run -0 complete_fish "wsync-pull -e $ep --model=policy -v "
	assert_output $'1\n2'
	run -0 complete_zsh "wsync-pull -m policy -v "
	assert_output $'1\n2'
}

@test "bash completes no model id, quietly, when no hub answers" {
	run -0 --separate-stderr complete_bash "wsync-pull -m "
	assert_output ""
	assert_equal "$stderr" ""
	run -0 --separate-stderr complete_bash "wsync-pull -e tcp://127.0.0.1:9 -m "
	assert_output ""
	assert_equal "$stderr" ""
}

@test "the zsh completion completes options, diff and weight files" {
	command -v zsh >/dev/null || skip "zsh is not installed"
	run zsh -n "$ROOT/completions/_wsync"
	assert_success
	run -0 complete_zsh "wsync-push --wa"
	assert_output $'--wait\n--wait-for'
	run -0 complete_zsh "wsync-inspect di"
	assert_output "diff"
	make_fixtures_dir
	run -0 complete_zsh "wsync-push -m policy fixtures-dir/"
	assert_line a.wsync
	assert_line b.safetensors
	refute_line notes.txt
}

@test "the fish completion completes options, diff and weight files" {
	command -v fish >/dev/null || skip "fish is not installed"
	run -0 complete_fish "wsync-push --wa"
	assert_output $'--wait\n--wait-for'
	run -0 complete_fish "wsync-inspect di"
	assert_output "diff"
	make_fixtures_dir
	run -0 complete_fish "wsync-push -m policy ./fixtures-dir/"
	assert_output $'./fixtures-dir/a.wsync\n./fixtures-dir/b.safetensors\n./fixtures-dir/sub/'
}

@test "the README's five-minute tour runs as pasted, twice, beside a hub on the default endpoint" {
	sed -n '/^## A five-minute tour$/,/^## /p' "$ROOT/README.md" |
	    sed -n '/^```sh$/,/^```$/p' | sed '1d;$d' >tour.sh
	[ -s tour.sh ]
	# The tour's build directory is this suite's, its default hub private to the test.
	sed -i "s|\$PWD/build/cc/bin|$WSYNC_BIN|; s|\$PWD/examples|$ROOT/examples|" tour.sh
	mkdir -m 700 run
	# A hub left on the default endpoint: the tour keeps to its own.
	env -u WSYNC_ENDPOINT XDG_RUNTIME_DIR="$TMP/run" wsync-serve --store "$TMP/left" 2>left.log &
	PIDS+=($!)
	wait_until grep -q "event=listen" left.log
	cd "$ROOT"
	# Whatever the tour started in the background ends with it, even when a step fails
	# (and set -e, which holds in the trap too, must not fail it when all ended already).
	run -0 --separate-stderr with_libwsync env -u WSYNC_ENDPOINT XDG_RUNTIME_DIR="$TMP/run" \
	    TMPDIR="$TMP" timeout 60 bash -c 'trap "kill \$(jobs -p) 2>/dev/null || true; wait" EXIT
	    set -e; . "$1"' tour "$TMP/tour.sh"
	assert_line --index 0 "1"
	run -0 --separate-stderr with_libwsync env -u WSYNC_ENDPOINT XDG_RUNTIME_DIR="$TMP/run" \
	    TMPDIR="$TMP" timeout 60 bash -c 'trap "kill \$(jobs -p) 2>/dev/null || true; wait" EXIT
	    set -e; . "$1"' tour "$TMP/tour.sh"
	assert_line --index 0 "1"
	assert_line --index 1 "policy 1 policy.wsync"
	assert_line "model     policy"
	assert_line "meta      step=100"
	assert_line "2"
	assert_line "stdin: OK"
	assert_line --regexp '^gpu0 +policy +2 +0 .* alive '
}

@test "HACKING.md's source map has a line for every source file, and names no file that is gone" {
	local f missing="" gone=""
	for f in "$ROOT"/lib/*.c "$ROOT"/cmd/*.c; do
		f=${f#"$ROOT"/}
		grep -q "^| \`$f\` |" "$ROOT/HACKING.md" || missing="$missing $f"
	done
	for f in $(sed -n 's/^| `\(\(lib\|cmd\)\/[^`]*\)` |.*/\1/p' "$ROOT/HACKING.md"); do
		[ -e "$ROOT/$f" ] || gone="$gone $f"
	done
	assert_equal "missing:$missing gone:$gone" "missing: gone:"
}

# header_functions: each function lib/wsync.h declares, one "SECTION FUNCTION"
# a line, SECTION the file its section's heading names ("-" before the first).
header_functions() {
	awk '
		BEGIN { section = "-" }
		/^\/\* ---- / { section = $3; sub(/:$/, "", section); next }
		/^(typedef|#|\/\*| \*|[ \t])/ { next }
		match($0, /wsync_[a-z0-9_]+\(/) {
			print section, substr($0, RSTART, RLENGTH - 1)
		}' "$ROOT/lib/wsync.h"
}

@test "every function in wsync.h sits in the section of the file that defines it" {
	local section fn defined wrong=""
	while read -r section fn; do
		defined=$(cd "$ROOT" && grep -lE "^([A-Za-z_][^;=(]*[ *])?$fn\(.*[^;]\$" lib/*.c)
		[ "$defined" = "$section" ] || wrong="$wrong $fn($section, defined in ${defined:-nothing})"
	done < <(header_functions)
	assert_equal "wrong:$wrong" "wrong:"
	assert [ "$(header_functions | wc -l)" -gt 100 ]
}

@test "every section of wsync.h names a file of lib/ that exists" {
	local heading file wrong=""
	while read -r heading; do
		file=${heading#"/* ---- "}
		file=${file%%:*}
		case $file in
		lib/*.c) [ -f "$ROOT/$file" ] || wrong="$wrong [$heading]" ;;
		*) wrong="$wrong [$heading]" ;;
		esac
	done < <(grep '^/\* ---- ' "$ROOT/lib/wsync.h")
	assert_equal "wrong:$wrong" "wrong:"
}

@test "wsync.h's sections come in the order of HACKING.md's source map" {
	local sections mapped
	sections=$(sed -n 's|^/\* ---- \(lib/[^:]*\):.*|\1|p' "$ROOT/lib/wsync.h")
	mapped=$(sed -n 's/^| `\(lib\/[^`]*\.c\)` |.*/\1/p' "$ROOT/HACKING.md" | grep -Fx "$sections")
	assert_equal "$sections" "$mapped"
}

@test "wsync.h holds none of wsync-push's option grammar" {
	run grep -nE 'WSYNC_PUSH_|wsync_push_req|wsync_batch_|wsync_parse_|wsync_split' "$ROOT/lib/wsync.h"
	assert_failure 1
	assert_output ""
}

@test "no library message names a command-line option" {
	# batch.c parses wsync-push's options (batch_int.h, the programs' own): its
	# messages are about the words typed. Log lines keep their form.
	local f found=""
	for f in "$ROOT"/lib/*.c; do
		[ "${f##*/}" = batch.c ] && continue
		found=$found$(grep -nE '"[^"]*--[a-z][^"]*"' "$f" |
		    grep -vE '^[0-9]+:[[:space:]]*(/?\*)|wsync_logf' | sed "s|^|${f##*/}:|")
	done
	assert_equal "$found" ""
}
