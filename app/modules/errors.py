"""How a module call fails: the kind decides whether the caller may retry (MOD-6).

``Unavailable`` is infrastructure (no healthy implementation, IPC fault, the
process died); ``Execution`` is the module saying this input is wrong (a
template error, invalid output). ``NotReady`` (nothing applied yet), ``Busy``
(host capacity exhausted) and ``DeadlineExceeded`` (the caller stopped
waiting; the work may still be running) are the other retryable kinds. A
report job keeps the kind until its retry decision (REP-4).
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    UNAVAILABLE = "Unavailable"
    NOT_READY = "NotReady"
    BUSY = "Busy"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    EXECUTION = "Execution"


RETRYABLE_KINDS = frozenset(
    {ErrorKind.UNAVAILABLE, ErrorKind.NOT_READY, ErrorKind.BUSY, ErrorKind.DEADLINE_EXCEEDED}
)


class ModuleError(Exception):
    def __init__(self, kind: ErrorKind, code: str, message: str):
        super().__init__(f"{kind}: {code}: {message}")
        self.kind = kind
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


def is_retryable(error: BaseException) -> bool:
    return isinstance(error, ModuleError) and error.retryable


class CandidateRejected(Exception):
    """A release cannot become a generation: bad id, files, digest, handshake or self-test."""

    def __init__(self, release_id: str, reason: str):
        super().__init__(f"release {release_id!r} rejected: {reason}")
        self.release_id = release_id
        self.reason = reason


class StaleRevision(Exception):
    """A generation for an older revision than the one applied was offered; it is not installed."""
