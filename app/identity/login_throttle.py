"""Login throttling per address and per username, shared by every process (IDN-3).

Each login attempt counts against two budgets: the caller's address
(``[security] login_rate_limit``) and the username tried
(``[security] login_username_rate_limit``, lower-cased and hashed so a
password typed into the username field is not stored). The counters are
fixed windows kept where every web process sees them: in PostgreSQL
(``login_throttle``) unless a shared rate-limit store is configured
(``[security] ratelimit_storage_uri``, e.g. Redis), then there. A per-process
memory store would multiply the real limit by the number of workers, so it is
never used for logins.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Protocol

import sqlalchemy as sa
from limits import RateLimitItem, parse_many

from app.db import transaction

# Buckets whose window ended are swept a few at a time on each attempt.
_SWEEP_BATCH = 100


def address_bucket(address: str | None) -> str:
    return f"addr:{address or 'unknown'}"


def username_bucket(username: str) -> str:
    digest = hashlib.sha256(username.lower().encode("utf-8", "surrogatepass")).hexdigest()
    return f"user:{digest[:32]}"


class LoginThrottle(Protocol):
    def hit(self, budgets: list[tuple[str, str]]) -> int | None:
        """Count one attempt against each ``(bucket, limits)``; seconds to wait if over."""


def _items(budgets: list[tuple[str, str]]) -> list[tuple[str, RateLimitItem]]:
    found = []
    for bucket, limit_text in sorted(budgets):  # one order everywhere: no lock cycles
        for item in parse_many(limit_text):
            found.append((f"{bucket}:{item.amount}/{item.get_expiry()}s", item))
    return found


class PostgresLoginThrottle:
    """Fixed-window counters in ``login_throttle``; the database clock decides the window."""

    def hit(self, budgets: list[tuple[str, str]]) -> int | None:
        retry_after: int | None = None
        with transaction() as conn:
            conn.execute(
                sa.text(
                    """
                    DELETE FROM login_throttle WHERE ctid IN (
                        SELECT ctid FROM login_throttle WHERE expires_at < now()
                        LIMIT :batch FOR UPDATE SKIP LOCKED)
                    """
                ),
                {"batch": _SWEEP_BATCH},
            )
            for key, item in _items(budgets):
                row = conn.execute(
                    sa.text(
                        """
                        WITH w AS (
                            SELECT to_timestamp(
                                floor(extract(epoch FROM now()) / :secs) * :secs) AS start)
                        INSERT INTO login_throttle (bucket, window_start, hits, expires_at)
                        SELECT :bucket, w.start, 1, w.start + make_interval(secs => :secs)
                        FROM w
                        ON CONFLICT (bucket, window_start)
                        DO UPDATE SET hits = login_throttle.hits + 1
                        RETURNING hits, extract(epoch FROM expires_at - now()) AS remaining
                        """
                    ),
                    {"bucket": key, "secs": item.get_expiry()},
                ).one()
                if row.hits > item.amount:
                    wait = max(1, math.ceil(float(row.remaining)))
                    retry_after = max(retry_after or 0, wait)
        return retry_after


class SharedStoreLoginThrottle:
    """The same fixed windows in a shared ``limits`` store (Redis, Memcached …)."""

    def __init__(self, storage_uri: str):
        from limits.storage import storage_from_string
        from limits.strategies import FixedWindowRateLimiter

        self._limiter = FixedWindowRateLimiter(storage_from_string(storage_uri))

    def hit(self, budgets: list[tuple[str, str]]) -> int | None:
        retry_after: int | None = None
        for key, item in _items(budgets):
            if not self._limiter.hit(item, "netmap-login", key):
                reset_at, _remaining = self._limiter.get_window_stats(item, "netmap-login", key)
                wait = max(1, math.ceil(reset_at - time.time()))
                retry_after = max(retry_after or 0, wait)
        return retry_after


def open_login_throttle(storage_uri: str) -> LoginThrottle:
    if not storage_uri or storage_uri.startswith("memory://"):
        return PostgresLoginThrottle()
    return SharedStoreLoginThrottle(storage_uri)
