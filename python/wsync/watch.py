"""A worker's loop: wsync-watch --ack stdin as a coprocess, one Update per version."""
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import files, tensors
from .errors import WsyncError
from .programs import client_args, coprocess, send_line, stopped, verify_args


class Update:
    """One model's new version, in place at path: its tensors (numpy or torch)
    over the mapped file, without a copy, held under the file's lease for as long
    as they live (see Weights). The hub counts it applied only after ack(); fail
    reports it failed with a reason the hub keeps and a waiting trainer sees.
    An update left without either is reported failed when the next is asked for.
    """

    def __init__(self, watcher: "Watcher", model: str, version: int, path: str) -> None:
        self.model, self.version, self.path = model, version, path
        self._watcher = watcher
        self._weights: Optional[files.Weights] = None
        self.answered = False

    @property
    def weights(self) -> files.Weights:
        """The mapped file (loaded at first use; its hashes were checked by wsync-watch)."""
        if self._weights is None:
            self._weights = files.load(self.path, self._watcher.framework, verify=False)
        return self._weights

    @property
    def tensors(self) -> Dict[str, Any]:
        """{name: tensor}, ready for load_state_dict."""
        return self.weights.tensors

    @property
    def meta(self) -> Dict[str, str]:
        return self.weights.meta

    @property
    def dtypes(self) -> Dict[str, str]:
        """{name: wsync dtype}: what the raw bits of bf16 and fp8 tensors are."""
        return self.weights.dtypes

    def ack(self) -> None:
        """Tells the hub this worker applied the version."""
        self._answer("ok")

    def fail(self, reason: str) -> None:
        """Tells the hub this worker failed to apply the version, and why (one line,
        at most 500 bytes kept)."""
        reason = " ".join(str(reason).split()) or "failed"
        self._answer("fail " + reason.encode()[:500].decode(errors="ignore"))

    def _answer(self, line: str) -> None:
        if self.answered:
            raise WsyncError(64, f"{self.model} version {self.version} was answered already")
        self.answered = True
        self._watcher._send(line)

    def __repr__(self) -> str:
        return f"Update({self.model!r}, {self.version}, {self.path!r})"


class Watcher:
    """The iterator watch() returns; a context manager that stops wsync-watch."""

    def __init__(self, args: List[str], framework: str) -> None:
        self.framework = framework
        self.proc = coprocess(args)
        self._last: Optional[Update] = None

    def _send(self, line: str) -> None:
        if self.proc.poll() is not None:
            raise self._stopped()
        send_line(self.proc, line)

    def _stopped(self) -> WsyncError:
        return stopped(self.proc)

    def __iter__(self) -> Iterator[Update]:
        return self

    def __next__(self) -> Update:
        if self._last is not None and not self._last.answered:
            self._last.fail("the worker went on without acknowledging it")
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            status = self.proc.wait()
            if status == 0:
                raise StopIteration
            raise self._stopped()
        model, version, path = line.rstrip("\n").split(" ", 2)
        self._last = Update(self, model, int(version), path)
        return self._last

    def close(self) -> None:
        """Stops wsync-watch (it says goodbye to the hub) and waits for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.stdout.close()
        self.proc.wait()

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.terminate()


def watch(model: Union[str, Sequence[str]], path: str, worker: Optional[str] = None,
          endpoint: Optional[str] = None, framework: str = "numpy",
          ack_timeout: float = 60, transfer: Optional[str] = None, keep: Optional[int] = None,
          key: Optional[str] = None, hub_key: Optional[str] = None,
          once: bool = False, verify_key: Union[str, Sequence[str], None] = None,
          timeout: Optional[float] = None) -> Watcher:
    """Follows model (or several, path then a directory: path/MODEL.wsync): the
    current version at once, then every newer one, each an Update to apply and
    then ack() (or fail(reason)) within ack_timeout seconds, else the hub is
    told it failed. It runs `wsync-watch --ack stdin` (wsync-watch(1)):

        with wsync.watch("policy", "policy.wsync", framework="torch") as updates:
            for update in updates:
                module.load_state_dict(update.tensors)
                update.ack()

    verify_key: a public key file (or several, for a key rotation): only
    versions signed with one of them are yielded; any other is refused, and
    the hub told why (wsync-watch --verify-key).

    timeout: HubUnavailable (69) when no hub answers within timeout seconds
    (wsync-watch -t); with once, a bound on the whole run: TimedOut (75) when a
    hub answered but no version was applied by then.

    Raises the WsyncError of wsync-watch's exit status when it stops on its own
    (69 no hub within timeout, 75 too far behind...), its message what
    wsync-watch said."""
    tensors.check_framework(framework)
    models = [model] if isinstance(model, str) else list(model)
    args = ["wsync-watch"] + client_args(endpoint, key, hub_key) + \
        ["--ack", "stdin", "--ack-timeout", str(ack_timeout), "-m", ",".join(models),
         "-o", path]
    if worker:
        args += ["--id", worker]
    if transfer:
        args += ["--transfer", transfer]
    if keep is not None:
        args += ["--keep", str(keep)]
    if once:
        args.append("--once")
    if timeout is not None:
        args += ["-t", str(timeout)]
    args += verify_args(verify_key)
    return Watcher(args, framework)
