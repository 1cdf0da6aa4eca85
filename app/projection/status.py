"""``projection_status`` of executions and tasks (PRJ-9).

pending, running, retrying, ready, not_started, not_applicable. DNS-only
executions publish no endpoints (not_applicable); an execution that has not
succeeded has nothing to publish yet (not_started). Until the projection
outbox exists a succeeded execution is reported as pending.
"""

from __future__ import annotations

from collections.abc import Iterable

PROJECTION_STATUSES = ("pending", "running", "retrying", "ready", "not_started", "not_applicable")


def projection_status_sql(alias: str) -> str:
    """SQL expression giving the projection status of execution row ``alias``."""
    return (
        f"CASE WHEN {alias}.kind = 'dns' THEN 'not_applicable' "
        f"WHEN {alias}.status <> 'succeeded' THEN 'not_started' "
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
