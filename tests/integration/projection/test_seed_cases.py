"""The eight projection failure cases of PRJ-3..PRJ-6 (docs/requirements.md), each on its own.

Real PostgreSQL, real stores.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from app import db
from app.db import transaction
from app.projection import outbox
from app.projection.status import projection_status_sql
from app.search.port import StoreUnavailable
from tests.support.es_simulator import Fault
from tests.support.projection import (
    create_execution,
    create_owner,
    drain,
    expected_current,
    expire_lease,
    make_due,
    outbox_row,
    run_one_slice,
    seed_execution,
    stored_current,
)
from tests.support.projection_setup import PUBLISH_CALL, page_cursors
from tests.support.scanner_protocol import claim, observation
from tests.support.search_documents import forge_key_collision
from tests.support.settings import make_settings
from tests.support.stores import ControlledStore, install
from tests.support.waiting import wait_until


def _status(execution_id: int) -> str:
    with transaction() as conn:
        return conn.execute(
            sa.text(f"SELECT {projection_status_sql('e')} FROM scan_executions e WHERE id = :e"),
            {"e": execution_id},
        ).scalar_one()


class Gate:
    """Holds the first call of a store method until released; counts the calls."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, *_args, **_kwargs) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(30), "the test never released the store call"


def _in_thread(function, *args, **kwargs):
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = function(*args, **kwargs)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


# 1 ---------------------------------------------------------------------------------------


def test_a_slow_store_call_holds_no_connection_with_a_pool_of_one(
    es_projection, database_url, tmp_path
):
    execution_id, _docs = seed_execution(es_projection.store, 15)
    tiny = make_settings(
        database_url,
        tmp_path,
        database={"pool_size": 1, "max_overflow": 0, "pool_timeout_seconds": 5},
    )
    engine = db.create_engine(database_url, tiny.database)
    previous = db.get_engine()
    db.set_engine(engine)
    gate = Gate()
    es_projection.store.before["publish_current"] = gate
    try:
        thread, result = _in_thread(run_one_slice, es_projection.worker())
        assert gate.entered.wait(30)
        # The worker is inside the store: the one pooled connection is free for others.
        assert engine.pool.checkedout() == 0
        assert _status(execution_id) == "running"
        gate.release.set()
        thread.join(30)
        assert result["value"].result == "completed"
    finally:
        gate.release.set()
        db.set_engine(previous)
        engine.dispose()
    assert outbox_row(execution_id).processed_at is not None


# 2 ---------------------------------------------------------------------------------------


def test_the_lease_is_renewed_during_a_slow_store_call(projection):
    execution_id, _docs = seed_execution(projection.store, 8)
    worker = projection.worker(projection_heartbeat_seconds=0.2)
    seen: list[object] = []

    def slow_until_renewed_twice(*_args, **_kwargs) -> None:
        if seen:
            return
        seen.append(outbox_row(execution_id).lease_expires_at)

        def renewed_twice() -> bool:
            current = outbox_row(execution_id).lease_expires_at
            if current != seen[-1]:
                seen.append(current)
            return len(seen) >= 3

        wait_until(renewed_twice, timeout=20)

    projection.store.before[PUBLISH_CALL[projection.backend]] = slow_until_renewed_twice
    outcome = run_one_slice(worker)
    assert outcome.result == "completed"
    assert seen[0] < seen[1] < seen[2]  # renewed while the store call was still running
    assert len(outcome.heartbeat_late_seconds) >= 2


# 3 ---------------------------------------------------------------------------------------


