"""Outbox backlog on ``/metrics`` (OBS-3): the lease kit's four backlog gauges
(``app.leases.metrics``), read from PostgreSQL at scrape time."""

from __future__ import annotations

from app.leases.metrics import BacklogGauges, register_backlog_metrics
from app.projection import outbox

OUTBOX_GAUGES = BacklogGauges(
    prefix="projection_outbox",
    waiting="Executions whose current assets are not published yet",
    row="outbox row",
    pending_row="unpublished outbox row",
)


def register_outbox_metrics() -> None:
    """Add the backlog gauges to ``/metrics`` (once per process)."""
    register_backlog_metrics(OUTBOX_GAUGES, outbox.backlog)
