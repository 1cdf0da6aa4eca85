"""A leased queue's backlog on ``/metrics``, read from PostgreSQL at scrape time.

Four gauges per queue, from ``LeaseQueue.backlog`` (one query on the queue's partial
backlog index): unprocessed rows, the age of the oldest (seconds since it was queued;
0 when none), rows under a live claim and rows holding a kept error. Every web
process reports the same numbers whichever runner did the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.leases.sql import Backlog
from app.observability import register_scrape_collector


@dataclass(frozen=True)
class BacklogGauges:
    """What one queue's gauges are called and say: ``netmap_<prefix>_backlog``,
    ``…_oldest_age_seconds``, ``…_running`` and ``…_retrying``."""

    prefix: str
    waiting: str  # the backlog gauge's help: what an unprocessed row stands for
    row: str  # a row of the queue ("outbox row")
    pending_row: str  # a row not processed yet ("unpublished outbox row")


def register_backlog_metrics(gauges: BacklogGauges, backlog: Callable[[], Backlog]) -> None:
    """Add the queue's four gauges to ``/metrics`` (once per process)."""
    register_scrape_collector(gauges.prefix, lambda: _BacklogCollector(gauges, backlog))


class _BacklogCollector(Collector):
    def __init__(self, gauges: BacklogGauges, backlog: Callable[[], Backlog]):
        self._gauges = gauges
        self._backlog = backlog

    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = self._backlog()
        gauges = self._gauges
        name = f"netmap_{gauges.prefix}"
        yield GaugeMetricFamily(f"{name}_backlog", gauges.waiting, value=found.rows)
        yield GaugeMetricFamily(
            f"{name}_oldest_age_seconds",
            f"Age of the oldest {gauges.pending_row} (0 when the backlog is empty)",
            value=found.oldest_age_seconds,
        )
        yield GaugeMetricFamily(
            f"{name}_running",
            f"{gauges.row.capitalize()}s under a live claim",
            value=found.running,
        )
        yield GaugeMetricFamily(
            f"{name}_retrying",
            f"{gauges.pending_row.capitalize()}s whose last attempt failed",
            value=found.retrying,
        )
