# fish completion for the wsync programs. Copy it to
# ~/.config/fish/completions/ once per program name (wsync-push.fish, ...),
# or source it from config.fish.
# Model ids, versions and worker ids come from a live hub that answers within 0.3 s
# (wsync-inspect --json, read with jq); without jq or a hub they are skipped.

# Prints the value of the last option short (-m) or long (--model) on the
# command line, in any of the forms -m V, -mV, --model V, --model=V.
function __wsync_opt_value -a short long
    set -l args (commandline -opc)
    set -l v
    for i in (seq 2 (count $args))
        switch $args[$i]
            case $short $long
                set -l next (math $i + 1)
                test $next -le (count $args); and set v $args[$next]
            case "$long=*"
                set v (string replace -- "$long=" '' $args[$i])
            case "$short?*"
                set v (string sub -s 3 -- $args[$i])
        end
    end
    printf '%s\n' $v
end

# Prints the values of field (models, workers, or versions of the model given
# by -m on the command line, else of every model) of the hub named by -e or
# --endpoint on the command line, else of the default hub; quiet and bounded.
function __wsync_hub -a field
    command -q jq; or return 0
    command -q wsync-inspect; or return 0
    set -l ep (__wsync_opt_value -e --endpoint)
    set -l model (__wsync_opt_value -m --model)
    set -l bound
    command -q timeout; and set bound timeout 2
    set -l json
    if test -n "$ep"
        set json ($bound wsync-inspect --json -t 0.3 -e $ep 2>/dev/null </dev/null)
    else
        set json ($bound wsync-inspect --hub --json -t 0.3 2>/dev/null </dev/null)
    end
    test -n "$json"; or return 0
    switch $field
        case models
            string join \n -- $json | jq -r '.models[]?.model // empty' 2>/dev/null
        case workers
            string join \n -- $json | jq -r '.workers[]?.worker // empty' 2>/dev/null
        case versions
            string join \n -- $json | jq -r --arg m (string replace -r -- '=.*' '' "$model") \
                '.models[]? | select($m == "" or .model == $m) | .versions[]?.version' \
                2>/dev/null | sort -un
    end
end

# The hub's values of field after the last comma of the token being completed.
function __wsync_list -a field
    set -l tok (commandline -ct)
    set -l head (string match -r -- '^.*,' $tok)
    for v in (__wsync_hub $field)
        printf '%s%s\n' "$head" $v
    end
end

# Weight files (.wsync and safetensors) and directories when any weight file
# matches, else every file; after MODEL= for wsync-push -m.
function __wsync_files
    set -l tok (commandline -ct)
    set -l head (string match -r -- '^[^/]*=' $tok)
    set -l base (string replace -- "$head" '' $tok)
    set -l all (complete -C"__wsync_nonexistent_command $base" | string replace -r '\t.*' '')
    set -l weights (string match -r -- '.*\.(wsync|safetensors)$' $all)
    if test (count $weights) -gt 0
        set all $weights (string match -r -- '.*/$' $all)
    end
    for f in $all
        printf '%s%s\n' "$head" $f
    end
end

function __wsync_endpoints
    set -q WSYNC_ENDPOINT; and echo $WSYNC_ENDPOINT
    echo tcp://
    echo ipc://
end

# True when wsync-inspect's diff subcommand is on the command line.
function __wsync_inspect_diff
    contains -- diff (commandline -opc)
end

# True while wsync-inspect has no operand yet.
function __wsync_inspect_first
    set -l args (commandline -opc)
    set -e args[1]
    set -l skip 0
    for a in $args
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $a
            case -e --endpoint -t --timeout
                set skip 1
            case '-*'
            case '*'
                return 1
        end
    end
    return 0
end

for prog in wsync-serve wsync-push wsync-pull wsync-watch wsync-inspect wsync-convert wsync-keygen
    complete -c $prog -f
    complete -c $prog -s h -l help -d 'Show the help'
    complete -c $prog -s V -l version -d 'Show the version'
end

