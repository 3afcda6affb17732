#!/usr/bin/env bats
# wsync-keygen: CURVE key pairs as ZeroMQ certificates.

load test_helper

# The value of the key line $2 (public-key or secret-key) in certificate $1.
cert_key() {
	sed -n "s/^    $2 = \"\\(.*\\)\"\$/\\1/p" "$1"
}

@test "--help prints the usage and the options on stdout" {
	run -0 --separate-stderr wsync-keygen --help
	assert_output - <<'TXT'
usage: wsync-keygen [-f] NAME

Make a CURVE key pair: NAME gets the public key (give it to the other side),
NAME_secret both keys (mode 0600; keep it). The files are ZeroMQ certificates
(the format czmq's zmakecert writes). Prints the public key.

  -f, --force              replace existing files
  -h, --help               show this help
  -V, --version            show the version

Exit status: 0 ok, 64 usage, 70 internal error, 74 I/O error or the files
exist. See wsync-keygen(1).
TXT
	assert_equal "$stderr" ""
}

@test "it writes NAME (0644) and NAME_secret (0600) and prints the public key" {
	run -0 --separate-stderr wsync-keygen hub
	assert_equal "$(stat -c %a hub) $(stat -c %a hub_secret)" "644 600"
	assert_output "$(cert_key hub public-key)"
	assert_equal "$(cert_key hub_secret public-key)" "$output"
	assert_equal "${#output}" 40
}

@test "the files are czmq certificates: a curve section with the key lines" {
	wsync-keygen hub >/dev/null
	run -0 grep -v '^#' hub_secret
	assert_output --regexp '^
metadata
curve
    public-key = "[^"]{40}"
    secret-key = "[^"]{40}"$'
	run -1 grep -c '^    secret-key' hub
	assert_output 0
}

@test "the secret key belongs to the public key (libzmq derives the same)" {
	wsync-keygen hub >/dev/null
	run -0 "$PY" -c 'import sys, zmq; print(zmq.curve_public(sys.argv[1].encode()).decode())' \
		"$(cert_key hub_secret secret-key)"
	assert_output "$(cert_key hub public-key)"
}

@test "existing files are not replaced without --force (74)" {
	wsync-keygen hub >/dev/null
	cp hub_secret before
	run -74 wsync-keygen hub
	assert_output "wsync-keygen: hub exists: keys are not replaced without --force"
	cmp hub_secret before
	run -0 wsync-keygen --force hub
	refute_output "$(cert_key before public-key)"
	assert_output "$(cert_key hub public-key)"
}

@test "no NAME is a usage error (64)" {
	run -64 wsync-keygen
	assert_output "wsync-keygen: no NAME given (the files are NAME and NAME_secret)
Try 'wsync-keygen --help'."
}