def test_concurrent_claims_never_share_an_execution(settings, engine):
    owner = create_owner()
    executions = {create_execution(owner) for _ in range(12)}
    create_execution(owner, status="failed")  # not succeeded: never claimed
    barrier = threading.Barrier(8)
    claimed: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def claimer() -> None:
        try:
            barrier.wait(10)
            while (claim_ := outbox.claim_next(lease_seconds=30)) is not None:
                with lock:
                    claimed.append(claim_.execution_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sorted(claimed) == sorted(executions)  # each exactly once
    assert outbox.claim_next(lease_seconds=30) is None  # all leased


# 4 ---------------------------------------------------------------------------------------


def test_an_expired_token_is_rejected_for_every_write(settings, engine):
    execution_id = create_execution(create_owner())
    stale = outbox.claim_next(lease_seconds=30)
    expire_lease(execution_id)
    before = outbox_row(execution_id)
    assert outbox.renew(stale) is False
    assert outbox.checkpoint(stale, cursor="f" * 32, processed=5, phase="pages") is False
    assert outbox.retry(stale, "boom", base_seconds=1, max_backoff_seconds=2) is None
    assert outbox.complete(stale) is False
    assert outbox.release(stale) is False
    assert outbox_row(execution_id) == before

    # A new owner takes over; the stale token stays useless and cannot touch its state.
    fresh = outbox.claim_next(lease_seconds=30)
    assert fresh.execution_id == execution_id and fresh.recovered
    assert outbox.checkpoint(fresh, cursor="a" * 32, processed=10, phase="pages")
    assert outbox.renew(stale) is False
    assert outbox.checkpoint(stale, cursor="0" * 32, processed=1, phase="refreshing") is False
    assert outbox.retry(stale, "late", base_seconds=1, max_backoff_seconds=2) is None
    assert outbox.complete(stale) is False
    row = outbox_row(execution_id)
    assert (row.cursor, row.processed_endpoints, row.phase, row.processed_at) == (
        "a" * 32,
        10,
        "pages",
        None,
    )
    assert row.claim_token == fresh.claim_token and row.leased


# 5 ---------------------------------------------------------------------------------------


class WorkerDied(BaseException):
    """Stands for the process dying: nothing in the worker catches it."""


def test_a_restarted_worker_resumes_from_the_saved_cursor(projection):
    execution_id, docs = seed_execution(projection.store, 35)
    publishes = 0

    def die_on_the_second_page(*_args, **_kwargs) -> None:
        nonlocal publishes
        publishes += 1
        if publishes == 2:
            raise WorkerDied()

    projection.store.before[PUBLISH_CALL[projection.backend]] = die_on_the_second_page
    with pytest.raises(WorkerDied):
        run_one_slice(projection.worker())
    saved = outbox_row(execution_id)
    assert saved.processed_endpoints == 10 and saved.leased  # the dead worker's lease
    first_cursors = page_cursors(projection)
    assert first_cursors[0] is None and first_cursors[1] == saved.cursor

    # A new worker process would see the row only once the lease expires.
    assert run_one_slice(projection.worker(store=ControlledStore(projection.store.inner))) is None
    expire_lease(execution_id)
    restarted = ControlledStore(projection.store.inner)
    outcomes = drain(projection.worker(store=restarted))
    assert [o.result for o in outcomes] == ["completed"]
    assert outcomes[0].endpoints == 25  # only what was left
    name = (
        "publish_execution_page" if projection.backend == "postgres" else "read_execution_endpoints"
    )
    resumed = [kw.get("after_id") for call, _a, kw in restarted.calls if call == name]
    assert resumed[0] == saved.cursor
    row = outbox_row(execution_id)
    assert row.processed_endpoints == 35 and row.processed_at is not None
    assert row.attempts == 0 and row.last_error is None  # cleared by the progress
    assert stored_current(projection.store, [docs[0].owner_id]) == expected_current([docs])


# 6 ---------------------------------------------------------------------------------------


def test_a_failed_bulk_item_does_not_advance_the_cursor(projection):
    execution_id, docs = seed_execution(projection.store, 15)
    first_in_page_order = min(docs, key=lambda d: d.id)  # pages follow endpoint ids
    target = expected_current([[first_in_page_order]])
    failing_id = next(i for i, d in target.items() if d.scope == "user")
    if projection.backend == "elasticsearch":
        simulator = projection.need_simulator()
        simulator.inject(
            Fault(
                action="item_status",
                endpoint="_bulk",
                item_ids=frozenset({failing_id}),
                status=400,
                error_type="mapper_parsing_exception",
            )
        )
        simulator.reset_requests()
        expected_error = "mapper_parsing_exception"
    else:
        failing = target[failing_id]
        forge_key_collision(
            "search_assets_user", failing_id, ip=failing.ip, owner_id=failing.owner_id
        )
        expected_error = "id_collision"
    outcome = run_one_slice(projection.worker())
    assert outcome.result == "retry" and expected_error in outcome.error
    row = outbox_row(execution_id)
    assert (row.cursor, row.processed_endpoints, row.phase) == (None, 0, "pages")
    assert row.attempts == 1 and expected_error in row.last_error and row.waiting
    if projection.backend == "elasticsearch":
        # Sent once; a failed item that is not a 429 is not re-sent by the store either.
        assert len(simulator.requests_to("_bulk")) == 3  # 20 operations in shards of 8
    else:
        _remove_forgery("search_assets_user", failing_id)
    make_due(execution_id)
    assert [o.result for o in drain(projection.worker())] == ["completed"]
    assert stored_current(projection.store, [docs[0].owner_id]) == expected_current([docs])


def _remove_forgery(table: str, document_id: str) -> None:
    from app.search.ids import pg_key

    with transaction() as conn:
        conn.execute(sa.text(f"DELETE FROM {table} WHERE key = :k"), {"k": pg_key(document_id)})


# 7 ---------------------------------------------------------------------------------------


def test_a_refresh_failure_retries_only_the_refresh(projection):
    execution_id, docs = seed_execution(projection.store, 23)
    if projection.backend == "elasticsearch":
        simulator = projection.need_simulator()
        simulator.inject(Fault(action="status", endpoint="_refresh", status=500))
    else:
        failures = iter([StoreUnavailable("refresh failed")])

        def fail_once() -> None:
            error = next(failures, None)
            if error is not None:
                raise error

        projection.store.before["refresh_current"] = fail_once
    outcome = run_one_slice(projection.worker())
    assert outcome.result == "retry" and outcome.pages == 3
    row = outbox_row(execution_id)
    assert (row.phase, row.processed_endpoints, row.processed_at) == ("refreshing", 23, None)
    assert row.attempts == 1 and "StoreUnavailable" in row.last_error
    assert _status(execution_id) == "retrying"

    make_due(execution_id)
    projection.store.calls.clear()
    if projection.simulator is not None:
        projection.simulator.reset_requests()
    assert [o.result for o in drain(projection.worker())] == ["completed"]
    names = projection.store.names()
    assert names.count("refresh_current") == 1
    assert not {"publish_current", "publish_execution_page", "read_execution_endpoints"} & set(
        names
    )
    if projection.simulator is not None:
        assert projection.simulator.requests_to("_bulk") == []
        assert len(projection.simulator.requests_to("_refresh")) == 1
    assert outbox_row(execution_id).cursor == row.cursor  # no page replayed
    assert stored_current(projection.store, [docs[0].owner_id]) == expected_current([docs])


# 8 ---------------------------------------------------------------------------------------


def test_final_and_repeated_final_do_not_wait_for_publishing(app, api, pg_projection):
    user, scanner = api.user(), api.scanner()
    response = user.post(
        "/api/tasks", json={"name": "p", "targets": ["192.0.2.0/29"], "ports": "22,443"}
    )
    task_id = response.get_json()["task"]["id"]
    upload_store = install(app)  # what the upload path calls
    upload = claim(scanner)
    batch = [observation(f"192.0.2.{n}", 443) for n in range(1, 6)]
    assert upload.batch(0, batch).get_json()["saved"] == 5
    final = upload.final(1, [observation("192.0.2.6", 22)])
    assert final.status_code == 200 and final.get_json() == {"success": True, "saved": 1}
    # The final committed without publishing anything: that is the worker's job.
    assert not {"publish_current", "publish_execution_page"} & set(upload_store.names())
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["projection_status"] == "pending"

    gate = Gate()
    pg_projection.store.before["publish_execution_page"] = gate
    thread, result = _in_thread(run_one_slice, pg_projection.worker())
    try:
        assert gate.entered.wait(30)
        assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["projection_status"] == (
            "running"
        )
        repeated = upload.post(upload.sent[-1])
        assert repeated.status_code == 200 and repeated.get_json() == {"success": True, "saved": 0}
        assert thread.is_alive()  # answered while the worker was still publishing
    finally:
        gate.release.set()
        thread.join(30)
    assert result["value"].result == "completed"
    done = outbox_row(upload.id)
    assert done.processed_at is not None and done.processed_endpoints == 6
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["projection_status"] == "ready"
    again = upload.post(upload.sent[-1])
    assert again.get_json() == {"success": True, "saved": 0}
    assert outbox_row(upload.id) == done  # repeating the final resets nothing
