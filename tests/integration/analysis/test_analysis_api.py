"""Change analysis over HTTP, from a scanner's final to the views (ANA-4..7).

Tasks are created and finished through the real routes (so the final's
transaction queues the analysis), then the projection and analysis workers
run as the runner would, and the user reads change lists, counts, history
and asset status; the queue backlog shows on ``/metrics`` and processed rows
are pruned after the retention.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.alerts.evaluate import change_set_hook
from app.analysis import queue
from app.analysis.worker import AnalysisWorker
from app.db import transaction
from app.projection.slices import ProjectionWorker
from app.search.postgres_store import PostgresStore
from tests.support.projection import drain
from tests.support.scanner_protocol import claim, observation

NET = "192.0.2.0/28"


def _scan(user, scanner, observations, targets=(NET,)) -> tuple[dict, int]:
    created = user.post(
        "/api/tasks", json={"name": "c", "targets": list(targets), "ports": "22,80"}
    )
    task = created.get_json()["task"]
    upload = claim(scanner)
    assert upload.final(0, observations).status_code == 200
    return task, upload.id


def _run_workers(settings) -> None:
    store = PostgresStore(settings)
    try:
        drain(ProjectionWorker(settings, store))
        worker = AnalysisWorker(
            settings, store, on_change_set=change_set_hook(settings.alerts, store)
        )
        while (work := worker.claim()) is not None:
            assert worker.run(work).result == "completed"
    finally:
        store.close()


def _metric(client, name: str) -> float:
    for line in client.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


def test_changes_counts_history_and_status_over_http(api, app, settings) -> None:
    alice, bob, scanner = api.user(), api.user(), api.scanner()
    hosts = [f"192.0.2.{i}" for i in range(1, 5)]
    first = [
        observation(ip, port, service={"name": "ssh" if port == 22 else "http"})
        for ip in hosts
        for port in (22, 80)
    ]
    first[0] = observation("192.0.2.1", 22, service={"name": "ssh", "product": "dropbear"})
    task1, _ = _scan(alice, scanner, first)
    assert _metric(api.admin(), "netmap_analysis_queue_backlog") == 1
    _run_workers(settings)
    assert _metric(api.admin(), "netmap_analysis_queue_backlog") == 0

    # The second scan misses 192.0.2.2:80 and sees a new product on 192.0.2.1:22.
    second = [o for o in first if (o["ip"], o["port"]) != ("192.0.2.2", 80)]
    second = [
        {**o, "service": {"name": "ssh", "product": "OpenSSH"}}
        if (o["ip"], o["port"]) == ("192.0.2.1", 22)
        else o
        for o in second
    ]
    task2, execution2 = _scan(alice, scanner, second)
    _run_workers(settings)

    detail = alice.get(f"/api/tasks/{task2['id']}").get_json()["task"]
    assert detail["changes"] == {
        "new": 0,
        "changed": 1,
        "gone": 1,
        "reappeared": 0,
        "analysed_executions": 1,
    }
    first_detail = alice.get(f"/api/tasks/{task1['id']}").get_json()["task"]
    assert first_detail["changes"]["new"] == 8
    executions = alice.get(f"/api/tasks/{task2['id']}/executions").get_json()["items"]
    assert executions[0]["changes"]["gone"] == 1 and executions[0]["changes"]["absence_checked"]

    gone = alice.get(f"/api/tasks/{task2['id']}/changes?kind=gone").get_json()
    assert [(i["ip"], i["port"], i["kind"]) for i in gone["items"]] == [("192.0.2.2", 80, "gone")]
    assert gone["items"][0]["old"]["service"] == "http" and gone["items"][0]["new"] is None
    changed = alice.get(f"/api/tasks/{task2['id']}/changes?kind=changed").get_json()["items"]
    assert [(c["old"]["product"], c["new"]["product"]) for c in changed] == [
        ("dropbear", "OpenSSH")
    ]

    # Keyset pages over the first task's eight "new" changes.
    seen, cursor = [], ""
    while True:
        page = alice.get(f"/api/tasks/{task1['id']}/changes?limit=3&cursor={cursor}").get_json()
        seen.extend((i["ip"], i["port"]) for i in page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted((o["ip"], o["port"]) for o in first)

    assets = alice.get("/api/assets").get_json()["items"]
    assert len(assets) == 7 and {a["status"] for a in assets} == {"open"}
    gone_assets = alice.get("/api/assets?status=gone").get_json()["items"]
    assert [(a["ip"], a["port"], a["gone_execution_id"]) for a in gone_assets] == [
        ("192.0.2.2", 80, execution2)
    ]
    assert len(alice.get("/api/assets?status=all").get_json()["items"]) == 8

    history = alice.get("/api/assets/history?ip=192.0.2.2&port=80&transport=tcp").get_json()
    assert history["status"] == "gone"
    assert [e["kind"] for e in history["events"]] == ["new", "gone"]
    assert history["events"][1]["execution_id"] == execution2
    changed_history = alice.get("/api/assets/history?ip=192.0.2.1&port=22").get_json()
    assert [e["kind"] for e in changed_history["events"]] == ["new", "changed"]

    # Owner-scoped: Bob sees neither Alice's history nor her task's changes.
    assert bob.get("/api/assets/history?ip=192.0.2.2&port=80").get_json()["events"] == []
    assert bob.get(f"/api/tasks/{task2['id']}/changes").status_code == 404


def test_bad_parameters_are_named(api) -> None:
    user = api.user()
    task = user.post("/api/tasks", json={"name": "x", "targets": [NET], "ports": "22"}).get_json()
    tid = task["task"]["id"]
    for path, parameter in (
        (f"/api/tasks/{tid}/changes?kind=closed", "kind"),
        (f"/api/tasks/{tid}/changes?cursor=nope", "cursor"),
        (f"/api/tasks/{tid}/changes?limit=0", "limit"),
        ("/api/assets/history?ip=nope&port=22", "ip"),
        ("/api/assets/history?ip=192.0.2.1", "port"),
        ("/api/assets/history?ip=192.0.2.1&port=22&transport=sctp", "transport"),
        ("/api/assets?status=closed", "status"),
    ):
        response = user.get(path)
        assert response.status_code == 400, path
        assert response.get_json()["error"]["details"]["parameter"] == parameter, path


def test_processed_rows_are_pruned_after_the_retention(api, settings) -> None:
    user, scanner = api.user(), api.scanner()
    _scan(user, scanner, [observation("192.0.2.1", 22)])
    _run_workers(settings)
    assert queue.prune_processed(retention_days=1) == 0
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scan_analysis_queue SET processed_at = now() - interval '2 days'")
        )
    assert queue.prune_processed(retention_days=1) == 1
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM scan_analysis_queue")).scalar() == 0


def test_a_page_that_counts_an_execution_analysed_holds_its_changes(api, settings, engine):
    """The analysis commits between the page's statements: the page must not call the
    execution analysed without its changes (a client polling for "analysed" then reads
    them from that very page)."""
    user, scanner = api.user(), api.scanner()
    task, _ = _scan(user, scanner, [observation("192.0.2.1", 22, service={"name": "ssh"})])
    store = PostgresStore(settings)
    fired: list[bool] = []

    def analyse_after_the_changes_are_read(conn, cursor, statement, *args) -> None:
        if fired or "FROM analysis_changes c WHERE" not in statement:
            return
        fired.append(True)
        worker = AnalysisWorker(settings, store)
        while (work := worker.claim()) is not None:
            assert worker.run(work).result == "completed"

    try:
        drain(ProjectionWorker(settings, store))
        sa.event.listen(engine, "after_cursor_execute", analyse_after_the_changes_are_read)
        try:
            page = user.get(f"/api/tasks/{task['id']}/changes").get_json()
        finally:
            sa.event.remove(engine, "after_cursor_execute", analyse_after_the_changes_are_read)
        assert fired
        assert page["counts"]["analysed_executions"] == 0 or page["items"]
        page = user.get(f"/api/tasks/{task['id']}/changes").get_json()
        assert page["counts"]["analysed_executions"] == 1
        assert [(c["kind"], c["port"]) for c in page["items"]] == [("new", 22)]
    finally:
        store.close()
