"""Bulk bodies: sharding by count and real bytes, and item-by-item answer checks (PRJ-4)."""

from __future__ import annotations

import json

import pytest

from app.search.elasticsearch_bulk import check_items, operation, shard_operations
from app.search.port import OperationTooLarge


def ops(n, size=0, action="update"):
    return [operation(action, "idx", f"id{i}", {"pad": "x" * size}) for i in range(n)]


def test_operations_are_ndjson_lines_counted_in_utf8_bytes():
    op = operation("index", "netmap-facts-2026.11", "abc", {"banner": "é"})
    lines = op.payload.decode().split("\n")
    assert json.loads(lines[0]) == {"index": {"_index": "netmap-facts-2026.11", "_id": "abc"}}
    assert json.loads(lines[1]) == {"banner": "é"}
    assert lines[2] == "" and op.size == len(op.payload)
    assert "é".encode() in op.payload  # sent as UTF-8, not \\u escapes


def test_shards_respect_operation_count():
    shards = shard_operations(ops(25), max_operations=10, max_bytes=1 << 20)
    assert [len(s) for s in shards] == [10, 10, 5]


def test_shards_respect_bytes_at_the_boundary():
    three = ops(3, size=100)
    exact = sum(op.size for op in three)
    assert [len(s) for s in shard_operations(three, max_operations=100, max_bytes=exact)] == [3]
    split = shard_operations(three, max_operations=100, max_bytes=exact - 1)
    assert [len(s) for s in split] == [2, 1]
    assert all(sum(op.size for op in s) <= exact - 1 for s in split)


def test_one_operation_over_the_limit_raises_before_any_shard():
    big = operation("update", "idx", "big", {"pad": "x" * 5000})
    with pytest.raises(OperationTooLarge) as caught:
        shard_operations([*ops(2), big], max_operations=10, max_bytes=4096)
    assert (caught.value.document_id, caught.value.size) == ("big", big.size)


def item(action="update", _id="id0", index="idx", status=200, error=None):
    body = {"_id": _id, "_index": index, "status": status}
    if error:
        body["error"] = error
    return {action: body}


def test_matching_answers_pass_item_by_item():
    batch = ops(2)
    answer = [item(_id="id0", status=201), item(_id="id1", status=200)]
    assert [(r.id, r.status, r.ok) for r in check_items(batch, answer)] == [
        ("id0", 201, True),
        ("id1", 200, True),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        [item(_id="id0")],  # one item missing
        [item(_id="id0"), item(_id="id1"), item(_id="id2")],  # one too many
        None,
    ],
)
def test_a_wrong_item_count_fails_every_operation(answer):
    results = check_items(ops(2), answer)
    assert [r.error_type for r in results] == ["response_mismatch"] * 2


def test_wrong_id_index_or_action_fail_that_item():
    batch = ops(4)
    answer = [
        item(_id="id0"),
        item(_id="other"),
        item(_id="id2", index="elsewhere"),
        item(action="index", _id="id3"),
    ]
    results = check_items(batch, answer)
    assert [r.ok for r in results] == [True, False, False, False]
    assert {r.error_type for r in results[1:]} == {"response_mismatch"}


def test_item_errors_keep_type_reason_and_retryability():
    batch = ops(2)
    answer = [
        item(_id="id0", status=429, error={"type": "es_rejected_execution_exception"}),
        item(_id="id1", status=400, error={"type": "document_parsing_exception", "reason": "bad"}),
    ]
    rejected, bad = check_items(batch, answer)
    assert (rejected.status, rejected.retryable) == (429, True)
    assert (bad.status, bad.error_type, bad.error_reason, bad.retryable) == (
        400,
        "document_parsing_exception",
        "bad",
        False,
    )
