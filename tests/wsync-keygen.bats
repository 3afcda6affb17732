#!/usr/bin/env bats
# wsync-keygen: CURVE key pairs as ZeroMQ certificates; signing key pairs in
# minisign's format, and keys and signatures that minisign and signify share.

load test_helper

# Skips the test when the Debian package $1 (command $2) is not installed.
need() {
	command -v "$2" >/dev/null || skip "$1 is not installed (scripts/deps check-or-install sign)"
}

# The value of the key line $2 (public-key or secret-key) in certificate $1.
cert_key() {
	sed -n "s/^    $2 = \"\\(.*\\)\"\$/\\1/p" "$1"
}

@test "--help prints the usage and the options on stdout" {
	run -0 --separate-stderr wsync-keygen --help
	assert_output - <<'TXT'
usage: wsync-keygen [-fs] NAME

Make a CURVE key pair: NAME gets the public key (give it to the other side),
NAME_secret both keys (mode 0600; keep it). The files are ZeroMQ certificates
(the format czmq's zmakecert writes). Prints the public key.
With --sign, make a signing key pair for signed pushes instead: NAME.pub and
NAME.key (unencrypted, mode 0600), in minisign's format.

  -f, --force              replace existing files
  -s, --sign               make a signing key pair (ed25519, minisign's format)
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

@test "--sign writes NAME.pub (0644) and NAME.key (0600) and prints the public key" {
	run -0 --separate-stderr wsync-keygen --sign trainer
	assert_equal "$(stat -c %a trainer.pub) $(stat -c %a trainer.key)" "644 600"
	assert_output "$(sed -n 2p trainer.pub)"
	assert_equal "${#output}" 56
	run -0 sed -n 1p trainer.pub
	assert_output --regexp '^untrusted comment: minisign public key [0-9A-F]{1,16}$'
}

@test "--sign does not replace existing keys without --force (74)" {
	wsync-keygen --sign trainer >/dev/null
	run -74 wsync-keygen --sign trainer
	assert_output "wsync-keygen: trainer.pub exists: keys are not replaced without --force"
	run -0 wsync-keygen --sign --force trainer
}

@test "--sign without NAME is a usage error (64)" {
	run -64 wsync-keygen --sign
	assert_output "wsync-keygen: no NAME given (the files are NAME.pub and NAME.key)
Try 'wsync-keygen --help'."
}

@test "minisign signs with a key wsync-keygen --sign made, and verifies with its public key" {
	need minisign minisign
	wsync-keygen --sign trainer >/dev/null
	echo weights >file
	run -0 minisign -S -s trainer.key -m file
	run -0 minisign -V -p trainer.pub -m file
	assert_line "Signature and comment signature verified"
}

@test "minisign verifies the manifest of a push wsync signed" {
	need minisign minisign
	wsync-keygen --sign trainer >/dev/null
	sign_helper sign trainer.key signed.wsync
	sign_helper extract signed.wsync .
	run -0 minisign -Vm manifest -p trainer.pub
	assert_line "Signature and comment signature verified"
	assert_line --regexp $'^Trusted comment: timestamp:[0-9]+\tfile:wsync-manifest\tseq:9$'
}

@test "wsync signs with a key minisign -G -W made, and verifies with its public key" {
	need minisign minisign
	minisign -G -W -p mini.pub -s mini.key >/dev/null
	sign_helper sign mini.key signed.wsync
	run -0 sign_helper verify signed.wsync mini.pub
	assert_output "ok"
	sign_helper extract signed.wsync .
	run -0 minisign -Vm manifest -p mini.pub
}

@test "a file signed by one key is refused under another, taken when both are given" {
	need minisign minisign
	minisign -G -W -p mini.pub -s mini.key >/dev/null
	wsync-keygen --sign other >/dev/null
	sign_helper sign mini.key signed.wsync
	run -0 --separate-stderr sign_helper verify signed.wsync other.pub
	assert_output "unknown-key"
	assert_equal "$stderr" "signed.wsync: signed by key $(sed -n 's/.* //p;q' mini.pub), which is not the verify key"
	run -0 sign_helper verify signed.wsync other.pub mini.pub
	assert_output "ok"
}

@test "wsync signs with a key signify -G -n made, and verifies with its public key" {
	need signify-openbsd signify-openbsd
	signify-openbsd -G -n -p s.pub -s s.sec
	sign_helper sign s.sec signed.wsync
	run -0 sign_helper verify signed.wsync s.pub
	assert_output "ok"
}
