"""Writing a version straight into a file of its exact size (a hub's slot)."""
import contextlib
import ctypes
import mmap
import os
import stat
from typing import Any, Dict, Mapping, Optional, Tuple

from . import _lib

KEEP_MAPPED = 4     # slot files kept mapped; 0: map and unmap at every write
# (st_dev, st_ino) -> mmap, the newest last. A mapping keeps its file alive, so
# no other file can have the same (st_dev, st_ino) while it is here.
maps: Dict[Tuple[int, int], mmap.mmap] = {}


def fill(fd: int, tree: "_lib.Tree", size: int) -> None:
    """Writes tree (of size bytes) into fd, through a kept mapping when it can."""
    st = os.fstat(fd)
    m = maps.pop((st.st_dev, st.st_ino), None)
    if m is not None and (len(m) != st.st_size or not KEEP_MAPPED):
        m.close()
        m = None
    if m is None and KEEP_MAPPED and stat.S_ISREG(st.st_mode) and st.st_size == size:
        with contextlib.suppress(OSError):
            m = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED | mmap.MAP_POPULATE)
    if m is None:
        tree.write_map(fd)
        return
    while len(maps) >= KEEP_MAPPED:
        maps.pop(next(iter(maps))).close()
    maps[(st.st_dev, st.st_ino)] = m
    at = ctypes.c_char.from_buffer(m)
    try:
        tree.write_into(ctypes.addressof(at), len(m))
    finally:
        del at


def wsync_size(state_dict: Mapping[str, Any], model: str,
               meta: Optional[Mapping[str, Any]] = None,
               dtypes: Optional[Mapping[str, str]] = None) -> int:
    """Bytes of the .wsync document of a state_dict (what write_into needs)."""
    with _lib.Tree(state_dict, model, meta, dtypes) as tree:
        return tree.size()


def write_into(fd: int, state_dict: Mapping[str, Any], model: str,
               meta: Optional[Mapping[str, Any]] = None,
               dtypes: Optional[Mapping[str, str]] = None) -> None:
    """Writes a state_dict as a .wsync document into the open file fd (read-write),
    which must hold exactly wsync_size bytes: copied and hashed in one pass, byte
    for byte what write() makes. Tensors that are not C-contiguous, or not on
    the host, are copied first (another pass). Mapping 1 GiB costs about as much
    as copying it, so the last KEEP_MAPPED files stay mapped for when the hub
    lends one again (their pages stay in memory while they do)."""
    with _lib.Tree(state_dict, model, meta, dtypes) as tree:
        fill(fd, tree, tree.size())