# wsync-serve
complete -c wsync-serve -s e -l endpoint -x -a '(__wsync_endpoints)' -d 'Listen on this endpoint (repeatable)'
complete -c wsync-serve -l store -x -a '(__fish_complete_directories)' -d 'Keep versions in this directory'
complete -c wsync-serve -l keep -x -d 'Versions kept per model (default 3)'
complete -c wsync-serve -l recycle -x -d 'Retired version files kept to be written again (default 0)'
complete -c wsync-serve -l log-format -x -a 'text json' -d 'Log lines as key=value text or JSON'
complete -c wsync-serve -l secret-key -r -F -d "The hub's secret key: CURVE on every socket"
complete -c wsync-serve -l allow-push -r -F -d 'Public keys (file or directory) that may push'
complete -c wsync-serve -l allow-pull -r -F -d 'Public keys (file or directory) that may only pull'
complete -c wsync-serve -l insecure -d 'Listen on non-loopback tcp without keys'
complete -c wsync-serve -l upstream -x -a '(__wsync_endpoints)' -d 'Be a relay: mirror the hub at this endpoint (repeatable)'
complete -c wsync-serve -l model -x -d 'Mirror only these models (default: all)'
complete -c wsync-serve -l key -r -F -d "The relay's secret key for its upstream"
complete -c wsync-serve -l hub-key -r -F -d "The upstream's public key"
complete -c wsync-serve -l advertise -x -a '(__wsync_endpoints)' -d 'Where other relays reach this one (placement)'

# CURVE keys, the same for every client
for prog in wsync-push wsync-pull wsync-watch wsync-inspect
    complete -c $prog -l key -r -F -d "This client's secret key"
    complete -c $prog -l hub-key -r -F -d "The hub's public key"
end

# wsync-push
complete -c wsync-push -s e -l endpoint -x -a '(__wsync_endpoints)' -d 'The hub'
complete -c wsync-push -s m -l model -x -a '(string match -q -- "*=*" (commandline -ct); and __wsync_files; or __wsync_hub models)' -d 'Model to publish (MODEL=FILE: several in one commit)'
complete -c wsync-push -s t -l timeout -x -d 'Bound on the whole push and wait (seconds)'
complete -c wsync-push -s w -l wait -x -a 'all (__wsync_list workers)' -d 'Wait until all, N or these workers applied it'
complete -c wsync-push -s W -l workers -x -a '(__wsync_list workers)' -d 'Announce the version to these workers only'
complete -c wsync-push -l wait-for -x -a '(__wsync_hub versions)' -d 'Push nothing; wait for this version'
complete -c wsync-push -l transfer -x -a 'auto copy link socket' -d 'How the files reach the hub'
complete -c wsync-push -l progress -d 'Show the progress even off a terminal'
complete -c wsync-push -s q -l quiet -d 'Only errors on stderr'
complete -c wsync-push -l batch -d 'Stay connected: one push a line on stdin, one answer a line'
complete -c wsync-push -l sign-key -r -F -d 'Sign the push with this secret key'
complete -c wsync-push -l seq -x -d "The signed push's sequence number, above the last"
complete -c wsync-push -l base -r -F -d 'Send the delta from the file or directory pushed before'
complete -c wsync-push -l no-delta -d 'With --batch: send each version whole'
complete -c wsync-push -l exclude -x -d 'A checkpoint directory: leave out the files matching this glob'
complete -c wsync-push -l max-file -x -d 'A checkpoint directory: the bound on a file beside the weights'
complete -c wsync-push -l part -x -d 'Push part R of a version in N parts (R/N)'
complete -c wsync-push -l group -x -d 'The version the parts build together, above the last'
complete -c wsync-push -n 'not string match -q -- "-*" (commandline -ct)' -a '(__wsync_files)'

# wsync-pull
complete -c wsync-pull -s e -l endpoint -x -a '(__wsync_endpoints)' -d 'The hub'
complete -c wsync-pull -s m -l model -x -a '(__wsync_hub models)' -d 'The model to fetch (repeatable)'
complete -c wsync-pull -s o -l output -r -F -d 'Where to write it (- is stdout; a directory with several models)'
complete -c wsync-pull -s v -l pull-version -x -a '(__wsync_hub versions)' -d 'Fetch this version instead of the newest'
complete -c wsync-pull -l if-newer -x -a '(__wsync_hub versions)' -d 'Exit 1 unless the newest is above this version'
complete -c wsync-pull -l transfer -x -a 'auto link copy socket' -d 'How the version comes'
complete -c wsync-pull -l base -r -F -d 'Fetch a delta from the older version this file holds'
complete -c wsync-pull -l no-delta -d 'Fetch the version whole, never as a delta'
complete -c wsync-pull -l progress -d 'Show the progress even off a terminal'
complete -c wsync-pull -s q -l quiet -d 'Only errors on stderr'
complete -c wsync-pull -s t -l timeout -x -d 'Bound on the whole pull (seconds)'
complete -c wsync-pull -l verify-key -r -F -d 'Take only versions signed by this public key'
complete -c wsync-pull -l max-age -x -d 'Warn when the signed version is older than SEC'
complete -c wsync-pull -l format -x -a 'wsync safetensors' -d 'The form of the output'
complete -c wsync-pull -l shard-size -x -d 'Safetensors: tensor bytes per shard'
complete -c wsync-pull -l cast -x -d 'Write matching tensors as DTYPE: PATTERN=DTYPE[:SCALING]'

