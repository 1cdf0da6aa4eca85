"""Saved searches as the API and the asset search read them, one short transaction
per call (docs/architecture.md, rule: services own transactions). A search of
another user is "not found" (404 ``search_not_found``), never "forbidden".
"""

from __future__ import annotations

from typing import Any

from app.db import transaction
from app.errors import NotFound
from app.saved_searches import records


def _not_found() -> NotFound:
    return NotFound("saved search not found", code="search_not_found")


def list_searches(owner_id: int, *, limit: int, after_id: int | None) -> tuple[list[Any], bool]:
    """One keyset page of the owner's saved searches, and whether more follow."""
    with transaction() as conn:
        rows = records.list_for(conn, owner_id, limit=limit + 1, after_id=after_id)
    return rows[:limit], len(rows) > limit


def create_search(owner_id: int, values: dict[str, str]) -> Any:
    with transaction() as conn:
        return records.create(conn, owner_id, values)


def get_search(owner_id: int, search_id: int) -> Any:
    with transaction() as conn:
        row = records.get(conn, owner_id, search_id)
    if row is None:
        raise _not_found()
    return row


def update_search(owner_id: int, search_id: int, values: dict[str, str]) -> Any:
    with transaction() as conn:
        row = records.update(conn, owner_id, search_id, values)
    if row is None:
        raise _not_found()
    return row


def delete_search(owner_id: int, search_id: int) -> None:
    with transaction() as conn:
        deleted = records.delete(conn, owner_id, search_id)
    if not deleted:
        raise _not_found()
