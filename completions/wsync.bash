# bash completion for the wsync programs: wsync-serve, wsync-push, wsync-pull,
# wsync-watch, wsync-inspect, wsync-convert and wsync-keygen.
#
# Source it from ~/.bashrc, or install it as
# /usr/share/bash-completion/completions/wsync-push (and a link per program).
# Model ids, versions and worker ids come from a live hub that answers within 0.3 s
# (wsync-inspect --json, read with jq); without jq or a hub they are skipped.
# It does not need the bash-completion package.

# Sets words, cword and cur from COMP_WORDS, joining back the pieces bash split
# at COMP_WORDBREAKS characters (= and :) when no space separated them, and
# bcur to the end of cur that readline replaces.
_wsync_words() {
	local line w i pos=0 glued
	words=()
	cword=0
	if [[ -z ${COMP_LINE-} ]]; then
		words=("${COMP_WORDS[@]}")
		cword=$COMP_CWORD
		cur=${words[cword]-}
		bcur=$cur
		return 0
	fi
	line=${COMP_LINE:0:COMP_POINT}
	for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
		w=${COMP_WORDS[i]}
		glued=1
		while ((pos < ${#line})) && [[ ${line:pos:1} == [[:space:]] ]]; do
			((pos++))
			glued=0
		done
		if ((i > 0 && glued && pos < ${#line})); then
			words[${#words[@]} - 1]+=$w
		else
			words+=("$w")
		fi
		((i <= COMP_CWORD)) && cword=$((${#words[@]} - 1))
		((pos += ${#w}))
	done
	if [[ $line == *[[:space:]] && -n ${words[cword]-} ]] || ((cword >= ${#words[@]})); then
		words+=("")
		cword=$((${#words[@]} - 1))
	fi
	cur=${words[cword]-}
	bcur=${line##*[[:space:]"${COMP_WORDBREAKS//[[:space:]]/}"]}
	[[ $cur == *"$bcur" ]] || bcur=$cur
}

# Adds each argument that, after vhead, starts with cur to COMPREPLY, cut to
# the part readline replaces.
_wsync_add() {
	local c full cut=${cur%"$bcur"}
	for c in "$@"; do
		full=$vhead$c
		[[ $full == "$cur"* ]] && COMPREPLY+=("${full#"$cut"}")
	done
	return 0
}

# The value being completed: cur without vhead.
_wsync_val() {
	printf '%s' "${cur#"$vhead"}"
}

# Prints the value of the last option short (-m) or long (--model) before
# the cursor, in any of the forms -m V, -mV, --model V, --model=V.
_wsync_opt_value() {
	local short=$1 long=$2 i v=""
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		"$short" | "$long") v=${words[i + 1]-} ;;
		"$long"=*) v=${words[i]#"$long"=} ;;
		"$short"?*) v=${words[i]#"$short"} ;;
		esac
	done
	printf '%s' "$v"
}

# Prints the values of field (models, workers, or versions of the model on the
# command line, else of every model) of the hub named by -e or --endpoint on
# the command line, else of the default hub; quiet and bounded.
_wsync_hub() {
	local field=$1 ep model json
	local -a bound=()
	command -v jq >/dev/null 2>&1 || return 0
	command -v wsync-inspect >/dev/null 2>&1 || return 0
	command -v timeout >/dev/null 2>&1 && bound=(timeout 2)
	ep=$(_wsync_opt_value -e --endpoint)
	model=$(_wsync_opt_value -m --model)
	if [[ -n $ep ]]; then
		json=$("${bound[@]}" wsync-inspect --json -t 0.3 -e "$ep" 2>/dev/null </dev/null)
	else
		json=$("${bound[@]}" wsync-inspect --hub --json -t 0.3 2>/dev/null </dev/null)
	fi
	[[ -n $json ]] || return 0
	case $field in
	models) jq -r '.models[]?.model // empty' 2>/dev/null <<<"$json" ;;
	workers) jq -r '.workers[]?.worker // empty' 2>/dev/null <<<"$json" ;;
	versions)
		jq -r --arg m "${model%%=*}" '.models[]? | select($m == "" or .model == $m)
		    | .versions[]?.version' 2>/dev/null <<<"$json" | sort -un
		;;
	esac
	return 0
}

# Completes the hub's values of field after the last comma of a list.
_wsync_list() {
	local field=$1 val v
	val=$(_wsync_val)
	[[ $val == *,* ]] && local vhead=$vhead${val%,*},
	local -a vals=()
	while IFS= read -r v; do
		vals+=("$v")
	done < <(_wsync_hub "$field")
	_wsync_add "${vals[@]}"
}

# Completes file names: the .wsync and .safetensors files and the directories
# when any weight file matches, else every file.
_wsync_files() {
	local f
	local -a all=() weights=() dirs=()
	while IFS= read -r f; do
		all+=("$f")
		if [[ -d $f ]]; then
			dirs+=("$f")
		elif [[ $f == *.wsync || $f == *.safetensors ]]; then
			weights+=("$f")
		fi
	done < <(compgen -f -- "$(_wsync_val)")
	((${#weights[@]})) && all=("${weights[@]}" "${dirs[@]}")
	_wsync_add "${all[@]}"
	compopt -o filenames 2>/dev/null
	return 0
}

# Completes paths of compgen's kind: d directories, f every file (key files
# have no telling suffix).
_wsync_paths() {
	local -a paths=()
	local d
	while IFS= read -r d; do
		paths+=("$d")
	done < <(compgen -"$1" -- "$(_wsync_val)")
	_wsync_add "${paths[@]}"
	compopt -o filenames 2>/dev/null
	return 0
}

_wsync_endpoints() {
	local val f
	val=$(_wsync_val)
	if [[ $val == ipc://* ]]; then
		local vhead=${vhead}ipc://
		local -a files=()
		while IFS= read -r f; do
			files+=("$f")
		done < <(compgen -f -- "${val#ipc://}")
		_wsync_add "${files[@]}"
	else
		_wsync_add ${WSYNC_ENDPOINT:+"$WSYNC_ENDPOINT"} tcp:// ipc://
	fi
	compopt -o nospace 2>/dev/null
	return 0
}

_wsync_commands() {
	local -a cmds=()
	local c
	while IFS= read -r c; do
		cmds+=("$c")
	done < <(compgen -c -- "$(_wsync_val)")
	_wsync_add "${cmds[@]}"
}

# Completes the argument of option opt of program prog; 1 when opt takes none.
_wsync_optarg() {
	local prog=$1 opt=$2 val
	case $prog:$opt in
	wsync-convert:-l | wsync-convert:--layout) _wsync_add tree flat ;;
	wsync-convert:-t | wsync-convert:--to) _wsync_add wsync safetensors dir ;;
	wsync-convert:-m | wsync-convert:--model | wsync-convert:--shard-size) ;;
	*:--transfer) _wsync_add auto link copy socket ;;
	wsync-convert:*) return 1 ;;
	*:-e | *:--endpoint | wsync-serve:--upstream | wsync-serve:--advertise) _wsync_endpoints ;;
	wsync-serve:--store) _wsync_paths d ;;
	wsync-pull:--base | wsync-push:--base) _wsync_paths f ;;
	wsync-serve:--secret-key | wsync-serve:--allow-push | wsync-serve:--allow-pull | \
		*:--key | *:--hub-key | wsync-push:--sign-key | *:--verify-key) _wsync_paths f ;;
	wsync-push:-m | wsync-push:--model)
		val=$(_wsync_val)
		if [[ $val == *=* ]]; then
			local vhead=$vhead${val%%=*}=
			_wsync_files
		else
			_wsync_list models
		fi
		;;
	wsync-push:-w | wsync-push:--wait)
		_wsync_add all
		_wsync_list workers
		;;
	wsync-push:-W | wsync-push:--workers) _wsync_list workers ;;
	wsync-pull:-m | wsync-pull:--model | wsync-watch:-m | wsync-watch:--model)
		_wsync_list models
		;;
	wsync-pull:-o | wsync-pull:--output | wsync-watch:-o | wsync-watch:--output)
		_wsync_files
		;;
	wsync-watch:-x | wsync-watch:--exec) _wsync_commands ;;
	wsync-watch:--ack) _wsync_add stdin ;;
	wsync-pull:--format | wsync-watch:--format) _wsync_add wsync safetensors ;;
	wsync-watch:--select-from) _wsync_files ;;
	*:--shard-size | wsync-watch:--select | *:--cast) ;;
	wsync-serve:--log-format | wsync-watch:--log-format) _wsync_add text json ;;
	wsync-push:--wait-for | wsync-pull:-v | wsync-pull:--pull-version | \
		wsync-pull:--if-newer) _wsync_list versions ;;
	wsync-serve:--keep | wsync-serve:--recycle | wsync-watch:--id | wsync-watch:--max-lag | wsync-watch:--keep | wsync-watch:--exec-timeout | wsync-watch:--ack-timeout | *:-t | *:--timeout | \
		wsync-push:--seq | wsync-push:--part | wsync-push:--group | *:--max-age) ;;
	*) return 1 ;;
	esac
	return 0
}

