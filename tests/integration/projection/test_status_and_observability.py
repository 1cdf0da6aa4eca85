"""projection_status through the API (PRJ-9), backlog metrics (OBS-3) and events (OBS-1)."""

from __future__ import annotations

import logging
import re
import threading

import sqlalchemy as sa

from app.db import transaction
from app.projection import outbox
from app.projection.status import projection_status_sql
from app.search.port import StoreUnavailable
from tests.support.projection import (
    create_execution,
    create_owner,
    expire_lease,
    make_due,
    outbox_row,
    run_one_slice,
    seed_execution,
)
from tests.support.scanner_protocol import claim, observation


def _execution_status(user, task_id: int) -> str:
    (execution,) = user.get(f"/api/tasks/{task_id}/executions").get_json()["items"]
    return execution["projection_status"]


def test_projection_status_goes_pending_running_retrying_ready(app, api, pg_projection):
    user, scanner = api.user(), api.scanner()
    task = user.post(
        "/api/tasks", json={"name": "s", "targets": ["192.0.2.0/30"], "ports": "443"}
    ).get_json()["task"]
    assert _execution_status(user, task["id"]) == "not_started"
    upload = claim(scanner)
    upload.final(0, [observation("192.0.2.1", 443), observation("192.0.2.2", 443)])
    assert _execution_status(user, task["id"]) == "pending"

    seen_while_publishing: list[str] = []
    pg_projection.store.before["publish_execution_page"] = lambda *a, **k: (
        seen_while_publishing.append(_execution_status(user, task["id"]))
    )
    failures = iter([StoreUnavailable("refresh failed")])

    def refresh_fails_once() -> None:
        error = next(failures, None)
        if error is not None:
            raise error

    pg_projection.store.before["refresh_current"] = refresh_fails_once
    assert run_one_slice(pg_projection.worker()).result == "retry"
    assert seen_while_publishing == ["running"]
    assert _execution_status(user, task["id"]) == "retrying"
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["projection_status"] == "retrying"

    make_due(upload.id)
    assert run_one_slice(pg_projection.worker()).result == "completed"
    assert _execution_status(user, task["id"]) == "ready"
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["projection_status"] == "ready"


def test_a_failed_or_cancelled_execution_publishes_nothing_and_holds_no_task_back(
    app, api, pg_projection
):
    """A scheduled task keeps the failed execution of an old run: once a later run is
    published, the task reads published, not "not started" for good."""
    user, scanner = api.user(), api.scanner()
    task = user.post(
        "/api/tasks", json={"name": "s", "targets": ["192.0.2.0/30"], "ports": "443"}
    ).get_json()["task"]
    failed = claim(scanner)
    path = f"/api/scanner/executions/{failed.id}/fail"
    assert scanner.post(path, json={"claim_token": failed.token}).status_code == 200
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert _execution_status(user, task["id"]) == "not_applicable"
    assert detail["projection_status"] == "not_applicable"

    assert user.post(f"/api/tasks/{task['id']}/runs").status_code == 201
    second = claim(scanner)
    executions = user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
    assert {e["id"]: e["projection_status"] for e in executions} == {
        failed.id: "not_applicable",
        second.id: "not_started",  # claimed, not yet succeeded: nothing to publish yet
    }
    second.final(0, [observation("192.0.2.1", 443)])
    assert run_one_slice(pg_projection.worker()).result == "completed"
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["projection_status"] == "ready"

    assert user.post(f"/api/tasks/{task['id']}/runs").status_code == 201
    (queued,) = [
        e["id"]
        for e in user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
        if e["status"] == "queued"
    ]
    run = user.get(f"/api/tasks/{task['id']}/runs").get_json()["items"][0]
    cancel = user.post(f"/api/tasks/{task['id']}/runs/{run['id']}/cancel")
    assert cancel.status_code == 200, cancel.get_json()
    executions = user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
    assert {e["id"]: e["projection_status"] for e in executions}[queued] == "not_applicable"
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["projection_status"] == "ready"


def test_a_claim_whose_worker_stopped_shows_retrying_until_recovered(settings, engine):
    execution_id = create_execution(create_owner())
    outbox.claim_next(lease_seconds=30)
    expire_lease(execution_id)

    def status() -> str:
        with transaction() as conn:
            return conn.execute(
                sa.text(f"SELECT {projection_status_sql('e')} FROM scan_executions e")
            ).scalar_one()

    assert status() == "retrying"
    recovered = outbox.claim_next(lease_seconds=30)
    assert recovered.recovered and status() == "running"
    assert outbox_row(execution_id).attempts == 1


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def test_backlog_and_oldest_age_are_on_metrics(api, engine):
    client = api.admin()  # /metrics is for operators
    owner = create_owner()
    first = create_execution(owner)
    create_execution(owner)
    text = client.get("/metrics").get_data(as_text=True)
    assert _metric(text, "netmap_projection_outbox_backlog") == 2
    assert _metric(text, "netmap_projection_outbox_oldest_age_seconds") >= 0
    assert _metric(text, "netmap_projection_outbox_running") == 0
    claimed = outbox.claim_next(lease_seconds=30)
    outbox.retry(claimed, "boom", base_seconds=60, max_backoff_seconds=60)
    outbox.claim_next(lease_seconds=30)
    text = client.get("/metrics").get_data(as_text=True)
    assert _metric(text, "netmap_projection_outbox_running") == 1
    assert _metric(text, "netmap_projection_outbox_retrying") == 1
    assert claimed.execution_id == first
    # The pool wait/hold histograms are there too (OBS-3).
    assert "netmap_db_pool_wait_seconds_bucket" in text


