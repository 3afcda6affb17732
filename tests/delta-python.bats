#!/usr/bin/env bats
# delta-python.bats - the delta form of wsync-format(5) proven from outside the
# C code: the man page's Python applier, run as printed, rebuilds the head
# byte for byte from deltas libwsync made (bench/delta, which make check
# builds), with every encoding, and refuses a damaged one.

load test_helper

MAN=$ROOT/man/wsync-format.5
DELTA=$WSYNC_BIN/../bench/delta

# man_code NAME: the man page's Python block NAME, its roff escapes undone.
man_code() {
	sed -n "/^# --- begin $1 ---\$/,/^# --- end $1 ---\$/p" "$MAN" |
	    sed -e 's/\\&//g' -e 's/\\-/-/g' -e 's/\\e/\\/g'
}

# apply BASE DELTA OUT: the man page's applier, then H's content id checked
# with the man page's reader, as the page says to before renaming OUT.
apply() {
	{
		man_code reader; man_code contentid; man_code applier
		cat <<-'PY'
		import sys
		apply_delta(*sys.argv[1:4])
		with open(sys.argv[2], "rb") as f:
		    want = "%016x" % msgpack.unpackb(f.read())["content"]
		if content_id(read_wsync(sys.argv[3])[0]["index"]) != want:
		    sys.exit("content id differs")
		PY
	} >applier.py
	"$PY" applier.py "$@"
}

@test "the man page's applier rebuilds stepped bf16 and f32 heads byte for byte" {
	for step in "bf16 0.01" "bf16 0.03" "f32 0.01" "f32 0" "bf16 1"; do
		# shellcheck disable=SC2086
		"$PY" "$FIXTURES/mkstep.py" $step 200000 base.wsync head.wsync >/dev/null
		run -0 "$DELTA" base.wsync head.wsync d.wdelta
		assert_line "rebuilt byte-identical"
		apply base.wsync d.wdelta out.wsync
		cmp out.wsync head.wsync
	done
}

@test "the man page's applier rebuilds a head that uses every encoding" {
	{ man_code reader; man_code writer; cat <<-'PY'
		rng = np.random.default_rng(7)
		u8 = rng.integers(0, 256, 5000, dtype=np.uint8)
		f32 = rng.standard_normal(300).astype(np.float32)
		write_wsync("base.wsync", {"a.u8": u8, "b.f32": f32, "c.gone": f32, "f.step": f32},
		    "edits")
		step = f32.copy()
		step[::50] += 1
		write_wsync("head.wsync", {"a.u8": u8 ^ (rng.random(5000) < 0.6).astype(np.uint8),
		    "b.f32": f32, "d.new": np.zeros(4096, np.int32),
		    "e.empty": np.zeros((0, 3), np.float32), "f.step": step}, "edits")
		PY
	} >edits.py
	"$PY" edits.py
	run -0 "$DELTA" base.wsync head.wsync d.wdelta
	assert_line --regexp '^same +1 '
	assert_line --regexp '^xor +1 '
	assert_line --regexp '^sparse +1 '
	assert_line --regexp '^whole +1 '
	assert_line --regexp '^raw +1 '
	apply base.wsync d.wdelta out.wsync
	cmp out.wsync head.wsync
}

@test "the man page's applier refuses a delta with a flipped byte and writes nothing" {
	"$PY" "$FIXTURES/mkstep.py" bf16 0.01 200000 base.wsync head.wsync >/dev/null
	"$DELTA" base.wsync head.wsync d.wdelta >/dev/null
	# The last bytes are the last tensor's encoded data.
	size=$(stat -c %s d.wdelta)
	printf '\x5a' | dd of=d.wdelta bs=1 seek=$((size - 40)) conv=notrunc status=none
	run ! apply base.wsync d.wdelta out.wsync
	[ ! -e out.wsync ]
}
