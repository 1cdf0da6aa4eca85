"""Removing the analysis rows of purged executions, in bounded batches (issue 33).

A deleted task's (or an old run's) executions take their change sets, summaries and
staged sightings with them; the owner's endpoint state (``analysis_assets``) is the
owner's, not the task's, and stays.
"""

from __future__ import annotations

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
