"""Projection failure paths: kept errors, backoff, 413, 429, lost leases (PRJ-3/4/6)."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from app.db import transaction
from tests.support.es_simulator import Fault
from tests.support.projection import (
    drain,
    expected_current,
    make_due,
    outbox_row,
    run_one_slice,
    seed_execution,
    stored_current,
)
from tests.support.waiting import wait_until


def _retry_window(execution_id: int) -> float:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT extract(epoch FROM available_at - updated_at) "
                "FROM scan_projection_outbox WHERE execution_id = :e"
            ),
            {"e": execution_id},
        ).scalar_one()


def test_a_413_is_a_kept_error_with_growing_backoff_not_an_endless_retry(es_projection):
    simulator = es_projection.need_simulator()
    execution_id, docs = seed_execution(es_projection.store, 6)
    worker = es_projection.worker(
        projection_retry_base_seconds=10, projection_max_backoff_seconds=60
    )
    simulator.inject(
        Fault(
            action="status",
            endpoint="_bulk",
            status=413,
            error_type="content_too_long_exception",
            times=3,
        )
    )
    windows = []
    for attempt in (1, 2, 3):
        simulator.reset_requests()
        outcome = run_one_slice(worker)
        assert outcome.result == "retry"
        assert len(simulator.requests_to("_bulk")) == 1  # refused once, not re-sent
        row = outbox_row(execution_id)
        assert row.attempts == attempt and row.waiting and row.cursor is None
        assert "413" in row.last_error and "projection_bulk_max_bytes" in row.last_error
        assert run_one_slice(worker) is None  # waiting out the backoff: nobody retries it now
        windows.append(_retry_window(execution_id))
        make_due(execution_id)
    # Equal jitter: attempt n waits between base*2^(n-1)/2 and base*2^(n-1).
    assert 5 <= windows[0] <= 10 and 10 <= windows[1] <= 20 and 20 <= windows[2] <= 40
    assert [o.result for o in drain(worker)] == ["completed"]
    assert stored_current(es_projection.store, [docs[0].owner_id]) == expected_current([docs])


def test_429_items_are_retried_alone_and_other_item_failures_are_not(es_projection):
    simulator = es_projection.need_simulator()
    execution_id, docs = seed_execution(es_projection.store, 3)  # one page, one shard of 6
    documents = list(expected_current([docs]).values())
    busy, broken = documents[0], documents[3]
    simulator.inject(
        Fault(
            action="item_status",
            endpoint="_bulk",
            item_ids=frozenset({busy.id}),
            status=429,
            times=1,
        )
    )
    simulator.inject(
        Fault(
            action="item_status",
            endpoint="_bulk",
            item_ids=frozenset({broken.id}),
            status=400,
            error_type="mapper_parsing_exception",
        )
    )
    simulator.reset_requests()
    outcome = run_one_slice(es_projection.worker())
    bulks = simulator.requests_to("_bulk")
    operations, _ = es_projection.store.inner.merge_operations([busy])
    # First request: all six; second: only the 429 item, alone. The 400 item is not re-sent.
    assert len(bulks) == 2
    assert bulks[1].body_bytes == operations[0].size
    assert outcome.result == "retry" and "mapper_parsing_exception" in outcome.error
    assert "es_rejected_execution_exception" not in outcome.error  # the 429 succeeded
    row = outbox_row(execution_id)
    assert row.cursor is None and row.attempts == 1
    make_due(execution_id)
    assert [o.result for o in drain(es_projection.worker())] == ["completed"]


def test_429s_that_outlast_the_store_budget_are_a_kept_retryable_error(es_projection):
    simulator = es_projection.need_simulator()
    execution_id, docs = seed_execution(es_projection.store, 2)
    busy = next(iter(expected_current([docs])))
    budget = es_projection.settings.elasticsearch.bulk_retry_budget
    simulator.inject(
        Fault(
            action="item_status",
            endpoint="_bulk",
            item_ids=frozenset({busy}),
            status=429,
            times=budget + 1,
        )
    )
    outcome = run_one_slice(es_projection.worker())
    assert outcome.result == "retry" and "BulkWriteError" in outcome.error
    assert outbox_row(execution_id).cursor is None
    make_due(execution_id)
    assert [o.result for o in drain(es_projection.worker())] == ["completed"]


def test_an_operation_over_the_byte_limit_is_kept_and_never_truncated(projection):
    banner = "b" * 70_000
    execution_id, docs = seed_execution(projection.store, 4, banner=banner)
    small = projection.worker(projection_bulk_max_bytes=65_536)
    if projection.simulator is not None:
        projection.simulator.reset_requests()
    outcome = run_one_slice(small)
    assert outcome.result == "retry" and "OperationTooLarge" in outcome.error
    if projection.simulator is not None:
        assert projection.simulator.requests_to("_bulk") == []  # refused before sending
    row = outbox_row(execution_id)
    assert row.cursor is None and row.attempts == 1 and "65536" in row.last_error
    assert stored_current(projection.store, [docs[0].owner_id]) == {}
    # Still refused on the next attempt (kept, retried), until the operator raises the limit.
    make_due(execution_id)
    assert run_one_slice(small).result == "retry"
    assert outbox_row(execution_id).attempts == 2
    make_due(execution_id)
    assert [o.result for o in drain(projection.worker())] == ["completed"]
    stored = stored_current(projection.store, [docs[0].owner_id])
    assert stored == expected_current([docs])
    assert {d.banner for d in stored.values()} == {banner}


def test_losing_the_lease_stops_further_shards_at_once(es_projection):
    simulator = es_projection.need_simulator()
    execution_id, _docs = seed_execution(es_projection.store, 10)  # 20 operations
    worker = es_projection.worker(bulk_batch_size=4, projection_heartbeat_seconds=0.2)
    simulator.inject(Fault(action="delay", endpoint="_bulk", seconds=2.0))
    simulator.reset_requests()
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("o", run_one_slice(worker)))
    thread.start()
    wait_until(lambda: simulator.cluster.in_flight.get("_bulk", 0) > 0, timeout=20)
    with transaction() as conn:  # another owner took the row over
        conn.execute(sa.text("UPDATE scan_projection_outbox SET claim_token = gen_random_uuid()"))
    thread.join(30)
    result = outcome["o"]
    assert result.result == "lease_lost" and result.error == "lease_lost"
    assert len(simulator.requests_to("_bulk")) == 1  # the shard in flight, nothing after it
    row = outbox_row(execution_id)
    assert row.cursor is None and row.processed_endpoints == 0 and row.leased


def test_a_lost_lease_ends_a_retry_wait_at_once(es_projection):
    simulator = es_projection.need_simulator()
    seed_execution(es_projection.store, 3)
    # Every bulk answers 503; the store would back off for 20-40 s before its next try.
    from app.search.elasticsearch_store import ElasticsearchStore
    from tests.support.stores import ControlledStore

    slow_retries = ElasticsearchStore(
        es_projection.settings.elasticsearch.replace(bulk_retry_backoff_ms=40_000)
    )
    try:
        worker = es_projection.worker(
            store=ControlledStore(slow_retries), projection_heartbeat_seconds=0.2
        )
        simulator.inject(Fault(action="status", endpoint="_bulk", status=503, times=100))
        simulator.reset_requests()
        outcome: dict[str, object] = {}
        thread = threading.Thread(target=lambda: outcome.setdefault("o", run_one_slice(worker)))
        thread.start()
        wait_until(lambda: simulator.requests_to("_bulk"), timeout=20)
        with transaction() as conn:
            conn.execute(
                sa.text("UPDATE scan_projection_outbox SET claim_token = gen_random_uuid()")
            )
        thread.join(15)  # far shorter than the backoff it was sleeping in
        assert not thread.is_alive()
        assert outcome["o"].result == "lease_lost"
        assert len(simulator.requests_to("_bulk")) == 1
    finally:
        slow_retries.close()


def test_a_worker_past_its_local_lease_deadline_sends_nothing_more(es_projection):
    """A worker whose heartbeat did not run (here: scheduled after the lease ends, as in a
    paused process) stops on its own clock, without the database having to tell it."""
    simulator = es_projection.need_simulator()
    execution_id, _docs = seed_execution(es_projection.store, 10)
    worker = es_projection.worker(
        bulk_batch_size=4, projection_heartbeat_seconds=60, projection_lease_seconds=1
    )
    simulator.inject(Fault(action="delay", endpoint="_bulk", seconds=1.5))
    simulator.reset_requests()
    outcome = run_one_slice(worker)
    assert outcome.result == "lease_lost" and outcome.error == "lease_expired"
    assert len(simulator.requests_to("_bulk")) == 1  # the shard in flight, nothing after it
    row = outbox_row(execution_id)
    assert row.cursor is None and row.claim_token is not None and not row.leased
    # The expired row is recovered by the next claim.
    assert [o.result for o in drain(es_projection.worker())] == ["completed"]
    assert outbox_row(execution_id).processed_endpoints == 10
