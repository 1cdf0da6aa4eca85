"""Deleting a task purges the same documents from every store adapter (issue 33, STO-2).

One owner's task (two runs) shares some endpoints with another task of the same owner and some
with another owner's task. The runner's purge job, with small batches so that every
phase takes several, runs against PostgreSQL and against the Elasticsearch adapter:
afterwards the task's rows, execution endpoints and facts are gone, the owner's assets
only it saw are gone from the owner's view, the global view keeps what the other owner
saw, and everything of the other tasks is as before. A purge that dies between a
store call and its checkpoint is retried to the same end state.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.bench.purge import run_purges
from app.db import transaction
from app.identity.user_record import User
from app.scan_control import purge
from app.search.port import BatchKey, StorageScope
from jobs import task_purge
from tests.support.analysis import Scans, hosts
from tests.support.search_documents import BASE_TIME, fact
from tests.support.stores import ControlledStore
from tests.support.task_purge import job_context, leftover_rows, purge_job, purge_row

pytestmark = pytest.mark.contract

DOOMED = 240  # endpoints of the deleted task
SHARED = 40  # of them, also seen by the owner's other task
FOREIGN = 30  # of them, also seen by another owner's task
EXTRA = 20  # the owner's other task's own endpoints
RERUN = 30  # endpoints only the deleted task's second run saw
FACTS = 50
SCOPE = StorageScope(months=(BASE_TIME.strftime("%Y.%m"),))
FACT_BATCH = [BatchKey("u-1", "main", 0)]


def _task_of(execution_id: int) -> int:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT task_id FROM scan_executions WHERE id = :e"), {"e": execution_id}
        ).scalar_one()


@pytest.fixture
def world(settings, engine, store, monkeypatch):
    # Small batches: each phase of the purge takes several.
    monkeypatch.setattr(task_purge, "ASSET_BATCH", 64)
    monkeypatch.setattr(task_purge, "ROW_BATCH", 100)
    scans = Scans(settings=settings, store=store)
    owner, stranger = scans.owner(), scans.owner()
    doomed_hosts = hosts("10.20.0.0/16", DOOMED)
    extra_hosts = hosts("10.21.0.0/16", EXTRA)
    doomed = scans.scan(owner, ["10.20.0.0/16"], [(ip, 443) for ip in doomed_hosts], ports="443")
    kept = scans.scan(
        owner,
        ["10.20.0.0/16", "10.21.0.0/16"],
        [(ip, 443) for ip in doomed_hosts[:SHARED] + extra_hosts],
        ports="443",
    )
    scans.scan(
        stranger,
        ["10.20.0.0/16"],
        [(ip, 443) for ip in doomed_hosts[SHARED : SHARED + FOREIGN]],
        ports="443",
    )
    tasks = {name: _task_of(e) for name, e in (("doomed", doomed), ("kept", kept))}
    # A second run of the deleted task, with endpoints of its own: the sweep walks every
    # execution of the task (each from its own key), not just the first.
    rerun_hosts = hosts("10.22.0.0/16", RERUN)
    rerun = scans.scan(
        owner,
        ["10.20.0.0/16", "10.22.0.0/16"],
        [(ip, 443) for ip in doomed_hosts[DOOMED // 2 :] + rerun_hosts],
        ports="443",
        task_id=tasks["doomed"],
    )
    scans.settle()
    for execution_id, task_id in ((doomed, tasks["doomed"]), (kept, tasks["kept"])):
        written = store.write_facts(
            [fact(execution_id, i, task_id=task_id, owner_id=owner) for i in range(FACTS)]
        )
        written.raise_for_failures()
    store.refresh(SCOPE)
    return {
        "scans": scans,
        "store": store,
        "owner": owner,
        "stranger": stranger,
        "doomed": doomed,
        "rerun": rerun,
        "kept": kept,
        "tasks": tasks,
        "doomed_hosts": doomed_hosts,
        "extra_hosts": extra_hosts,
    }


def _snapshot(world) -> dict[str, object]:
    """What the store holds: asset keys per view, and the surviving tasks' documents."""
    scans, store = world["scans"], world["store"]
    store.refresh(SCOPE)
    store.refresh_current()
    return {
        "owner": set(scans.assets(world["owner"])),
        "stranger": {k: v.last_execution_id for k, v in scans.assets(world["stranger"]).items()},
        "global": set(scans.assets(None, scope="global")),
        "kept_endpoints": len(
            store.read_execution_endpoints(world["kept"], after_id=None, limit=1000)
        ),
        "kept_facts": len(store.batch_facts(SCOPE, world["kept"], FACT_BATCH)),
    }


