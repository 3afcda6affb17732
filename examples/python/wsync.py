"""wsync.py - weights in and out of the wsync programs from Python.

Copy this file next to your code: it needs numpy and the wsync programs on
PATH (and libwsync.so.0, installed with them, for wsync_size and write_into),
nothing else. Arrays are {name: numpy array}; names are PyTorch's
state_dict keys ("actor.0.weight"). From torch: {k: v.detach().cpu().numpy()
for k, v in model.state_dict().items()}; back: torch.from_numpy(a.copy()).

    write("ckpt.safetensors", arrays, meta={"step": "100"})
    version = push("policy", "ckpt.safetensors", wait="all", timeout=30)
    version = pull("policy", "policy.wsync")
    arrays, meta = read("policy.wsync")
    for model, version, path in watch("policy", "policy.wsync"): ...

    with Publisher() as pub:            # a trainer: one connection for its life
        version = pub.publish("policy", arrays, wait="all", timeout=10)

A failed program raises WsyncError with its exit status (wsync(7): 75 timed
out, 69 no hub...) and its message.

Writing a version into a file the hub lends (a slot) goes through libwsync
(ctypes): one pass over the arrays that copies and hashes them.

    size = wsync_size(arrays, "policy", meta={"step": "100"})
    write_into(fd, arrays, "policy", meta={"step": "100"})   # fd: size bytes
"""
import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import mmap
import os
import shutil
import stat
import subprocess
import tempfile

import numpy as np

# safetensors dtype names and their little-endian numpy types.
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
NAMES = {np.dtype(t).name: name for name, t in DTYPES.items()}


class WsyncError(RuntimeError):
    """A wsync program failed: status is its exit status, its stderr the message."""

    def __init__(self, status, message):
        super().__init__(message.strip() or f"exit status {status}")
        self.status = status


def s_run(args, data=None, endpoint=None):
    """Runs a wsync program; returns its stdout (bytes), raises WsyncError."""
    if endpoint:
        args = args[:1] + ["-e", endpoint] + args[1:]
    r = subprocess.run(args, input=data, capture_output=True)
    if r.returncode != 0:
        raise WsyncError(r.returncode, r.stderr.decode(errors="replace"))
    return r.stdout


