"""Deleting a task: hidden at once, purged in bounded batches, resumable (issue 33).

A task with thousands of endpoints shares some with another task of the same owner.
After the purge no row of the deleted task is left in any table (checked table by
table, from the catalogue), the current assets only it had evidence for are gone, and
the other task's assets are exactly as before.
"""

from __future__ import annotations

import ipaddress
import itertools

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.identity.user_record import User
from app.scan_control import purge
from app.search.postgres_store import PostgresStore
from jobs import task_purge
from tests.support.analysis import Scans
from tests.support.search_documents import fact
from tests.support.task_purge import job_context, leftover_rows, purge_job, purge_row

ENDPOINTS = 4000
SHARED = 150


def hosts(network: str, count: int) -> list[str]:
    return [str(ip) for ip in itertools.islice(ipaddress.ip_network(network).hosts(), count)]


def _assets(owner_id: int) -> list[tuple]:
    with transaction() as conn:
        user = conn.execute(
            sa.text(
                "SELECT host(ip), port, transport, service, last_execution_id "
                "FROM search_assets_user WHERE owner_id = :o ORDER BY ip, port"
            ),
            {"o": owner_id},
        ).all()
        world = conn.execute(
            sa.text("SELECT host(ip), port, transport FROM search_assets_global ORDER BY ip, port")
        ).all()
    return [tuple(r) for r in user], [tuple(r) for r in world]


@pytest.fixture
def world(settings, engine, api):
    store = PostgresStore(settings)
    scans = Scans(settings=settings, store=store)
    owner = scans.owner()
    addresses = hosts("10.7.0.0/18", ENDPOINTS)
    doomed = scans.scan(owner, ["10.7.0.0/18"], [(ip, 443) for ip in addresses], ports="443")
    kept = scans.scan(
        owner,
        ["10.7.0.0/18", "10.9.0.0/24"],
        [(ip, 443) for ip in addresses[:SHARED]] + [(ip, 443) for ip in hosts("10.9.0.0/24", 20)],
        ports="443",
    )
    scans.settle()
    with transaction() as conn:
        doomed_task, kept_task = (
            conn.execute(
                sa.text("SELECT task_id FROM scan_executions WHERE id = :e"), {"e": e}
            ).scalar()
            for e in (doomed, kept)
        )
    store.write_facts([fact(doomed, i, task_id=doomed_task, owner_id=owner) for i in range(300)])
    return store, owner, doomed_task, doomed, kept_task, kept


def test_delete_hides_the_task_and_the_purge_removes_only_its_evidence(api, settings, world):
    store, owner, doomed_task, doomed_execution, kept_task, kept_execution = world
    admin = User(id=owner, username="owner", is_admin=True, disabled=False)
    before_user, _ = _assets(owner)
    assert len(before_user) == ENDPOINTS + 20
    kept_before = [a for a in before_user if a[4] == kept_execution]

    from app.exports.records import insert_export
    from app.object_store import open_object_store

    objects = open_object_store(settings)
    with transaction() as conn:
        export = insert_export(
            conn,
            owner_id=owner,
            task_id=doomed_task,
            task_name="doomed",
            fmt="csv",
            execution_ids=[doomed_execution],
        )
        conn.execute(
            sa.text("UPDATE exports SET status = 'ready', object_key = :k WHERE id = :id"),
            {"k": f"exports/doomed-{export.id}.csv", "id": export.id},
        )
    objects.put(f"exports/doomed-{export.id}.csv", b"ip,port\n", "text/csv")
    assert objects.exists(f"exports/doomed-{export.id}.csv")

    status = purge.request_delete(admin, doomed_task)
    assert status["status"] == "queued" and status["phase"] == "assets"
    with pytest.raises(Exception) as again:
        purge.request_delete(admin, doomed_task)
    assert getattr(again.value, "code", None) == "task_not_found"
    viewer = api.admin()
    assert viewer.get(f"/api/tasks/{doomed_task}").status_code == 404
    listed = viewer.get("/api/tasks?limit=500").get_json()["items"]
    assert doomed_task not in [t["id"] for t in listed] and kept_task in [t["id"] for t in listed]

    job = purge_job(settings, store)
    ctx = job_context(settings)
    work = job.claim(ctx)
    assert work is not None and work.task_id == doomed_task
    job.run(ctx, work)
    assert job.claim(ctx) is None

    row = purge_row(doomed_task)
    assert row.status == "done" and row.finished_at is not None
    assert row.removed["user_assets"] == ENDPOINTS - SHARED
    assert row.removed["global_assets"] == ENDPOINTS - SHARED
    assert row.removed["execution_endpoints"] == ENDPOINTS
    assert row.removed["facts"] == 300
    assert row.removed["executions"] == 1 and row.removed["tasks"] == 1
    assert row.removed["exports"] == 1
    assert not objects.exists(f"exports/doomed-{export.id}.csv")

    assert leftover_rows([doomed_task], [doomed_execution]) == {}
    after_user, after_global = _assets(owner)
    assert len(after_user) == SHARED + 20 and len(after_global) == SHARED + 20
    # The other task's assets are unchanged, and so is its evidence.
    assert [a for a in after_user if a[4] == kept_execution] == kept_before
    shared_hosts = set(hosts("10.7.0.0/18", SHARED))
    shared = {a[:3] for a in before_user if a[0] in shared_hosts}
    assert {a[:3] for a in after_user} == shared | {
        (ip, 443, "tcp") for ip in hosts("10.9.0.0/24", 20)
    }
    assert viewer.get(f"/api/tasks/{kept_task}/results?limit=5").get_json()["total_endpoints"] == (
        SHARED + 20
    )


