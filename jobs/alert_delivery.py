"""Job kind: send alert messages from the deliveries outbox (docs/alerts.md).

``claim`` takes the next due delivery under a lease (``app.alerts.deliveries``);
``run`` sends it (no database connection held) and records the outcome.
"""

from __future__ import annotations

from app.alerts.deliveries import DeliveryClaim, claim_next, deliver
from app.config import Settings
from jobs.base import JobContext


class AlertDeliveryJob:
    name = "alert_delivery"

    def __init__(self, settings: Settings):
        self.settings = settings

    def claim(self, ctx: JobContext) -> DeliveryClaim | None:
        return claim_next(self.settings.alerts)

    def run(self, ctx: JobContext, work: DeliveryClaim) -> None:
        deliver(self.settings, work)


def job(settings: Settings) -> AlertDeliveryJob:
    return AlertDeliveryJob(settings)
