"""Asset searches read whole, and the answers a search must give, for plan tests.

A plan test lets the planner choose and then checks the answer against the plain
condition over the view's own columns, evaluated with no index at all: whatever way
the planner took, the rows must be those.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa

from app import db
from app.bench.scratch import vacuum_analyze
from app.search.port import AssetQuery
from app.search.postgres_queries import looked_up_statement
from app.search.seed import seed_current_assets
from tests.support.plans import explain
from tests.support.search_documents import at


def every_page(store, query: AssetQuery) -> list[tuple[str, int]]:
    """(address, port) of every asset the search finds, page after page, in page order."""
    found, cursor = [], None
    while True:
        page = store.search_assets(dataclasses.replace(query, cursor=cursor, limit=500))
        found.extend((item.ip, item.port) for item in page.items)
        if (cursor := page.next_cursor) is None:
            return found


def without_indexes(
    scope: str,
    condition: str,
    owner: int | None,
    *,
    columns: str = "host(ip), port",
    **params: Any,
) -> list[tuple]:
    """``columns`` of the open assets of ``scope`` (of ``owner`` in the user view) that
    ``condition`` (bound ``params``) selects, in page order, read with every index off."""
    owner_clause = "AND owner_id = :owner_id" if scope == "user" else ""
    with db.transaction() as conn:
        for setting in ("enable_indexscan", "enable_bitmapscan", "enable_indexonlyscan"):
            conn.execute(sa.text(f"SET LOCAL {setting} = off"))
        rows = conn.execute(
            sa.text(
                f"SELECT {columns} FROM search_assets_{scope} "
                f"WHERE ({condition}) AND status = 'open' {owner_clause} "
                "ORDER BY ip_order, port, transport"
            ),
            {**params, "owner_id": owner},
        ).all()
    return [tuple(row) for row in rows]


def seed_views(owner: int, endpoints: int, services, *, spread_minutes: int = 0) -> None:
    """``endpoints`` seeded open assets of ``owner`` in both views (``app.search.seed``:
    host 10.0.0.0 + n // len(services) on service n % len(services)), seen now (or
    over the ``spread_minutes`` before)."""
    with db.transaction() as conn:
        seed_current_assets(
            conn,
            owner_id=owner,
            execution_id=1,
            low=0,
            high=endpoints,
            seen=at(0),
            services=services,
            spread_minutes=spread_minutes,
        )


def analyse_views() -> None:
    """Both views as autovacuum leaves them: statistics (of their expressions too) and
    the partial indexes' sizes."""
    vacuum_analyze("search_assets_user", "search_assets_global")


def search_statement(query: AssetQuery) -> tuple[str, dict[str, Any]]:
    """The search's statement and parameters, after its lookups, as the store makes it."""
    with db.transaction() as conn:
        statement = looked_up_statement(conn, query)
    assert statement is not None
    return statement


def search_plan(query: AssetQuery) -> dict[str, Any]:
    """The JSON plan of the search's statement (``search_statement``)."""
    return explain(*search_statement(query))
