"""The deleted-task sweep's cursor (a bigint in the purge row, both stores) keeps the order
of execution-endpoint ids, and resuming after it skips exactly the ids already read."""

from __future__ import annotations

import random

from app.search.ids import cursor_after_id, cursor_key, execution_endpoint_id


def test_the_cursor_orders_like_the_ids_and_fits_a_bigint():
    ids = sorted(
        execution_endpoint_id(7, f"10.0.{n // 256}.{n % 256}", 443, "tcp") for n in range(2000)
    )
    keys = [cursor_key(i) for i in ids]
    assert keys == sorted(keys)
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert cursor_key("0" * 32) == -(2**63) and cursor_key("f" * 32) == 2**63 - 1


def test_resuming_after_a_cursor_reads_exactly_the_later_ids():
    ids = sorted(
        execution_endpoint_id(9, f"192.0.2.{n}", port, "tcp")
        for n in range(1, 200)
        for port in (22, 80)
    )
    for last in random.Random(5).sample(range(len(ids)), 25):
        after = cursor_after_id(cursor_key(ids[last]))
        assert [i for i in ids if i > after] == ids[last + 1 :]
