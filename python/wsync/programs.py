"""The wsync programs run as subprocesses: push and pull."""
import collections
import ctypes
import signal
import subprocess
import sys
import threading
from typing import Any, Iterable, List, Optional, Sequence, Union

from .errors import InternalError, NotInstalled, WsyncError, error
from .signing import check_seq

Wait = Union[str, int, Sequence[str]]


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a coprocess: end it (SIGTERM) when the Python process that started it dies,
    so a worker or trainer killed outright leaves no wsync program behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _not_installed(program: str) -> NotInstalled:
    return NotInstalled(127, f"{program} not found on PATH: install wsync (make install), "
                        "or put its build's bin directory (build/cc/bin) on PATH")


def _tee(stream: Any, tail: "collections.deque[str]") -> None:
    """Passes a coprocess's stderr on to ours, keeping its last lines for an error."""
    for line in stream:
        tail.append(line.rstrip("\n"))
        sys.stderr.write(line)
        sys.stderr.flush()


def coprocess(args: List[str]) -> "subprocess.Popen[str]":
    """Starts a wsync program talked to through its stdin and stdout, lines of text;
    its stderr goes on to ours, its last lines kept for stopped()."""
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=_die_with_parent)
    except FileNotFoundError:
        raise _not_installed(args[0]) from None
    tail: "collections.deque[str]" = collections.deque(maxlen=8)
    reader = threading.Thread(target=_tee, args=(proc.stderr, tail), daemon=True)
    reader.start()
    proc.stderr_tail, proc.stderr_reader = tail, reader    # type: ignore[attr-defined]
    return proc


def stopped(proc: "subprocess.Popen[str]") -> WsyncError:
    """The error of a coprocess that ended: the WsyncError of its exit status with
    what it said last on stderr (why it exited), else InternalError (70)."""
    status = proc.wait()
    proc.stderr_reader.join(5)      # type: ignore[attr-defined]
    tail = proc.stderr_tail         # type: ignore[attr-defined]
    if status > 0:
        return error(status, tail[-1] if tail else f"{proc.args[0]} exited with status "
                     f"{status}")
    return InternalError(70, f"{proc.args[0]} stopped (status {status})")


def client_args(endpoint: Optional[str] = None, key: Optional[str] = None,
                hub_key: Optional[str] = None) -> List[str]:
    """The options that say which hub, and with which keys."""
    args: List[str] = []
    if endpoint:
        args += ["-e", endpoint]
    if key:
        args += ["--key", key]
    if hub_key:
        args += ["--hub-key", hub_key]
    return args


def verify_args(verify_key: Union[str, Sequence[str], None]) -> List[str]:
    """--verify-key for each public key file given (one, or several)."""
    keys = [verify_key] if isinstance(verify_key, str) else list(verify_key or [])
    return [a for k in keys for a in ("--verify-key", k)]


def wait_arg(wait: Wait) -> str:
    """-w's argument: "all", a count, or worker ids."""
    if isinstance(wait, (str, int)):
        return str(wait)
    return ",".join(wait) + ("," if len(wait) == 1 else "")


def run(args: Iterable[str], data: Optional[bytes] = None) -> bytes:
    """Runs a wsync program; returns its stdout, raises the WsyncError of its status."""
    args = list(args)
    try:
        r = subprocess.run(args, input=data, capture_output=True)
    except FileNotFoundError:
        raise _not_installed(args[0]) from None
    if r.returncode != 0:
        raise error(r.returncode, r.stderr.decode(errors="replace"))
    return r.stdout


def push(model: str, path: str, wait: Optional[Wait] = None, timeout: float = 30,
         endpoint: Optional[str] = None, workers: Optional[Sequence[str]] = None,
         key: Optional[str] = None, hub_key: Optional[str] = None,
         sign_key: Optional[str] = None, seq: Optional[int] = None) -> int:
    """Publishes the file at path (.wsync or safetensors) as model's next version
    and returns its number; with wait ("all", N, or worker ids), once those
    workers applied it (TimedOut, 75, after timeout seconds: published, but
    late workers, named in the message). workers: only these get it.
    sign_key: sign it with this secret key (wsync-push --sign-key), under seq
    (above the last number signed with the key, else DataError, 65) or the
    counter's next beside the key."""
    check_seq(seq, sign_key is not None)
    args = ["wsync-push"] + client_args(endpoint, key, hub_key) + ["-t", str(timeout)]
    if sign_key is not None:
        args += ["--sign-key", sign_key]
    if seq is not None:
        args += ["--seq", str(seq)]
    if wait is not None:
        args += ["-w", wait_arg(wait)]
    if workers:
        args += ["-W", ",".join(workers)]
    return int(run(args + ["-m", model, path]))


def pull(model: str, path: str, version: Optional[int] = None, timeout: float = 30,
         endpoint: Optional[str] = None, key: Optional[str] = None,
         hub_key: Optional[str] = None,
         verify_key: Union[str, Sequence[str], None] = None) -> int:
    """Fetches model's newest version (or version) into path, verified and
    replaced atomically; returns its number. verify_key: a public key file (or
    several): take only a version signed with one of them, else
    PermissionDenied (77) naming why it was refused."""
    args = ["wsync-pull"] + client_args(endpoint, key, hub_key) + \
        ["-t", str(timeout), "-m", model, "-o", path]
    if version is not None:
        args += ["-v", str(version)]
    return int(run(args + verify_args(verify_key)))


def send_line(proc: "subprocess.Popen[str]", line: str) -> None:
    """Writes one line to a coprocess's stdin and flushes it; stopped()'s error
    when it has stopped."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    except BrokenPipeError as e:
        raise stopped(proc) from e
