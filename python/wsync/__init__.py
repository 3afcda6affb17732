"""wsync - neural-network weights from a trainer to its workers, from Python.

A trainer publishes each version of a model's state_dict; every worker gets
it, loads it, and says so; the hub knows who runs what (wsync(7)). The package
speaks to the wsync programs (subprocesses) and to libwsync (ctypes); it needs
numpy, and torch only for torch tensors.

    import wsync

    with wsync.Publisher("policy") as pub:                  # the trainer
        version = pub.publish(model.state_dict(), meta={"step": step},
                              wait="all", timeout=30)

    with wsync.watch("policy", "policy.wsync", framework="torch") as updates:
        for update in updates:                               # a worker
            module.load_state_dict(update.tensors)           # no copy of the file
            update.ack()                                      # or update.fail(reason)

    write("ckpt.safetensors", state_dict, meta={"step": 100})
    version = push("policy", "ckpt.safetensors", wait="all", timeout=30)
    version = pull("policy", "policy.wsync")
    tensors, meta = read("policy.wsync", framework="torch")

Publisher(model, sign_key="trainer.key") signs every publish (wsync-push
--sign-key); watch and pull take verify_key= to apply only what it signed.

A sharded trainer's ranks each publish their own shard as a part of one
version (wsync-push --part, wsync(7) SHARDED TRAINERS), signed by each rank
with the trainer's key when sign_key is given:

    with wsync.Publisher("policy", part=(rank, world), sign_key="trainer.key") as pub:
        version = pub.publish(shard_state_dict, group=step)   # once all parts are in

Every dtype of wsync travels, bf16 and fp8 included, without ml_dtypes
(module wsync.tensors says how). A failure raises a WsyncError whose status
is the exit status of wsync(7): TimedOut (75), HubUnavailable (69),
NotFound (66)..., its message the program's own (what its stderr said);
NotInstalled (127) when libwsync or a program cannot be found.
"""
from .errors import (DataError, HubUnavailable, InternalError, NotFound, NothingNewer,
                     NotInstalled, PermissionDenied, ProtocolError, TimedOut, UsageError,
                     WsyncError, WsyncIOError)
from .files import Weights, load, open_version, read, write
from .programs import pull, push
from .publisher import Publisher
from .slots import write_into, wsync_size
from .watch import Update, Watcher, watch

__version__ = "0.1.0"

__all__ = [
    "DataError", "HubUnavailable", "InternalError", "NotFound", "NothingNewer",
    "NotInstalled", "PermissionDenied", "ProtocolError", "Publisher", "TimedOut", "Update", "UsageError",
    "Watcher", "Weights", "WsyncError", "WsyncIOError", "load", "open_version", "pull",
    "push", "read", "watch", "write", "write_into", "wsync_size",
]
