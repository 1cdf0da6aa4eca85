"""Periodic job: drop the months of raw facts past ``[search] facts_retention_months``
(docs/architecture.md "Fact retention").

One runner at a time (the periodic lease); each month goes in its own short transaction
(``app.search.postgres_retention``), so an interrupted tick leaves whole months only and
the next tick carries on. A store without the ability (Elasticsearch: its monthly
indices are managed by the cluster's own lifecycle policies) is left alone.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.config import Settings
from app.observability import emit
from app.search.port import fact_retention
from app.search.postgres_retention import months_to_keep_from
from jobs.base import JobContext, PeriodicJob, PeriodicLease


def job(settings: Settings) -> PeriodicJob:
    store = None

    def tick(ctx: JobContext, lease: PeriodicLease) -> None:
        nonlocal store
        months = settings.search.facts_retention_months
        if not months:
            return
        if store is None:  # opened once per worker process, after the fork
            from app.search import open_store

            store = open_store(settings)
        retention = fact_retention(store)
        if retention is None:
            return
        kept_from = months_to_keep_from(datetime.now(UTC), months)
        dropped = retention.drop_fact_months_before(kept_from)
        if dropped:
            emit("SearchFactRetentionApplied", kept_from=kept_from.isoformat(), dropped=dropped)

    return PeriodicJob(
        "facts-retention",
        tick,
        interval_seconds=settings.search.retention_interval_seconds,
        lease_seconds=600,
    )
