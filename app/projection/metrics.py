"""Outbox backlog on ``/metrics`` (OBS-3): read from PostgreSQL at scrape time.

Gauges: unprocessed rows, age of the oldest unprocessed row (seconds since its
final), rows under a live claim, rows holding a kept error. They come from one
query on the partial backlog index, so every web process reports the same
numbers whichever runner did the work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.observability import register_scrape_collector
from app.projection import outbox

_registered = False
_lock = threading.Lock()


class OutboxBacklogCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        backlog = outbox.backlog()
        yield GaugeMetricFamily(
            "netmap_projection_outbox_backlog",
            "Executions whose current assets are not published yet",
            value=backlog.rows,
        )
        yield GaugeMetricFamily(
            "netmap_projection_outbox_oldest_age_seconds",
            "Age of the oldest unpublished outbox row (0 when the backlog is empty)",
            value=backlog.oldest_age_seconds,
        )
        yield GaugeMetricFamily(
            "netmap_projection_outbox_running",
            "Outbox rows under a live claim",
            value=backlog.running,
        )
        yield GaugeMetricFamily(
            "netmap_projection_outbox_retrying",
            "Unpublished outbox rows whose last attempt failed",
            value=backlog.retrying,
        )


def register_outbox_metrics() -> None:
    """Add the backlog gauges to ``/metrics`` (once per process)."""
    global _registered
    with _lock:
        if not _registered:
            register_scrape_collector(OutboxBacklogCollector)
            _registered = True
