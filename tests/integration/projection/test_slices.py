"""The projection worker end to end in process: pages, slices, refresh, completion (PRJ-2..5)."""

from __future__ import annotations

import itertools
import threading

import pytest

from app.projection import outbox
from tests.support.projection import (
    drain,
    expected_current,
    outbox_row,
    run_one_slice,
    seed_execution,
    stored_current,
)
from tests.support.projection_setup import PUBLISH_CALL


def test_everything_is_published_like_a_from_scratch_projection(projection):
    first, first_docs = seed_execution(projection.store, 37)
    owner = first_docs[0].owner_id
    # A later execution of the same owner sees some endpoints again, newer, plus new ones.
    second, second_docs = seed_execution(
        projection.store, 25, owner_id=owner, minutes=30, first_ip=20, product="newer"
    )
    other, other_docs = seed_execution(projection.store, 12, first_ip=5)
    outcomes = drain(projection.worker())
    assert {o.execution_id for o in outcomes if o.result == "completed"} == {first, second, other}
    expected = expected_current([first_docs, second_docs, other_docs])
    assert stored_current(projection.store, [owner, other_docs[0].owner_id]) == expected
    for execution_id, docs in ((first, first_docs), (second, second_docs), (other, other_docs)):
        row = outbox_row(execution_id)
        assert row.processed_at is not None and row.phase == "done"
        assert row.processed_endpoints == len(docs)
        assert row.claim_token is None and row.last_error is None
    assert outbox.claim_next(lease_seconds=10) is None


def test_a_slice_is_at_most_pages_per_tick_then_other_executions_get_a_turn(projection):
    big, big_docs = seed_execution(projection.store, 30)
    small, small_docs = seed_execution(projection.store, 5)
    worker = projection.worker(projection_pages_per_tick=1)
    outcomes = drain(worker)
    order = [(o.execution_id, o.result, o.pages) for o in outcomes]
    # big: page 1 (released, back of the queue), small: its only page and the refresh,
    # then big again until its last (short) page and the refresh.
    assert order == [
        (big, "released", 1),
        (small, "completed", 1),
        (big, "released", 1),
        (big, "released", 1),
        (big, "completed", 1),
    ]
    assert outbox_row(big).processed_endpoints == 30
    owners = [big_docs[0].owner_id, small_docs[0].owner_id]
    assert stored_current(projection.store, owners) == expected_current([big_docs, small_docs])


def test_released_rows_queue_behind_rows_that_waited_longer(pg_projection):
    first, _ = seed_execution(pg_projection.store, 25)
    second, _ = seed_execution(pg_projection.store, 25)
    worker = pg_projection.worker(projection_pages_per_tick=1)
    claimed = [run_one_slice(worker).execution_id for _ in range(4)]
    assert claimed == [first, second, first, second]


def test_an_execution_without_endpoints_completes_with_one_refresh(projection):
    execution_id, _ = seed_execution(projection.store, 0)
    outcomes = drain(projection.worker())
    assert [(o.result, o.endpoints) for o in outcomes] == [("completed", 0)]
    assert projection.store.names().count("refresh_current") == 1
    row = outbox_row(execution_id)
    assert row.processed_at is not None and row.cursor is None and row.processed_endpoints == 0


def test_a_page_of_exactly_page_size_needs_an_empty_page_to_know_it_was_the_last(projection):
    execution_id, _ = seed_execution(projection.store, 20)
    (outcome,) = drain(projection.worker())
    assert (outcome.result, outcome.pages, outcome.endpoints) == ("completed", 3, 20)
    assert outbox_row(execution_id).processed_endpoints == 20


def test_runner_stopping_finishes_the_page_then_releases(projection):
    execution_id, _docs = seed_execution(projection.store, 35)
    stopping = threading.Event()
    name = PUBLISH_CALL[projection.backend]
    projection.store.before[name] = lambda *a, **k: stopping.set()
    outcome = run_one_slice(projection.worker(), stopping=stopping)
    assert (outcome.result, outcome.pages) == ("released", 1)
    row = outbox_row(execution_id)
    assert row.claim_token is None and row.processed_endpoints == 10 and not row.waiting
    # Stopping before anything started releases without touching the store.
    projection.store.calls.clear()
    outcome = run_one_slice(projection.worker(), stopping=stopping)
    assert (outcome.result, outcome.pages) == ("released", 0)
    assert name not in projection.store.names()
    assert outbox_row(execution_id).processed_endpoints == 10


@pytest.mark.parametrize(("cancel_on_call", "saved"), [(1, 0), (2, 10)])
def test_the_shutdown_deadline_mid_page_saves_the_page_if_it_finished_and_releases(
    projection, cancel_on_call, saved
):
    execution_id, _ = seed_execution(projection.store, 35)
    cancelled = threading.Event()
    calls = itertools.count(1)

    def deadline_passes(*_args, **_kwargs):
        if next(calls) == cancel_on_call:
            cancelled.set()

    projection.store.before[PUBLISH_CALL[projection.backend]] = deadline_passes
    outcome = run_one_slice(projection.worker(), cancelled=cancelled)
    assert outcome.result == "cancelled"
    row = outbox_row(execution_id)
    # The pages the store finished are checkpointed; the row is free again at once.
    assert row.claim_token is None and row.processed_endpoints == saved
    assert row.last_error is None
    assert [o.result for o in drain(projection.worker())] == ["completed"]
    assert outbox_row(execution_id).processed_endpoints == 35
