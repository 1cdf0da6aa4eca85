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