def _expected_after(world) -> dict[str, object]:
    doomed_hosts, extra_hosts = world["doomed_hosts"], world["extra_hosts"]
    kept = {(ip, 443, "tcp") for ip in doomed_hosts[:SHARED] + extra_hosts}
    foreign = {(ip, 443, "tcp") for ip in doomed_hosts[SHARED : SHARED + FOREIGN]}
    return {"owner": kept, "global": kept | foreign}


def _assert_purged(world, before: dict[str, object]) -> None:
    store = world["store"]
    after = _snapshot(world)
    expected = _expected_after(world)
    assert after["owner"] == expected["owner"]
    assert after["global"] == expected["global"]
    # Everything of the other tasks is as it was.
    assert after["stranger"] == before["stranger"]
    assert after["kept_endpoints"] == SHARED + EXTRA == before["kept_endpoints"]
    assert after["kept_facts"] == FACTS == before["kept_facts"]
    # The deleted task's own documents are gone.
    for execution in (world["doomed"], world["rerun"]):
        assert store.read_execution_endpoints(execution, after_id=None, limit=10) == []
    assert store.batch_facts(SCOPE, world["doomed"], FACT_BATCH) == []
    assert leftover_rows([world["tasks"]["doomed"]], [world["doomed"], world["rerun"]]) == {}


def _known_to_analysis(owner_id: int) -> set[tuple[str, int, str]]:
    """The endpoints the change analysis remembers for the owner (``analysis_assets``)."""
    with transaction() as conn:
        rows = conn.execute(
            sa.text("SELECT host(ip), port, transport FROM analysis_assets WHERE owner_id = :o"),
            {"o": owner_id},
        ).all()
    return {(ip, port, transport) for ip, port, transport in rows}


def _delete(world) -> None:
    admin = User(id=world["owner"], username="owner", is_admin=True, disabled=False)
    status = purge.request_delete(admin, world["tasks"]["doomed"])
    assert status["status"] == "queued" and status["batches"] == 0


def test_the_purge_removes_the_task_and_only_the_assets_it_alone_saw(settings, world):
    before = _snapshot(world)
    assert len(before["owner"]) == DOOMED + EXTRA + RERUN
    assert len(before["global"]) == DOOMED + EXTRA + RERUN
    assert _known_to_analysis(world["owner"]) == before["owner"]
    strangers_memory = _known_to_analysis(world["stranger"])
    _delete(world)

    assert run_purges(settings, world["store"]) == 1
    row = purge_row(world["tasks"]["doomed"])
    assert row.status == "done"
    assert row.removed["user_assets"] == DOOMED - SHARED + RERUN
    assert row.removed["global_assets"] == DOOMED - SHARED - FOREIGN + RERUN
    assert row.removed["execution_endpoints"] == DOOMED + DOOMED // 2 + RERUN
    assert row.removed["facts"] == FACTS
    assert row.removed["executions"] == 2 and row.removed["tasks"] == 1
    # 390 endpoints of two runs at 64 a batch: seven asset batches, then the executions.
    assert row.batches >= 8
    _assert_purged(world, before)
    # The change analysis forgot what left the owner's view (seen again, it is new, as
    # on the Assets page), and nothing of the other owner's.
    assert row.removed["analysis_assets"] == DOOMED - SHARED + RERUN
    assert _known_to_analysis(world["owner"]) == _expected_after(world)["owner"]
    assert _known_to_analysis(world["stranger"]) == strangers_memory


@pytest.mark.parametrize("dies_in", ["purge_task_assets", "purge_execution_data"])
def test_a_purge_that_dies_after_a_store_call_ends_the_same_when_retried(settings, world, dies_in):
    before = _snapshot(world)
    _delete(world)
    store = ControlledStore(world["store"])
    calls = {"n": 0}

    def dies_the_second_time(*_args, **_kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the store did its work; the process dies before the checkpoint
            raise SystemExit("killed")

    store.after[dies_in] = dies_the_second_time
    job = purge_job(settings, store)
    ctx = job_context(settings)
    work = job.claim(ctx)
    with pytest.raises(SystemExit):
        job.run(ctx, work)
    row = purge_row(world["tasks"]["doomed"])
    assert row.status == "running" and row.finished_at is None
    with transaction() as conn:  # the dead worker's lease runs out
        conn.execute(
            sa.text(
                "UPDATE task_purges SET lease_expires_at = now() - interval '1 second' "
                "WHERE task_id = :t"
            ),
            {"t": world["tasks"]["doomed"]},
        )

    assert run_purges(settings, world["store"]) == 1
    row = purge_row(world["tasks"]["doomed"])
    assert row.status == "done" and row.attempts == 2
    # A batch done again finds its documents gone and does not count them twice.
    assert row.removed["user_assets"] <= DOOMED - SHARED + RERUN
    assert row.removed.get("execution_endpoints", 0) <= DOOMED + DOOMED // 2 + RERUN
    _assert_purged(world, before)
