"""Change history as the API and the console read it, one short transaction per call.

The routes and the console pages call these same functions (docs/architecture.md,
rule: services own transactions); the connection-taking queries in ``queries`` stay
for callers composing a larger transaction.
"""

from __future__ import annotations

from typing import Any

from app.analysis import queries
from app.db import transaction


def endpoint_history(
    *,
    owner_id: int,
    ip: str,
    port: int,
    transport: str,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One keyset page of an endpoint's changes across the owner's executions."""
    with transaction() as conn:
        return queries.endpoint_history(
            conn,
            owner_id=owner_id,
            ip=ip,
            port=port,
            transport=transport,
            limit=limit,
            cursor=cursor,
        )


def owner_changes(
    owner_id: int, *, kind: str | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    """What changed across all of the owner's tasks, newest first (``GET /api/changes``)."""
    with transaction() as conn:
        return queries.owner_changes(conn, owner_id, kind=kind, limit=limit, cursor=cursor)


def recent_change_counts(owner_id: int, *, days: int, execution_cap: int) -> dict[str, Any]:
    """New and gone endpoints of the owner's recent executions (the dashboard's counts)."""
    with transaction() as conn:
        return queries.recent_change_counts(conn, owner_id, days=days, execution_cap=execution_cap)
