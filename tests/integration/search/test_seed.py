"""The set-based benchmark seed writes exactly the rows publishing the same endpoints writes."""

from __future__ import annotations

import sqlalchemy as sa

from app.bench.store import BASE_TIME, SERVICES, _document, _endpoints
from app.db import transaction
from app.projection.pages import current_asset_documents
from app.search.documents import merge_all
from app.search.seed import seed_current_assets

TABLES = ("search_assets_user", "search_assets_global")


def _rows() -> dict[str, list]:
    with transaction() as conn:
        return {
            table: [
                tuple(row) for row in conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY key"))
            ]
            for table in TABLES
        }


def test_seeded_rows_equal_published_rows(app) -> None:
    from app.http import context

    with app.app_context():
        store = context.store()
    endpoints = _endpoints(23)
    docs = [
        _document("execution", e, execution_id=7, task_id=3, owner_id=5, seen=BASE_TIME)
        for e in endpoints
    ]
    store.publish_current(
        merge_all(current_asset_documents(docs)), max_operations=1000, max_bytes=5_000_000
    ).raise_for_failures()
    published = _rows()
    assert len(published["search_assets_user"]) == 23
    with transaction() as conn:
        for table in TABLES:
            conn.execute(sa.text(f"DELETE FROM {table}"))

    with transaction() as conn:
        written = seed_current_assets(
            conn, owner_id=5, execution_id=7, low=0, high=10, seen=BASE_TIME, services=SERVICES
        )
        written += seed_current_assets(
            conn, owner_id=5, execution_id=7, low=10, high=23, seen=BASE_TIME, services=SERVICES
        )
    assert written == 23
    assert _rows() == published

    # Publishing the same endpoints again merges into the seeded rows: nothing doubles.
    store.publish_current(
        merge_all(current_asset_documents(docs)), max_operations=1000, max_bytes=5_000_000
    ).raise_for_failures()
    assert _rows() == published
