"""Who may open a console page, and the CSRF check of every console form (WEB-1, WEB-2).

Pages use the API's own server-side sessions (a session is valid only while its
row exists), so signing in on the console or through ``/api/auth/login`` is the
same thing. An anonymous visitor is redirected to the sign-in page with the page
they asked for; a signed-in user opening an admin page gets a 403 page.

Every state-changing request carries the session's CSRF token, as the hidden
form field ``csrf_token`` (or the ``X-CSRF-Token`` header, which the console's
script and the API use). A missing or wrong token is answered with a page that
says so, and nothing is done. The sign-in form is protected too: an anonymous
visitor gets a token in the (signed) cookie session before the form is shown,
so another site cannot sign a browser into an account of its choosing.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from flask import g, redirect, request, session, url_for

from app.errors import Forbidden
from app.http.guards import CSRF_HEADER, SAFE_METHODS, live_session_user, mark_access
from app.http.ratelimit import admin_limit, limiter, session_or_address_key
from app.identity.users import User

CSRF_FIELD = "csrf_token"


class CsrfFailed(Forbidden):
    code = "csrf_failed"


def ensure_csrf_token() -> str:
    """The session's CSRF token; an anonymous visitor gets one for the sign-in form."""
    token = session.get("csrf")
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def check_csrf() -> None:
    if request.method in SAFE_METHODS:
        return
    expected = session.get("csrf") or ""
    given = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER, "")
    if not expected or not given or not hmac.compare_digest(str(expected), str(given)):
        raise CsrfFailed(
            "this form has expired or did not come from this console; "
            "nothing was changed. Reload the page and try again.",
        )


def safe_next(target: str | None) -> str | None:
    """A redirect target after sign-in: only a path of this console, never another site."""
    if not target or not target.startswith("/console/") or target.startswith("//"):
        return None
    # CR/LF would split the Location header (a 500, or worse); no control character,
    # whitespace or line separator belongs in a path we redirect to.
    if any(ch.isspace() or not ch.isprintable() for ch in target):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or "\\" in target:
        return None
    # A dot segment (``..``, also percent-encoded, which browsers resolve alike) or an
    # empty one would lead the browser out of /console/ when it resolves the Location.
    segments = [unquote(segment) for segment in parts.path.split("/")[1:]]
    if any(segment in ("", ".", "..") for segment in segments[:-1]) or segments[-1] in (
        ".",
        "..",
    ):
        return None
    return target


def _signed_in() -> User | None:
    user = live_session_user()
    if user is not None:
        g.user = user
    return user


def _to_sign_in():
    wanted = request.full_path if request.method in SAFE_METHODS else None
    return redirect(url_for("web.sign_in", next=safe_next(wanted and wanted.rstrip("?"))))


def page_user(view: Callable[..., Any]) -> Callable[..., Any]:
    """A page for any signed-in user; anonymous visitors go to the sign-in page."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _signed_in() is None:
            return _to_sign_in()
        check_csrf()
        return view(*args, **kwargs)

    return mark_access(wrapper, "user")


def page_admin(view: Callable[..., Any]) -> Callable[..., Any]:
    """An admin page; its forms fall under the API's admin rate limit."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        user = _signed_in()
        if user is None:
            return _to_sign_in()
        check_csrf()
        if not user.is_admin:
            raise Forbidden("this page is for administrators", code="forbidden")
        return view(*args, **kwargs)

    # Admin actions (POST) share the API's admin budget; reading admin pages does not.
    limited = limiter.limit(admin_limit, key_func=session_or_address_key, methods=["POST"])(wrapper)
    return mark_access(limited, "admin")


def page_public(view: Callable[..., Any]) -> Callable[..., Any]:
    """A page anyone may open (sign-in, static files); forms on it still need CSRF."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_csrf()
        return view(*args, **kwargs)

    return mark_access(wrapper, "public")


def signed_in_user() -> User:
    return g.user
