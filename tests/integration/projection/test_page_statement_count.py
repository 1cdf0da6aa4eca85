"""A projection page costs a constant number of SQL statements, whatever its size (PRJ-4).

Counted with SQLAlchemy's ``before_cursor_execute`` on the real engine while the real
worker claims and runs a slice of one full page on the PostgreSQL store: the claim,
two server-side statements per concurrent part of the page (``bulk_max_concurrency``:
its new text fact values, then its merge), the token-guarded checkpoint and the
release. Nothing may grow with the number of endpoints (no per-row statements, no
per-shard round trips). The lease heartbeat runs in its own thread on its own schedule
and is not part of a page's cost.
"""

from __future__ import annotations

import threading

import pytest

from app.projection.slices import ProjectionWorker
from app.search.postgres_pages import MIN_PART
from app.search.postgres_store import PostgresStore
from tests.support.projection import drain, outbox_row, run_one_slice, seed_execution
from tests.support.projection_setup import PROJECTION_DEFAULTS
from tests.support.sql import counted_statements


def _not_the_heartbeat() -> bool:
    # The page's parts run on pool threads, so every thread counts but the heartbeat's.
    return not threading.current_thread().name.startswith("projection-heartbeat")


def _shape(statement: str) -> str:
    return " ".join(statement.split())[:80]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_page_costs_the_same_statements_for_small_and_large_pages(settings, engine, concurrency):
    configured = settings.replace(
        elasticsearch={**PROJECTION_DEFAULTS, "bulk_max_concurrency": concurrency}
    )
    store = PostgresStore(configured)
    try:
        store.ensure_schema()
        # The store checks its SQL id spelling once, on its first page: not a page's cost.
        seed_execution(store, 3)
        drain(ProjectionWorker(configured, store))

        counts = {}
        # The smallest page that is split into ``concurrency`` parts, and a large one.
        for size in (MIN_PART * concurrency, 1500):
            execution_id, _docs = seed_execution(store, size)
            worker = ProjectionWorker(
                configured.replace(
                    elasticsearch={"projection_page_size": size, "projection_pages_per_tick": 1}
                ),
                store,
            )
            with counted_statements(counts=_not_the_heartbeat, shape=_shape) as statements:
                outcome = run_one_slice(worker)
            assert outcome is not None and outcome.result == "released", outcome
            assert outcome.endpoints == size
            assert outbox_row(execution_id).processed_endpoints == size
            counts[size] = statements
            drain(worker)  # the empty last page and the refresh, so the next size starts alone

        small, large = counts.values()
        # The parts run at once, so their statements interleave in either order.
        assert sorted(small) == sorted(large), (small, large)
        # The claim, the page's parts (values, merge), the checkpoint and the release:
        # nothing per endpoint.
        assert len(large) == 1 + 2 * concurrency + 2, large
    finally:
        store.close()
