"""Order, supersession and leases of the analysis queue (ANA-1, ANA-3).

Overlapping executions finishing out of order converge to one verdict
whatever order their queue rows become visible in; a worker that dies
mid-analysis is followed by one that completes the work exactly once; two
workers never hold the same execution, and one owner's executions are analysed
one at a time in finish order, each after its projection is ready.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import sqlalchemy as sa

from app.analysis import changes, queue
from app.analysis.worker import AnalysisWorker
from app.db import transaction
from tests.support.analysis import Scans, changes_of, summary_of
from tests.support.search_documents import BASE_TIME
from tests.support.sql import scalar

IP = "10.3.0.1"


def _expire(execution_id: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_analysis_queue SET lease_expires_at = now() - interval '1 second' "
                "WHERE execution_id = :e AND claim_token IS NOT NULL"
            ),
            {"e": execution_id},
        )


def _out_of_order(scans: Scans, *, older_sees: bool, late: bool) -> tuple[int, int]:
    """Two scans of one address: the newer one finished last; ``late``: the older's row too."""
    owner = scans.owner()
    scans.scan(owner, [IP], [(IP, 80)], ports="80")
    scans.settle()
    newer = scans.scan(
        owner,
        [IP],
        [] if older_sees else [(IP, 80)],
        ports="80",
        finished_at=BASE_TIME + timedelta(hours=2),
        queued=not late,
    )
    older = scans.scan(
        owner,
        [IP],
        [(IP, 80)] if older_sees else [],
        ports="80",
        finished_at=BASE_TIME + timedelta(hours=1),
        queued=not late,
    )
    if late:
        scans.enqueue(newer)
        scans.settle()
        scans.enqueue(older)  # its final committed after the newer one was analysed
    scans.settle()
    return owner, older


def test_out_of_order_finishes_converge_whatever_the_queue_order(pg_scans: Scans) -> None:
    verdicts = {}
    for older_sees in (True, False):
        for late in (False, True):
            owner, older = _out_of_order(pg_scans, older_sees=older_sees, late=late)
            verdicts[(older_sees, late)] = (pg_scans.open_set(owner), pg_scans.gone_set(owner))
            if late:
                # The superseded execution decided nothing about the known endpoint.
                assert changes_of(older) == [] and summary_of(older).superseded
    # The newer execution's verdict wins in every order.
    endpoint = {(IP, 80, "tcp")}
    assert verdicts[(True, False)] == verdicts[(True, True)] == (set(), endpoint)
    assert verdicts[(False, False)] == verdicts[(False, True)] == (endpoint, set())


def test_one_owner_in_finish_order_after_projection_and_never_twice(pg_scans: Scans) -> None:
    owner = pg_scans.owner()
    later = pg_scans.scan(owner, [IP], [(IP, 22)], finished_at=BASE_TIME + timedelta(hours=2))
    earlier = pg_scans.scan(owner, [IP], [(IP, 22)], finished_at=BASE_TIME + timedelta(hours=1))
    # Projection not ready yet: nothing is claimable.
    assert queue.claim_next(lease_seconds=10) is None
    pg_scans.project()
    first = queue.claim_next(lease_seconds=10)
    assert first is not None and first.execution_id == earlier
    # The later execution of the same owner waits for the earlier one; the earlier
    # one is held by its claim.
    assert queue.claim_next(lease_seconds=10) is None
    worker = AnalysisWorker(pg_scans.settings, pg_scans.store)
    assert worker.run(first).result == "completed"
    second = queue.claim_next(lease_seconds=10)
    assert second is not None and second.execution_id == later
    assert worker.run(second).result == "completed"
    assert [c.kind for c in changes_of(earlier)] == ["new"]
    assert changes_of(later) == []


def test_concurrent_claims_never_share_an_execution(pg_scans: Scans) -> None:
    owners = [pg_scans.owner() for _ in range(4)]
    executions = {pg_scans.scan(o, [IP], [(IP, 443)]) for o in owners}
    pg_scans.project()
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def claim_all() -> None:
        barrier.wait()
        while (claim := queue.claim_next(lease_seconds=30)) is not None:
            with lock:
                claimed.append(claim.execution_id)

    threads = [threading.Thread(target=claim_all) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(executions)


def test_worker_dying_mid_analysis_is_completed_once_by_the_next(pg_scans: Scans) -> None:
    owner = pg_scans.owner()
    pg_scans.scan(owner, [IP], [(IP, 22), (IP, 80)], ports="22,80")
    pg_scans.settle()
    execution = pg_scans.scan(owner, [IP], [(IP, 22)], ports="22,80")
    pg_scans.project()

    # Worker 1 claims and dies before its analysis commits: nothing is left behind.
    dead = queue.claim_next(lease_seconds=10)
    assert dead is not None and dead.execution_id == execution
    assert queue.claim_next(lease_seconds=10) is None  # leased: nobody else takes it
    _expire(execution)

    # Worker 2 recovers it, commits the change set and dies before pushing statuses.
    second = queue.claim_next(lease_seconds=10)
    assert second is not None and second.recovered and second.attempts == 1
    counts = changes.analyse(second, sightings_sql=pg_scans.store.execution_sightings_sql())
    assert counts.gone == 1
    assert pg_scans.gone_set(owner) == set()  # not pushed yet
    _expire(execution)

    # The first worker wakes up: every write it tries is refused.
    try:
        changes.analyse(dead, sightings_sql=pg_scans.store.execution_sightings_sql())
    except queue.LeaseLost:
        pass
    else:
        raise AssertionError("a worker without its lease analysed")
    assert not queue.complete(dead)

    # Worker 3 continues from the committed phase: push and complete, no second change set.
    outcomes = pg_scans.analyse()
    assert [o.result for o in outcomes] == ["completed"]
    assert outcomes[0].counts is None  # nothing recomputed
    assert [c.kind for c in changes_of(execution)] == ["gone"]
    assert pg_scans.gone_set(owner) == {(IP, 80, "tcp")}
    assert (
        scalar(
            "SELECT count(*) FROM analysis_execution_summaries WHERE execution_id = :e", e=execution
        )
        == 1
    )
    row = scalar(
        "SELECT processed_at IS NOT NULL FROM scan_analysis_queue WHERE execution_id = :e",
        e=execution,
    )
    assert row is True


def test_store_failure_is_kept_and_retried(pg_scans: Scans) -> None:
    owner = pg_scans.owner()
    pg_scans.scan(owner, [IP], [(IP, 22)])
    pg_scans.settle()
    execution = pg_scans.scan(owner, [IP], [])
    pg_scans.project()
    store = pg_scans.store
    store.before["apply_asset_status"] = lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("cluster says no")
    )
    outcomes = pg_scans.analyse()
    assert [o.result for o in outcomes] == ["retrying"]
    error = scalar(
        "SELECT last_error FROM scan_analysis_queue WHERE execution_id = :e", e=execution
    )
    assert "cluster says no" in error
    del store.before["apply_asset_status"]
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_analysis_queue SET available_at = now()"))
    assert [o.result for o in pg_scans.analyse()] == ["completed"]
    assert pg_scans.gone_set(owner) == {(IP, 22, "tcp")}
    assert [c.kind for c in changes_of(execution)] == ["gone"]
