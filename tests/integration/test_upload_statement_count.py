"""A batch costs a constant number of SQL statements, whatever its size (issue 21).

Counted with SQLAlchemy's ``before_cursor_execute`` on the real engine while the real
upload route takes a batch: the receipt transaction, the set-based store writes and
the confirmation must not grow with the number of observations (no per-row
statements, no per-row counter updates). Batches stay within one store shard
(``elasticsearch.bulk_batch_size``, 1000 by default), the unit a statement covers.
"""

from __future__ import annotations

import threading

from tests.support.scanner_protocol import claim, make_task, observation
from tests.support.sql import counted_statements, scalar


def _difference(small: list[str], large: list[str]) -> str:
    def shapes(statements: list[str]) -> list[str]:
        return [" ".join(s.split())[:120] for s in statements]

    return "\n".join(["only with 10:", *shapes(small), "", "with 1000:", *shapes(large)])


def _observations(start: int, count: int) -> list[dict]:
    return [observation(f"198.51.100.{i % 256}", 1 + i // 256) for i in range(start, start + count)]


def test_a_batch_costs_the_same_statements_for_10_and_1000_observations(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("198.51.100.0/24",), ports="1-10")
    upload = claim(scanner)
    # The first batch of a month creates its fact partition: not part of the steady cost.
    assert upload.batch(0, _observations(0, 1)).status_code == 200

    # Only the upload's statements: the test client serves the request on this thread and
    # a batch of 1,000 writes its facts on the upload's own thread (service.OVERLAP_MIN_ITEMS),
    # while the app's background threads (the renderer selection refresh) use the same engine.
    request_thread = threading.get_ident()

    def upload_thread() -> bool:
        current = threading.current_thread()
        return current.ident == request_thread or current.name == "netmap-upload-facts"

    counts = {}
    start = 1
    for batch_index, size in ((1, 10), (2, 1000)):
        with counted_statements(counts=upload_thread) as statements:
            response = upload.batch(batch_index, _observations(start, size))
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["saved"] == size
        counts[size] = statements
        start += size

    assert len(counts[10]) == len(counts[1000]), _difference(counts[10], counts[1000])
    # Receipt (lock, streams, identity, insert), facts, endpoints, confirmation, plus
    # the transaction plumbing: a handful, never one per observation.
    assert len(counts[1000]) <= 20, counts[1000]
    # And at least the receipt, the facts, the endpoints and the confirmation: the counter
    # does see the request's statements (an empty count would pass the checks above).
    assert len(counts[1000]) >= 4, counts[1000]
    # Nothing was lost on the way: every observation became a fact and an endpoint.
    assert scalar("SELECT count(*) FROM search_facts WHERE execution_id = :e", e=upload.id) == (
        1 + 10 + 1000
    )
    assert scalar(
        "SELECT endpoints FROM search_execution_endpoint_counts WHERE execution_id = :e",
        e=upload.id,
    ) == (1 + 10 + 1000)
