"""The projection worker end to end in process: pages, slices, refresh, completion (PRJ-2..5)."""

from __future__ import annotations

from app.projection import outbox
from tests.support.projection import (
    drain,
    expected_current,
    outbox_row,
    seed_execution,
    stored_current,
)


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
