"""Task runs: run 1 at creation, later runs, one active run, status from executions (issue 33)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app import migrations
from app.db import normalise_url, transaction
from app.errors import Conflict
from app.scan_control.dispatch import claim_next_execution, fail_execution
from app.scan_control.runs import start_run


def _create_task(user, targets=("192.0.2.0/30",), name="t", **extra):
    body = {"name": name, "targets": list(targets), "ports": "80", **extra}
    response = user.post("/api/tasks", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()["task"]


def _runs(task_id: int):
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT r.id, r.number, r.status, r.trigger, r.started_at, r.finished_at, "
                "ARRAY(SELECT e.status FROM scan_executions e WHERE e.run_id = r.id "
                "ORDER BY e.id) AS executions "
                "FROM task_runs r WHERE r.task_id = :t ORDER BY r.number"
            ),
            {"t": task_id},
        ).all()


def _finish_all(scanner_id: int, *, fail: bool = False) -> None:
    """Claim every queued execution and fail it (or mark it succeeded directly)."""
    while True:
        with transaction() as conn:
            claimed = claim_next_execution(conn, scanner_id=scanner_id, lease_seconds=60)
            if claimed is None:
                return
            if fail:
                fail_execution(
                    conn,
                    execution_id=claimed.id,
                    scanner_id=scanner_id,
                    claim_token=claimed.claim_token,
                    reason="x",
                )
            else:
                from app.scan_control.dispatch import aggregate_task_status
                from app.scan_control.executions import mark_succeeded

                mark_succeeded(conn, claimed.id, observations=1, endpoints=1, ips=1)
                aggregate_task_status(conn, claimed.task_id)


def test_task_creation_starts_run_1_with_every_execution(api):
    user = api.user()
    task = _create_task(user, targets=["192.0.2.0/23"])
    runs = _runs(task["id"])
    assert [(r.number, r.status, r.trigger) for r in runs] == [(1, "queued", "manual")]
    assert runs[0].executions == ["queued"] * task["execution_count"]
    assert task["latest_run"]["number"] == 1 and task["latest_run"]["status"] == "queued"


def test_a_second_run_waits_for_the_first_and_follows_its_executions(api):
    user = api.user()
    scanner = api.scanner()
    settings = api.app.extensions["netmap.settings"]
    task = _create_task(user, targets=["192.0.2.0/24", "198.51.100.0/24"])
    with pytest.raises(Conflict) as raised:
        start_run(task["id"], trigger="manual", limits=settings.scan)
    assert raised.value.code == "run_active"

    _finish_all(scanner.id)
    first = _runs(task["id"])[0]
    assert first.status == "succeeded" and first.finished_at is not None

    second = start_run(task["id"], trigger="schedule", limits=settings.scan)
    assert (second.number, second.status, second.trigger) == (2, "queued", "schedule")
    assert second.counts["executions"]["queued"] == first.executions.__len__()
    with pytest.raises(Conflict):
        start_run(task["id"], trigger="manual", limits=settings.scan)

    _finish_all(scanner.id, fail=True)
    runs = _runs(task["id"])
    assert [(r.number, r.status) for r in runs] == [(1, "succeeded"), (2, "failed")]
    assert runs[1].started_at is not None and runs[1].finished_at is not None
    with transaction() as conn:
        status = conn.execute(
            sa.text("SELECT status FROM scan_tasks WHERE id = :t"), {"t": task["id"]}
        ).scalar()
    assert status == "failed"  # the task shows its newest run


def test_a_run_with_mixed_outcomes_is_partial(api):
    user = api.user()
    scanner = api.scanner()
    task = _create_task(user, targets=["192.0.2.0/24", "198.51.100.0/24"])
    with transaction() as conn:
        first = claim_next_execution(conn, scanner_id=scanner.id, lease_seconds=60)
        fail_execution(
            conn,
            execution_id=first.id,
            scanner_id=scanner.id,
            claim_token=first.claim_token,
            reason="x",
        )
    assert _runs(task["id"])[0].status == "running"
    _finish_all(scanner.id)
    assert _runs(task["id"])[0].status == "partial"


def test_existing_executions_become_run_1_of_their_task(empty_database_url):
    migrations.upgrade(empty_database_url, "20261202_0810")  # the revision before runs
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    """
                    INSERT INTO users (username, password_hash) VALUES ('o', 'x');
                    INSERT INTO scan_tasks (owner_id, name, targets, ports, transports, scan_plan)
                    VALUES (1, 'done', '[]', '80', '{tcp}', '{}'),
                           (1, 'mixed', '[]', '80', '{tcp}', '{}'),
                           (1, 'going', '[]', '80', '{tcp}', '{}');
                    INSERT INTO scan_executions (task_id, kind, status, targets, ports,
                                                 transports, finished_at)
                    VALUES (1, 'ports', 'succeeded', '[]', '80', '{tcp}', now()),
                           (2, 'ports', 'succeeded', '[]', '80', '{tcp}', now()),
                           (2, 'ports', 'failed', '[]', '80', '{tcp}', now()),
                           (3, 'ports', 'queued', '[]', '80', '{tcp}', NULL),
                           (3, 'ports', 'succeeded', '[]', '80', '{tcp}', now());
                    """
                )
            )
        migrations.upgrade(empty_database_url)
        with engine.connect() as conn:
            runs = conn.execute(
                sa.text(
                    "SELECT task_id, number, status, trigger, finished_at IS NOT NULL AS done "
                    "FROM task_runs ORDER BY task_id"
                )
            ).all()
            orphans = conn.execute(
                sa.text(
                    "SELECT count(*) FROM scan_executions e JOIN task_runs r ON r.id = e.run_id "
                    "WHERE r.task_id <> e.task_id"
                )
            ).scalar()
        assert [tuple(r) for r in runs] == [
            (1, 1, "succeeded", "manual", True),
            (2, 1, "partial", "manual", True),
            (3, 1, "running", "manual", False),
        ]
        assert orphans == 0
    finally:
        engine.dispose()


def test_an_import_only_task_queues_nothing_and_each_import_is_a_run(api):
    user = api.user()
    task = _create_task(user, targets=["198.51.100.0/24"], scan=False, ports="22,80")
    assert task["scan"] is False and task["execution_count"] == 0
    assert task["latest_run"] is None
    assert _runs(task["id"]) == []
    # Nothing is queued for it: idle (not listed with tasks waiting for a scanner).
    assert task["status"] == "idle"
    assert [t["id"] for t in user.get("/api/tasks?status=idle").get_json()["items"]] == [task["id"]]
    assert user.get("/api/tasks?status=queued").get_json()["items"] == []
    for port in (22, 80):
        imported = user.post(
            f"/api/tasks/{task['id']}/imports?format=naabu-jsonl",
            json={"ip": "198.51.100.7", "port": port, "protocol": "tcp"},
        )
        assert imported.status_code == 201, imported.get_json()
    runs = _runs(task["id"])
    assert [(r.number, r.status, r.trigger) for r in runs] == [
        (1, "succeeded", "import"),
        (2, "succeeded", "import"),
    ]
    assert all(len(r.executions) == 1 for r in runs)
    listed = user.get(f"/api/tasks/{task['id']}/runs").get_json()["items"]
    assert [(r["number"], r["trigger"], r["counts"]["endpoints"]) for r in listed] == [
        (2, "import", 1),
        (1, "import", 1),
    ]
    refused = user.post(f"/api/tasks/{task['id']}/runs")
    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "task_import_only"
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["status"] == "succeeded"


def test_scan_must_be_a_boolean(api):
    user = api.user()
    response = user.post(
        "/api/tasks", json={"name": "t", "targets": ["192.0.2.1"], "ports": "80", "scan": "no"}
    )
    assert response.status_code == 400
    assert "scan" in str(response.get_json()["error"])


def test_cancelling_a_queued_run_cancels_its_executions(api):
    user = api.user()
    other = api.user()
    task = _create_task(user, targets=["192.0.2.0/24", "198.51.100.0/24"])
    run_id = task["latest_run"]["id"]
    assert other.post(f"/api/tasks/{task['id']}/runs/{run_id}/cancel").status_code == 404
    cancelled = user.post(f"/api/tasks/{task['id']}/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.get_json()
    run = cancelled.get_json()["run"]
    assert run["status"] == "cancelled" and run["finished_at"] is not None
    assert run["started_at"] is None  # no scanner ever claimed it
    assert run["counts"]["executions"]["cancelled"] == 2
    assert _runs(task["id"])[0].executions == ["cancelled", "cancelled"]
    scanner = api.scanner()
    assert scanner.claim().status_code == 204  # nothing claimable is left
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["status"] == "cancelled"
    again = user.post(f"/api/tasks/{task['id']}/runs/{run_id}/cancel")
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "run_not_active"
    restarted = user.post(f"/api/tasks/{task['id']}/runs")
    assert restarted.status_code == 201
    assert restarted.get_json()["run"]["number"] == 2
    missing = user.post(f"/api/tasks/{task['id']}/runs/999999/cancel")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "run_not_found"


def test_a_cancelled_execution_answers_renewal_and_upload_with_execution_cancelled(api):
    from tests.support.scanner_protocol import observation, upload_body

    user = api.user()
    scanner = api.scanner()
    task = _create_task(user, targets=["198.51.100.0/30"])
    claimed = scanner.claim().get_json()["execution"]
    run = user.post(f"/api/tasks/{task['id']}/runs/{task['latest_run']['id']}/cancel")
    assert run.get_json()["run"]["started_at"] is not None  # it was claimed
    renewal = scanner.post(
        f"/api/scanner/executions/{claimed['id']}/lease",
        json={"claim_token": claimed["claim_token"]},
    )
    assert renewal.status_code == 409
    assert renewal.get_json()["error"]["code"] == "execution_cancelled"
    upload = scanner.post(
        f"/api/scanner/executions/{claimed['id']}/uploads",
        json=upload_body(claimed["claim_token"], 0, [observation("198.51.100.1", 22)]),
    )
    assert upload.status_code == 409
    assert upload.get_json()["error"]["code"] == "execution_cancelled"


def test_results_changes_and_exports_default_to_the_latest_finished_run(api):
    from tests.support.scanner_protocol import claim, observation

    user = api.user()
    scanner = api.scanner()
    task = _create_task(user, targets=["198.51.100.0/30"], ports="22,80")
    first_run = task["latest_run"]["id"]
    assert claim(scanner).final(0, [observation("198.51.100.1", 22)]).status_code == 200
    second = user.post(f"/api/tasks/{task['id']}/runs").get_json()["run"]
    # Run 2 is not finished: results still show run 1.
    page = user.get(f"/api/tasks/{task['id']}/results").get_json()
    assert [(i["ip"], i["port"]) for i in page["items"]] == [("198.51.100.1", 22)]
    assert claim(scanner).final(0, [observation("198.51.100.2", 80)]).status_code == 200

    latest = user.get(f"/api/tasks/{task['id']}/results").get_json()
    assert [(i["ip"], i["port"]) for i in latest["items"]] == [("198.51.100.2", 80)]
    assert latest["total_endpoints"] == 1 and latest["total_ips"] == 1
    older = user.get(f"/api/tasks/{task['id']}/results?run={first_run}").get_json()
    assert [(i["ip"], i["port"]) for i in older["items"]] == [("198.51.100.1", 22)]
    missing = user.get(f"/api/tasks/{task['id']}/results?run=999999")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "run_not_found"
    bad = user.get(f"/api/tasks/{task['id']}/results?run=x")
    assert bad.status_code == 400

    export = user.post(f"/api/tasks/{task['id']}/exports?run={first_run}", json={"format": "csv"})
    assert export.status_code == 202
    with transaction() as conn:
        executions = conn.execute(
            sa.text("SELECT execution_ids FROM exports WHERE id = :id"),
            {"id": export.get_json()["export"]["id"]},
        ).scalar()
        first_executions = conn.execute(
            sa.text("SELECT array_agg(id) FROM scan_executions WHERE run_id = :r"),
            {"r": first_run},
        ).scalar()
    assert list(executions) == list(first_executions)
    changes = user.get(f"/api/tasks/{task['id']}/changes").get_json()
    assert changes["run_id"] == second["id"]
    compare = user.get(f"/api/tasks/{task['id']}/changes?from_run={first_run}")
    assert compare.status_code == 400
    assert compare.get_json()["error"]["details"]["parameter"] == "to_run"
    # One run's change set or a comparison, not both (run was dropped without a word).
    both = user.get(
        f"/api/tasks/{task['id']}/changes?from_run={first_run}&to_run={second['id']}&run={first_run}"
    )
    assert both.status_code == 400
    assert both.get_json()["error"]["details"]["parameter"] == "run"


def test_a_cancelled_latest_run_does_not_hide_the_finished_one_before_it(api):
    """A run cancelled by mistake: results, changes and exports still default to the
    latest run that finished without being cancelled."""
    from tests.support.scanner_protocol import claim, observation

    user, scanner = api.user(), api.scanner()
    task = _create_task(user, targets=["198.51.100.0/30"], ports="22")
    first_run = task["latest_run"]["id"]
    assert claim(scanner).final(0, [observation("198.51.100.1", 22)]).status_code == 200
    second = user.post(f"/api/tasks/{task['id']}/runs").get_json()["run"]
    cancelled = user.post(f"/api/tasks/{task['id']}/runs/{second['id']}/cancel")
    assert cancelled.get_json()["run"]["status"] == "cancelled"

    page = user.get(f"/api/tasks/{task['id']}/results").get_json()
    assert [(i["ip"], i["port"]) for i in page["items"]] == [("198.51.100.1", 22)]
    assert user.get(f"/api/tasks/{task['id']}/changes").get_json()["run_id"] == first_run
    export = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"})
    assert export.status_code == 202, export.get_json()
    # The cancelled run itself is still there to look at by its id.
    shown = user.get(f"/api/tasks/{task['id']}/results?run={second['id']}").get_json()
    assert shown["items"] == []


def test_reports_show_the_latest_finished_run_and_do_not_wait_for_a_newer_one(api):
    from app.reports import capture
    from tests.support.scanner_protocol import claim, observation

    user = api.user()
    task = _create_task(user, targets=["198.51.100.0/30"], ports="22")
    with transaction() as conn:
        assert capture._pending_executions(conn, [task["id"]]) == 1  # run 1 not done
    assert claim(api.scanner()).final(0, [observation("198.51.100.1", 22)]).status_code == 200
    second = user.post(f"/api/tasks/{task['id']}/runs").get_json()["run"]
    with transaction() as conn:
        latest = capture._latest_executions(conn, [task["id"]])
        pending = capture._pending_executions(conn, [task["id"]])
        first_run_executions = conn.execute(
            sa.text("SELECT array_agg(id) FROM scan_executions WHERE run_id = :r"),
            {"r": task["latest_run"]["id"]},
        ).scalar()
    assert [row.id for row in latest] == list(first_run_executions)
    assert pending == 0  # run 2 (queued) does not hold the report back
    assert second["status"] == "queued"
