"""The web console: server-rendered pages over the same services the API uses (WEB-1..6).

Everything lives under ``/console``: Jinja templates (autoescaped, so every value a
user, scanner or target controls is printed as text), one stylesheet and one small
script served from ``/console/static`` (the strict Content-Security-Policy allows
no inline script or style). Pages call the domain services directly, never the
HTTP API; errors of the domain (a 400 naming a field, a 404 for another user's
task) become HTML pages with the same status instead of JSON bodies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, g, render_template, request
from werkzeug.exceptions import HTTPException

from app.errors import ApiError
from app.http.requests import check_form_fields

blueprint = Blueprint("web", __name__, url_prefix="/console", template_folder="templates")


@blueprint.app_template_filter("when")
def format_when(value: Any) -> str:
    """An ISO timestamp or datetime as ``2026-11-30 18:04:05Z`` (UTC), empty for None."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


@blueprint.app_template_filter("url_origin")
def format_url_origin(value: str | None) -> str:
    """A URL's scheme and host only: a webhook's path and query often hold its secret."""
    parts = urlsplit(value or "")
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.netloc else ""


@blueprint.app_template_filter("counted")
def format_counted(value: int, singular: str, plural: str | None = None) -> str:
    """A count with its noun: ``1 address``, ``3 addresses`` (``plural``: singular + "s")."""
    return f"{value} {singular if value == 1 else (plural or singular + 's')}"


# Projection states in a user's words: whether the scan's findings are in the asset view yet.
ASSET_VIEW_WORDS = {
    "pending": "waiting to be published",
    "running": "being published",
    "retrying": "publishing (retrying)",
    "ready": "published",
    "not_started": "not started yet",
    "not_applicable": "nothing to publish",
}


@blueprint.app_template_filter("asset_view")
def asset_view(status: str | None) -> str:
    """A projection status as the console shows it (console.js has the same words)."""
    return ASSET_VIEW_WORDS.get(status or "", status or "")


@blueprint.context_processor
def page_context() -> dict[str, Any]:
    from app.web.access import ensure_csrf_token

    return {"csrf_token": ensure_csrf_token(), "me": g.get("user")}


def error_message(error: ApiError) -> str:
    """A refusal as a form shows it: each field's reason when the error names fields."""
    fields = (error.details or {}).get("fields")
    if isinstance(fields, dict) and fields:
        return "; ".join(f"{name}: {reason}" for name, reason in fields.items())
    return error.message


def _error_page(status: int, code: str, message: str, headers: dict[str, str] | None = None):
    body = render_template(
        "console/error.html", status=status, code=code, message=message, path=request.path
    )
    return body, status, headers or {}


# A NUL in a form field is a 400 naming the field (the API's JSON bodies get the same).
blueprint.before_request(check_form_fields)


@blueprint.errorhandler(ApiError)
def api_error_page(error: ApiError):
    return _error_page(error.status, error.code, error.message, error.headers)


@blueprint.errorhandler(HTTPException)
def http_error_page(error: HTTPException):
    code = "rate_limited" if error.code == 429 else (error.name or "error").lower()
    return _error_page(error.code or 500, code.replace(" ", "_"), error.description or "")


def unmatched_address_page(error: HTTPException):
    """An address under ``/console`` that no console page has (a typo, an old bookmark) is
    answered with the console's error page, not the API's JSON body; None elsewhere.

    The application's own handler calls it: an address no route matches never reaches
    the blueprint's handlers. No session is read for it: the page shows no account."""
    if request.path != blueprint.url_prefix and not request.path.startswith(
        f"{blueprint.url_prefix}/"
    ):
        return None
    if error.code == 405:
        # A form's action opened as a page (a bookmark, a pasted address, a reload).
        allowed = sorted(getattr(error, "valid_methods", None) or ())
        return _error_page(
            405,
            "method_not_allowed",
            "This address is where a form of the console sends its answer; open the page "
            "the form is on instead.",
            {"Allow": ", ".join(allowed)} if allowed else None,
        )
    if error.code != 404:
        return None
    return _error_page(404, "not_found", "There is no console page at this address.")


from app.web import (  # noqa: E402,F401 - the views register themselves on the blueprint
    account_pages,
    admin_pages,
    alert_pages,
    api_pages,
    asset_pages,
    change_pages,
    export_pages,
    host_pages,
    ops_pages,
    report_pages,
    saved_search_pages,
    scanner_pages,
    schedule_pages,
    search_help_pages,
    session_pages,
    task_pages,
    token_pages,
    traffic_pages,
)
