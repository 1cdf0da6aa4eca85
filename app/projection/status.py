"""``projection_status`` of executions and tasks (PRJ-9).

pending, running, retrying, ready, not_started, not_applicable. DNS-only
executions publish no endpoints (not_applicable); an execution that has not
succeeded has nothing to publish yet (not_started). A succeeded execution's
state comes from its ``scan_projection_outbox`` row: processed → ready, a kept
error → retrying, otherwise pending.
"""

from __future__ import annotations

from collections.abc import Iterable

PROJECTION_STATUSES = ("pending", "running", "retrying", "ready", "not_started", "not_applicable")


def projection_status_sql(alias: str) -> str:
    """SQL expression giving the projection status of execution row ``alias``."""
    outbox = f"(SELECT o FROM scan_projection_outbox o WHERE o.execution_id = {alias}.id)"
    return (
        f"CASE WHEN {alias}.kind = 'dns' THEN 'not_applicable' "
        f"WHEN {alias}.status <> 'succeeded' THEN 'not_started' "
        f"WHEN ({outbox}).processed_at IS NOT NULL THEN 'ready' "
        f"WHEN ({outbox}).last_error IS NOT NULL THEN 'retrying' "
        "ELSE 'pending' END"
    )


def aggregate_projection_status(statuses: Iterable[str]) -> str:
    """A task's status: the least advanced of its executions that publish anything."""
    relevant = [s for s in statuses if s != "not_applicable"]
    if not relevant:
        return "not_applicable"
    for status in ("retrying", "running", "pending", "not_started"):
        if status in relevant:
            return status
    return "ready"
