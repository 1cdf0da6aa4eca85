"""Rate limits (IDN-3) with Flask-Limiter; storage from ``[security] ratelimit_storage_uri``.

``memory://`` (the default) limits per process; point it at Redis
(``redis://127.0.0.1:6379/0``) so all gunicorn workers share one budget. Login
attempts are not counted here but by ``app.identity.login_throttle``, which
keeps its counters in PostgreSQL when no shared store is configured.
"""

from __future__ import annotations

from flask import session
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

from app.http import context

limiter = Limiter(get_remote_address, headers_enabled=True)


def _security():
    return context.settings().security


def admin_limit() -> str:
    return _security().admin_rate_limit


def session_or_address_key() -> str:
    """Admin limits follow the logged-in user, anonymous callers their address."""
    uid = session.get("uid")
    return f"user:{uid}" if uid else f"addr:{get_remote_address()}"
