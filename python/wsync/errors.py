"""The exceptions of the wsync package: one class per exit status of wsync(7).

Every failure of a wsync program or of libwsync raises a WsyncError (or one of
its subclasses) carrying the exit status the program had, or would have had:

    try:
        wsync.push("policy", "ckpt.safetensors", wait="all", timeout=30)
    except wsync.TimedOut as e:      # e.status == 75: published, some workers late
        print(e)
"""
from typing import Dict, Type


class WsyncError(RuntimeError):
    """A wsync program or libwsync failed: status is its exit status (wsync(7)),
    str(error) its message."""

    status = 70

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message.strip() or f"exit status {status}")
        self.status = status


class NothingNewer(WsyncError):
    """Status 1: a plain "no" (nothing newer than asked, files differ)."""


class UsageError(WsyncError):
    """Status 64: a bad argument (a model id, an option, a dtype)."""


class DataError(WsyncError):
    """Status 65: a bad weight file or tensor."""


class NotFound(WsyncError):
    """Status 66: an input is missing: no such file, model or version."""


class HubUnavailable(WsyncError):
    """Status 69: no hub answered."""


class InternalError(WsyncError):
    """Status 70: an internal error (or a program that stopped unexpectedly)."""


class WsyncIOError(WsyncError):
    """Status 74: an I/O error."""


class TimedOut(WsyncError):
    """Status 75: timed out; try again (a wait names the workers that did not apply)."""


class ProtocolError(WsyncError):
    """Status 76: the hub or a program broke the protocol."""


class PermissionDenied(WsyncError):
    """Status 77: authentication or authorization failed."""


class NotInstalled(WsyncError):
    """Status 127 (a shell's "command not found"): libwsync or a wsync program
    cannot be found; the message says which and where it was looked for."""


_BY_STATUS: Dict[int, Type[WsyncError]] = {
    1: NothingNewer, 64: UsageError, 65: DataError, 66: NotFound, 69: HubUnavailable,
    70: InternalError, 74: WsyncIOError, 75: TimedOut, 76: ProtocolError,
    77: PermissionDenied, 127: NotInstalled,
}


def error(status: int, message: str = "") -> WsyncError:
    """The exception for exit status status: its subclass when it has one."""
    return _BY_STATUS.get(status, WsyncError)(status, message)
