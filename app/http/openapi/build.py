"""Assembles the areas' entries into one OpenAPI 3.1 document."""

from __future__ import annotations

import copy
import functools
from typing import Any

from app.http.openapi import (
    alerts,
    auth_admin,
    exports,
    fleet,
    inventory,
    monitoring,
    reports,
    scanner,
    system,
    tasks,
)
from app.http.openapi.components import SCHEMAS, errors

# One module per area; a new area's module is added here.
AREAS = (
    auth_admin,
    tasks,
    scanner,
    fleet,
    reports,
    exports,
    system,
    inventory,
    alerts,
    monitoring,
)

# Every operation can answer with the error envelope: any client error, and 503 when the
# database or the search store is unavailable (with Retry-After).
COMMON_ERRORS = ("4XX", "503")

SECURITY_SCHEMES = {
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "netmap_session",  # the app's SESSION_COOKIE_NAME
        "description": "The session cookie of POST /api/auth/login. Requests that change "
        "something also send the login answer's csrf_token as the X-CSRF-Token header.",
    },
    "token": {
        "type": "http",
        "scheme": "bearer",
        "description": "A personal API token (POST /api/auth/tokens): the user's routes "
        "as that user, no CSRF header needed.",
    },
    "scanner": {"type": "http", "scheme": "bearer", "description": "A scanner's token."},
    "metrics": {"type": "http", "scheme": "bearer", "description": "[security] metrics_token"},
    "traffic": {"type": "http", "scheme": "bearer", "description": "[traffic] ingest_token"},
}


def operations() -> dict[tuple[str, str], dict[str, Any]]:
    """Every documented (method, path), from every area; a duplicate is a mistake."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for area in AREAS:
        for key, entry in area.OPERATIONS.items():
            if key in found:
                raise ValueError(f"{key} is documented twice")
            found[key] = entry
    return found


@functools.cache
def _document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), entry in sorted(operations().items()):
        operation = copy.deepcopy(entry)
        operation.setdefault("operationId", _operation_id(method, path))
        responses = operation["responses"]
        for status, response in errors(*COMMON_ERRORS).items():
            responses.setdefault(status, response)
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "netmap API",
            "version": "1",
            "description": "The JSON API of netmap. Sign in with POST /api/auth/login; "
            'every error is {"error": {"code", "message", "details"?}}.',
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": SECURITY_SCHEMES},
    }


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may change theirs)."""
    return copy.deepcopy(_document())


def _operation_id(method: str, path: str) -> str:
    words = [p.strip("{}").replace("-", "_").replace(".", "_") for p in path.split("/") if p]
    return "_".join([method, *[w for w in words if w != "api"]])
