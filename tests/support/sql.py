"""One-line reads of the test database for assertions (each in its own short transaction)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa

from app.db import get_engine, transaction


def rows(sql: str, **params: Any) -> list[Any]:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).all()


def scalar(sql: str, **params: Any) -> Any:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).scalar()


@contextlib.contextmanager
def counted_statements(
    *, counts: Callable[[], bool], shape: Callable[[str], str] = lambda statement: statement
) -> Iterator[list[str]]:
    """The statements the app's engine runs while the block runs, as ``shape`` gives them,
    from the threads for which ``counts()`` is true (it is called on the running thread).
    For tests that a unit of work costs a constant number of statements."""
    statements: list[str] = []
    lock = threading.Lock()

    def count(conn, cursor, statement, parameters, context, executemany):
        if counts():
            with lock:
                statements.append(shape(statement))

    engine = get_engine()
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
