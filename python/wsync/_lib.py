"""libwsync through ctypes: trees written to files and slots, files parsed in memory."""
import contextlib
import ctypes
import ctypes.util
import os
import shutil
from typing import Any, Iterator, Mapping, Optional, Tuple

from . import tensors
from .errors import NotInstalled, error

MAX_DIMS = 8                    # WSYNC_MAX_DIMS


class Err(ctypes.Structure):
    """wsync_err_t."""
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Tensor(ctypes.Structure):
    """wsync_tensor_t."""
    _fields_ = [("path", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_uint64 * MAX_DIMS), ("nbytes", ctypes.c_uint64),
                ("hash", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("data", ctypes.c_void_p)]


class Meta(ctypes.Structure):
    """wsync_meta_t."""
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


_lib: Optional[ctypes.CDLL] = None


def path() -> Optional[str]:
    """Where libwsync is: $WSYNC_LIB, else the one beside the wsync-push on PATH (a
    build directory's bin/.., or an installed PREFIX/lib), else the system's."""
    found, push = os.environ.get("WSYNC_LIB"), shutil.which("wsync-push")
    if not found and push:
        bindir = os.path.dirname(os.path.realpath(push))
        found = next((p for p in (os.path.join(bindir, "..", "libwsync.so.0"),
                                  os.path.join(bindir, "..", "lib", "libwsync.so.0"))
                      if os.path.exists(p)), None)
    return found or ctypes.util.find_library("wsync")


def lib() -> ctypes.CDLL:
    """libwsync, loaded once; NotInstalled (127) when it cannot be found."""
    global _lib
    if _lib is not None:
        return _lib
    where = path()
    if not where:
        raise NotInstalled(127, "libwsync.so.0 not found (beside wsync-push on PATH, nor "
                           "where the dynamic linker looks): install wsync (make install), "
                           "or set WSYNC_LIB to its path")
    so, P, E, u64, i = ctypes.CDLL(where), ctypes.c_void_p, ctypes.POINTER(Err), \
        ctypes.c_uint64, ctypes.c_int
    s = ctypes.c_char_p
    for name, res, args in [
            ("tree_new", P, [s, E]), ("tree_destroy", None, [ctypes.POINTER(P)]),
            ("tree_add_split", i, [P, s, s, i, i, ctypes.POINTER(u64), P, u64, E]),
            ("tree_set_meta", i, [P, s, s, E]),
            ("tree_size", i, [P, ctypes.POINTER(u64), E]), ("tree_write_map", i, [P, i, E]),
            ("tree_write_into", i, [P, P, u64, E]), ("tree_write_file", i, [P, s, E]),
            ("tree_write_safetensors_file", i, [P, s, E]),
            ("file_open_buffer", P, [P, ctypes.c_size_t, s, E]),
            ("file_close", None, [ctypes.POINTER(P)]), ("file_model", s, [P]),
            ("file_version", u64, [P]), ("file_count", ctypes.c_size_t, [P]),
            ("file_tensor", ctypes.POINTER(Tensor), [P, ctypes.c_size_t]),
            ("file_meta_count", ctypes.c_size_t, [P]),
            ("file_meta", ctypes.POINTER(Meta), [P, ctypes.c_size_t]),
            ("file_verify", i, [P, P, P, E]),
            ("signkey_load", P, [s, E]), ("signkey_destroy", None, [ctypes.POINTER(P)]),
            ("signseq_next", i, [s, u64, ctypes.POINTER(u64), E]),
            ("sign_trees", i, [ctypes.POINTER(P), i, P, u64, P, E])]:
        f = getattr(so, "wsync_" + name)
        f.restype, f.argtypes = res, args
    _lib = so
    return so


def check(rc: int, err: Err) -> None:
    """Raises the WsyncError err holds when rc is not 0."""
    if rc != 0:
        raise error(err.code, err.msg.decode(errors="replace"))


class Tree:
    """A libwsync tree borrowing the host arrays of a state_dict (kept alive here)."""

    def __init__(self, state_dict: Mapping[str, Any], model: str,
                 meta: Optional[Mapping[str, Any]] = None,
                 dtypes: Optional[Mapping[str, str]] = None) -> None:
        self.lib, self.err, self.keep = lib(), Err(), []
        self.ptr = ctypes.c_void_p(self.lib.wsync_tree_new(model.encode(), self.err))
        check(0 if self.ptr else -1, self.err)
        try:
            for name, d, a in tensors.items(state_dict, dtypes):
                self.keep.append(a)
                check(self.lib.wsync_tree_add_split(
                    self.ptr, name.encode(), b".", d.abi, a.ndim,
                    (ctypes.c_uint64 * a.ndim)(*a.shape), a.__array_interface__["data"][0],
                    a.nbytes, self.err), self.err)
            for k, v in (meta or {}).items():
                check(self.lib.wsync_tree_set_meta(self.ptr, tensors.meta_key(k).encode(),
                                                   tensors.meta_value(k, v).encode(),
                                                   self.err), self.err)
        except BaseException:
            self.close()
            raise

    def size(self) -> int:
        """Bytes of the .wsync document (what write_into needs)."""
        n = ctypes.c_uint64()
        check(self.lib.wsync_tree_size(self.ptr, ctypes.byref(n), self.err), self.err)
        return n.value

    def write_file(self, where: str, safetensors: bool = False) -> None:
        """Writes where atomically, as .wsync or as safetensors."""
        f = self.lib.wsync_tree_write_safetensors_file if safetensors else \
            self.lib.wsync_tree_write_file
        check(f(self.ptr, os.fsencode(where), self.err), self.err)

    def write_map(self, fd: int) -> None:
        check(self.lib.wsync_tree_write_map(self.ptr, fd, self.err), self.err)

    def write_into(self, address: int, size: int) -> None:
        check(self.lib.wsync_tree_write_into(self.ptr, address, size, self.err), self.err)

    def close(self) -> None:
        if self.ptr:
            self.lib.wsync_tree_destroy(ctypes.byref(self.ptr))
        self.keep = []

    def __enter__(self) -> "Tree":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def parsed(buffer: Any, name: str, verify: bool) -> Iterator[Tuple[Any, ctypes.CDLL]]:
    """Yields (file handle, lib) of a .wsync image in buffer (a writable buffer,
    borrowed while the handle lives); verify recomputes every hash first."""
    so, err = lib(), Err()
    at = ctypes.c_char.from_buffer(buffer)
    try:
        f = ctypes.c_void_p(so.wsync_file_open_buffer(ctypes.addressof(at), len(buffer),
                                                     os.fsencode(name), err))
        check(0 if f else -1, err)
        try:
            if verify:
                check(so.wsync_file_verify(f, None, None, err), err)
            yield f, so
        finally:
            so.wsync_file_close(ctypes.byref(f))
    finally:
        del at