# wsync-watch
complete -c wsync-watch -s e -l endpoint -x -a '(__wsync_endpoints)' -d 'The hub'
complete -c wsync-watch -s m -l model -x -a '(__wsync_list models)' -d 'The models to follow, separated by commas'
complete -c wsync-watch -s o -l output -r -F -d 'The file (one model) or directory'
complete -c wsync-watch -l id -x -d "This worker's id (default HOST:PID)"
complete -c wsync-watch -s x -l exec -x -a '(__fish_complete_command)' -d 'Run this command after each update'
complete -c wsync-watch -l exec-timeout -x -d 'Stop a hook that runs longer than SEC seconds'
complete -c wsync-watch -l ack -x -a stdin -d 'Acknowledge each update when stdin answers ok'
complete -c wsync-watch -l ack-timeout -x -d 'Report an update failed when stdin has not answered within SEC'
complete -c wsync-watch -l once -d 'Exit after the first update of every model'
complete -c wsync-watch -l max-lag -x -d 'Exit 75 when a model is more than N versions behind'
complete -c wsync-watch -l keep -x -d 'Hold leases on the N versions before the current one'
complete -c wsync-watch -l recycle -d 'Write socket versions into replaced outputs no reader leases'
complete -c wsync-watch -l transfer -x -a 'auto link copy socket' -d 'How each version comes'
complete -c wsync-watch -l no-delta -d 'Fetch every version whole, never as a delta'
complete -c wsync-watch -s t -l timeout -x -d 'Exit 69 if no hub answers within SEC'
complete -c wsync-watch -s q -l quiet -d 'Only errors and failed hooks on stderr'
complete -c wsync-watch -l log-format -x -a 'text json' -d 'Messages as text or JSON'
complete -c wsync-watch -l verify-key -r -F -d 'Apply only versions signed by this public key'
complete -c wsync-watch -l max-age -x -d 'Log when the signed version in place is older than SEC'
complete -c wsync-watch -l format -x -a 'wsync safetensors' -d 'The form of each version'
complete -c wsync-watch -l shard-size -x -d 'Safetensors: tensor bytes per shard'
complete -c wsync-watch -l select -x -d 'Safetensors: only tensors matching this glob'
complete -c wsync-watch -l select-from -r -F -d 'Safetensors: the patterns of this file'
complete -c wsync-watch -l cast -x -d 'Write matching tensors as DTYPE: PATTERN=DTYPE[:SCALING]'

# wsync-inspect
complete -c wsync-inspect -s j -l json -d 'Print one JSON document'
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -l verify -d "Recompute every tensor's hash"
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -l verify-key -r -F -d 'Check the signature with this public key'
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -s e -l endpoint -x -a '(__wsync_endpoints)' -d 'Show this hub'
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -l prometheus -d "Print a hub's metrics in Prometheus' text format"
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -l hub -d 'Show the hub at $WSYNC_ENDPOINT or the local one'
complete -c wsync-inspect -n 'not __wsync_inspect_diff' -s t -l timeout -x -d 'Bound on reaching the hub (seconds)'
complete -c wsync-inspect -n '__wsync_inspect_first' -a diff -d 'Compare the tensors of two files'
complete -c wsync-inspect -n 'not string match -q -- "-*" (commandline -ct)' -a '(__wsync_files)'

# wsync-keygen
complete -c wsync-keygen -s f -l force -d 'Replace existing key files'
complete -c wsync-keygen -s s -l sign -d 'Make a signing key pair (minisign format)'
complete -c wsync-keygen -n 'not string match -q -- "-*" (commandline -ct)' -a '(__fish_complete_path)'

# wsync-convert
complete -c wsync-convert -s l -l layout -x -a 'tree\t"Nest keys at each dot and slash" flat\t"Keep each name as one key"' -d 'Layout of a .wsync output'
complete -c wsync-convert -s m -l model -x -d 'Model id of a .wsync output'
complete -c wsync-convert -s t -l to -x -a 'wsync safetensors dir' -d 'Output kind'
complete -c wsync-convert -l shard-size -x -d 'Directory output: tensor bytes per shard'
complete -c wsync-convert -l cast -x -d 'Write matching tensors as DTYPE: PATTERN=DTYPE[:SCALING]'
complete -c wsync-convert -n 'not string match -q -- "-*" (commandline -ct)' -a '(__wsync_files)'
