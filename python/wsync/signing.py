"""Signing a publish: one manifest of all its models, signed with a secret key."""
import ctypes
import os
from typing import Any, Optional, Sequence

from . import _lib
from .errors import UsageError


def check_seq(seq: Optional[int], signed: bool) -> None:
    """Raises UsageError (64) for a seq that is not a number of 1 or more, or for
    one given to an unsigned publish (which has no sequence number)."""
    if seq is None:
        return
    if not signed:
        raise UsageError(64, "seq goes with sign_key: an unsigned publish has no "
                         "sequence number")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < 2 ** 64:
        raise UsageError(64, f"seq wants a sequence number of 1 or more, not {seq!r}")


class SignKey:
    """A secret signing key (minisign's, unencrypted, as `wsync-keygen --sign`
    makes it, or signify's made with -n), loaded by libwsync and wiped on
    close. Raises DataError (65) for an encrypted or unreadable key,
    PermissionDenied (77) for one others can read, NotFound (66) for none."""

    def __init__(self, path: str) -> None:
        self.lib, self.err = _lib.lib(), _lib.Err()
        self.path = os.fsencode(path)
        self.ptr = ctypes.c_void_p(self.lib.wsync_signkey_load(self.path, self.err))
        _lib.check(0 if self.ptr else -1, self.err)

    def sign(self, trees: Sequence["_lib.Tree"], seq: Optional[int] = None) -> int:
        """Signs trees as one push (wsync_sign_trees: a manifest of their digests,
        one SHA-256 pass over each one's data, into every tree's meta) and
        returns its sequence number: seq, which must be above the last one
        signed with the key (else DataError, 65), or the counter's next. The
        counter (KEY.seq, beside the key) is set before anything is signed,
        so a number is never signed twice. Write the trees afterwards."""
        if not self.ptr:
            raise UsageError(64, "the signing key was closed")
        got = ctypes.c_uint64()
        _lib.check(self.lib.wsync_signseq_next(self.path, seq or 0, ctypes.byref(got),
                                               self.err), self.err)
        ptrs = (ctypes.c_void_p * len(trees))(*(t.ptr.value for t in trees))
        _lib.check(self.lib.wsync_sign_trees(ptrs, len(trees), self.ptr, got.value, None,
                                             self.err), self.err)
        return got.value

    def close(self) -> None:
        if self.ptr:
            self.lib.wsync_signkey_destroy(ctypes.byref(self.ptr))

    def __enter__(self) -> "SignKey":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