def test_each_backlog_gauge_is_scraped_once_with_its_help_whatever_apps_were_made(
    api, settings, engine
):
    from app import close_app, create_app

    close_app(create_app(settings, engine=engine))  # a second app registers its gauges again
    text = api.admin().get("/metrics").get_data(as_text=True)
    helps = {
        "netmap_projection_outbox_backlog": "Executions whose current assets are not published yet",
        "netmap_projection_outbox_oldest_age_seconds": (
            "Age of the oldest unpublished outbox row (0 when the backlog is empty)"
        ),
        "netmap_projection_outbox_running": "Outbox rows under a live claim",
        "netmap_projection_outbox_retrying": "Unpublished outbox rows whose last attempt failed",
        "netmap_analysis_queue_backlog": (
            "Finished executions whose change analysis is not done yet"
        ),
        "netmap_analysis_queue_oldest_age_seconds": (
            "Age of the oldest unprocessed analysis-queue row (0 when the backlog is empty)"
        ),
        "netmap_analysis_queue_running": "Analysis-queue rows under a live claim",
        "netmap_analysis_queue_retrying": (
            "Unprocessed analysis-queue rows whose last attempt failed"
        ),
    }
    for name, help_text in helps.items():
        assert re.findall(rf"^# HELP {name} (.*)$", text, re.MULTILINE) == [help_text]
        assert len(re.findall(rf"^{name} ", text, re.MULTILINE)) == 1
    assert len(re.findall(r"^# HELP netmap_alert_oldest_pending_age_seconds ", text, re.M)) == 1


def test_events_name_the_execution_phase_page_size_duration_and_error(projection, caplog):
    caplog.set_level(logging.INFO, logger="netmap.events")
    execution_id, _ = seed_execution(projection.store, 13)
    failures = iter([StoreUnavailable("store down for a moment")])

    def fail_first_refresh() -> None:
        error = next(failures, None)
        if error is not None:
            raise error

    projection.store.before["refresh_current"] = fail_first_refresh
    run_one_slice(projection.worker())
    make_due(execution_id)
    run_one_slice(projection.worker())

    def events(name: str) -> list[dict]:
        return [
            r.netmap_fields
            for r in caplog.records
            if getattr(r, "netmap_event", None) == name
            and r.netmap_fields.get("execution_id") == execution_id
        ]

    claimed = events("ScanProjectionClaimed")
    assert [(e["phase"], e["attempts"]) for e in claimed] == [("pages", 0), ("refreshing", 1)]
    pages = events("ScanProjectionPageCompleted")
    assert [e["page_endpoints"] for e in pages] == [10, 3]
    assert [e["phase"] for e in pages] == ["pages", "refreshing"]
    assert all(e["duration_ms"] >= 0 for e in pages)
    (error,) = events("ScanProjectionOutboxError")
    assert error["phase"] == "refreshing" and error["operation"] == "refresh"
    assert "store down for a moment" in error["error"] and error["attempts"] == 1
    assert error["slice_duration_ms"] >= 0 and error["retry_in_s"] > 0
    (completed,) = events("ScanProjectionCompleted")
    assert completed["processed_endpoints"] == 13 and completed["slice_duration_ms"] >= 0
    for record in caplog.records:  # tokens never reach a log line
        assert "claim_token" not in getattr(record, "netmap_fields", {})
    stages = {
        r.netmap_fields["stage"]
        for r in caplog.records
        if getattr(r, "netmap_event", None) == "ScanWriteConnectionAcquired"
    }
    assert {"projection_checkpoint", "projection_complete", "projection_retry"} <= stages


def test_the_runner_registers_the_projection_job(settings):
    from jobs.registry import job_kinds

    assert "projection" in [kind.name for kind in job_kinds(settings)]


def test_no_thread_is_left_behind_by_a_slice(projection):
    seed_execution(projection.store, 5)
    before = {t.name for t in threading.enumerate()}
    run_one_slice(projection.worker(projection_heartbeat_seconds=0.05))
    after = {t.name for t in threading.enumerate() if t.name.startswith("projection-heartbeat")}
    assert not after - before
