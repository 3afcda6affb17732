"""Weight files: written from a state_dict, read as tensors over the mapped file."""
import fcntl
import json
import mmap
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from . import _lib, tensors
from .errors import DataError, NotFound, TimedOut

# safetensors' dtype names -> wsync's.
_SAFETENSORS = {"F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16", "I64": "i64",
                "I32": "i32", "I16": "i16", "I8": "i8", "U8": "u8", "BOOL": "bool",
                "F8_E4M3": "f8e4m3", "F8_E5M2": "f8e5m2"}


class Weights:
    """A weight file mapped into this process: model, version, meta, and tensors
    (numpy arrays or torch tensors) over the mapping, without a copy.

    The mapping is private: writing a tensor changes this process's pages
    only, never the file. It holds the file's lease (wsync(7), LEASES) for as
    long as any tensor of it lives, so a hub that recycles retired versions
    leaves the file alone meanwhile. dtypes gives each tensor's wsync dtype:
    bf16 and fp8 come as raw bits in numpy (and fp8 in torch 1.13).
    """

    model: Optional[str]
    version: int
    meta: Dict[str, str]
    tensors: Dict[str, Any]
    dtypes: Dict[str, str]

    def __init__(self, path: str, framework: str = "numpy", verify: bool = True) -> None:
        tensors.check_framework(framework)
        self.path = path
        fd = open_version(path)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise DataError(65, f"{path}: empty file")
            # ACCESS_COPY: private and writable, so torch takes it without a warning.
            buf = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)    # the mapping keeps the file, and its lease, open
        if buf[8:9] == b"{":
            self._safetensors(buf, framework)
        else:
            self._wsync(buf, framework, verify)

    def _wsync(self, buf: mmap.mmap, framework: str, verify: bool) -> None:
        with _lib.parsed(buf, self.path, verify) as (f, so):
            self.model = so.wsync_file_model(f).decode()
            self.version = so.wsync_file_version(f)
            self.meta = {}
            for i in range(so.wsync_file_meta_count(f)):
                m = so.wsync_file_meta(f, i).contents
                self.meta[m.key.decode()] = m.value.decode()
            found = []
            for i in range(so.wsync_file_count(f)):
                t = so.wsync_file_tensor(f, i).contents
                found.append((t.path.decode(), tensors.BY_ABI[t.dtype], t.offset,
                              tuple(t.shape[:t.ndim])))
        self.tensors, self.dtypes = {}, {}
        for name, d, offset, shape in found:
            self.tensors[name] = tensors.view(buf, offset, d, shape, framework)
            self.dtypes[name] = d.name

    def _safetensors(self, buf: mmap.mmap, framework: str) -> None:
        n = int.from_bytes(buf[:8], "little")
        try:
            header = json.loads(buf[8:8 + n])
        except ValueError as e:
            raise DataError(65, f"{self.path}: bad safetensors header: {e}") from e
        self.model, self.version = None, 0
        self.meta = header.pop("__metadata__", None) or {}
        self.tensors, self.dtypes = {}, {}
        for name, t in header.items():
            d = tensors.DTYPES.get(_SAFETENSORS.get(t.get("dtype", ""), ""))
            if d is None:
                raise DataError(65, f"{self.path}: tensor {name}: dtype {t.get('dtype')}")
            self.tensors[name] = tensors.view(buf, 8 + n + t["data_offsets"][0], d,
                                              tuple(t["shape"]), framework)
            self.dtypes[name] = d.name


def load(path: str, framework: str = "numpy", verify: bool = True) -> Weights:
    """The weight file at path (.wsync or safetensors, told apart by content),
    mapped with its lease; a .wsync file's hashes are checked first unless
    verify is False. framework: "numpy" or "torch"."""
    return Weights(path, framework, verify)


def read(path: str, framework: str = "numpy",
         verify: bool = True) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """(tensors, meta) of a .wsync or safetensors file (see load)."""
    w = load(path, framework, verify)
    return w.tensors, w.meta


def write(path: str, state_dict: Mapping[str, Any], meta: Optional[Mapping[str, Any]] = None,
          model: Optional[str] = None, dtypes: Optional[Mapping[str, str]] = None) -> None:
    """Writes a state_dict (torch tensors on any device, or numpy arrays) atomically:
    a .wsync file when path ends in .wsync (model: the model id, default the
    file's name), else safetensors. dtypes: {name: wsync dtype} for raw bits."""
    wsync = path.endswith(".wsync")
    if model is None:
        model = "".join(c if c.isalnum() or c in "._-" else "_"
                        for c in os.path.basename(path)[:-len(".wsync")] or "model")
    with _lib.Tree(state_dict, model, meta, dtypes) as tree:
        tree.write_file(path, safetensors=not wsync)


def open_version(path: str) -> int:
    """A descriptor of the version file at path, with its lease (wsync(7) LEASES).

    A hub run with --recycle rewrites retired version files nobody holds;
    the lease (a shared flock taken while path still names the file) keeps
    this one as it is for as long as the descriptor, or a mapping of it, lives.
    """
    for _ in range(8):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise NotFound(66, f"{path}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held, named = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return fd
        except OSError:
            pass
        os.close(fd)
    raise TimedOut(75, f"{path}: replaced 8 times while being opened")
