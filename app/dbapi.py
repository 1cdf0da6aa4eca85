"""Plain DB-API (psycopg2) transactions, for code that must also run without SQLAlchemy.

A cron command started every five minutes (``netmap traffic rollup``) spends
most of a short run importing things; SQLAlchemy alone is a fifth of a second
(PRF-3). Code on such a path writes its SQL for psycopg2 (``%(name)s``
parameters) and takes a *cursor factory*: a callable whose context manager
yields a psycopg2 cursor inside one short transaction, committed at a normal
exit and rolled back on an exception. Two factories satisfy it:

* ``app.db.engine_cursor`` — a cursor of ``app.db.transaction()``'s connection: the
  runner and the web process keep their pool, timeouts and measurements;
* ``DirectConnection.cursor`` — one psycopg2 connection a command opens itself,
  with the same server-side timeouts as ``app.db.create_engine``.

This module imports neither SQLAlchemy nor psycopg2 at import time.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

# A factory of one-transaction cursors (see the module docstring).
CursorFactory = Callable[[], AbstractContextManager[Any]]

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def pyformat(sql: str) -> str:
    """SQL written with ``:name`` parameters (as for ``sqlalchemy.text``) in psycopg2's
    ``%(name)s`` style; a literal ``%`` is doubled. ``::`` casts are left alone."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


def connect_options(settings: Any) -> str:
    """libpq ``options``: server-side limits so no statement or transaction hangs forever."""
    return " ".join(
        (
            f"-c statement_timeout={settings.statement_timeout_ms}",
            f"-c lock_timeout={settings.lock_timeout_ms}",
            f"-c idle_in_transaction_session_timeout={settings.idle_in_transaction_timeout_ms}",
            "-c timezone=UTC",
        )
    )


def libpq_url(url: str) -> str:
    """A SQLAlchemy-style URL (``postgresql+psycopg2://``) as libpq accepts it."""
    for prefix in ("postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


class DirectConnection:
    """One psycopg2 connection for a command: ``cursor()`` is one short transaction."""

    def __init__(self, url: str, settings: Any, *, application_name: str):
        import psycopg2

        self._conn = psycopg2.connect(
            libpq_url(url),
            application_name=application_name,
            options=connect_options(settings),
        )

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Any]:
        # ``with connection`` commits at a normal exit and rolls back on an exception;
        # it does not close the connection, so the next transaction reuses it.
        with self._conn, self._conn.cursor() as cursor:
            yield cursor

    def close(self) -> None:
        self._conn.close()


def copy_text(value: str) -> str:
    """A value in PostgreSQL ``COPY`` text format (backslash, tab and line breaks escaped).

    Each character is tested with ``in`` (a C scan) before a replace: most values hold
    none of them, and a long JSON text is scanned four times faster than translated."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\t" in value:
        value = value.replace("\t", "\\t")
    if "\n" in value:
        value = value.replace("\n", "\\n")
    if "\r" in value:
        value = value.replace("\r", "\\r")
    return value
