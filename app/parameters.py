"""Query parameter values parsed from their text, a refusal naming the parameter.

The HTTP layer reads them from ``request.args``; an asset export reads the same names
from its stored filters (app.search.asset_params), so one parameter means one thing
wherever it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from app.errors import ValidationError

_DECIMAL = re.compile(r"-?[0-9]{1,19}")


def decimal_int(text: str) -> int:
    """An integer written as people and clients write one in a URL: ASCII digits, an
    optional minus. Python's ``int`` also takes ``1_0``, ``+5``, `` 5`` and other scripts'
    digits (the full-width five), which no client means as a number; ValueError for those."""
    if _DECIMAL.fullmatch(text) is None:
        raise ValueError(f"not a decimal integer: {text[:40]!r}")
    return int(text)


def int_param(
    params: Mapping[str, str], name: str, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = decimal_int(raw)
    except ValueError:
        raise ValidationError(
            f"{name} must be an integer", code="invalid_parameter", details={"parameter": name}
        ) from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValidationError(
            f"{name} must be {_range_text(minimum, maximum)}",
            code="invalid_parameter",
            details={"parameter": name},
        )
    return value


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if maximum is None:
        return f"at least {minimum}"
    if minimum is None:
        return f"at most {maximum}"
    return f"between {minimum} and {maximum}"


def datetime_param(params: Mapping[str, str], name: str) -> datetime | None:
    """An ISO 8601 timestamp; one without a zone is read as UTC."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        # 9999-12-31T23:59:59-23:59 parses but is no UTC instant: refuse it here rather
        # than overflow in the driver.
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValidationError(
            f"{name} must be an ISO 8601 timestamp such as 2026-11-30T06:00:00Z "
            "(between years 1 and 9999 in UTC)",
            code="invalid_parameter",
            details={"parameter": name},
        ) from None


def text_param(params: Mapping[str, str], name: str, maximum: int) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if len(value) > maximum:
        raise ValidationError(
            f"{name} is longer than {maximum} characters",
            code="invalid_parameter",
            details={"parameter": name},
        )
    return value
