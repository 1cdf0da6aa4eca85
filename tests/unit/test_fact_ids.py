"""Fact ids lead with their execution (``app.search.ids``, scheme 2), so a run's facts
land side by side in the facts' key; scheme 1, the digest alone, stays for batches
reserved before the change (docs/scaling.md, "Keys with insert locality")."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from app.search import ids

executions = st.integers(min_value=1, max_value=2**47)
positions = st.integers(min_value=0, max_value=5000)


def _digest_alone(execution_id, upload_id, stream, batch_index, position) -> str:
    """Scheme 1 spelled out: SHA-256 over ``fact`` and the length-prefixed parts."""
    parts = (execution_id, upload_id, stream, batch_index, position)
    encoded = b"".join(
        len(raw).to_bytes(4, "big") + raw for raw in (str(p).encode() for p in parts)
    )
    return hashlib.sha256(b"fact" + encoded).hexdigest()[:32]


@given(executions, positions)
def test_an_id_is_its_execution_in_hex_then_the_digest(execution_id, position):
    made = ids.fact_id(execution_id, "u-1", "main", 3, position)
    assert len(made) == ids.ID_HEX_CHARS
    assert made[:12] == f"{execution_id:012x}"
    assert made[12:] == _digest_alone(execution_id, "u-1", "main", 3, position)[:20]
    assert ids.fact_ids(execution_id, "u-1", "main", 3, position + 1)[position] == made


@given(executions, executions, positions, positions)
def test_a_later_execution_s_facts_sort_after_an_earlier_one_s(first, second, p, q):
    assume(first != second)
    early, late = sorted((first, second))
    assert ids.fact_id(early, "u-9", "dns", 0, p) < ids.fact_id(late, "u-1", "main", 0, q)


def test_executions_whose_prefix_wraps_still_get_distinct_ids():
    wrapped = 5 + 2**48
    one, other = ids.fact_ids(5, "u", "main", 0, 100), ids.fact_ids(wrapped, "u", "main", 0, 100)
    assert {i[:12] for i in one} == {i[:12] for i in other} == {"000000000005"}
    assert not set(one) & set(other)


def test_scheme_1_is_the_digest_alone_as_receipts_before_the_change_wrote_it():
    assert ids.fact_ids(7, "u-1", "main", 2, 3, scheme=1) == [
        _digest_alone(7, "u-1", "main", 2, p) for p in range(3)
    ]
    assert ids.fact_id(7, "u-1", "main", 2, 1, scheme=1) == _digest_alone(7, "u-1", "main", 2, 1)


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="scheme"):
        ids.fact_ids(7, "u-1", "main", 2, 3, scheme=3)