def safetensors_bytes(arrays, meta=None):
    """The safetensors image of arrays (names sorted; tobytes() is C order)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": NAMES[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def parse_safetensors(image):
    """(arrays, meta) from a safetensors image; the arrays are read-only views."""
    n = int.from_bytes(image[:8], "little")
    header = json.loads(image[8:8 + n])
    meta = header.pop("__metadata__", {})
    base, arrays = 8 + n, {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        a = np.frombuffer(image, DTYPES[t["dtype"]], offset=base + begin,
                          count=(end - begin) // np.dtype(DTYPES[t["dtype"]]).itemsize)
        arrays[name] = a.reshape(t["shape"])
    return arrays, meta


class s_Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


# numpy's dtype names in the order of wsync_dtype_t (wsync.h); the last three
# come from ml_dtypes.
ABI_DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
              "int8", "uint8", "bool", "float8_e4m3fn", "float8_e5m2"]
s_libwsync = None


def s_lib():
    """libwsync: $WSYNC_LIB, else the one beside the wsync-push on PATH (a build
    directory's bin/.., or an installed PREFIX/lib), else the system's."""
    global s_libwsync
    if s_libwsync is None:
        path, push = os.environ.get("WSYNC_LIB"), shutil.which("wsync-push")
        if not path and push:
            bindir = os.path.dirname(os.path.realpath(push))
            path = next((p for p in (os.path.join(bindir, "..", "libwsync.so.0"),
                                     os.path.join(bindir, "..", "lib", "libwsync.so.0"))
                         if os.path.exists(p)), None)
        path = path or ctypes.util.find_library("wsync")
        if not path:
            raise WsyncError(69, "libwsync.so.0 not found: set WSYNC_LIB to its path")
        lib, P, E = ctypes.CDLL(path), ctypes.c_void_p, ctypes.POINTER(s_Err)
        u64, i = ctypes.c_uint64, ctypes.c_int
        for name, res, args in [
                ("new", P, [ctypes.c_char_p, E]), ("destroy", None, [ctypes.POINTER(P)]),
                ("add_split", i, [P, ctypes.c_char_p, ctypes.c_char_p, i, i,
                                  ctypes.POINTER(u64), P, u64, E]),
                ("set_meta", i, [P, ctypes.c_char_p, ctypes.c_char_p, E]),
                ("size", i, [P, ctypes.POINTER(u64), E]), ("write_map", i, [P, i, E]),
                ("write_into", i, [P, P, u64, E])]:
            f = getattr(lib, "wsync_tree_" + name)
            f.restype, f.argtypes = res, args
        s_libwsync = lib
    return s_libwsync


s_dtypes = {}     # numpy dtype -> its index in ABI_DTYPES (dtype.name is slow)


def s_dtype_index(name, dtype):
    """The wsync dtype number of tensor name's numpy dtype; 65 when it has none."""
    i = s_dtypes.get(dtype)
    if i is None:
        if dtype.name not in ABI_DTYPES:
            raise WsyncError(65, f"tensor {name}: no wsync dtype for numpy's {dtype}")
        i = s_dtypes[dtype] = ABI_DTYPES.index(dtype.name)
    return i


@contextlib.contextmanager
def s_tree(arrays, model, meta):
    """A libwsync tree of arrays, yielding (lib, tree, err, check); check(rc) raises."""
    lib, err, keep = s_lib(), s_Err(), []

    def check(rc):
        if rc != 0:
            raise WsyncError(err.code, err.msg.decode(errors="replace"))
    tree = ctypes.c_void_p(lib.wsync_tree_new(model.encode(), err))
    check(0 if tree else -1)
    try:
        for name, a in arrays.items():
            if not isinstance(a, np.ndarray) and hasattr(a, "numpy"):   # torch
                a = (a.detach().cpu() if hasattr(a, "detach") else a).numpy()
            a = np.asarray(a, order="C")   # a copy when not C-contiguous
            if a.dtype.byteorder == ">":
                a = a.astype(a.dtype.newbyteorder("<"))
            keep.append(a)
            check(lib.wsync_tree_add_split(
                tree, name.encode(), b".", s_dtype_index(name, a.dtype), a.ndim,
                (ctypes.c_uint64 * a.ndim)(*a.shape), a.__array_interface__["data"][0],
                a.nbytes, err))
        for k, v in (meta or {}).items():
            check(lib.wsync_tree_set_meta(tree, str(k).encode(), str(v).encode(), err))
        yield lib, tree, err, check
    finally:
        lib.wsync_tree_destroy(ctypes.byref(tree))


def s_size(lib, tree, err, check):
    size = ctypes.c_uint64()
    check(lib.wsync_tree_size(tree, ctypes.byref(size), err))
    return size.value


def wsync_size(arrays, model, meta=None):
    """Bytes of the .wsync document of arrays (what write_into needs)."""
    with s_tree(arrays, model, meta) as t:
        return s_size(*t)


KEEP_MAPPED = 4     # slot files kept mapped; 0: map and unmap at every write
# (st_dev, st_ino) -> mmap, the newest last. A mapping keeps its file alive, so
# no other file can have the same (st_dev, st_ino) while it is here.
s_maps = {}


def s_fill(fd, size, lib, tree, err, check):
    """Writes tree (of size bytes) into fd, through a kept mapping when it can."""
    st = os.fstat(fd)
    m = s_maps.pop((st.st_dev, st.st_ino), None)
    if m is not None and (len(m) != st.st_size or not KEEP_MAPPED):
        m.close()
        m = None
    if m is None and KEEP_MAPPED and stat.S_ISREG(st.st_mode) and st.st_size == size:
        with contextlib.suppress(OSError):
            m = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED | mmap.MAP_POPULATE)
    if m is None:
        return check(lib.wsync_tree_write_map(tree, fd, err))
    while len(s_maps) >= KEEP_MAPPED:
        s_maps.pop(next(iter(s_maps))).close()
    s_maps[(st.st_dev, st.st_ino)] = m
    at = ctypes.c_char.from_buffer(m)
    try:
        check(lib.wsync_tree_write_into(tree, ctypes.addressof(at), len(m), err))
    finally:
        del at


def write_into(fd, arrays, model, meta=None):
    """Writes arrays as a .wsync document into the open file fd (read-write), which
    must hold exactly wsync_size bytes: copied and hashed in one pass, byte for
    byte what write() and wsync-convert make. Arrays that are not C-contiguous
    are copied first (another pass). Mapping 1 GiB costs about as much as
    copying it, so the last KEEP_MAPPED files stay mapped for when the hub lends
    one again (their pages stay in memory while they do)."""
    with s_tree(arrays, model, meta) as t:
        s_fill(fd, s_size(*t), *t)


def write(path, arrays, meta=None, model=None):
    """Writes arrays as safetensors, or as .wsync when path ends in .wsync."""
    image = safetensors_bytes(arrays, meta)
    if path.endswith(".wsync"):
        s_run(["wsync-convert", "-t", "wsync"] +
              (["-m", model] if model else []) + ["-", path], data=image)
        return
    with open(path, "wb") as f:
        f.write(image)


def read(path):
    """(arrays, meta) of a .wsync or safetensors file; .wsync is verified first."""
    with open(path, "rb") as f:
        image = f.read()
    if image[8:9] == b"{":      # a safetensors JSON header after its length
        return parse_safetensors(image)
    return parse_safetensors(s_run(["wsync-convert", "-t", "safetensors", "-", "-"],
                                   data=image))


