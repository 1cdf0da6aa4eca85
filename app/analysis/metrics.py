"""Analysis-queue backlog on ``/metrics`` (ANA-7): read from PostgreSQL at scrape time.

Gauges: unprocessed rows, age of the oldest unprocessed row (seconds since its
final queued it), rows under a live claim, rows holding a kept error; every
web process reports the same numbers whichever runner did the work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.analysis import queue
from app.observability import register_scrape_collector

_registered = False
_lock = threading.Lock()


class AnalysisBacklogCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        backlog = queue.backlog()
        yield GaugeMetricFamily(
            "netmap_analysis_queue_backlog",
            "Finished executions whose change analysis is not done yet",
            value=backlog.rows,
        )
        yield GaugeMetricFamily(
            "netmap_analysis_queue_oldest_age_seconds",
            "Age of the oldest unprocessed analysis-queue row (0 when the backlog is empty)",
            value=backlog.oldest_age_seconds,
        )
        yield GaugeMetricFamily(
            "netmap_analysis_queue_running",
            "Analysis-queue rows under a live claim",
            value=backlog.running,
        )
        yield GaugeMetricFamily(
            "netmap_analysis_queue_retrying",
            "Unprocessed analysis-queue rows whose last attempt failed",
            value=backlog.retrying,
        )


def register_analysis_metrics() -> None:
    """Add the backlog gauges to ``/metrics`` (once per process)."""
    global _registered
    with _lock:
        if not _registered:
            register_scrape_collector(AnalysisBacklogCollector)
            _registered = True
