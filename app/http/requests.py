"""Request parsing shared by the blueprints: JSON bodies, limits, opaque keyset cursors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from flask import request

from app import cursors
from app.errors import ValidationError

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def json_body() -> dict[str, Any]:
    """The request's JSON object, or a 400 that says what is wrong with it."""
    if not request.is_json:
        raise ValidationError(
            "request body must be JSON (Content-Type: application/json)", code="invalid_json"
        )
    try:
        body = json.loads(request.get_data(cache=True) or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ValidationError("request body must be a JSON object", code="invalid_json")
    return body


def page_limit(default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> int:
    raw = request.args.get("limit")
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= maximum:
        raise ValidationError(
            f"limit must be an integer between 1 and {maximum}",
            code="invalid_parameter",
            details={"parameter": "limit", "value": raw},
        )
    return value


def encode_cursor(position: dict[str, Any], kind: str = "page") -> str:
    return cursors.encode_cursor(kind, position)


def decode_cursor(parameter: str = "cursor", kind: str = "page") -> dict[str, Any] | None:
    return cursors.decode_cursor(kind, request.args.get(parameter))


def int_arg(name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(
            f"{name} must be an integer", code="invalid_parameter", details={"parameter": name}
        ) from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValidationError(
            f"{name} must be between {minimum} and {maximum}",
            code="invalid_parameter",
            details={"parameter": name},
        )
    return value


def datetime_arg(name: str) -> datetime | None:
    """An ISO 8601 timestamp query parameter; one without a zone is read as UTC."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(
            f"{name} must be an ISO 8601 timestamp such as 2026-11-30T06:00:00Z",
            code="invalid_parameter",
            details={"parameter": name},
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
