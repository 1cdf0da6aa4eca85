"""Typed domain errors and their single mapping to JSON error bodies.

Domain services raise these; the HTTP layer turns them into
``{"error": {"code", "message", "details"?}}`` with the status the class
carries. Nothing else in the code base builds error responses by hand.

An error body is always valid, small JSON whatever the request held: strings
echoed back (a rejected value, a message quoting it) are cut to
``MAX_ECHO_CHARS``, lists to ``MAX_ECHO_ITEMS``, and NaN/±Infinity become
strings, which JSON has no literal for.
"""

from __future__ import annotations

import math
from typing import Any

MAX_ECHO_CHARS = 200
MAX_MESSAGE_CHARS = 1000
MAX_ECHO_ITEMS = 100
MAX_ECHO_DEPTH = 8


def truncate_text(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def safe_echo(value: Any, depth: int = 0) -> Any:
    """``value`` made fit for an error body (short strings, finite numbers, bounded size)."""
    if isinstance(value, str):
        return truncate_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= MAX_ECHO_DEPTH:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ECHO_ITEMS]
        return {truncate_text(str(k)): safe_echo(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple | set | frozenset):
        return [safe_echo(v, depth + 1) for v in list(value)[:MAX_ECHO_ITEMS]]
    return truncate_text(str(value))


class ApiError(Exception):
    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.code,
            "message": truncate_text(str(self.message), MAX_MESSAGE_CHARS),
        }
        if self.details is not None:
            error["details"] = safe_echo(self.details)
        return {"error": error}


class ValidationError(ApiError):
    status = 400
    code = "validation_failed"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class Unprocessable(ApiError):
    """Well-formed, but refused for what it contains; sending it again cannot succeed."""

    status = 422
    code = "unprocessable"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class RateLimited(ApiError):
    status = 429
    code = "rate_limited"


class TooManyQueued(RateLimited):
    """A fan-out cap (run-now cooldown, queued exports per user): 429 with Retry-After."""

    def __init__(self, message: str, *, retry_after: int, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = max(1, int(retry_after))
        self.headers.setdefault("Retry-After", str(self.retry_after))


class Unavailable(ApiError):
    """A dependency is temporarily unavailable; the client should retry after a while."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after
        if retry_after is not None:
            self.headers.setdefault("Retry-After", str(retry_after))


class PoolTimeout(Unavailable):
    """The database connection pool had no free connection in time (ING-4)."""

    code = "database_busy"

    def __init__(self, message: str = "database connection pool exhausted; retry shortly"):
        super().__init__(message, retry_after=2)
