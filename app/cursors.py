"""Opaque keyset cursors for every paged list (tasks, executions, results, assets).

A cursor is the position after the last row of a page plus whatever the first
page computed once (the exact IP total of ING-10), encoded as URL-safe base64
JSON. Both adapters use the same encoding, so a cursor names a position, not
an adapter's internals. A cursor this code did not issue (or one for another
kind of page) is rejected with a 400 ``invalid_cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from app.errors import ValidationError


def encode_cursor(kind: str, position: dict[str, Any]) -> str:
    raw = json.dumps({**position, "_kind": kind}, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def bad_cursor() -> ValidationError:
    """The 400 for a cursor this server did not issue (or that it cannot read back)."""
    return ValidationError(
        "cursor is not one this server issued",
        code="invalid_cursor",
        details={"parameter": "cursor"},
    )


def decode_cursor(kind: str, cursor: str | None) -> dict[str, Any] | None:
    """The position inside ``cursor`` (``None`` for the first page)."""
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict) or value.get("_kind") != kind:
        raise bad_cursor()
    value.pop("_kind")
    return value


def cursor_int(position: dict[str, Any], key: str) -> int:
    """An integer a decoded cursor must carry (anything else: ``bad_cursor``)."""
    value = position.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_cursor()
    return value


def cursor_str(position: dict[str, Any], key: str) -> str:
    """A string a decoded cursor must carry (anything else: ``bad_cursor``)."""
    value = position.get(key)
    if not isinstance(value, str):
        raise bad_cursor()
    return value
