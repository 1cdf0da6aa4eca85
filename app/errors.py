"""Typed domain errors and their single mapping to JSON error bodies.

Domain services raise these; the HTTP layer turns them into
``{"error": {"code", "message", "details"?}}`` with the status the class
carries. Nothing else in the code base builds error responses by hand.
"""

from __future__ import annotations

from typing import Any


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
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
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


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class RateLimited(ApiError):
    status = 429
    code = "rate_limited"


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
