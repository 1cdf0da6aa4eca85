"""The object-store port: what callers need to keep, read and remove whole objects (EXP-1).

Objects are named by keys that both adapters validate the same way (EXP-2): one
to eight ``/``-separated segments of letters, digits, ``.``, ``_``, ``-`` and
``=``, no segment ``.`` or ``..``, nothing absolute, no NUL, at most 512
bytes. A key that breaks the rule raises ``InvalidObjectKey`` before any I/O,
so a bad key can never name a path outside the filesystem store's root.

``put`` streams: it accepts bytes, a binary file-like object or an iterable of
byte chunks and never holds the whole object in memory. It returns an
``ObjectRef`` with the size and SHA-256 of what was stored. ``delete`` answers
whether something was there (True: deleted, False: missing); transport failures
raise ``ObjectStoreUnavailable`` after the adapter's retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

MAX_KEY_BYTES = 512
MAX_KEY_SEGMENTS = 8
_SEGMENT = re.compile(r"[A-Za-z0-9._=-]{1,128}")

Payload = bytes | bytearray | memoryview | BinaryIO | Iterable[bytes]


class ObjectStoreError(Exception):
    """Base of object-store failures."""


class InvalidObjectKey(ObjectStoreError, ValueError):
    def __init__(self, key: object, reason: str):
        super().__init__(f"invalid object key: {reason}")
        self.reason = reason


class ObjectNotFound(ObjectStoreError):
    def __init__(self, key: str):
        super().__init__("no object under this key")
        self.key = key


class ObjectStoreUnavailable(ObjectStoreError):
    """The store could not be reached or kept failing after the retry budget."""


@dataclass(frozen=True)
class ObjectRef:
    key: str
    size: int
    sha256: str
    content_type: str


def validate_key(key: object) -> str:
    """The key itself when it follows the key rule; raises ``InvalidObjectKey`` otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidObjectKey(key, "must be a non-empty string")
    if "\x00" in key:
        raise InvalidObjectKey(key, "must not contain NUL")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidObjectKey(key, f"must be at most {MAX_KEY_BYTES} bytes")
    if key.startswith("/") or key.startswith("\\"):
        raise InvalidObjectKey(key, "must be relative (no leading '/')")
    segments = key.split("/")
    if len(segments) > MAX_KEY_SEGMENTS:
        raise InvalidObjectKey(key, f"must have at most {MAX_KEY_SEGMENTS} segments")
    for segment in segments:
        if segment in {".", ".."}:
            raise InvalidObjectKey(key, "must not contain '.' or '..' segments")
        if not _SEGMENT.fullmatch(segment):
            raise InvalidObjectKey(
                key, "segments must be 1-128 characters of A-Z a-z 0-9 . _ = -, separated by '/'"
            )
    return key


def key_prefix(key: str) -> str:
    """What events may say about a key: its first segment (the kind of object), never the rest,
    which can carry user or task identifiers."""
    return key.split("/", 1)[0] if isinstance(key, str) else "?"


def iter_chunks(payload: Payload, chunk_size: int = 1024 * 1024) -> Iterator[bytes]:
    """Byte chunks of any accepted payload, read lazily."""
    if isinstance(payload, bytes | bytearray | memoryview):
        view = memoryview(payload)
        for start in range(0, len(view), chunk_size):
            yield bytes(view[start : start + chunk_size])
        return
    read = getattr(payload, "read", None)
    if read is not None:
        while True:
            chunk = read(chunk_size)
            if not chunk:
                return
            yield chunk
    else:
        for chunk in payload:  # type: ignore[union-attr]
            if chunk:
                yield bytes(chunk)


class ObjectStore(Protocol):
    name: str  # "filesystem" | "s3"

    def put(self, key: str, payload: Payload, content_type: str) -> ObjectRef:
        """Store the payload under ``key`` (replacing what was there), streaming."""

    def open(self, key: str) -> BinaryIO:
        """A binary stream of the object; raises ``ObjectNotFound``. Close it when done."""

    def delete(self, key: str) -> bool:
        """Remove the object: True when it existed, False when it was already missing."""

    def exists(self, key: str) -> bool: ...

    def size(self, key: str) -> int:
        """Size in bytes; raises ``ObjectNotFound``."""

    def url_for(self, key: str, expires: int, *, filename: str | None = None) -> str:
        """A download URL valid for ``expires`` seconds (presigned on S3; a signed netmap
        URL on the filesystem store)."""

    def close(self) -> None: ...
