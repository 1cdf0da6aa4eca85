"""Alert deliveries on ``/metrics``, read from PostgreSQL at scrape time.

``netmap_alert_deliveries{channel_kind, status}``: messages by channel kind and outcome
(pending, delivered, dead); ``netmap_alert_oldest_pending_age_seconds``: how long the
oldest undelivered message has waited (0 when none).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.alerts import deliveries
from app.observability import register_scrape_collector


class AlertDeliveryCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = deliveries.stats()
        by_kind = GaugeMetricFamily(
            "netmap_alert_deliveries",
            "Alert messages by channel kind and status",
            labels=["channel_kind", "status"],
        )
        for (kind, status), count in sorted(found.by_kind_and_status.items()):
            by_kind.add_metric([kind, status], count)
        yield by_kind
        yield GaugeMetricFamily(
            "netmap_alert_oldest_pending_age_seconds",
            "Age of the oldest alert message not delivered yet (0 when none)",
            value=found.oldest_pending_age_seconds,
        )


def register_alert_metrics() -> None:
    """Add the delivery gauges to ``/metrics`` (once per process)."""
    register_scrape_collector("alert_deliveries", AlertDeliveryCollector)
