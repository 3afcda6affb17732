"""A trainer's connection to the hub: wsync-push --batch as a coprocess."""
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib, signing, slots
from .errors import UsageError, WsyncError, error
from .programs import Wait, client_args, coprocess, run, send_line, stopped, wait_arg

StateDict = Mapping[str, Any]
_MODEL_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


class Publisher:
    """Publishes the state_dicts of one model, or of several committed together,
    through one `wsync-push --batch` for the publisher's life (wsync-push(1),
    "Batch mode"):

        with wsync.Publisher("policy") as pub:
            for step in range(steps):
                train(step)
                pub.publish(model.state_dict(), meta={"step": step}, wait="all")

    A state_dict is taken as it is: torch tensors of every dtype wsync has
    (bf16 included; fp8 as 8-bit integers named in dtypes), on the host or on
    a GPU (copied to the host as the version is written), or numpy arrays.

    On the hub's host, each publish asks the hub for a slot in its store,
    writes the tensors into it (copied and hashed in one pass by libwsync, into
    pages a recycling hub already has), and commits it on those hashes, asking
    for the next slot while the workers take this version. Elsewhere it writes
    a .wsync file in a private directory (default /dev/shm) and pushes that.
    The tensors must not change while publish copies them: the hub trusts the
    hashes taken as they are copied.

    With sign_key (a secret key file: `wsync-keygen --sign NAME` makes
    NAME.key and NAME.pub), every publish is signed before it is written: one
    manifest of all its models (a SHA-256 digest of each one's tensors, its
    content id, its meta) and a sequence number, checked by workers run with
    --verify-key NAME.pub (wsync-push(1), "Signed pushes"). The number is
    publish's seq (such as the trainer's step), which must be above the last
    one signed with the key, else DataError (65); or the counter's next, kept
    in NAME.key.seq beside the key.

    With part=(rank, world), the publisher is one rank of a sharded trainer:
    its state_dict holds this rank's tensors only, and publish(state_dict,
    group=step) pushes them as part rank of world of the version named step
    (wsync-push --part, wsync(7) SHARDED TRAINERS). Every rank's publish
    returns the same version once all world parts are in; a part missing when
    timeout runs out raises TimedOut (75) naming it. Parts are pushed whole,
    one model a publisher, announced to every worker. With sign_key too, each
    rank signs its own part with the trainer's key (every rank holds a copy):
    a part's manifest names its group, its part and its tensors, and a worker
    run with --verify-key applies the version only when its parts are one
    signed group (wsync-format(5), SIGNATURES); the group is its seq.
    """

    def __init__(self, model: Union[str, Sequence[str]], endpoint: Optional[str] = None,
                 directory: Optional[str] = None, workers: Optional[Sequence[str]] = None,
                 key: Optional[str] = None, hub_key: Optional[str] = None,
                 sign_key: Optional[str] = None,
                 part: Optional[Tuple[int, int]] = None) -> None:
        self.models: List[str] = [model] if isinstance(model, str) else list(model)
        self.part = part
        if part is not None and (len(part) != 2 or not 0 <= part[0] < part[1] <= 256 or
                                 len(self.models) != 1 or workers):
            raise UsageError(64, "part=(rank, world) wants 0 <= rank < world <= 256, one "
                             "model and no workers")
        if not self.models or len(set(self.models)) != len(self.models):
            raise UsageError(64, "Publisher wants one model id or several different ones")
        for m in self.models:
            if not _MODEL_ID.fullmatch(m):
                raise UsageError(64, f"bad model id \"{m}\": use 1 to 64 of A-Z a-z 0-9 . _ - "
                                 "(not starting with '.')")
        self.workers = f" -W {','.join(workers)}" if workers else ""
        self.client = client_args(endpoint, key, hub_key)
        self.args = ["wsync-push", "--batch"] + self.client
        # Signed here, not by the coprocess: the trees are written into slots.
        self.sign_key = signing.SignKey(sign_key) if sign_key is not None else None
        self.sign_path = sign_key
        self.seq: Optional[int] = None      # of the last signed publish
        self.proc: Optional["subprocess.Popen[str]"] = None
        try:
            if part is None:
                self._start()
        except BaseException:
            self._close_key()
            raise
        if directory is None and os.path.isdir("/dev/shm"):
            directory = "/dev/shm"
        self.parent: Optional[str] = directory
        self.dir: Optional[str] = None      # made for the first file pushed
        self.slots = True

    def _start(self) -> None:
        self.proc = coprocess(self.args)

    def _restart(self) -> None:
        """A new coprocess; the old one aborts its slots when its input ends."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()
        self._start()

    def _send(self, line: str) -> None:
        send_line(self.proc, line)

    def _answer(self) -> List[str]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
        except BaseException:
            # Interrupted before its answer: the next would be read for it. Start afresh.
            self._restart()
            raise
        answer = line.rstrip("\n").split(" ")
        if answer[0] == "error":
            raise error(int(answer[1]), " ".join(answer[2:]))
        if answer[0] not in ("ok", "slot"):
            raise stopped(self.proc)
        return answer

    def _by_model(self, state_dict: Any) -> Dict[str, StateDict]:
        if len(self.models) == 1:
            return {self.models[0]: state_dict}
        if not isinstance(state_dict, Mapping) or sorted(state_dict) != sorted(self.models):
            raise UsageError(64, f"publish wants {{model: state_dict}} for every model of "
                             f"the publisher: {', '.join(self.models)}")
        return {m: state_dict[m] for m in self.models}

    def _slot(self, sizes: Dict[str, int], timeout: float) -> Optional[List[str]]:
        """[upload, path...] of a slot for each model's next version, or None off the
        hub's host."""
        try:
            self._send("--slot " + " ".join(f"-m {m}={n}" for m, n in sizes.items()) +
                       f"{self.workers} -t {timeout}")
            return self._answer()[1:]
        except WsyncError as e:
            if e.status != 64 or "not visible" not in str(e):
                raise
            self.slots = False      # the hub is on another host
            return None

    def _fill(self, slot: List[str], trees: List["_lib.Tree"], sizes: List[int]) -> None:
        """Writes each tree into its file of the slot; aborts the slot if that fails."""
        try:
            for where, tree, size in zip(slot[1:], trees, sizes):
                fd = os.open(where, os.O_RDWR)
                try:
                    slots.fill(fd, tree, size)
                finally:
                    os.close(fd)
        except BaseException:
            self._send(f"--abort {slot[0]}")
            self._answer()
            raise

    def publish(self, state_dict: Any, meta: Optional[Mapping[str, Any]] = None,
                wait: Optional[Wait] = None, timeout: float = 30,
                dtypes: Optional[Mapping[str, Any]] = None, seq: Optional[int] = None,
                group: Optional[int] = None) -> Any:
        """Publishes a state_dict as the model's next version and returns its number;
        for a publisher of several models, {model: state_dict} committed together,
        returning {model: version}. wait: "all", N, or worker ids: returns once those
        workers applied it; raises DataError (65) as soon as every one answered and
        some could not apply it, naming each with its reason (a failed version is
        never retried); else TimedOut (75) after timeout seconds naming each late
        worker and its last failure. dtypes: {name: wsync dtype} for raw
        bits ({model: {name: dtype}} for several models). seq: the sequence number
        of a signed publish (see Publisher), 1 or more; it is kept in self.seq.
        group: with part (see Publisher), the version the ranks build together,
        above the last group of the model (the trainer's step); a signed part's
        seq is its group."""
        if (group is None) != (self.part is None):
            raise UsageError(64, "group goes with a publisher made with part=(rank, world)")
        if group is not None and seq is not None:
            raise UsageError(64, "seq goes with a whole publish: a part is signed for its group")
        if group is not None:
            return self._publish_part(state_dict, meta, wait, timeout, dtypes, group)
        signing.check_seq(seq, self.sign_key is not None)
        parts = self._by_model(state_dict)
        many = len(self.models) > 1
        wait_opt = f" -w {wait_arg(wait)}" if wait is not None else ""
        trees: List[_lib.Tree] = []
        try:
            for m, sd in parts.items():
                d = (dtypes or {}).get(m) if many else dtypes
                trees.append(_lib.Tree(sd, m, meta, d))
            if self.sign_key is not None:
                self.seq = self.sign_key.sign(trees, seq)
            slot = None
            if self.slots:
                sizes = [t.size() for t in trees]
                slot = self._slot(dict(zip(parts, sizes)), timeout)
                if slot is not None:
                    self._fill(slot, trees, sizes)
                    self._send(f"--commit {slot[0]} --trust-hashes --next-slot -t {timeout}"
                               f"{wait_opt}")
            if slot is None:
                if self.dir is None:
                    self.dir = tempfile.mkdtemp(prefix="wsync-publisher.", dir=self.parent)
                files = []
                for m, tree in zip(parts, trees):
                    files.append(f"-m {m}={os.path.join(self.dir, m + '.wsync')}")
                    tree.write_file(files[-1].split("=", 1)[1])
                self._send(" ".join(files) + f"{self.workers} -t {timeout}{wait_opt}")
        finally:
            for t in trees:
                t.close()
        answer = self._answer()[1:]
        versions = {answer[i]: int(answer[i + 1]) for i in range(0, len(answer), 2)}
        return versions if many else versions[self.models[0]]

    def _publish_part(self, state_dict: Any, meta: Optional[Mapping[str, Any]],
                      wait: Optional[Wait], timeout: float,
                      dtypes: Optional[Mapping[str, Any]], group: int) -> int:
        """This rank's part of version group, written here and pushed by wsync-push --part."""
        assert self.part is not None
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="wsync-publisher.", dir=self.parent)
        path = os.path.join(self.dir, self.models[0] + ".wsync")
        tree = _lib.Tree(state_dict, self.models[0], meta, dtypes)
        try:
            tree.write_file(path)
        finally:
            tree.close()
        args = ["wsync-push", "-q"] + self.client + ["-t", str(timeout), "--part",
                                                     f"{self.part[0]}/{self.part[1]}",
                                                     "--group", str(group)]
        if wait is not None:
            args += ["-w", wait_arg(wait)]
        if self.sign_path is not None:
            args += ["--sign-key", self.sign_path]
        version = int(run(args + ["-m", self.models[0], path]))
        if self.sign_path is not None:
            self.seq = group
        return version

    def close(self) -> None:
        """Ends the coprocess (which gives back a slot asked for ahead)."""
        if self.proc is not None and self.proc.stdin is not None:
            if not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except BrokenPipeError:     # it stopped, and said why already
                    pass
            self.proc.wait()
        self._close_key()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _close_key(self) -> None:
        if self.sign_key is not None:
            self.sign_key.close()

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
