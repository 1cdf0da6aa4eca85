"""``projection_status`` of executions and tasks (PRJ-9).

pending, running, retrying, ready, not_started, not_applicable. DNS-only
executions publish no endpoints (not_applicable), and neither does an execution
that failed or was cancelled: it ended without a final, so it never will (a task
scanned on a schedule keeps such an execution of an old run, which must not hold
the task's status back for good). A queued or running execution has nothing to
publish yet (not_started). A succeeded execution's state comes from its
``scan_projection_outbox`` row:

* ready — ``processed_at`` is set;
* running — a worker holds a live claim (token with an unexpired lease);
* retrying — the last attempt failed (``last_error`` kept, waiting out the
  backoff or about to be claimed again), or a claim's lease expired without
  the slice ending (its worker stopped; the next claim recovers it);
* pending — queued, or between two slices of a long execution.

So a row normally goes pending → running → (pending ↔ running per slice) →
ready, with retrying whenever an error is kept.
"""

from __future__ import annotations

from collections.abc import Iterable

PROJECTION_STATUSES = ("pending", "running", "retrying", "ready", "not_started", "not_applicable")


def projection_status_sql(alias: str) -> str:
    """SQL expression giving the projection status of execution row ``alias``."""
    return (
        f"CASE WHEN {alias}.kind = 'dns' THEN 'not_applicable' "  # noqa: S608 - alias is a table alias from our own SQL
        f"WHEN {alias}.status IN ('failed', 'cancelled') THEN 'not_applicable' "
        f"WHEN {alias}.status <> 'succeeded' THEN 'not_started' "
        "ELSE coalesce(("
        "SELECT CASE WHEN o.processed_at IS NOT NULL THEN 'ready' "
        "WHEN o.claim_token IS NOT NULL AND o.lease_expires_at > now() THEN 'running' "
        "WHEN o.last_error IS NOT NULL OR o.claim_token IS NOT NULL THEN 'retrying' "
        "ELSE 'pending' END "
        f"FROM scan_projection_outbox o WHERE o.execution_id = {alias}.id), 'pending') END"
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
