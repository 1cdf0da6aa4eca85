"""Periodic jobs: evaluate the condition alert rules (docs/alerts.md, "Condition rules").

``alert-scanner-offline``, ``alert-run-failed``, ``alert-run-digests`` (the digests of
runs that ended without a last analysis sending them) and ``alert-searched-changes`` (the
search-filtered rules an analysis left pending on the Elasticsearch store,
``app.alerts.searched_changes``), every ``[alerts] conditions_interval_seconds``, and
``alert-certificate-expiry`` (every ``[alerts] certificate_interval_seconds``) each run on
one runner at a time under the periodic lease (``jobs.base.PeriodicJob``); what they find
becomes messages in the deliveries outbox, sent by the ``alert_delivery`` job. Each
episode is marked in the transaction that creates its messages, so a second runner, a
retried tick or a restart finds it marked and sends nothing twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

from app.alerts.conditions import (
    evaluate_certificate_expiry,
    evaluate_run_failed,
    evaluate_scanner_offline,
)
from app.alerts.run_digests import send_finished_run_digests
from app.alerts.searched_changes import evaluate_due
from app.config import Settings
from jobs.base import JobContext, PeriodicJob, PeriodicLease


def _quick_condition_job(name: str, evaluate, settings: Settings) -> PeriodicJob:
    """A condition read in one short statement, every ``conditions_interval_seconds``."""

    def tick(ctx: JobContext, lease: PeriodicLease) -> None:
        evaluate(settings)

    return PeriodicJob(
        name,
        tick,
        interval_seconds=settings.alerts.conditions_interval_seconds,
        lease_seconds=60,
    )


def scanner_offline_job(settings: Settings) -> PeriodicJob:
    # The runner's start: silence from before it (netmap was down) is not held against
    # a scanner until its agent had the time to come back (evaluate_scanner_offline).
    started = datetime.now(UTC)
    return _quick_condition_job(
        "alert-scanner-offline",
        partial(evaluate_scanner_offline, watching_since=started),
        settings,
    )


def run_failed_job(settings: Settings) -> PeriodicJob:
    return _quick_condition_job("alert-run-failed", evaluate_run_failed, settings)


def run_digests_job(settings: Settings) -> PeriodicJob:
    """The digests of runs that ended without a last analysis sending them."""
    return _quick_condition_job("alert-run-digests", send_finished_run_digests, settings)


def _store_job(name: str, evaluate, settings: Settings, *, interval_seconds: int) -> PeriodicJob:
    """A job that asks the search store: ``evaluate(store, check)``, the store opened once
    per worker process (after the fork), ``check`` ending the tick once the lease is lost
    or the runner stops, so nothing is written by a holder that is no longer one."""
    store = None

    def tick(ctx: JobContext, lease: PeriodicLease) -> None:
        nonlocal store
        if store is None:
            from app.search import open_store

            store = open_store(settings)

        def check() -> None:
            ctx.check_cancelled()
            lease.check()

        evaluate(store, check)

    return PeriodicJob(name, tick, interval_seconds=interval_seconds, lease_seconds=300)


def searched_changes_job(settings: Settings) -> PeriodicJob:
    """Search-filtered rules left pending after an analysis (Elasticsearch store): the
    worker crashed after the commit, or the store was out."""
    return _store_job(
        "alert-searched-changes",
        lambda store, check: evaluate_due(settings.alerts, store, check=check),
        settings,
        interval_seconds=settings.alerts.conditions_interval_seconds,
    )


def certificate_expiry_job(settings: Settings) -> PeriodicJob:
    return _store_job(
        "alert-certificate-expiry",
        lambda store, check: evaluate_certificate_expiry(settings, store, check=check),
        settings,
        interval_seconds=settings.alerts.certificate_interval_seconds,
    )


def jobs(settings: Settings) -> list[PeriodicJob]:
    return [
        scanner_offline_job(settings),
        run_failed_job(settings),
        run_digests_job(settings),
        searched_changes_job(settings),
        certificate_expiry_job(settings),
    ]
