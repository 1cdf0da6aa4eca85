"""Deleting a task with 100,000 endpoints (issue 33, "Tests": delete at 100k).

The task is filled as ``netmap bench purge`` fills it (``app.bench.purge.fill_task``:
the upload benchmark's observations sent through the real upload route, so receipts,
facts, execution endpoints and counters are what an upload writes), finalised and
projected by the real projection worker. Another task of the same owner saw some of its endpoints
and some of its own. ``DELETE /api/tasks/<id>`` answers 202 and the task is gone from
lists at once; the runner's purge job then works in the background while the API goes
on answering (lists, the other task's results, the owner's assets), in many bounded
batches. At the end no row of the task is left in any table, and the other task's
results and assets are exactly as before.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from app.bench.purge import OWN, fill_task, run_purges
from app.bench.upload_data import observations
from app.db import transaction
from app.projection.slices import ProjectionWorker
from app.search.postgres_store import PostgresStore
from jobs import task_purge
from tests.support.projection import drain
from tests.support.task_purge import leftover_rows, purge_row

pytestmark = pytest.mark.slow

ENDPOINTS = 100_000
SHARED = 2_000  # of the task's endpoints, also seen by the other task


def _results(session, task_id: int) -> list[dict]:
    found, cursor = [], None
    while True:
        suffix = f"&cursor={cursor}" if cursor else ""
        page = session.get(f"/api/tasks/{task_id}/results?limit=1000{suffix}").get_json()
        found += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return found


def _owner_assets(owner_id: int, addresses: list[str]) -> tuple[int, dict[tuple[str, int], dict]]:
    """How many current assets the owner has, and the rows (whole) of those on ``addresses``."""
    with transaction() as conn:
        total = conn.execute(
            sa.text("SELECT count(*) FROM search_assets_user WHERE owner_id = :o"), {"o": owner_id}
        ).scalar_one()
        rows = conn.execute(
            sa.text(
                "SELECT host(a.ip) AS address, a.port, to_jsonb(a) AS row "
                "FROM search_assets_user a "
                "WHERE a.owner_id = :o AND a.ip = ANY(CAST(:addresses AS inet[]))"
            ),
            {"o": owner_id, "addresses": addresses},
        ).all()
    return total, {(r.address, r.port): r.row for r in rows}


def test_deleting_a_task_with_100k_endpoints(api, settings):
    user = api.user()
    scanner = api.scanner()
    owner = user.user["id"]
    doomed, doomed_execution = fill_task(api.app, scanner.token, owner, "doomed", [(0, ENDPOINTS)])
    kept, _ = fill_task(api.app, scanner.token, owner, "kept", [(0, SHARED), (ENDPOINTS * 2, OWN)])
    store = PostgresStore(settings)
    try:
        drain(ProjectionWorker(settings, store))
        seen_by_kept = observations(0, SHARED, "") + observations(ENDPOINTS * 2, OWN, "")
        kept_addresses = [o["ip"] for o in seen_by_kept]
        total, before = _owner_assets(owner, kept_addresses)
        assert total == ENDPOINTS + OWN and len(before) == SHARED + OWN
        kept_results = _results(user, kept)
        assert len(kept_results) == SHARED + OWN
        deleted = user.delete(f"/api/tasks/{doomed}")
        assert deleted.status_code == 202
        assert deleted.get_json()["purge"]["status"] == "queued"
        listed = [t["id"] for t in user.get("/api/tasks?limit=500").get_json()["items"]]
        assert doomed not in listed and kept in listed
        assert user.get(f"/api/tasks/{doomed}").status_code == 404

        # The purge runs as the runner runs it (its own thread); the API keeps answering.
        failure: list[BaseException] = []

        def purge() -> None:
            try:
                run_purges(settings, store)
            except BaseException as exc:  # reported below, in the test thread
                failure.append(exc)

        worker = threading.Thread(target=purge, name="purge")
        worker.start()
        answered_while_running = 0
        while worker.is_alive():
            worker.join(timeout=0.5)  # paced: the API answers alongside, not instead
            running = purge_row(doomed).status == "running"
            listed = user.get("/api/tasks?limit=500")
            assets = user.get("/api/assets?limit=5")
            results = user.get(f"/api/tasks/{kept}/results?limit=5")
            assert (listed.status_code, assets.status_code, results.status_code) == (200,) * 3
            assert doomed not in [t["id"] for t in listed.get_json()["items"]]
            if running and purge_row(doomed).status == "running":
                answered_while_running += 1  # all three answered inside the purge's run
        worker.join()
        assert not failure, failure
        assert answered_while_running >= 1

        row = purge_row(doomed)
        assert row.status == "done" and row.attempts == 1
        assert row.removed["execution_endpoints"] == ENDPOINTS
        assert row.removed["facts"] == ENDPOINTS
        assert row.removed["user_assets"] == ENDPOINTS - SHARED
        assert row.removed["global_assets"] == ENDPOINTS - SHARED
        assert row.removed["executions"] == 1 and row.removed["tasks"] == 1
        # Bounded: the asset sweep alone took one batch per ASSET_BATCH endpoints.
        assert row.batches >= ENDPOINTS // task_purge.ASSET_BATCH

        assert leftover_rows([doomed], [doomed_execution]) == {}
        # The other task's assets (the shared ones and its own) are all that is left, and
        # exactly as they were.
        assert _owner_assets(owner, kept_addresses) == (SHARED + OWN, before)
        assert _results(user, kept) == kept_results
    finally:
        store.close()
