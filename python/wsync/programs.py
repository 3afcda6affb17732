"""The wsync programs run as subprocesses: push and pull."""
import ctypes
import signal
import subprocess
from typing import Iterable, List, Optional, Sequence, Union

from .errors import InternalError, error
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


def coprocess(args: List[str]) -> "subprocess.Popen[str]":
    """Starts a wsync program talked to through its stdin and stdout, lines of text."""
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=_die_with_parent)


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
    r = subprocess.run(list(args), input=data, capture_output=True)
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
    """Writes one line to a coprocess's stdin and flushes it; InternalError (70)
    naming its status when it has stopped."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    except BrokenPipeError as e:
        raise InternalError(70, f"{proc.args[0]} stopped (status {proc.wait()})") from e
