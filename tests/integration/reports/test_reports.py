"""Reports end to end on real PostgreSQL: definitions, three phases, retries (REP-1..7).

Results arrive through the scanner protocol; report jobs run the runner's own
code in-process. The renderer is a real ``ModuleRegistry``: "not ready" is a
registry with nothing installed (what a process sees before its selection is
applied or after its worker died), recovery installs the builtin module.
"""

from __future__ import annotations

import email
import re
import threading
from datetime import UTC, datetime, timedelta
from email import policy
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.modules.registry import ModuleRegistry
from app.modules.report_render import SLOT_NAME, BuiltinRenderModule, report_render_slot
from app.object_store import open_object_store
from app.reports import records
from app.reports.delivery import claim_next_delivery, deliver, outbox_directory
from app.reports.pipeline import run_report
from tests.support.scanner_protocol import claim, make_task, observation


class Renderer:
    """A real registry for the report-render slot; empty until ``recover``."""

    def __init__(self, settings, *, ready: bool = True):
        self.registry = ModuleRegistry([report_render_slot(settings)], drain_timeout=2.0)
        self.revision = 0
        if ready:
            self.recover()

    def recover(self) -> None:
        self.revision += 1
        self.registry.install(
            SLOT_NAME, BuiltinRenderModule(), release_id="builtin", revision=self.revision
        )

    def acquire(self):
        return self.registry.acquire(SLOT_NAME)


def _scanned_task(api, user=None):
    user = user or api.user()
    task = make_task(user, targets=("192.0.2.0/29",), ports="22,443")
    upload = claim(api.scanner())
    observations = [
        observation(f"192.0.2.{i}", port, service={"name": "ssh" if port == 22 else "https"})
        for i in range(1, 5)
        for port in (22, 443)
    ]
    assert upload.final(0, observations).status_code == 200
    return user, task


