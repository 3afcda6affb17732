# bench/lib.sh: the shell functions bench/run and bench/update share (sourced).

# Reads times (seconds, first field) on stdin; prints "median p90" in seconds,
# p90 by nearest rank.
stats() {
	awk '{ print $1 }' | sort -n | awk '
		{ t[NR] = $1 }
		END {
			if (NR == 0) exit 1
			m = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
			r = int(0.9 * NR); if (r < 0.9 * NR) r++
			printf "%.9f %.9f\n", m, t[r]
		}'
}

# Seconds as a short human time.
human() {
	awk -v s="$1" 'BEGIN {
		if (s < 1e-3) printf "%.0f us", s * 1e6
		else if (s < 1) printf "%.1f ms", s * 1e3
		else printf "%.2f s", s
	}'
}

# Seconds for bytes as GB/s (10^9 bytes).
gbs() {
	awk -v s="$1" -v b="$2" 'BEGIN { printf "%.1f GB/s", b / s / 1e9 }'
}

# ratio A B: A / B as "1.23x".
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
}

# A free loopback port: asks the kernel for one.
free_port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# maxrss COMMAND...: runs it; prints its peak resident set in bytes, or "failed"
# (with the reason on stderr) so that one failure does not lose the table.
maxrss() {
	/usr/bin/python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
if r.returncode != 0:
    print("bench: %s exited %d" % (" ".join(sys.argv[1:]), r.returncode), file=sys.stderr)
    print("failed")
else:
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)' "$@"
}
# hwm PID: the peak resident set of a running process, in bytes.
hwm() {
	awk '/^VmHWM:/ { printf "%.0f\n", $2 * 1024 }' "/proc/$1/status"
}
# mib BYTES: bytes as MiB.
mib() {
	awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}
