"""The wsync programs run as subprocesses: push and pull."""
import subprocess
from typing import Iterable, List, Optional, Sequence, Union

from .errors import InternalError, error

Wait = Union[str, int, Sequence[str]]


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
         key: Optional[str] = None, hub_key: Optional[str] = None) -> int:
    """Publishes the file at path (.wsync or safetensors) as model's next version
    and returns its number; with wait ("all", N, or worker ids), once those
    workers applied it (TimedOut, 75, after timeout seconds: published, but
    late workers, named in the message). workers: only these get it."""
    args = ["wsync-push"] + client_args(endpoint, key, hub_key) + ["-t", str(timeout)]
    if wait is not None:
        args += ["-w", wait_arg(wait)]
    if workers:
        args += ["-W", ",".join(workers)]
    return int(run(args + ["-m", model, path]))


def pull(model: str, path: str, version: Optional[int] = None, timeout: float = 30,
         endpoint: Optional[str] = None, key: Optional[str] = None,
         hub_key: Optional[str] = None) -> int:
    """Fetches model's newest version (or version) into path, verified and
    replaced atomically; returns its number."""
    args = ["wsync-pull"] + client_args(endpoint, key, hub_key) + \
        ["-t", str(timeout), "-m", model, "-o", path]
    if version is not None:
        args += ["-v", str(version)]
    return int(run(args))


def send_line(proc: "subprocess.Popen[str]", line: str) -> None:
    """Writes one line to a coprocess's stdin and flushes it; InternalError (70)
    naming its status when it has stopped."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    except BrokenPipeError as e:
        raise InternalError(70, f"{proc.args[0]} stopped (status {proc.wait()})") from e
