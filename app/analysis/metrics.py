"""Analysis-queue backlog on ``/metrics`` (ANA-7): the lease kit's four backlog gauges
(``app.leases.metrics``), read from PostgreSQL at scrape time."""

from __future__ import annotations

from app.analysis import queue
from app.leases.metrics import BacklogGauges, register_backlog_metrics

ANALYSIS_GAUGES = BacklogGauges(
    prefix="analysis_queue",
    waiting="Finished executions whose change analysis is not done yet",
    row="analysis-queue row",
    pending_row="unprocessed analysis-queue row",
)


def register_analysis_metrics() -> None:
    """Add the backlog gauges to ``/metrics`` (once per process)."""
    register_backlog_metrics(ANALYSIS_GAUGES, queue.backlog)
