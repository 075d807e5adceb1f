"""Exceptions raised by the ckptd client.

Every JSON-RPC error the daemon returns becomes a :class:`CkptdError` subclass chosen by its
``code`` (see docs/protocol.md, "Errors"); ``message`` and ``data`` are the daemon's. Failures
that are not JSON-RPC errors (the daemon process died, the binary was not found, the client was
closed) have ``code`` ``None``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Type

__all__ = [
    "CkptdError",
    "ProtocolError",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "CheckpointNotFound",
    "CheckpointCorrupt",
    "Conflict",
    "TooLarge",
    "ResumeValidationError",
    "StorageUnavailable",
    "ShuttingDown",
    "Claimed",
    "ClaimLost",
    "DaemonDied",
    "BinaryNotFound",
    "ClientClosed",
    "ClientForked",
    "WrongEventLoop",
    "FramingError",
    "Interrupted",
    "error_from_response",
]


class CkptdError(Exception):
    """Base class of every ckptd client error.

    ``code`` is the JSON-RPC error code (``None`` for errors that did not come from the daemon),
    ``message`` the daemon's message and ``data`` its ``data`` member (``None`` when absent).
    """

    code: Optional[int] = None

    def __init__(self, code: Optional[int], message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return "%s (code %d)" % (self.message, self.code)

    def __repr__(self) -> str:
        return "%s(code=%r, message=%r, data=%r)" % (type(self).__name__, self.code, self.message, self.data)

    def __reduce__(self) -> Any:  # picklable despite the 3-argument constructor
        return (_rebuild, (type(self), self.code, self.message, self.data))


def _rebuild(cls: Type[CkptdError], code: Optional[int], message: str, data: Any) -> CkptdError:
    err = cls.__new__(cls)
    CkptdError.__init__(err, code, message, data)
    return err


class ProtocolError(CkptdError):
    """-32700 (parse error) or -32600 (invalid request), or a malformed frame from the daemon."""


class MethodNotFound(CkptdError):
    """-32601: the daemon does not know the method (e.g. an older server)."""


class InvalidParams(CkptdError):
    """-32602: a param is missing, of the wrong type or out of range (``data``: {field, reason})."""


class InternalError(CkptdError):
    """-32603: a bug in ckptd."""


class CheckpointNotFound(CkptdError):
    """-32001: the checkpoint or workflow does not exist."""


class CheckpointCorrupt(CkptdError):
    """-32002: the stored checkpoint fails verification (``data``: {checkpointId, reason}, plus
    ``alsoCorrupt`` [{checkpointId, reason}] when a latest-load found no intact checkpoint)."""


class Conflict(CkptdError):
    """-32003: the checkpointId was saved with different content, or belongs to another workflow."""


class TooLarge(CkptdError):
    """-32004: a state or frame is over the daemon's limit (``data``: {limit, size})."""


class ResumeValidationError(CkptdError):
    """-32005: ``resume/plan`` found problems; ``problems`` lists them all."""

    @property
    def problems(self) -> List[Dict[str, Any]]:
        data = self.data
        if isinstance(data, dict):
            probs = data.get("problems")
            if isinstance(probs, list):
                return probs
        return []


class StorageUnavailable(CkptdError):
    """-32006: disk full, I/O error, database locked too long."""


class ShuttingDown(CkptdError):
    """-32007: the request arrived after ``shutdown``."""


class Claimed(CkptdError):
    """-32008: the workflow's claim refused the call: another worker's live claim refused
    ``workflow/claim``, or a write (or renewal) carried a fencing token that is no longer the
    workflow's (it was claimed again since, or released), or none while the claim is live.
    ``data``: ``{workflowId, owner, expiresAt, reason}``, the claim as the daemon saw it
    (``owner`` and ``expiresAt`` are ``None`` when nobody holds it)."""

    def _field(self, key: str) -> Any:
        return self.data.get(key) if isinstance(self.data, dict) else None

    @property
    def workflow_id(self) -> Optional[str]:
        return self._field("workflowId")  # type: ignore[no-any-return]

    @property
    def owner(self) -> Optional[str]:
        """Who holds the claim now (``None``: nobody)."""
        return self._field("owner")  # type: ignore[no-any-return]

    @property
    def expires_at(self) -> Optional[str]:
        """When the holder's lease ends, by the database's clock (for people: do not compare it
        with this machine's clock)."""
        return self._field("expiresAt")  # type: ignore[no-any-return]

    @property
    def reason(self) -> Optional[str]:
        return self._field("reason")  # type: ignore[no-any-return]


class ClaimLost(Claimed):
    """A claim helper (``client.claim(...)``) lost its claim while the block ran: a renewal was
    refused (``code`` -32008 and the daemon's ``data``: another worker took the workflow over), or
    no renewal got through before the lease ran out (``code`` ``None``; ``data`` says the same
    fields as far as this client knows them, the cause is chained). Saves made with the claim's
    token after another worker took over are refused too (as :class:`Claimed`)."""


