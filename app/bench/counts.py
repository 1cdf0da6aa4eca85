"""What the database counted after a benchmark's uploads: the figures a bench checks
against what it sent, so that its timings are of a right answer."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def confirmed_observations(conn: Connection) -> int:
    """Observations in every confirmed upload receipt."""
    return int(
        conn.execute(
            sa.text(
                "SELECT coalesce(sum(observation_count), 0) FROM scan_upload_receipts "
                "WHERE status = 'confirmed'"
            )
        ).scalar_one()
    )


def execution_counts(conn: Connection, execution_id: int) -> dict[str, int]:
    """An execution's observation, endpoint and IP counts."""
    row = conn.execute(
        sa.text(
            "SELECT observation_count AS observations, endpoint_count AS endpoints, "
            "ip_count AS ips FROM scan_executions WHERE id = :id"
        ),
        {"id": execution_id},
    ).one()
    return dict(row._mapping)
