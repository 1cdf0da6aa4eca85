"""Removing the analysis rows of purged executions, in bounded batches (issue 33).

A deleted task's (or an old run's) executions take their change sets, summaries and
staged sightings with them. The owner's endpoint state (``analysis_assets``) is the
owner's, not the task's: it stays, except for the endpoints the deleted task's purge
removes from the owner's asset view (no other task of the owner saw them,
``forget_endpoints``). The analysis then agrees with that view: seen again, such an
endpoint is new, as it is on the Assets page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from app.db import transaction

_STATEMENTS = (
    (
        "changes",
        "DELETE FROM analysis_changes WHERE id IN (SELECT id FROM analysis_changes "
        "WHERE execution_id = ANY(:ids) LIMIT :limit)",
    ),
    (
        "sightings",
        "DELETE FROM analysis_sightings WHERE (execution_id, ip, port, transport) IN ("
        "SELECT execution_id, ip, port, transport FROM analysis_sightings "
        "WHERE execution_id = ANY(:ids) LIMIT :limit)",
    ),
    ("summaries", "DELETE FROM analysis_execution_summaries WHERE execution_id = ANY(:ids)"),
    ("queue", "DELETE FROM scan_analysis_queue WHERE execution_id = ANY(:ids)"),
)


def purge_executions(execution_ids: Sequence[int], *, limit: int) -> dict[str, int]:
    """Up to ``limit`` rows per table of the executions' analysis; empty: none left."""
    removed: dict[str, int] = {}
    with transaction() as conn:
        for name, statement in _STATEMENTS:
            count = conn.execute(
                sa.text(statement), {"ids": list(execution_ids), "limit": limit}
            ).rowcount
            if count:
                removed[name] = count
    return removed


def forget_endpoints(endpoints: Sequence[tuple[int, str, int, str]]) -> int:
    """Drop the state of ``endpoints`` ((owner, ip, port, transport), gone from the owner's
    view with a deleted task); the number of rows dropped. Repeating it is harmless."""
    if not endpoints:
        return 0
    rows = [
        {"owner_id": owner, "ip": ip, "port": port, "transport": transport}
        for owner, ip, port, transport in endpoints
    ]
    with transaction() as conn:
        return conn.execute(
            sa.text(
                """
                DELETE FROM analysis_assets a
                 USING jsonb_to_recordset(CAST(:rows AS jsonb))
                       AS r(owner_id bigint, ip inet, port integer, transport text)
                 WHERE a.owner_id = r.owner_id AND a.ip = r.ip AND a.port = r.port
                   AND a.transport = r.transport
                """
            ),
            {"rows": json.dumps(rows)},
        ).rowcount
