"""After a task is deleted, what it alone saw is new again (docs/changes.md).

Deleting a task removes from the owner's asset view the endpoints no other task of theirs
saw; the change analysis forgets the same endpoints. A new task that finds them reports
them as new, alert rules hear of it, and the dashboard's and the Assets page's figures
agree with the change set. Before, the analysis remembered them: the new task's first
run found nothing new while the Assets page had just gone empty.
"""

from __future__ import annotations

from app.bench.purge import run_purges
from app.search.postgres_store import PostgresStore
from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.support.scanner_protocol import observation


def test_a_deleted_tasks_endpoints_are_new_to_the_task_that_finds_them_next(api, settings):
    user, scanner = api.user(), api.scanner()
    first, _ = _scan(user, scanner, [observation("192.0.2.5", 22), observation("192.0.2.6", 22)])
    _run_workers(settings)
    assert user.get(f"/api/tasks/{first['id']}/changes").get_json()["counts"]["new"] == 2
    # Another task of the owner also saw 192.0.2.6:22: that one stays known.
    other, _ = _scan(user, scanner, [observation("192.0.2.6", 22)])
    _run_workers(settings)

    assert user.delete(f"/api/tasks/{first['id']}").status_code == 202
    store = PostgresStore(settings)
    try:
        assert run_purges(settings, store) == 1
    finally:
        store.close()
    assert [a["ip"] for a in user.get("/api/assets").get_json()["items"]] == ["192.0.2.6"]

    again, _ = _scan(user, scanner, [observation("192.0.2.5", 22), observation("192.0.2.6", 22)])
    _run_workers(settings)
    body = user.get(f"/api/tasks/{again['id']}/changes").get_json()
    assert body["counts"]["new"] == 1
    assert [(c["ip"], c["kind"]) for c in body["items"]] == [("192.0.2.5", "new")]
    assert other["id"] != again["id"]