def _definition(user, task, **overrides):
    body = {
        "name": "weekly look",
        "task_id": task["id"],
        "period": "on_demand",
        "recipients": ["alice@example.com", "bob@example.com"],
        **overrides,
    }
    response = user.post("/api/reports/definitions", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()["definition"]


def _run(settings, renderer, **kwargs):
    work = records.claim_next_job(lease_seconds=60)
    assert work is not None
    return run_report(
        work,
        renderer=renderer,
        object_store=open_object_store(settings),
        search_store=_search_store(settings),
        delete_concurrency=3,
        wait_seconds=0,
        **kwargs,
    )


def _search_store(settings):
    from app.search import open_store

    return open_store(settings)


def _count(sql: str, **params) -> int:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def _make_due(report_id: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE report_jobs SET available_at = now() WHERE report_id = :id"),
            {"id": report_id},
        )


def test_definition_validation_names_the_field_and_writes_nothing(api):
    user, task = _scanned_task(api)
    other = api.user()
    base = {"name": "r", "task_id": task["id"], "period": "daily", "recipients": ["a@b.example"]}
    cases = [
        ({**base, "recipients": ["not an address"]}, 400, "recipients"),
        ({**base, "recipients": []}, 400, "recipients"),
        ({**base, "template": "nope"}, 400, "template"),
        ({**base, "period": "hourly"}, 400, "period"),
        ({**base, "timezone": "Mars/Base"}, 400, "timezone"),
        # Files of the zone database that are not zones: refused (only real IANA names).
        ({**base, "timezone": "localtime"}, 400, "timezone"),
        ({**base, "timezone": "Factory"}, 400, "timezone"),
        ({**base, "timezone": "posixrules"}, 400, "timezone"),
        ({**base, "timezone": "../zoneinfo/UTC"}, 400, "timezone"),
        ({**base, "scope": "all"}, 400, "task_id"),
    ]
    for body, status, field in cases:
        response = user.post("/api/reports/definitions", json=body)
        assert response.status_code == status, (body, response.get_json())
        assert response.get_json()["error"]["details"]["field"] == field
    stolen = other.post("/api/reports/definitions", json=base)
    assert stolen.status_code == 404
    assert stolen.get_json()["error"]["details"]["field"] == "task_id"
    assert _count("SELECT count(*) FROM report_definitions") == 0


def test_on_demand_report_is_archived_and_written_to_the_outbox(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    queued = user.post(f"/api/reports/definitions/{definition['id']}/run")
    assert queued.status_code == 202
    report_id = queued.get_json()["report"]["id"]

    assert _run(settings, Renderer(settings)).result == "ready"

    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["status"] == "ready"
    assert report["statistics"]["endpoints"] == 8
    assert report["statistics"]["ips"] == 4
    assert report["statistics"]["new_endpoints"] == 8
    assert sum(d["count"] for d in report["statistics"]["new_endpoints_per_day"]) == 8
    assert _count("SELECT count(*) FROM report_execution_aggregates") == 1
    assert {r["name"] for r in report["statistics"]["top_services"]} == {"ssh", "https"}
    renderer = report["quality"]["renderer"]
    assert renderer["release_id"] == "builtin" and renderer["generation"] >= 1
    assert len(renderer["input_checksum"]) == 64
    assert report["quality"]["mail_error"] is None
    assert sorted(report["images"]) == ["new-endpoints", "services"]
    assert [d["status"] for d in report["deliveries"]] == ["queued", "queued"]

    page = user.get(f"/api/reports/{report_id}/mail.html")
    assert page.status_code == 200
    assert page.data.count(b"data:image/png;base64,") == 2

    store = open_object_store(settings)
    # An image gone from the store: the archived mail is shown without it (it was a 500).
    with transaction() as conn:
        keys = conn.execute(
            sa.text("SELECT images FROM reports WHERE id = :id"), {"id": report_id}
        ).scalar_one()
    with store.open(keys[0]["key"]) as handle:
        moved = handle.read()
    store.delete(keys[0]["key"])
    without = user.get(f"/api/reports/{report_id}/mail.html")
    assert without.status_code == 200 and without.data.count(b"data:image/png;base64,") == 1
    store.put(keys[0]["key"], moved, "image/png")  # the deliveries below attach it
    while (work := claim_next_delivery(lease_seconds=60)) is not None:
        assert deliver(settings, work, store) == "written"
    files = sorted(outbox_directory(settings).glob("*.eml"))
    assert len(files) == 2
    message = email.message_from_bytes(files[0].read_bytes(), policy=policy.default)
    assert message.get_content_type() == "multipart/alternative"
    assert message["Message-ID"] in {d["message_id"] for d in report["deliveries"]}
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert [d["status"] for d in report["deliveries"]] == ["written", "written"]


def test_the_mail_reads_in_the_report_time_zone_and_says_new_once(api, settings):
    # The scan's change analysis has not run (it is the runner's own job): its count of
    # new endpoints is 0 meanwhile, and the mail used to say "8 new" in the subject and
    # "new 0" in the body. Both now read the endpoints first seen in the period.
    user, task = _scanned_task(api)
    definition = _definition(user, task, timezone="Asia/Kolkata")
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    assert _run(settings, Renderer(settings)).result == "ready"
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["statistics"]["changes"]["new"] == 0
    assert report["statistics"]["changes"]["pending_executions"] == 1
    assert ": 8 endpoints, 8 new (" in report["subject"]

    html = user.get(f"/api/reports/{report_id}/mail.html").get_data(as_text=True)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "New endpoints in the period 8" in text
    # "New" appears as the row above and the chart's heading, nowhere else.
    assert len(re.findall(r"\bnew\b", text, re.IGNORECASE)) == 2
    assert "New endpoints per day" in text
    # The days as text too (the text part showed an empty heading: the chart is an image).
    per_day = report["statistics"]["new_endpoints_per_day"]
    assert per_day and f"{per_day[0]['day']} {per_day[0]['count']}" in text
    assert "Scans not compared with the previous one yet 1" in text
    # Period bounds in the report's zone, whole minutes or seconds, never microseconds.
    start = datetime.fromisoformat(report["period"]["start"]).astimezone(ZoneInfo("Asia/Kolkata"))
    assert f"{start:%Y-%m-%d %H:%M}" in text and "IST" in text
    assert not re.search(r"\d:\d\d\.\d{6}|\+00:00", text)


def test_an_object_store_outage_while_storing_images_waits_with_its_reason(api, settings):
    """The store fails after the first image is written: that image is taken back and the
    report waits (retry_wait, the reason recorded); it stayed "generating" with no error
    until its lease ran out."""
    from app.object_store.port import ObjectStoreUnavailable

    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    real = open_object_store(settings)

    class FailsOnSecondPut:
        def __init__(self):
            self.puts = 0

        def __getattr__(self, name):
            return getattr(real, name)

        def put(self, key, payload, content_type):
            self.puts += 1
            if self.puts > 1:
                raise ObjectStoreUnavailable("connection refused")
            return real.put(key, payload, content_type)

    work = records.claim_next_job(lease_seconds=60)
    outcome = run_report(
        work,
        renderer=Renderer(settings),
        object_store=FailsOnSecondPut(),
        search_store=_search_store(settings),
        delete_concurrency=3,
        wait_seconds=0,
    )
    assert outcome.result == "retry_wait", outcome
    with transaction() as conn:
        job = conn.execute(
            sa.text("SELECT status, error_kind, last_error FROM report_jobs WHERE report_id = :id"),
            {"id": report_id},
        ).one()
    assert (job.status, job.error_kind) == ("retry_wait", "object_store")
    assert "connection refused" in job.last_error
    with transaction() as conn:
        assert records.get_report_row(conn, report_id).status == "queued"
    assert not list((settings.data_dir / "objects").rglob("*.png"))  # the first one too


def test_temporary_renderer_failure_archives_nothing_and_retries_after_a_minute(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    renderer = Renderer(settings, ready=False)

    assert _run(settings, renderer).result == "retry_wait"

    with transaction() as conn:
        job = conn.execute(
            sa.text(
                "SELECT status, error_kind, available_at - now() AS wait FROM report_jobs "
                "WHERE report_id = :id"
            ),
            {"id": report_id},
        ).one()
        report = records.get_report_row(conn, report_id)
    assert (job.status, job.error_kind) == ("retry_wait", "NotReady")
    assert timedelta(seconds=50) < job.wait <= timedelta(minutes=1)
    assert report.status == "queued" and report.statistics is None and report.html is None
    assert _count("SELECT count(*) FROM report_deliveries") == 0
    assert not list((settings.data_dir / "objects").rglob("*.png"))
    assert records.claim_next_job(lease_seconds=60) is None  # backoff holds

    renderer.recover()
    _make_due(report_id)
    assert _run(settings, renderer).result == "ready"
    assert _count("SELECT count(*) FROM report_deliveries WHERE report_id = :r", r=report_id) == 2


def test_a_report_on_an_import_only_task_counts_its_imported_endpoints(api, settings):
    """An import is its task's run (docs/running.md): a report reads it as it reads a
    scan's, not as an empty task."""
    import json
    import time

    user = api.user()
    task = user.post(
        "/api/tasks",
        json={"name": "imported", "targets": ["192.0.2.0/29"], "ports": "1-65535", "scan": False},
    ).get_json()["task"]
    now = str(int(time.time()))
    rows = [
        {
            "ip": "192.0.2.3",
            "timestamp": now,
            "ports": [{"port": p, "proto": "tcp", "status": "open"}],
        }
        for p in (80, 443)
    ]
    imported = user.post(
        f"/api/tasks/{task['id']}/imports?format=masscan-json",
        data=json.dumps(rows).encode(),
        headers={"Content-Type": "application/octet-stream"},
        json=None,
    )
    assert imported.status_code == 201, imported.get_json()
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    assert _run(settings, Renderer(settings)).result == "ready"
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["statistics"]["endpoints"] == 2
    assert report["statistics"]["latest_executions"] == [
        imported.get_json()["import"]["execution_id"]
    ]
    assert ": 2 endpoints, 2 new (" in report["subject"]


def test_permanent_template_error_keeps_statistics_and_sends_no_mail(api, settings):
    admin = api.admin()
    created = admin.post(
        "/api/reports/templates",
        json={"name": "broken", "version": "1", "subject": "x", "html": "{{ image('nope') }}"},
    )
    assert created.status_code == 201, created.get_json()
    assert (
        admin.post("/api/reports/templates/broken/publish", json={"version": "1"}).status_code
        == 200
    )
    user, task = _scanned_task(api)
    definition = _definition(user, task, template="broken")
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]

    outcome = _run(settings, Renderer(settings))

    assert outcome.result == "mail_error"
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["status"] == "ready"
    assert report["statistics"]["endpoints"] == 8
    assert "template_error" in report["quality"]["mail_error"]
    assert report["deliveries"] == [] and report["images"] == []
    assert user.get(f"/api/reports/{report_id}/mail.html").status_code == 404


def test_a_template_that_does_not_parse_is_refused_at_its_line_and_nothing_is_stored(api):
    admin = api.admin()
    good = {"name": "weekly", "version": "1", "subject": "{{ report.name }}", "html": "<p>ok</p>"}
    for field, source, line in (
        ("html", "<p>\n{{", 2),
        ("html", "{% if %}", 1),
        ("subject", "{{ report.name", 1),
    ):
        refused = admin.post("/api/reports/templates", json={**good, field: source})
        assert refused.status_code == 400, refused.get_json()
        error = refused.get_json()["error"]
        assert error["code"] == "invalid_template"
        assert error["details"] == {"field": field, "line": line}
        assert error["message"].startswith(f"{field} does not parse: line {line}: ")
    for version in ("  ", "a\u0001b"):
        refused = admin.post("/api/reports/templates", json={**good, "version": version})
        assert refused.status_code == 400 and refused.get_json()["error"]["details"] == {
            "field": "version"
        }
    names = [t["name"] for t in admin.get("/api/reports/templates").get_json()["items"]]
    assert "weekly" not in names
    assert admin.post("/api/reports/templates", json=good).status_code == 201


def test_a_definition_cannot_name_a_template_without_a_published_version(api):
    admin = api.admin()
    made = admin.post(
        "/api/reports/templates",
        json={"name": "draft", "version": "1", "subject": "s", "html": "<p>h</p>"},
    )
    assert made.status_code == 201
    user, task = _scanned_task(api, admin)
    refused = user.post(
        "/api/reports/definitions",
        json={
            "name": "d",
            "task_id": task["id"],
            "period": "daily",
            "recipients": ["a@example.com"],
            "template": "draft",
        },
    )
    assert refused.status_code == 400
    assert refused.get_json()["error"]["code"] == "unpublished_template"
    assert refused.get_json()["error"]["details"] == {"field": "template"}
    misspelt = admin.post("/api/reports/templates/draft/publish", json={"versoin": "1"})
    assert misspelt.status_code == 400
    assert misspelt.get_json()["error"]["code"] == "unknown_field"
    assert (
        admin.post("/api/reports/templates/draft/publish", json={"version": "1"}).status_code == 200
    )
    _definition(user, task, template="draft")
    # Both admin actions are in the audit trail, with who and which version.
    trail = admin.get("/api/audit?action=report_template").get_json()["items"]
    assert [(a["action"], a["target_id"], a["details"]["version"]) for a in trail] == [
        ("report_template.publish", "draft", "1"),
        ("report_template.add", "draft", "1"),
    ]
    assert trail[0]["actor"]["id"] == admin.id


def test_five_attempts_then_failed_and_an_admin_retry_succeeds(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    renderer = Renderer(settings, ready=False)
    results = []
    for _ in range(5):
        results.append(_run(settings, renderer).result)
        _make_due(report_id)
    assert results == ["retry_wait"] * 4 + ["failed"]
    assert records.claim_next_job(lease_seconds=60) is None
    assert user.get(f"/api/reports/{report_id}").get_json()["report"]["status"] == "failed"

    assert user.post(f"/api/reports/{report_id}/retry").status_code == 403
    retried = api.admin().post(f"/api/reports/{report_id}/retry")
    assert retried.status_code == 202
    renderer.recover()
    assert _run(settings, renderer).result == "ready"
    assert user.get(f"/api/reports/{report_id}").get_json()["report"]["status"] == "ready"


def test_lost_lease_during_generate_refuses_the_commit_and_deletes_its_images(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    store = open_object_store(settings)
    seen: list[str] = []

    def expire_lease():
        seen.extend(str(p) for p in (settings.data_dir / "objects").rglob("*.png"))
        with transaction() as conn:
            conn.execute(
                sa.text(
                    "UPDATE report_jobs SET lease_expires_at = now() - interval '1 second' "
                    "WHERE report_id = :id"
                ),
                {"id": report_id},
            )

    assert _run(settings, Renderer(settings), before_commit=expire_lease).result == "lease_lost"
    assert len(seen) == 2  # put before the commit...
    assert not list((settings.data_dir / "objects").rglob("*.png"))  # ...and removed after
    with transaction() as conn:
        report = records.get_report_row(conn, report_id)
    assert report.status == "generating" and report.html is None
    assert _count("SELECT count(*) FROM report_deliveries") == 0
    # The next runner takes it over once the lease has passed, and commits.
    assert _run(settings, Renderer(settings)).result == "ready"
    assert store.name == "filesystem"


def test_two_runners_claim_each_report_once(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    for _ in range(3):
        user.post(f"/api/reports/definitions/{definition['id']}/run")
    claims: list = []
    lock = threading.Lock()

    def runner():
        while (work := records.claim_next_job(lease_seconds=60)) is not None:
            with lock:
                claims.append(work.report_id)

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims) == sorted(set(claims)) and len(claims) == 3


def test_daily_schedule_makes_one_report_per_period_across_runners_and_restarts(api, settings):
    user, task = _scanned_task(api)
    _definition(user, task, period="daily", timezone="Europe/Berlin")
    first_day = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE report_definitions SET created_at = :at"),
            {"at": first_day - timedelta(days=3)},
        )
    created: list[list[int]] = []
    threads = [
        threading.Thread(
            target=lambda: created.append(records.create_due_scheduled_reports(first_day))
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(len(c) for c in created) == 1
    # A restarted runner later the same day creates nothing; the next day one more.
    assert records.create_due_scheduled_reports(first_day + timedelta(hours=10)) == []
    assert len(records.create_due_scheduled_reports(first_day + timedelta(days=1))) == 1
    with transaction() as conn:
        starts = (
            conn.execute(sa.text("SELECT period_start FROM reports ORDER BY period_start"))
            .scalars()
            .all()
        )
    # Berlin midnight is 23:00 UTC in winter.
    assert [s.astimezone(UTC).isoformat() for s in starts] == [
        "2026-11-28T23:00:00+00:00",
        "2026-11-29T23:00:00+00:00",
    ]


def test_a_daily_definition_made_mid_day_reports_first_on_the_day_it_was_made(api, settings):
    """Made at 10:00 on 30 November, its first report is of 30 November (sent on
    1 December), not of 29 November with the figures of the 30th."""
    user, task = _scanned_task(api)
    _definition(user, task, period="daily", timezone="UTC")
    made = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    with transaction() as conn:
        conn.execute(sa.text("UPDATE report_definitions SET created_at = :at"), {"at": made})
    assert records.create_due_scheduled_reports(made + timedelta(hours=1)) == []
    assert len(records.create_due_scheduled_reports(made + timedelta(days=1))) == 1
    with transaction() as conn:
        (period,) = conn.execute(sa.text("SELECT period_start, period_end FROM reports")).all()
    assert [moment.astimezone(UTC).isoformat() for moment in period] == [
        "2026-11-30T00:00:00+00:00",
        "2026-12-01T00:00:00+00:00",
    ]


@pytest.mark.parametrize("wait", [3600.0])
def test_incomplete_data_waits_without_spending_an_attempt(api, settings, wait):
    user = api.user()
    task = make_task(user, targets=("192.0.2.9",), ports="22")
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    work = records.claim_next_job(lease_seconds=60)
    outcome = run_report(
        work,
        renderer=Renderer(settings),
        object_store=open_object_store(settings),
        search_store=_search_store(settings),
        delete_concurrency=3,
        wait_seconds=wait,
    )
    assert outcome.result == "waiting"
    with transaction() as conn:
        job = conn.execute(
            sa.text("SELECT status, attempts FROM report_jobs WHERE report_id = :id"),
            {"id": report_id},
        ).one()
    assert (job.status, job.attempts) == ("retry_wait", 0)


def test_renderer_swap_during_generate_commits_with_the_old_generation(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    renderer = Renderer(settings)
    old = renderer.registry.current(SLOT_NAME).identity.generation

    assert _run(settings, renderer, before_commit=renderer.recover).result == "ready"

    assert renderer.registry.current(SLOT_NAME).identity.generation > old
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["quality"]["renderer"]["generation"] == old


def test_a_delivery_interrupted_in_sending_is_resent_with_the_same_message_id(api, settings):
    user, task = _scanned_task(api)
    _definition_id = _definition(user, task, recipients=["alice@example.com"])["id"]
    user.post(f"/api/reports/definitions/{_definition_id}/run")
    assert _run(settings, Renderer(settings)).result == "ready"
    first = claim_next_delivery(lease_seconds=60)
    # The runner "dies" here: the row stays in sending until its lease passes.
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE report_deliveries SET lease_expires_at = now() - interval '1 second'")
        )
    again = claim_next_delivery(lease_seconds=60)
    assert again.id == first.id and again.resend and not first.resend
    assert again.message_id == first.message_id
    assert deliver(settings, again, open_object_store(settings)) == "written"
    with transaction() as conn:
        row = conn.execute(
            sa.text("SELECT status, attempts, last_error FROM report_deliveries")
        ).one()
    assert (row.status, row.attempts) == ("written", 2)
    assert "resent" in row.last_error


def test_killed_renderer_worker_is_a_temporary_error_then_a_new_worker_renders(
    api, settings, renderer_releases
):
    import os
    import signal

    from app.config import load_settings
    from app.modules.report_render import open_candidate
    from tests.support.settings import RENDERER_RELEASES

    worker_settings, _ = load_settings(
        env={}, overrides={"report_renderer": {"releases_directory": str(renderer_releases)}}
    )
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    renderer = Renderer(settings, ready=False)
    release = RENDERER_RELEASES[0]
    doomed = open_candidate(worker_settings, release)
    renderer.registry.install(SLOT_NAME, doomed, release_id=release, revision=1)
    os.kill(doomed.pid, signal.SIGKILL)

    outcome = _run(settings, renderer)

    assert outcome.result == "retry_wait", outcome
    with transaction() as conn:
        job = conn.execute(
            sa.text("SELECT status, error_kind FROM report_jobs WHERE report_id = :id"),
            {"id": report_id},
        ).one()
        report = records.get_report_row(conn, report_id)
    assert (job.status, job.error_kind) == ("retry_wait", "Unavailable")
    assert report.statistics is None and report.images == []
    assert _count("SELECT count(*) FROM report_deliveries") == 0

    fresh = open_candidate(worker_settings, release)
    renderer.registry.install(SLOT_NAME, fresh, release_id=release, revision=2)
    _make_due(report_id)
    try:
        assert _run(settings, renderer).result == "ready"
    finally:
        renderer.registry.close(5.0)
    body = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert body["quality"]["renderer"]["release_id"] == release
    assert sorted(d["recipient"] for d in body["deliveries"]) == [
        "alice@example.com",
        "bob@example.com",
    ]


def test_definition_crud_is_owner_scoped_and_update_checks_the_task(api):
    user, task = _scanned_task(api)
    _other_user, other_task = _scanned_task(api)
    definition = _definition(user, task)
    assert [d["id"] for d in user.get("/api/reports/definitions").get_json()["items"]] == [
        definition["id"]
    ]
    path = f"/api/reports/definitions/{definition['id']}"
    moved = user.client.patch(path, json={"task_id": other_task["id"]}, headers=user._headers(None))
    assert moved.status_code == 404
    assert moved.get_json()["error"]["details"]["field"] == "task_id"
    changed = user.client.put(
        path, json={"enabled": False, "scope": "all"}, headers=user._headers(None)
    )
    assert changed.status_code == 200, changed.get_json()
    body = changed.get_json()["definition"]
    assert (body["enabled"], body["scope"], body["revision"]) == (False, "all", 2)
    assert user.client.delete(path, headers=user._headers(None)).status_code == 200
    assert user.get(path).status_code == 404


def test_a_disabled_template_version_keeps_statistics_with_a_mail_error(api, settings):
    admin = api.admin()
    version = {
        "name": "plain",
        "version": "1",
        "subject": "s {{ report.name }}",
        "html": "<p>x</p>",
    }
    assert (
        admin.post("/api/reports/templates", json={**version, "enabled": False}).status_code == 201
    )
    assert admin.post("/api/reports/templates", json=version).status_code == 409
    assert (
        admin.post("/api/reports/templates/plain/publish", json={"version": "1"}).status_code == 200
    )
    listed = {t["name"]: t for t in admin.get("/api/reports/templates").get_json()["items"]}
    assert listed["plain"]["published_version"] == "1" and listed["default"]["builtin"]
    user, task = _scanned_task(api)
    definition = _definition(user, task, template="plain")
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    assert _run(settings, Renderer(settings)).result == "mail_error"
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert "disabled" in report["quality"]["mail_error"]
    assert report["statistics"]["endpoints"] == 8 and report["deliveries"] == []


def test_the_runner_job_kind_renders_through_the_process_renderer_service(api, settings):
    from jobs.base import JobContext
    from jobs.registry import job_kinds
    from jobs.report_render_modules import ReportRenderModules
    from jobs.reports import ReportGenerateJob

    assert {"report_generate", "report_delivery"} <= {k.name for k in job_kinds(settings)}
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    ctx = JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )
    service = ReportRenderModules(settings)
    service.start(ctx)
    try:
        settings = settings.replace(
            reports=settings.reports.replace(incomplete_wait_seconds=0),
        )
        job = ReportGenerateJob(settings)
        work = job.claim(ctx)
        assert work is not None and work.report_id == report_id
        job.run(ctx, work)
    finally:
        service.stop()
    report = user.get(f"/api/reports/{report_id}").get_json()["report"]
    assert report["status"] == "ready"
    assert report["quality"]["renderer"]["release_id"] == "builtin"


def test_a_report_whose_runners_keep_dying_fails_after_the_last_attempt(api, settings):
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    for attempt in range(1, 6):
        work = records.claim_next_job(lease_seconds=60)
        assert work is not None and work.attempts == attempt
        with transaction() as conn:  # the runner dies: its lease just runs out
            conn.execute(
                sa.text("UPDATE report_jobs SET lease_expires_at = now() - interval '1 second'")
            )
    assert records.claim_next_job(lease_seconds=60) is None
    assert user.get(f"/api/reports/{report_id}").get_json()["report"]["status"] == "failed"


def test_renderer_deadline_then_busy_are_temporary_errors(api, settings, renderer_releases):
    from app.config import load_settings
    from app.modules.report_render import open_candidate
    from tests.support.settings import FAULTY_RELEASE

    # The test-only faulty build sleeps on a "fault:sleep:N" template version; the caller
    # stops waiting after 0.5 s, and the abandoned call keeps the only slot busy meanwhile.
    worker_settings, _ = load_settings(
        env={},
        overrides={
            "report_renderer": {
                "releases_directory": str(renderer_releases),
                "wait_timeout_seconds": 0.5,
                "max_in_flight": 1,
            }
        },
    )
    admin = api.admin()
    version = {"name": "slow", "version": "fault:sleep:5", "subject": "s", "html": "<p>x</p>"}
    assert admin.post("/api/reports/templates", json=version).status_code == 201
    published = admin.post("/api/reports/templates/slow/publish", json={"version": "fault:sleep:5"})
    assert published.status_code == 200
    user, task = _scanned_task(api)
    definition = _definition(user, task, template="slow")
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    renderer = Renderer(worker_settings, ready=False)
    renderer.registry.install(
        SLOT_NAME,
        open_candidate(worker_settings, FAULTY_RELEASE),
        release_id=FAULTY_RELEASE,
        revision=1,
    )
    kinds = []
    try:
        for _ in range(2):
            assert _run(settings, renderer).result == "retry_wait"
            with transaction() as conn:
                kinds.append(
                    conn.execute(
                        sa.text("SELECT error_kind FROM report_jobs WHERE report_id = :id"),
                        {"id": report_id},
                    ).scalar_one()
                )
            _make_due(report_id)
    finally:
        renderer.registry.close(10.0)
    assert kinds == ["DeadlineExceeded", "Busy"]
    with transaction() as conn:
        report = records.get_report_row(conn, report_id)
    assert report.status == "queued" and report.statistics is None
    assert _count("SELECT count(*) FROM report_deliveries") == 0


def test_capture_reads_an_execution_without_stored_aggregates_inside_its_snapshot(api, settings):
    from app.reports.capture import capture

    user, task = _scanned_task(api)
    definition = _definition(user, task)
    user.post(f"/api/reports/definitions/{definition['id']}/run")
    work = records.claim_next_job(lease_seconds=60)
    # prepare_aggregates was skipped on purpose
    snapshot = capture(work, store=_search_store(settings), wait_seconds=0)
    assert snapshot.statistics["new_endpoints"] == 8
    assert {r["name"] for r in snapshot.statistics["top_services"]} == {"ssh", "https"}
    assert _count("SELECT count(*) FROM report_execution_aggregates") == 0


def _reopen_the_scope(task_id: int, status: str) -> None:
    """Another execution of the report's task, as a re-run of it would add."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO scan_executions (task_id, kind, status, targets, ports, transports, "
                "finished_at) SELECT task_id, kind, :status, targets, ports, transports, "
                "CASE WHEN :status = 'succeeded' THEN now() END FROM scan_executions "
                "WHERE task_id = :t ORDER BY id LIMIT 1"
            ),
            {"t": task_id, "status": status},
        )


@pytest.mark.parametrize("status", ["queued", "succeeded"])
def test_a_report_whose_input_became_incomplete_is_neither_archived_nor_delivered(
    api, settings, status
):
    """REP-3: the commit re-checks input completeness. An execution of
    the scope queued again, or a newer one that replaced the captured numbers,
    between capture and commit: nothing is archived, no delivery is created, the
    images are deleted and the job goes back to capture without spending an attempt."""
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    seen: list[str] = []

    def input_changes():
        seen.extend(str(p) for p in (settings.data_dir / "objects").rglob("*.png"))
        _reopen_the_scope(task["id"], status)

    if status == "queued":  # the queued case matters for a complete capture: project first
        from app.projection.slices import ProjectionWorker
        from app.search import open_store
        from tests.support.projection import drain

        drain(ProjectionWorker(settings, open_store(settings)))
        assert _count("SELECT count(*) FROM scan_projection_outbox WHERE processed_at IS NULL") == 0
    outcome = _run(settings, Renderer(settings), before_commit=input_changes)
    assert outcome.result == "waiting", outcome
    assert outcome.error == "input incomplete at commit"
    assert len(seen) == 2 and not list((settings.data_dir / "objects").rglob("*.png"))
    with transaction() as conn:
        report = records.get_report_row(conn, report_id)
        job = conn.execute(
            sa.text("SELECT status, attempts, error_kind FROM report_jobs WHERE report_id = :id"),
            {"id": report_id},
        ).one()
    assert report.status == "queued" and report.html is None and report.statistics is None
    assert (job.status, job.attempts, job.error_kind) == ("retry_wait", 0, "waiting")
    assert _count("SELECT count(*) FROM report_deliveries") == 0
    if status == "succeeded":  # once due again, capture reads the new input and commits
        _make_due(report_id)
        assert _run(settings, Renderer(settings)).result == "ready"
        assert _count("SELECT count(*) FROM report_deliveries") == 2


def test_an_on_demand_report_may_show_an_earlier_run(api, settings):
    user, task = _scanned_task(api)
    scanner = api.scanner()
    again = user.post(f"/api/tasks/{task['id']}/runs")
    assert again.status_code == 201, again.get_json()
    upload = claim(scanner)
    assert (
        upload.final(0, [observation("192.0.2.1", 22, service={"name": "ssh"})]).status_code == 200
    )
    runs = user.get(f"/api/tasks/{task['id']}/runs").get_json()["items"]
    run1 = next(r["id"] for r in runs if r["number"] == 1)
    definition = _definition(user, task)
    path = f"/api/reports/definitions/{definition['id']}/run"

    latest = user.post(path).get_json()["report"]
    assert latest["run_id"] is None
    assert _run(settings, Renderer(settings)).result == "ready"
    shown = user.post(path, json={"run": run1}).get_json()["report"]
    assert shown["run_id"] == run1
    assert _run(settings, Renderer(settings)).result == "ready"
    endpoints = {
        r["id"]: user.get(f"/api/reports/{r['id']}").get_json()["report"]["statistics"]["endpoints"]
        for r in (latest, shown)
    }
    assert endpoints == {latest["id"]: 1, shown["id"]: 8}
    # Its executions are that run's too, not the period's (run 1's one and run 2's one).
    executions = user.get(f"/api/reports/{shown['id']}").get_json()["report"]["statistics"]
    run1_executions = user.get(f"/api/tasks/{task['id']}/runs/{run1}").get_json()["run"]
    assert executions["executions"]["total"] == run1_executions["counts"]["executions"]["total"]
    assert executions["executions"]["total"] == 1

    # A run of another task, a run on an all-tasks definition, a bad body: refused.
    _, other_task = _scanned_task(api, user)
    other_run = user.get(f"/api/tasks/{other_task['id']}/runs").get_json()["items"][0]["id"]
    assert user.post(path, json={"run": other_run}).status_code == 404
    everything = user.post(
        "/api/reports/definitions",
        json={"name": "all", "scope": "all", "period": "on_demand", "recipients": ["a@b.c"]},
    ).get_json()["definition"]
    refused = user.post(f"/api/reports/definitions/{everything['id']}/run", json={"run": run1})
    assert refused.status_code == 400 and refused.get_json()["error"]["details"]["field"] == "run"
    for bad in ({"run": "1"}, {"run": 0}, {"runs": 1}):
        assert user.post(path, json=bad).status_code == 400
    # A run cancelled before any scan of it finished has nothing to report: its report
    # said the task had no endpoints.
    cancelled = user.post(f"/api/tasks/{task['id']}/runs").get_json()["run"]
    assert user.post(f"/api/tasks/{task['id']}/runs/{cancelled['id']}/cancel").status_code == 200
    nothing = user.post(path, json={"run": cancelled["id"]})
    assert nothing.status_code == 409, nothing.get_json()
    assert nothing.get_json()["error"]["code"] == "run_not_reportable"


def test_a_deleted_tasks_definitions_are_gone_at_once(api, settings):
    """Deleting a task hides its report definitions from then on (lists, lookups, run
    now, the schedule), as its results; they were listed and runnable until the purge."""
    user, task = _scanned_task(api)
    definition = _definition(user, task)
    daily = _definition(user, task, name="daily", period="daily")
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE report_definitions SET created_at = now() - interval '3 days'")
        )
    assert user.delete(f"/api/tasks/{task['id']}").status_code == 202
    assert user.get("/api/reports/definitions").get_json()["items"] == []
    for made in (definition, daily):
        path = f"/api/reports/definitions/{made['id']}"
        assert user.get(path).status_code == 404
        assert user.post(path + "/run").status_code == 404
    assert records.create_due_scheduled_reports(datetime.now(UTC)) == []


def test_a_rescan_finds_no_new_endpoints_once_the_changes_are_analysed(api, settings):
    """A task scanned again the same day: its report of the second run counts as new the
    endpoints new to the owner (the change analysis), none here; the scan's own
    first_seen is the second scan's time, and counted every endpoint as new."""
    from tests.integration.analysis.test_analysis_api import _run_workers

    user, task = _scanned_task(api)
    _run_workers(settings)
    first_run = user.get(f"/api/tasks/{task['id']}/runs").get_json()["items"][0]["id"]
    again = user.post(f"/api/tasks/{task['id']}/runs")
    assert again.status_code == 201, again.get_json()
    upload = claim(api.scanner())
    observations = [observation(f"192.0.2.{i}", 22, service={"name": "ssh"}) for i in (1, 2)]
    observations.append(observation("192.0.2.6", 22, service={"name": "ssh"}))  # one new
    assert upload.final(0, observations).status_code == 200
    _run_workers(settings)
    definition = _definition(user, task)
    path = f"/api/reports/definitions/{definition['id']}/run"
    latest = user.post(path).get_json()["report"]["id"]
    assert _run(settings, Renderer(settings)).result == "ready"
    first = user.post(path, json={"run": first_run}).get_json()["report"]["id"]
    assert _run(settings, Renderer(settings)).result == "ready"
    figures = {
        r: user.get(f"/api/reports/{r}").get_json()["report"]["statistics"] for r in (latest, first)
    }
    assert (figures[latest]["endpoints"], figures[latest]["new_endpoints"]) == (3, 1)
    assert (figures[first]["endpoints"], figures[first]["new_endpoints"]) == (8, 8)
    assert sum(d["count"] for d in figures[latest]["new_endpoints_per_day"]) == 1