def test_a_purge_taken_over_after_a_lost_lease_resumes_where_it_stopped(
    api, settings, world, monkeypatch
):
    store, owner, doomed_task, doomed_execution, _, _ = world
    admin = User(id=owner, username="owner", is_admin=True, disabled=False)
    purge.request_delete(admin, doomed_task)
    monkeypatch.setattr(task_purge, "ASSET_BATCH", 500)
    job = purge_job(settings, store)
    ctx = job_context(settings)

    saved = purge.checkpoint
    calls = {"n": 0}

    def expiring_checkpoint(claim, **kwargs):
        saved(claim, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:  # the worker stalls: its lease runs out, another takes over
            with transaction() as conn:
                conn.execute(
                    sa.text(
                        "UPDATE task_purges SET lease_expires_at = now() - interval '1 second' "
                        "WHERE task_id = :t"
                    ),
                    {"t": claim.task_id},
                )

    monkeypatch.setattr(purge, "checkpoint", expiring_checkpoint)
    first = job.claim(ctx)
    job.run(ctx, first)  # stops at its next checkpoint: the lease is gone
    row = purge_row(doomed_task)
    assert row.status == "running" and row.phase == "assets" and row.cursor is not None
    assert row.removed["user_assets"] < ENDPOINTS - SHARED
    monkeypatch.setattr(purge, "checkpoint", saved)

    second = job.claim(ctx)
    assert second.task_id == doomed_task and second.cursor == row.cursor
    job.run(ctx, second)
    row = purge_row(doomed_task)
    assert row.status == "done" and row.attempts == 2
    assert leftover_rows([doomed_task], [doomed_execution]) == {}
    after_user, _ = _assets(owner)
    assert len(after_user) == SHARED + 20


def test_runs_beyond_keep_runs_are_purged_with_their_executions(api, settings):
    from tests.support.scanner_protocol import claim, observation

    user = api.user()
    scanner = api.scanner()
    created = user.post(
        "/api/tasks", json={"name": "kept", "targets": ["198.51.100.0/30"], "ports": "22"}
    ).get_json()["task"]
    for number in range(1, 5):
        if number > 1:
            assert user.post(f"/api/tasks/{created['id']}/runs").status_code == 201
        final = claim(scanner).final(0, [observation(f"198.51.100.{number % 3 + 1}", 22)])
        assert final.status_code == 200
    with transaction() as conn:
        old_executions = list(
            conn.execute(
                sa.text(
                    "SELECT e.id FROM scan_executions e JOIN task_runs r ON r.id = e.run_id "
                    "WHERE r.task_id = :t AND r.number <= 2"
                ),
                {"t": created["id"]},
            ).scalars()
        )
    keep_two = settings.replace(scan={"keep_runs": 2})
    store = PostgresStore(settings)
    runs, executions = task_purge.purge_old_runs(keep_two, store)
    assert (runs, executions) == (2, 2)
    listed = user.get(f"/api/tasks/{created['id']}/runs").get_json()["items"]
    assert [r["number"] for r in listed] == [4, 3]
    leftovers = leftover_rows([-1], old_executions)
    assert leftovers == {}
    assert task_purge.purge_old_runs(keep_two, store) == (0, 0)
    task = user.get(f"/api/tasks/{created['id']}").get_json()["task"]
    assert task["status"] == "succeeded" and task["latest_run"]["number"] == 4
    results = user.get(f"/api/tasks/{created['id']}/results").get_json()
    assert results["total_endpoints"] == 1


def test_a_projection_in_flight_is_waited_out_before_the_asset_sweep(api, settings, world):
    store, owner, doomed_task, doomed_execution, _, _ = world
    admin = User(id=owner, username="owner", is_admin=True, disabled=False)
    with transaction() as conn:  # a projection worker holds the execution's outbox row
        conn.execute(
            sa.text(
                "UPDATE scan_projection_outbox SET processed_at = NULL, phase = 'pages', "
                "claim_token = gen_random_uuid(), lease_expires_at = now() + interval '30 s' "
                "WHERE execution_id = :e"
            ),
            {"e": doomed_execution},
        )
    purge.request_delete(admin, doomed_task)
    job = purge_job(settings, store)
    ctx = job_context(settings)
    job.run(ctx, job.claim(ctx))
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                "SELECT status, phase, claim_token, available_at > now() + interval '20 s' "
                "AS later FROM task_purges WHERE task_id = :t"
            ),
            {"t": doomed_task},
        ).one()
        outbox_rows = conn.execute(
            sa.text("SELECT count(*) FROM scan_projection_outbox WHERE execution_id = :e"),
            {"e": doomed_execution},
        ).scalar()
    assert outbox_rows == 0  # never projected from now on
    assert row.phase == "assets" and row.claim_token is None and row.later
    assert job.claim(ctx) is None  # not before the projection's lease ran out
    before, _ = _assets(owner)
    assert len(before) == ENDPOINTS + 20  # nothing swept yet
