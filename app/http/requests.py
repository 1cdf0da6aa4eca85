"""Request parsing shared by the blueprints: JSON bodies, limits, opaque keyset cursors."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from app import cursors
from app.errors import ValidationError, truncate_text
from app.http import context
from app.json_input import decode_json, require_clean_json
from app.parameters import datetime_param, decimal_int, int_param

_SURROGATE = re.compile("[\ud800-\udfff]")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def request_body(*, cache: bool = True) -> bytes:
    """The raw body, with the size limit holding for chunked bodies too.

    Werkzeug reads a body without Content-Length (chunked, as gunicorn passes it)
    only up to ``MAX_CONTENT_LENGTH`` and silently drops the rest, which would turn
    an oversized body into a truncated one ("invalid JSON"); read one byte more
    ourselves and answer 413 instead.
    """
    limit = context.settings().ingest.max_body_bytes  # Flask's MAX_CONTENT_LENGTH
    if request.content_length is None and limit and request.environ.get("wsgi.input_terminated"):
        cached = request.environ.get("netmap.body")
        if cached is not None:
            return cached
        data = request.environ["wsgi.input"].read(limit + 1)
        if len(data) > limit:
            raise RequestEntityTooLarge(f"request body is larger than {limit} bytes")
        if cache:
            request.environ["netmap.body"] = data
        return data
    return request.get_data(cache=cache)


def json_body(*, allow_nul: bool = False) -> dict[str, Any]:
    """The request's JSON object, or a 400 that says what is wrong with it.

    ``allow_nul`` is for routes whose own validation names a NUL precisely.
    """
    if not request.is_json:
        raise ValidationError(
            "request body must be JSON (Content-Type: application/json)", code="invalid_json"
        )
    data = request_body()
    body = decode_json(data)
    # NUL and lone surrogates in names, passwords or reasons are refused here, once for
    # every JSON route, rather than failing later in the database driver.
    require_clean_json(body, allow_nul=allow_nul, raw=data)
    if not isinstance(body, dict):
        raise ValidationError("request body must be a JSON object", code="invalid_json")
    return body


def check_query_parameters() -> None:
    """Before every request: no NUL or lone surrogate in query parameter names or values.

    PostgreSQL text cannot hold NUL and a lone surrogate cannot be encoded as
    UTF-8, so either would fail deep in a query; refusing them once here keeps
    every route's parameters (``q``, ``service``, ``product``, ``domain`` …) safe.
    """
    _check_fields(request.args, "query parameter", "parameter")


def check_form_fields() -> None:
    """Before a console request: the same for the fields of a URL-encoded form body (the
    console's forms), so a NUL typed into a name or a URL is a 400 naming the field, as
    the API's JSON check makes it, rather than a failure in the database driver.
    Multipart bodies are left to their route: an import sets its own size limit before
    its body is parsed."""
    if request.mimetype == "application/x-www-form-urlencoded":
        _check_fields(request.form, "form field", "field")


def _check_fields(fields, what: str, key: str) -> None:
    for name, value in fields.items(multi=True):
        for text in (name, value):
            problem = "NUL" if "\x00" in text else None
            if problem is None and _SURROGATE.search(text):
                problem = "a lone UTF-16 surrogate"
            if problem:
                raise ValidationError(
                    f"{what} {truncate_text(name, 64)!r} contains {problem}",
                    code="invalid_parameter",
                    details={key: truncate_text(name, 64)},
                )


def page_limit(default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> int:
    raw = request.args.get("limit")
    if raw is None or raw == "":
        return default
    try:
        value = decimal_int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= maximum:
        raise ValidationError(
            f"limit must be an integer between 1 and {maximum}",
            code="invalid_parameter",
            details={"parameter": "limit", "value": raw},
        )
    return value


def encode_cursor(
    position: dict[str, Any], kind: str | None = None, *, endpoint: str | None = None
) -> str:
    """A cursor for the list at ``endpoint`` (default: this request's, which lists); a
    page that links to another route's list (a console page shown again by a form's
    POST) names that route."""
    return cursors.encode_cursor(_page_kind(kind, endpoint), position)


def decode_cursor(parameter: str = "cursor", kind: str | None = None) -> dict[str, Any] | None:
    return cursors.decode_cursor(_page_kind(kind), request.args.get(parameter))


def _page_kind(kind: str | None, endpoint: str | None = None) -> str:
    """A list's cursors are its own: without a kind of its own, a cursor is signed for the
    route that lists (its endpoint), so one list's cursor given to another is a 400
    ``invalid_cursor``, not a page of that list read from a position of another."""
    return kind if kind is not None else f"page.{endpoint or request.endpoint}"


def int_arg(name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    return int_param(request.args, name, minimum=minimum, maximum=maximum)


def datetime_arg(name: str) -> datetime | None:
    """An ISO 8601 timestamp query parameter; one without a zone is read as UTC."""
    return datetime_param(request.args, name)