def open_version(path):
    """A descriptor of the version file at path, with its lease (wsync(7) LEASES).

    A hub run with --recycle rewrites retired version files nobody holds;
    the lease (a shared flock taken while path still names the file) keeps
    this one as it is for as long as the descriptor, or a mapping of it, lives.
    """
    for _ in range(8):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise WsyncError(66, f"{path}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held, named = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return fd
        except OSError:
            pass
        os.close(fd)
    raise WsyncError(75, f"{path}: replaced 8 times while being opened")


def push(model, path, wait=None, timeout=30, endpoint=None):
    """Publishes path as model's next version; returns it. wait: "all", N or ids."""
    args = ["wsync-push", "-t", str(timeout), "-m", model, path]
    if wait is not None:
        args[1:1] = ["-w", str(wait)]
    return int(s_run(args, endpoint=endpoint))


def pull(model, path, version=None, timeout=30, endpoint=None):
    """Fetches model's newest version (or version) into path; returns its number."""
    args = ["wsync-pull", "-t", str(timeout), "-m", model, "-o", path]
    if version is not None:
        args += ["-v", str(version)]
    return int(s_run(args, endpoint=endpoint))


def watch(model, path, worker=None, endpoint=None):
    """Yields (model, version, path) per update wsync-watch applied, for ever."""
    args = ["wsync-watch", "-m", model, "-o", path] + (["--id", worker] if worker else [])
    if endpoint:
        args[1:1] = ["-e", endpoint]
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as p:
        try:
            for line in p.stdout:
                m, v, where = line.rstrip("\n").split(" ", 2)
                yield m, int(v), where
        finally:
            p.terminate()
    if p.returncode not in (0, -15):
        raise WsyncError(p.returncode, "wsync-watch stopped")


class Publisher:
    """A trainer's coprocess, `wsync-push --batch`: connected once, one line a push.

    On the hub's host, each publish asks for a slot in the hub's store, writes
    the arrays into it (write_into: copied and hashed in one pass, into pages
    a recycling hub already has) and commits it with --trust-hashes and
    --next-slot (the coprocess asks for the next slot while the workers take
    this version: the next publish of the same size finds it). Elsewhere it
    writes a safetensors file in a private directory (default: the per-user
    tmpfs) and pushes that. With wait, it returns once those workers applied it.
    The arrays must not change while publish copies them: the hashes are taken
    from them as they are copied, and the hub trusts them.
    """

    def __init__(self, endpoint=None, directory=None):
        self.args = ["wsync-push", "--batch"] + (["-e", endpoint] if endpoint else [])
        self.s_start()
        if directory is None and os.path.isdir("/dev/shm"):
            directory = "/dev/shm"
        self.parent, self.dir = directory, None     # made for the first file pushed
        self.slots = True

    def s_start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def s_restart(self):
        """A new coprocess; the old one aborts its slots when its input ends."""
        self.proc.stdin.close()
        self.s_start()

    def s_send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def s_answer(self):
        try:
            line = self.proc.stdout.readline()
        except BaseException:
            # Interrupted before its answer: the next would be read for it. Start afresh.
            self.s_restart()
            raise
        answer = line.rstrip("\n").split(" ", 2)
        if answer[0] == "error":
            raise WsyncError(int(answer[1]), answer[2])
        if answer[0] not in ("ok", "slot"):
            raise WsyncError(self.proc.wait(), "wsync-push --batch stopped")
        return answer

    def s_slot(self, model, size, timeout):
        """(upload, path) of a slot for model's next version, or None off the hub's host."""
        try:
            self.s_send(f"--slot -m {model}={size} -t {timeout}")
            return tuple(self.s_answer()[1:])
        except WsyncError as e:
            if e.status != 64 or "not visible" not in str(e):
                raise
            self.slots = False      # the hub is on another host
            return None

    def s_write_slot(self, slot, size, tree):
        """Writes tree into slot (upload, path); aborts the slot if that fails."""
        try:
            fd = os.open(slot[1], os.O_RDWR)
            try:
                s_fill(fd, size, *tree)
            finally:
                os.close(fd)
        except BaseException:
            self.s_send(f"--abort {slot[0]}")
            self.s_answer()
            raise

    def publish(self, model, arrays, meta=None, wait=None, timeout=30):
        """Publishes arrays as model's next version; returns its number."""
        wait_opt = f" -w {wait}" if wait is not None else ""
        slot = None
        if self.slots:
            with s_tree(arrays, model, meta) as t:
                size = s_size(*t)
                slot = self.s_slot(model, size, timeout)
                if slot is not None:
                    self.s_write_slot(slot, size, t)
        if slot is None:
            if self.dir is None:
                self.dir = tempfile.mkdtemp(prefix="wsync-publisher.", dir=self.parent)
            path = os.path.join(self.dir, model + ".safetensors")
            write(path, arrays, meta)
            self.s_send(f"-m {model} -t {timeout} {path}{wait_opt}")
            return int(self.s_answer()[2])
        self.s_send(f"--commit {slot[0]} --trust-hashes --next-slot -t {timeout}{wait_opt}")
        return int(self.s_answer()[2])

    def close(self):
        self.proc.stdin.close()     # the coprocess gives back a slot asked for ahead
        self.proc.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
