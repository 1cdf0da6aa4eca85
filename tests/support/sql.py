"""One-line reads of the test database for assertions (each in its own short transaction)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa

from app import db
from app.db import get_engine, transaction


def rows(sql: str, **params: Any) -> list[Any]:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).all()


def scalar(sql: str, **params: Any) -> Any:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def insert_address_texts(conn: sa.Connection, table: str, hosts: int) -> None:
    """``hosts`` address-like distinct texts (``10.a.b.c``) in ``table``, as the subjects
    of certificates issued for an address or banners naming their host are; analysed."""
    conn.execute(
        sa.text(
            f"INSERT INTO {table} (id, text) "
            "SELECT md5(t)::uuid, t FROM (SELECT '10.' || (h >> 16 & 255) || '.' || "
            "(h >> 8 & 255) || '.' || (h & 255) AS t FROM generate_series(0, :hosts - 1) AS h) s "
            "ON CONFLICT (id) DO NOTHING"
        ),
        {"hosts": hosts},
    )
    conn.execute(sa.text(f"ANALYZE {table}"))


def insert_host_texts(conn: sa.Connection, hosts: int) -> None:
    """``hosts`` free texts (banner, product, host name) in ``search_asset_texts``, one per
    named host (``host-a-b-c.corpN.example``), as an estate with reverse DNS has; analysed."""
    conn.execute(
        sa.text(
            "INSERT INTO search_asset_texts (id, text) "
            "SELECT md5(t)::uuid, t FROM (SELECT (ARRAY['SSH-2.0-OpenSSH_9.2p1 Debian-2', "
            "'HTTP/1.1 200 OK Server: nginx/1.24.0'])[1 + h % 2] || E'\\x1f' || "
            "(ARRAY['OpenSSH', 'nginx'])[1 + h % 2] || E'\\x1fhost-' || (h >> 16 & 255) || '-' "
            "|| (h >> 8 & 255) || '-' || (h & 255) || '.corp' || h % 7 || '.example' AS t "
            "FROM generate_series(0, :hosts - 1) AS h) s ON CONFLICT (id) DO NOTHING"
        ),
        {"hosts": hosts},
    )
    conn.execute(sa.text("ANALYZE search_asset_texts"))


def text_condition_answers(condition: str, pairs: list[tuple[str, str]]) -> list[tuple[bool, bool]]:
    """For each (text, value) pair, what ``ILIKE`` answers and what ``condition`` does, a
    distinct-text condition over ``x.text``, ``x.pattern`` (the value's ``like_pattern``)
    and ``x.value`` (its ``searched_text``), evaluated by PostgreSQL."""
    from app.search.postgres_values import like_pattern, searched_text

    values_sql = ", ".join(f"(:n{n}, :t{n}, :p{n}, :v{n})" for n in range(len(pairs)))
    params: dict[str, Any] = {}
    for n, (text, value) in enumerate(pairs):
        params |= {f"n{n}": n, f"t{n}": text, f"p{n}": like_pattern(value)}
        params[f"v{n}"] = searched_text(value)
    with transaction() as conn:
        answers = conn.execute(
            sa.text(
                f"SELECT x.n, x.text ILIKE x.pattern AS plain, {condition} AS indexed "
                f"FROM (VALUES {values_sql}) AS x(n, text, pattern, value) ORDER BY x.n"
            ),
            params,
        ).all()
    return [(row.plain, row.indexed) for row in answers]


def valid_indexes(conn: sa.Connection, *tables: str) -> set[str]:
    """Names of the valid indexes of ``tables`` (on ``conn``: migration tests use their own)."""
    return set(
        conn.execute(
            sa.text(
                "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE x.indrelid = ANY(CAST(:tables AS regclass[])) AND x.indisvalid"
            ),
            {"tables": list(tables)},
        ).scalars()
    )


@contextlib.contextmanager
def counted_statements(
    *, counts: Callable[[], bool], shape: Callable[[str], str] = lambda statement: statement
) -> Iterator[list[str]]:
    """The statements the app's engine runs while the block runs, as ``shape`` gives them,
    from the threads for which ``counts()`` is true (it is called on the running thread).
    For tests that a unit of work costs a constant number of statements. COPYs run by
    ``db.copy_in`` count too (SQLAlchemy's cursor events do not see them)."""
    statements: list[str] = []
    lock = threading.Lock()

    def count(conn, cursor, statement, parameters, context, executemany):
        if counts():
            with lock:
                statements.append(shape(statement))

    copy_in = db.copy_in

    def counted_copy_in(conn, statement, data):
        count(conn, None, statement, None, None, False)
        return copy_in(conn, statement, data)

    engine = get_engine()
    sa.event.listen(engine, "before_cursor_execute", count)
    db.copy_in = counted_copy_in
    try:
        yield statements
    finally:
        db.copy_in = copy_in
        sa.event.remove(engine, "before_cursor_execute", count)
