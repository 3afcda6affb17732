"""wsync.py - weights in and out of the wsync programs from Python.

Copy this file next to your code: it needs numpy and the wsync programs on
PATH, nothing else. Arrays are {name: numpy array}; names are PyTorch's
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
"""
import fcntl
import json
import os
import shutil
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
        fd = os.open(path, os.O_RDONLY)
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

    Each publish writes the arrays as safetensors in a private directory
    (default: the per-user tmpfs when there is one) and asks the coprocess to
    push it; with wait, it returns once those workers applied it.
    """

    def __init__(self, endpoint=None, directory=None):
        args = ["wsync-push", "--batch"] + (["-e", endpoint] if endpoint else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        if directory is None and os.path.isdir("/dev/shm"):
            directory = "/dev/shm"
        self.dir = tempfile.mkdtemp(prefix="wsync-publisher.", dir=directory)

    def publish(self, model, arrays, meta=None, wait=None, timeout=30):
        """Pushes arrays as model's next version; returns its number."""
        path = os.path.join(self.dir, model + ".safetensors")
        write(path, arrays, meta)
        line = f"-m {model} -t {timeout} {path}" + (f" -w {wait}" if wait is not None else "")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().rstrip("\n").split(" ", 2)
        if answer[0] == "ok":
            return int(answer[2])
        if answer[0] == "error":
            raise WsyncError(int(answer[1]), answer[2])
        raise WsyncError(self.proc.wait(), "wsync-push --batch stopped")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
