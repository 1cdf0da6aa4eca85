"""A search a person waits for stops at its time limit (``AssetQuery.time_limit_ms``).

Both adapters stop a search that runs past its limit and raise ``SearchTimedOut``
(logged as a warning, not as an outage); a search without a limit (exports, reports,
alerts) is not stopped by it.

PostgreSQL: the search's transaction gets the limit as its ``statement_timeout``. A
table locked by another session holds the search past it, the same clock as a slow
plan, and the pooled connection goes back without the limit.
Elasticsearch: the limit is the search's ``timeout``; the simulator stops collecting
as a shard does and answers ``timed_out``.
"""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy as sa

from app.search.port import AssetQuery, SearchTimedOut
from tests.support.search_documents import current_asset

OWNER = 4242


def _events(caplog, name):
    return [
        (r.levelno, r.netmap_fields)
        for r in caplog.records
        if getattr(r, "netmap_event", "") == name
    ]


def _publish(store, count: int) -> None:
    assets = [
        current_asset("user", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 443, owner_id=OWNER)
        for i in range(count)
    ]
    for start in range(0, count, 500):
        assert store.publish_current(
            assets[start : start + 500], max_operations=500, max_bytes=1 << 24
        ).ok
    store.refresh_current()


def test_a_postgres_search_held_past_its_limit_is_stopped_and_logged(
    postgres_store, engine, caplog
):
    _publish(postgres_store, 3)
    caplog.set_level(logging.INFO)
    limited = AssetQuery(scope="user", owner_id=OWNER, time_limit_ms=200)
    with engine.connect() as blocker:
        blocker.execute(sa.text("LOCK TABLE search_assets_user IN ACCESS EXCLUSIVE MODE"))
        with pytest.raises(SearchTimedOut) as stopped:
            postgres_store.search_assets(limited)
        with pytest.raises(SearchTimedOut):
            postgres_store.asset_facets(limited, size=5, sample=100)
        blocker.rollback()
    assert stopped.value.limit_ms == 200
    events = _events(caplog, "SearchTimedOut")
    assert [(level, fields["statement"], fields["limit_ms"]) for level, fields in events] == [
        (logging.WARNING, "search_assets", 200),
        (logging.WARNING, "asset_facets", 200),
    ]
    # Not an outage: nothing logged as the store's timeout or unavailability.
    assert _events(caplog, "SearchStoreTimeout") == []
    # Once the lock is gone the same search answers.
    assert len(postgres_store.search_assets(limited).items) == 3


def test_a_postgres_search_without_a_limit_waits_and_the_limit_does_not_outlive_it(
    postgres_store, engine
):
    _publish(postgres_store, 2)
    unlimited = AssetQuery(scope="user", owner_id=OWNER)
    # A search without a limit (an export's page) waits out a lock longer than the
    # interactive limit would have allowed.
    with engine.connect() as blocker:
        blocker.execute(sa.text("LOCK TABLE search_assets_user IN ACCESS EXCLUSIVE MODE"))
        release = threading.Timer(0.6, blocker.rollback)
        release.start()
        try:
            assert len(postgres_store.search_assets(unlimited).items) == 2
        finally:
            release.join()
    # A limited search first, then other work on the pooled connections: the limit was
    # the search transaction's own (SET LOCAL), so a statement longer than it still runs.
    postgres_store.search_assets(AssetQuery(scope="user", owner_id=OWNER, time_limit_ms=100))
    for _ in range(3):
        _slept, setting = postgres_store._run(
            lambda conn: conn.execute(
                sa.text("SELECT pg_sleep(0.3), current_setting('statement_timeout')")
            ).one()
        )
        assert setting != "100ms"


def test_an_elasticsearch_search_past_its_limit_is_stopped(es_target, elasticsearch_store, caplog):
    if es_target.simulator is None:
        pytest.skip("a real cluster answers this index faster than any limit we could set")
    _publish(elasticsearch_store, 2000)
    caplog.set_level(logging.INFO)
    with pytest.raises(SearchTimedOut):
        elasticsearch_store.search_assets(
            AssetQuery(scope="user", owner_id=OWNER, limit=10, time_limit_ms=1)
        )
    with pytest.raises(SearchTimedOut):
        elasticsearch_store.asset_facets(
            AssetQuery(scope="user", owner_id=OWNER, time_limit_ms=1), size=5, sample=100
        )
    assert [fields["statement"] for _level, fields in _events(caplog, "SearchTimedOut")] == [
        "search",
        "asset_facets",
    ]
    # The same searches with room to finish (or no limit) answer in full.
    page = elasticsearch_store.search_assets(
        AssetQuery(scope="user", owner_id=OWNER, limit=10, time_limit_ms=60_000)
    )
    assert len(page.items) == 10 and page.next_cursor is not None
    facets = elasticsearch_store.asset_facets(
        AssetQuery(scope="user", owner_id=OWNER), size=5, sample=100
    )
    assert facets.sampled == 100 and facets.capped
