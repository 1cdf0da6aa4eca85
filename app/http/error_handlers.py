"""The single mapping from exceptions to JSON error bodies (FND-6).

Domain errors carry their status; Werkzeug's HTTP errors (404, 405, 413, 429 …)
become the same JSON shape with a snake_case code; anything unexpected is
logged as an ``UnhandledException`` event (with the trace, server-side only)
and answered with a bare 500 that names the request id. A database error is
logged as ``UnhandledDatabaseError`` with its class, the statement's name
(verb and table) and the request id only: SQLAlchemy's message and trace
carry the statement's parameters, which hold observations and usernames.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from flask import Flask, g, has_request_context, jsonify, request
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from app.errors import ApiError, PoolTimeout, Unavailable, Unprocessable
from app.observability import database_error, statement_name
from app.search.port import SearchTimedOut, StoreRefused, StoreUnavailable


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _api_error_response(error: ApiError):
    response = jsonify(error.body())
    response.status_code = error.status
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


def search_timeout_error(error: SearchTimedOut) -> Unavailable:
    """The answer to a search stopped at ``[search] interactive_timeout_seconds`` (the API's
    503 and the console's message say the same)."""
    seconds = f"{error.limit_ms / 1000:g}"
    return Unavailable(
        f"the search was stopped after {seconds} s; narrow it (a port, network, service "
        "or time condition) and try again",
        code="search_timeout",
        details={"limit_seconds": error.limit_ms / 1000},
    )


def _log_store_error(event: str, error: Exception) -> None:
    # The error class and the request id only: a store message can quote document content.
    logging.getLogger("netmap.http").error(
        "search store error",
        extra={
            "netmap_event": event,
            "netmap_fields": {
                "error": type(error).__name__,
                "request_id": getattr(g, "request_id", None),
                "path": request.path if has_request_context() else None,
            },
        },
    )


def register_error_handlers(
    app: Flask, *, page: Callable[[HTTPException], Any] | None = None
) -> None:
    """``page``: for an HTTP error raised outside every blueprint (an address no route
    matches), a page to answer with instead of the JSON body, or None: the console's own
    error page for an address under ``/console`` that is no console page."""

    @app.errorhandler(ApiError)
    def handle_api_error(error: ApiError):
        return _api_error_response(error)

    @app.errorhandler(HTTPException)
    def handle_http_error(error: HTTPException):
        if page is not None and request.blueprint is None:
            answer = page(error)
            if answer is not None:
                return answer
        code = _snake(error.name or "http_error")
        if error.code == 429:
            code = "rate_limited"
        response = jsonify({"error": {"code": code, "message": error.description or error.name}})
        response.status_code = error.code or 500
        if error.code == 405 and getattr(error, "valid_methods", None):
            response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
        return response

    @app.errorhandler(StoreRefused)
    def handle_store_refused(error: StoreRefused):
        # A refusal for the request's content (an Elasticsearch 4xx, a PostgreSQL data error):
        # the same request fails again, so it is a 422, never a retryable 503 or a 500.
        _log_store_error("SearchStoreRefused", error)
        return _api_error_response(
            Unprocessable("the search store refused this request", code="store_refused")
        )

    @app.errorhandler(SearchTimedOut)
    def handle_search_timed_out(error: SearchTimedOut):
        # The store logged it (SearchTimedOut). No Retry-After: the same search is likely
        # to be stopped again, so the answer asks for a narrower one.
        return _api_error_response(search_timeout_error(error))

    @app.errorhandler(StoreUnavailable)
    def handle_store_unavailable(error: StoreUnavailable):
        # Timeouts and outages are operators' business: an error event with the request id
        # (the client only sees a 503 with Retry-After).
        _log_store_error("SearchStoreUnavailable", error)
        return _api_error_response(
            Unavailable(
                "the search store is unavailable; retry shortly",
                code="store_unavailable",
                retry_after=getattr(error, "retry_after", None) or 5,
            )
        )

    @app.errorhandler(sa_exc.TimeoutError)
    def handle_pool_timeout(error: sa_exc.TimeoutError):
        return _api_error_response(PoolTimeout())

    @app.errorhandler(Exception)
    def handle_unexpected(error: Exception):
        request_id = getattr(g, "request_id", None)
        statement_error = database_error(error)
        if statement_error is not None:
            logging.getLogger("netmap.http").error(
                "unhandled database error",
                extra={
                    "netmap_event": "UnhandledDatabaseError",
                    "netmap_fields": {
                        "error": type(statement_error).__name__,
                        "statement": statement_name(getattr(statement_error, "statement", None)),
                        "request_id": request_id,
                    },
                },
            )
        else:
            # The trace goes to the server log only; the client sees the request id.
            logging.getLogger("netmap.http").error(
                "unhandled exception",
                exc_info=error,
                extra={
                    "netmap_event": "UnhandledException",
                    "netmap_fields": {"error": type(error).__name__, "request_id": request_id},
                },
            )
        response = jsonify(
            {
                "error": {
                    "code": "internal_error",
                    "message": "internal server error",
                    "details": {"request_id": request_id},
                }
            }
        )
        response.status_code = 500
        return response