# 0 when the words before the cursor hold wsync-inspect's diff subcommand.
_wsync_inspect_in_diff() {
	local i
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		-e | --endpoint | -t | --timeout) ((i++)) ;;
		-*) ;;
		diff) return 0 ;;
		*) return 1 ;;
		esac
	done
	return 1
}

_wsync() {
	local words cword cur bcur vhead="" prog opts i operands=0
	COMPREPLY=()
	_wsync_words
	prog=${words[0]##*/}
	case $prog in
	wsync-serve) opts="-e --endpoint --store --keep --recycle --log-format --secret-key --allow-push
		--allow-pull --insecure --upstream --model --key --hub-key --advertise -h --help -V
		--version" ;;
	wsync-push) opts="-e --endpoint -m --model -t --timeout -w --wait -W --workers
		--wait-for --transfer -q --quiet --progress --batch --sign-key --seq --base --no-delta
		--exclude --max-file --part --group --key --hub-key
		-h --help -V --version" ;;
	wsync-pull) opts="-e --endpoint -m --model -o --output -v --pull-version
		--if-newer --transfer --base --no-delta -t --timeout -q --quiet --progress --verify-key
		--max-age --format --shard-size --cast --key --hub-key -h --help -V --version" ;;
	wsync-watch) opts="-e --endpoint -m --model -o --output --id -x --exec --exec-timeout
		--ack --ack-timeout --once --max-lag --keep --recycle --transfer --no-delta -t --timeout -q --quiet --log-format
		--verify-key --max-age --format --shard-size --select --select-from --cast --key --hub-key
		-h --help -V --version" ;;
	wsync-inspect) opts="-e --endpoint --hub -j --json --prometheus -t --timeout --verify --verify-key
		--key --hub-key -h --help -V --version" ;;
	wsync-convert) opts="-l --layout -m --model -t --to --shard-size --cast -h --help -V --version" ;;
	wsync-keygen) opts="-f --force -s --sign -h --help -V --version" ;;
	*) return 0 ;;
	esac

	if [[ $cur == --*=* ]]; then
		vhead=${cur%%=*}=
		_wsync_optarg "$prog" "${cur%%=*}"
		return 0
	fi
	if ((cword > 1)) && _wsync_optarg "$prog" "${words[cword - 1]}"; then
		return 0
	fi
	if [[ $cur == -* ]]; then
		if [[ $prog == wsync-inspect ]] && _wsync_inspect_in_diff; then
			_wsync_add -j --json
		else
			# shellcheck disable=SC2086
			_wsync_add $opts
		fi
		return 0
	fi
	for ((i = 1; i < cword; i++)); do
		case $prog:${words[i]} in
		wsync-convert:-l | wsync-convert:--layout | wsync-convert:-m | \
			wsync-convert:--model | wsync-convert:-t | wsync-convert:--to | \
			wsync-convert:--shard-size | wsync-convert:--cast) ((i++)) ;;
		wsync-convert:*) [[ ${words[i]} == -?* ]] || ((operands++)) ;;
		*:-e | *:--endpoint | *:-m | *:--model | *:-o | *:--output | *:-t | \
			*:--timeout | *:-w | *:--wait | *:-W | *:--workers | *:--wait-for | \
			*:-v | *:--pull-version | *:--if-newer | *:--id | *:-x | *:--exec | \
			*:--exec-timeout | *:--ack | *:--ack-timeout | *:--max-lag | *:--store | *:--keep | *:--recycle | *:--transfer | *:--base | \
			*:--log-format | *:--key | *:--hub-key | *:--secret-key | *:--allow-push | \
			*:--allow-pull | *:--sign-key | *:--seq | *:--part | *:--group | *:--verify-key | *:--max-age | \
			*:--format | *:--shard-size | *:--select | *:--select-from | *:--cast | \
			*:--upstream | *:--advertise) ((i++)) ;;
		*) [[ ${words[i]} == -?* ]] || ((operands++)) ;;
		esac
	done
	case $prog in
	wsync-push) ((operands == 0)) && _wsync_files ;;
	wsync-convert) ((operands < 2)) && _wsync_files ;;
	wsync-keygen) ((operands == 0)) && _wsync_paths f ;;
	wsync-inspect)
		((operands == 0)) && _wsync_add diff
		_wsync_files
		;;
	esac
	return 0
}

complete -F _wsync wsync-serve wsync-push wsync-pull wsync-watch wsync-inspect wsync-convert \
	wsync-keygen
