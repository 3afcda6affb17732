#!/bin/bash
# relay.sh FROM TO MODEL: copies the newest version of MODEL from the hub at
# FROM to the hub at TO in the flat layout (every state_dict name one key), as
# one pipeline in which each program checks what it reads. The pull writes the
# version to a file in $TMPDIR first (stdout gets nothing until it is verified);
# the convert and the push stream it.
# Prints the version TO gave it. Exit status: that of the first program that
# failed (a failed pull leaves the push empty-handed: it publishes nothing).
[ $# -eq 3 ] || { echo "usage: relay.sh FROM TO MODEL" >&2; exit 64; }
wsync-pull -e "$1" -m "$3" -o - |
	wsync-convert -t wsync -l flat -m "$3" - - |
	wsync-push -e "$2" -m "$3" -
status=("${PIPESTATUS[@]}")
for s in "${status[@]}"; do
	[ "$s" -eq 0 ] || exit "$s"
done
