"""Every user of the lease kit (app/leases/), each through its real queue: how to make one
unit of its work, claim it, renew it, and name its row (tests/integration/leases/).

A "user" is ``LeaseUser(name, claim, renew, key)``: ``claim(lease_seconds)`` claims the
next unit through the domain's own claim function (or None), ``renew(work)`` is the
callback the domain hands the kit's Heartbeat, ``key(work)`` is (table, key column,
key) for a test that steals or inspects the row. Importable in a subprocess (the
kill -9 test claims there), so nothing here needs a fixture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from app.analysis import queue as analysis_queue
from app.db import transaction
from app.exports import records as export_records
from app.projection import outbox
from app.reports import delivery
from app.reports import records as report_records
from app.scan_control import purge as task_purge
from jobs.base import claim_periodic


@dataclass(frozen=True)
class LeaseUser:
    name: str
    claim: Callable[[float], Any | None]
    renew: Callable[[Any], bool | None]
    key: Callable[[Any], tuple[str, str, object]]


def _export_claim(lease_seconds: float):
    work, _exhausted = export_records.claim_next_build(
        host="lease-test", concurrency=4, lease_seconds=lease_seconds, max_attempts=100
    )
    return work


USERS: dict[str, LeaseUser] = {
    user.name: user
    for user in (
        LeaseUser(
            "projection",
            lambda lease: outbox.claim_next(lease_seconds=lease),
            outbox.renew,
            lambda w: ("scan_projection_outbox", "execution_id", w.execution_id),
        ),
        LeaseUser(
            "analysis",
            lambda lease: analysis_queue.claim_next(lease_seconds=lease),
            analysis_queue.renew,
            lambda w: ("scan_analysis_queue", "execution_id", w.execution_id),
        ),
        LeaseUser(
            "exports",
            _export_claim,
            export_records.renew,
            lambda w: ("exports", "id", w.id),
        ),
        LeaseUser(
            "report_jobs",
            lambda lease: report_records.claim_next_job(lease_seconds=lease, max_attempts=100),
            report_records.renew,
            lambda w: ("report_jobs", "report_id", w.report_id),
        ),
        LeaseUser(
            "report_deliveries",
            lambda lease: delivery.claim_next_delivery(lease_seconds=lease),
            delivery.renew,
            lambda w: ("report_deliveries", "id", w.id),
        ),
        LeaseUser(
            "periodic_jobs",
            lambda lease: claim_periodic(
                "lease-test", interval_seconds=3600, lease_seconds=lease, holder="lease-test"
            ),
            lambda w: w.renew(),
            lambda w: ("runner_periodic_jobs", "name", w.name),
        ),
        LeaseUser(
            "task_purges",
            lambda lease: task_purge.claim_next_purge(lease_seconds=lease),
            lambda w: task_purge.PURGE_ROWS.renew(w.task_id, w.claim_token, w.lease_seconds),
            lambda w: ("task_purges", "task_id", w.task_id),
        ),
    )
}


def steal(work: Any, user: LeaseUser) -> None:
    """Another worker's view: the row now carries someone else's token."""
    table, column, key = user.key(work)
    with transaction() as conn:
        conn.execute(
            sa.text(f"UPDATE {table} SET claim_token = gen_random_uuid() WHERE {column} = :key"),
            {"key": key},
        )


def token_of(work: Any) -> object:
    return work.claim_token


def make_work_for_every_user(api) -> None:
    """One unit of work in each queue: a scanned execution whose projection is done (the
    analysis queue's), one still to project (the outbox's), an export and a report, a
    queued delivery of that report, a deleted task's purge."""
    from tests.support.scanner_protocol import claim, make_task, observation

    projected = api.user()
    make_task(projected, targets=("192.0.2.4/30",), ports="22")
    assert claim(api.scanner()).final(0, [observation("192.0.2.5", 22)]).status_code == 200
    with transaction() as conn:  # the projection finished it: analysis may claim it
        conn.execute(
            sa.text("UPDATE scan_projection_outbox SET processed_at = now(), phase = 'done'")
        )
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/30",), ports="22")
    upload = claim(api.scanner())
    assert upload.final(0, [observation("192.0.2.1", 22)]).status_code == 200
    doomed = make_task(user, targets=("192.0.2.8/30",), ports="22")
    deleted = user.client.delete(f"/api/tasks/{doomed['id']}", headers=user._headers(None))
    assert deleted.status_code == 202, deleted.get_json()  # a queued task purge
    exported = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"})
    assert exported.status_code == 202, exported.get_json()
    definition = user.post(
        "/api/reports/definitions",
        json={
            "name": "lease test",
            "task_id": task["id"],
            "period": "on_demand",
            "recipients": ["alice@example.com"],
        },
    )
    assert definition.status_code == 201, definition.get_json()
    run = user.post(f"/api/reports/definitions/{definition.get_json()['definition']['id']}/run")
    report_id = run.get_json()["report"]["id"]
    with transaction() as conn:  # what a committed report leaves for the mail runner
        conn.execute(
            sa.text(
                "INSERT INTO report_deliveries (report_id, recipient, message_id) "
                "VALUES (:r, 'alice@example.com', '<lease-test@netmap.local>')"
            ),
            {"r": report_id},
        )
