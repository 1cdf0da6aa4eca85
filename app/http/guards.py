"""Who may call a route: session users (with CSRF), admins, scanners, or anyone.

Every view is wrapped by exactly one of these decorators; a test walks the URL
map and fails when a route has none. Session-authenticated state-changing
requests must carry the session's CSRF token in ``X-CSRF-Token`` (IDN-2);
bearer-token routes (scanners, rollup ingest) ignore cookies entirely, so a
browser cannot be tricked into acting as a scanner. A session is valid only
while its server-side row exists (IDN-1), so every request checks it.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flask import g, request, session

from app.errors import Forbidden, Unauthorized
from app.http import context
from app.http.ratelimit import admin_limit, limiter, session_or_address_key
from app.identity import service as identity
from app.identity.api_tokens import TOKEN_PREFIX as API_TOKEN_PREFIX
from app.identity.scanners import Scanner
from app.identity.users import User

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "X-CSRF-Token"


def _mark(view: Callable[..., Any], access: str) -> Callable[..., Any]:
    view._netmap_access = access  # type: ignore[attr-defined]
    return view


def start_session(user: User) -> str:
    """Log the user in: a fresh server-side session, cookie and CSRF token."""
    # The same lifetime create_app gives Flask (PERMANENT_SESSION_LIFETIME) for the cookie.
    lifetime = timedelta(hours=context.settings().security.session_lifetime_hours)
    session_id = identity.start_session(user.id, lifetime)
    session.clear()
    session.permanent = True
    session["uid"] = user.id
    session["sid"] = session_id
    session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def end_session() -> None:
    """Log out: the server-side row goes, so copies of the cookie stop working too."""
    session_id = session.get("sid")
    if isinstance(session_id, str):
        identity.end_session(session_id)
    session.clear()


def session_id() -> str | None:
    """The id of this request's session (None for a token's request or no session)."""
    value = session.get("sid")
    return value if isinstance(value, str) else None


def csrf_token() -> str | None:
    return session.get("csrf")


def _check_csrf() -> None:
    if request.method in SAFE_METHODS:
        return
    expected = session.get("csrf") or ""
    given = request.headers.get(CSRF_HEADER, "")
    if not expected or not given or not hmac.compare_digest(expected, given):
        raise Forbidden(
            f"missing or wrong {CSRF_HEADER} header for a session-authenticated request",
            code="csrf_failed",
        )


def _live_session_user() -> User | None:
    """The user of the cookie's session if that session is still live, else None."""
    uid, session_id = session.get("uid"), session.get("sid")
    if not isinstance(uid, int) or not isinstance(session_id, str):
        return None
    user = identity.user_for_session(session_id, uid)
    if user is None:
        session.clear()
    return user


def live_session_user() -> User | None:
    """The signed-in user of this request's cookie, or None (for the web console's pages)."""
    return _live_session_user()


def mark_access(view: Callable[..., Any], access: str) -> Callable[..., Any]:
    """Declare a view's access rule (the web console's own decorators use this)."""
    return _mark(view, access)


def bearer_refused(message: str, realm: str, code: str = "invalid_token") -> Unauthorized:
    """The 401 for a missing or wrong bearer token, naming the realm it is for."""
    return Unauthorized(message, code=code, headers={"WWW-Authenticate": f'Bearer realm="{realm}"'})


def _request_user() -> User:
    """The caller: a personal API token's user (``Authorization: Bearer nmu_…``), else the
    session's. A token request carries no cookie a browser could add on its own, so it
    needs no CSRF header; a bearer header that is not a live user token is a 401, whatever
    cookie comes with it."""
    token = bearer_token()
    if token is not None:
        found = identity.user_for_api_token(token)
        if found is None:
            raise bearer_refused("invalid, expired or revoked API token", "netmap", "unauthorized")
        if found.access == "read" and request.method not in SAFE_METHODS:
            raise Forbidden("this API token may only read (GET and HEAD)", code="read_only_token")
        g.user, g.api_token = found.user, True
        return found.user
    user = _live_session_user()
    if user is None:
        raise Unauthorized("login required", code="unauthorized")
    _check_csrf()
    g.user = user
    return user


def signed_in_with_token() -> bool:
    """Whether this request's user came from an API token rather than a session."""
    return bool(g.get("api_token"))


def require_session(view: Callable[..., Any]) -> Callable[..., Any]:
    """A user route that acts on the session itself (sign out, change the password, make
    an API token): a token's caller gets 403, so a leaked token cannot mint more tokens
    or take over the account."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _request_user()
        if signed_in_with_token():
            raise Forbidden(
                "this needs a signed-in session, not an API token", code="session_required"
            )
        return view(*args, **kwargs)

    return _mark(wrapper, "user")


def optional_admin() -> bool:
    """Whether a public route is being read by a logged-in admin (for extra detail)."""
    if not session.get("sid"):
        return False
    user = _live_session_user()
    return user is not None and user.is_admin


def require_user(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _request_user()
        return view(*args, **kwargs)

    return _mark(wrapper, "user")


def require_admin(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        user = _request_user()
        if not user.is_admin:
            raise Forbidden("admin privileges required", code="forbidden")
        return view(*args, **kwargs)

    limited = limiter.limit(admin_limit, key_func=session_or_address_key)(wrapper)
    return _mark(limited, "admin")


def require_scanner(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = bearer_token()
        scanner = None
        if token:
            scanner = identity.authenticate_scanner(token)
        if scanner is None:
            raise bearer_refused("a valid scanner token is required", "netmap-scanner")
        g.scanner = scanner
        return view(*args, **kwargs)

    return _mark(wrapper, "scanner")


def require_bearer(check: Callable[[str], bool], realm: str) -> Callable[..., Any]:
    """A route authenticated by some other bearer secret (e.g. the rollup ingest token)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            token = bearer_token()
            if not token or not check(token):
                raise bearer_refused("a valid bearer token is required", realm)
            return view(*args, **kwargs)

        return _mark(wrapper, "bearer")

    return decorator


def require_admin_or_bearer(check: Callable[[str], bool], realm: str) -> Callable[..., Any]:
    """Operators' routes (``/metrics``): a bearer secret for scrapers, or an admin (by
    session or by the admin's API token)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            token = bearer_token()
            if token is not None and not token.startswith(API_TOKEN_PREFIX):
                if not check(token):
                    raise bearer_refused("a valid bearer token is required", realm)
                return view(*args, **kwargs)
            user = _request_user()
            if not user.is_admin:
                raise Forbidden("admin privileges required", code="forbidden")
            return view(*args, **kwargs)

        return _mark(wrapper, "admin_or_bearer")

    return decorator


def public(view: Callable[..., Any]) -> Callable[..., Any]:
    return _mark(view, "public")


def bearer_token() -> str | None:
    """The bearer token of ``Authorization``; None without a bearer header. A bearer header
    with no token is an empty token, which no check accepts: it is a 401 like a wrong one,
    not a request that falls back to the session cookie sent beside it."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip()


def current_user() -> User:
    return g.user


def current_scanner() -> Scanner:
    return g.scanner