class DaemonDied(CkptdError):
    """The daemon process exited (or closed its stdout): every pending and later call fails with it.

    ``exit_code`` is the process's return code (negative: killed by that signal; ``None`` if
    it could not be determined) and ``stderr_tail`` the last bytes it wrote to stderr.
    """

    def __init__(self, message: str, exit_code: Optional[int] = None, stderr_tail: str = "") -> None:
        super().__init__(None, message, {"exitCode": exit_code, "stderrTail": stderr_tail})
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def __reduce__(self) -> Any:
        return (DaemonDied, (self.message, self.exit_code, self.stderr_tail))


class BinaryNotFound(CkptdError):
    """No ckptd executable was found; ``searched`` lists every place that was looked at."""

    def __init__(self, message: str, searched: Sequence[str] = ()) -> None:
        super().__init__(None, message, {"searched": list(searched)})
        self.searched = list(searched)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        return (BinaryNotFound, (self.message, self.searched))


class ClientClosed(CkptdError):
    """The client was closed; no more calls can be made."""

    def __init__(self, message: str = "the ckptd client is closed") -> None:
        super().__init__(None, message, None)

    def __reduce__(self) -> Any:
        return (ClientClosed, (self.message,))


class ClientForked(CkptdError):
    """A client created with ``on_fork="error"`` was used in a process forked from the one that
    started its daemon (``parent_pid``). The parent's daemon belongs to the parent: create a new
    client in this process, or leave ``on_fork`` at its default (``"spawn"``: the client starts its
    own daemon on the same database when first used here)."""

    def __init__(self, parent_pid: int, child_pid: int) -> None:
        super().__init__(
            None,
            "this ckptd client was started in process %d and is used in process %d, a fork of it; it was "
            "created with on_fork='error': create a new client in this process (or use on_fork='spawn', "
            "the default, to have it start its own daemon here)" % (parent_pid, child_pid),
            {"parentPid": parent_pid, "pid": child_pid},
        )
        self.parent_pid = parent_pid
        self.child_pid = child_pid

    def __reduce__(self) -> Any:
        return (ClientForked, (self.parent_pid, self.child_pid))


class WrongEventLoop(CkptdError):
    """An :class:`~ckptd.AsyncClient` attached to an event loop that is running in another thread
    was used from a different loop. ``loop`` is the loop it is attached to (as text), ``used_from``
    the loop of the call. Use one AsyncClient per loop (or the thread-safe :class:`ckptd.Client`)."""

    def __init__(self, loop: str, used_from: str) -> None:
        super().__init__(
            None,
            "this ckptd AsyncClient is attached to event loop %s, which is running in another thread, and "
            "was called from event loop %s: an AsyncClient serves one running loop at a time; create one "
            "per loop (or share a thread-safe ckptd.Client)" % (loop, used_from),
            {"loop": loop, "usedFrom": used_from},
        )
        self.loop = loop
        self.used_from = used_from

    def __reduce__(self) -> Any:
        return (WrongEventLoop, (self.loop, self.used_from))


class FramingError(CkptdError):
    """A frame could not be read. ``kind`` is ``"header"`` (bad header block) or ``"eof"`` (the
    stream ended inside a frame)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(None, message, {"kind": kind})
        self.kind = kind

    def __reduce__(self) -> Any:
        return (FramingError, (self.kind, self.message))


class Interrupted(KeyboardInterrupt):
    """Raised inside a workflow step when the process receives SIGTERM (like KeyboardInterrupt
    for SIGINT), so the step helper can save an ``interrupted`` checkpoint before exiting."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__("interrupted by signal %d" % signum)
        self.signum = signum


_BY_CODE: Dict[int, Type[CkptdError]] = {
    -32700: ProtocolError,
    -32600: ProtocolError,
    -32601: MethodNotFound,
    -32602: InvalidParams,
    -32603: InternalError,
    -32001: CheckpointNotFound,
    -32002: CheckpointCorrupt,
    -32003: Conflict,
    -32004: TooLarge,
    -32005: ResumeValidationError,
    -32006: StorageUnavailable,
    -32007: ShuttingDown,
    -32008: Claimed,
}


def error_from_response(err: Any) -> CkptdError:
    """Turns a JSON-RPC error object into the matching exception."""
    if not isinstance(err, dict):
        return ProtocolError(None, "malformed error object from ckptd: %r" % (err,))
    code = err.get("code")
    message = err.get("message")
    if not isinstance(message, str):
        message = str(message)
    data = err.get("data")
    cls = _BY_CODE.get(code, CkptdError) if isinstance(code, int) else CkptdError
    return cls(code if isinstance(code, int) else None, message, data)
