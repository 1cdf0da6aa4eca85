"""Database engine and the short-transaction helper.

Every database touch goes through ``with transaction() as conn:`` — commit on
success, roll back on error, connection back in the pool at exit (docs/architecture.md,
rule: short transactions). The helper measures pool wait and hold time for every transaction and,
when given a ``stage``, emits ``ScanWriteConnectionAcquired/Released`` so the
"no connection held across store I/O" rule is observable. A pool timeout
becomes ``PoolTimeout`` (503, Retry-After: 2); other database errors keep their
own classification.

The engine is per process. ``get_engine()`` notices a fork and drops the
inherited pool without closing the parent's sockets (docs/architecture.md,
rule: fork safety).

There is no shared ``MetaData``: the schema is what the migrations in
``alembic/versions/`` create, and each owning package writes its SQL against
it (docs/architecture.md, rule: explicit SQL).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from app import observability
from app.config import DatabaseSettings
from app.dbapi import connect_options
from app.errors import PoolTimeout, Unavailable
from app.json_input import load_stored_json
from app.observability import emit

_engine: Engine | None = None
_engine_pid: int | None = None


def normalise_url(url: str) -> str:
    """Pin the psycopg2 driver (SQLAlchemy 2.1 would otherwise pick psycopg 3)."""
    for prefix in ("postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix) :]
    return url


def create_engine(
    url: str,
    settings: DatabaseSettings | None = None,
    *,
    application_name: str = "netmap",
    **overrides: Any,
) -> Engine:
    """A pooled engine with server-side timeouts so no transaction can hang forever."""
    settings = settings or DatabaseSettings()
    kwargs: dict[str, Any] = {
        "pool_size": settings.pool_size,
        "max_overflow": settings.max_overflow,
        "pool_timeout": settings.pool_timeout_seconds,
        "pool_recycle": settings.pool_recycle_seconds,
        "pool_pre_ping": True,
        # json/jsonb columns come back decoded by orjson (same values as json.loads).
        "json_deserializer": load_stored_json,
        "connect_args": {
            "application_name": application_name,
            "options": connect_options(settings),
        },
    }
    kwargs.update(overrides)
    if kwargs.get("poolclass") is sa.pool.NullPool:
        # One-off commands: no pool, so pool sizing does not apply.
        for key in ("pool_size", "max_overflow", "pool_timeout", "pool_recycle"):
            kwargs.pop(key, None)
    return sa.create_engine(normalise_url(url), **kwargs)


def set_engine(engine: Engine | None) -> None:
    """Install the process-wide engine (app factory, runner worker, CLI, tests)."""
    global _engine, _engine_pid
    _engine = engine
    _engine_pid = os.getpid() if engine is not None else None


def get_engine() -> Engine:
    global _engine_pid
    if _engine is None:
        raise RuntimeError("database engine not initialised; call app.db.set_engine() first")
    if _engine_pid != os.getpid():
        # Forked child: forget the parent's connections without closing them.
        _engine.dispose(close=False)
        _engine_pid = os.getpid()
    return _engine


@contextlib.contextmanager
def engine_installed(engine: Engine) -> Iterator[Engine]:
    """Install ``engine`` for a block (one CLI command), then dispose it and put back
    whatever engine was installed before, so a command run in-process leaves its caller's
    engine as it found it."""
    global _engine, _engine_pid
    previous, previous_pid = _engine, _engine_pid
    set_engine(engine)
    try:
        yield engine
    finally:
        engine.dispose()
        _engine, _engine_pid = previous, previous_pid


def dispose_engine() -> None:
    if _engine is not None:
        _engine.dispose()
    set_engine(None)


def _connect(engine: Engine) -> Connection:
    try:
        return engine.connect()
    except sa_exc.TimeoutError:
        emit("DatabasePoolTimeout", level=logging.WARNING)
        raise PoolTimeout() from None
    except sa_exc.OperationalError as exc:
        emit("DatabaseUnavailable", level=logging.ERROR, error=str(exc.orig).strip()[:200])
        raise Unavailable(
            "database is not reachable", code="database_unavailable", retry_after=5
        ) from None


@contextlib.contextmanager
def transaction(
    stage: str | None = None,
    *,
    engine: Engine | None = None,
    isolation_level: str | None = None,
) -> Iterator[Connection]:
    """One short transaction on a pooled connection, returned to the pool at exit."""
    engine = engine or get_engine()
    started = time.perf_counter()
    conn = _connect(engine)
    acquired = time.perf_counter()
    wait_s = acquired - started
    observability.POOL_WAIT_SECONDS.observe(wait_s)
    if stage:
        emit("ScanWriteConnectionAcquired", stage=stage, wait_ms=round(wait_s * 1000, 3))
    try:
        if isolation_level:
            conn = conn.execution_options(isolation_level=isolation_level)
        with conn.begin():
            yield conn
    finally:
        conn.close()
        hold_s = time.perf_counter() - acquired
        observability.CONNECTION_HOLD_SECONDS.observe(hold_s)
        if stage:
            emit("ScanWriteConnectionReleased", stage=stage, hold_ms=round(hold_s * 1000, 3))


def extension_schema(conn: Connection, name: str) -> str | None:
    """The schema extension ``name`` is installed in, or None when it is not installed
    in this database (its functions and views are then called through that schema)."""
    return conn.execute(
        sa.text(
            "SELECT n.nspname FROM pg_extension e "
            "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = :name"
        ),
        {"name": name},
    ).scalar()


# SQLSTATE of a duplicate key.
UNIQUE_VIOLATION = "23505"


def copy_in(conn: Connection, statement: str, data: bytes) -> None:
    """Run ``COPY … FROM STDIN`` with ``data`` on ``conn``, inside its transaction.

    SQLAlchemy has no COPY, so this goes to the driver's cursor; a driver error is
    raised as SQLAlchemy would have raised it (``DBAPIError`` and its subclasses, the
    driver's error as ``orig``), so callers map failures as for any other statement.
    SQLAlchemy's cursor events do not see this statement."""
    import psycopg2  # the pinned driver (``normalise_url``)

    cursor = conn.connection.cursor()
    try:
        cursor.copy_expert(statement, io.BytesIO(data), size=1 << 20)
    except psycopg2.Error as exc:
        raise sa_exc.DBAPIError.instance(statement, None, exc, psycopg2.Error) from exc
    finally:
        cursor.close()


@contextlib.contextmanager
def engine_cursor() -> Iterator[Any]:
    """A psycopg2 cursor inside ``transaction()`` (the installed engine); a cursor factory
    for code that runs with or without SQLAlchemy (``app.dbapi``)."""
    with transaction() as conn:
        cursor = conn.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
