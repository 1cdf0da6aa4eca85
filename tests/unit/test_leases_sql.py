"""The shared lease-queue statements take exactly the parameters their helpers build.

The SQL itself runs in the projection and analysis integration suites; here a
mismatch between a statement and its parameter helper (a renamed bind, a missing
key) fails without a database.
"""

from __future__ import annotations

import uuid

import pytest

from app.analysis import queue
from app.leases import (
    MAX_ERROR_CHARS,
    claim_parameters,
    owned,
    retry_parameters,
)
from app.projection import outbox


def _binds(statement) -> set[str]:
    return set(statement.compile().params)


@pytest.mark.parametrize("module", [outbox, queue], ids=["outbox", "analysis"])
def test_statements_bind_what_the_helpers_give(module):
    ownership = owned(7, uuid.uuid4())
    assert _binds(module._CLAIM) == set(claim_parameters(30))
    assert _binds(module._RETRY) == set(ownership) | set(
        retry_parameters("boom", base_seconds=1, max_backoff_seconds=60)
    )
    assert _binds(module._COMPLETE) - {"in_phase"} == set(ownership)


def test_only_the_analysis_queue_completes_from_one_phase():
    assert queue._COMPLETE.compile().params["in_phase"] == "publish"
    assert "in_phase" not in outbox._COMPLETE.compile().params


def test_retry_parameters_cap_the_error_text():
    params = retry_parameters("x" * (MAX_ERROR_CHARS + 50), base_seconds=1, max_backoff_seconds=2)
    assert len(params["error"]) == MAX_ERROR_CHARS
