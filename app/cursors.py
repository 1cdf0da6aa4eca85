"""Opaque keyset cursors for every paged list (tasks, executions, results, assets).

A cursor is the position after the last row of a page plus whatever the first
page computed once (the exact IP total of ING-10), as URL-safe JSON signed
with the server's secret key (itsdangerous, one salt per kind of page). Both
adapters use the same encoding, so a cursor names a position, not an adapter's
internals. A cursor this server did not sign (forged, edited, truncated, or
issued for another kind of page) is refused with a 400 ``invalid_cursor``
before any of its values is looked at, so a forged position (a NaN, a scoped
IPv6 address, a nested object where an id belongs) never reaches a query.
"""

from __future__ import annotations

import secrets
from typing import Any

from itsdangerous import BadData, URLSafeSerializer

from app.errors import ValidationError

MAX_CURSOR_CHARS = 2048
_secret: str | bytes = secrets.token_bytes(32)  # until the app configures its key


def use_secret(secret: str | bytes) -> None:
    """Sign cursors with ``secret`` (``[security] secret_key``, set once at start-up), so a
    cursor issued by one web process is accepted by every other."""
    global _secret
    _secret = secret


def _serializer(kind: str) -> URLSafeSerializer:
    return URLSafeSerializer(_secret, salt=f"netmap.cursor.{kind}")


def encode_cursor(kind: str, position: dict[str, Any]) -> str:
    return _serializer(kind).dumps({**position, "_kind": kind})


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
        value = _serializer(kind).loads(cursor) if len(cursor) <= MAX_CURSOR_CHARS else None
    except (BadData, ValueError, UnicodeError, RecursionError):
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
