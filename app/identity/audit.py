"""Audit rows for admin actions (IDN-6), written in the same transaction as the action."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def record_audit(
    conn: Connection,
    *,
    actor_user_id: int | None,
    action: str,
    target_type: str | None = None,
    target_id: str | int | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        sa.text(
            """
            INSERT INTO audit_log (actor_user_id, action, target_type, target_id, details)
            VALUES (:actor, :action, :target_type, :target_id, CAST(:details AS jsonb))
            """
        ),
        {
            "actor": actor_user_id,
            "action": action,
            "target_type": target_type,
            "target_id": None if target_id is None else str(target_id),
            "details": json.dumps(details or {}),
        },
    )


# Actions are dotted names (``user.create``, ``api_token.revoke``…); a filter names one or
# its family (``user``), never a pattern.
_ACTION = "(a.action = :action OR a.action LIKE :family)"


def audit_page(
    conn: Connection,
    *,
    limit: int,
    before_id: int | None = None,
    action: str | None = None,
    actor_user_id: int | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the audit trail, newest first, and the id the next page starts before
    (None on the last). ``action`` is an action or a family of them (``user`` for every
    ``user.…``); ``actor_user_id`` keeps one actor's rows."""
    where = ["(CAST(:before AS bigint) IS NULL OR a.id < :before)"]
    params: dict[str, Any] = {"before": before_id, "limit": limit + 1}
    if action:
        where.append(_ACTION)
        params["action"] = action
        params["family"] = (
            action.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ".%"
        )
    if actor_user_id is not None:
        where.append("a.actor_user_id = :actor")
        params["actor"] = actor_user_id
    rows = conn.execute(
        sa.text(
            f"""
            SELECT a.id, a.created_at, a.actor_user_id, u.username, a.action, a.target_type,
                   a.target_id, a.details
              FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
             WHERE {" AND ".join(where)}
             ORDER BY a.id DESC
             LIMIT :limit
            """  # noqa: S608 - fixed clauses; values are bound
        ),
        params,
    ).all()
    items = [
        {
            "id": row.id,
            "at": row.created_at.isoformat(),
            "actor": {"id": row.actor_user_id, "username": row.username}
            if row.actor_user_id is not None
            else None,
            "action": row.action,
            "target_type": row.target_type,
            "target_id": row.target_id,
            "details": row.details,
        }
        for row in rows[:limit]
    ]
    return items, (rows[limit - 1].id if len(rows) > limit else None)
