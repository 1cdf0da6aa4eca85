"""After a large change set, the analysis reads the store's value keys back into memory.

The change analysis of a large scan writes and reads enough through PostgreSQL's shared
buffers to push out the value keys the next projection looks every new value up in
(docs/scaling.md). ``[analysis] warm_after_endpoints`` decides which analyses are large:
the endpoints staged or in the change set. Warming is an optimisation, so a server
without ``pg_prewarm`` or a failing store leaves the analysis exactly as it was.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import sqlalchemy as sa

from app.db import transaction
from app.search.port import StoreUnavailable
from tests.support.analysis import Scans, changes_of, hosts

NET = "10.9.0.0/29"


def _scans(scans: Scans, **analysis: int) -> Scans:
    return replace(scans, settings=scans.settings.replace(analysis=analysis))


def _endpoints(count: int) -> list[tuple[str, int, str, dict[str, str]]]:
    return [(ip, 22, "tcp", {"service": "ssh"}) for ip in hosts(NET, count)]


def _events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "netmap_event", "") == name]


def _install_prewarm() -> None:
    with transaction() as conn:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_prewarm"))


def test_a_change_set_at_the_threshold_warms_both_keys(pg_scans, caplog):
    caplog.set_level(logging.INFO)
    _install_prewarm()
    scans = _scans(pg_scans, warm_after_endpoints=5)
    scans.scan(scans.owner(), [NET], _endpoints(5), ports="22")
    [outcome] = scans.settle()
    assert outcome.result == "completed" and outcome.counts.new == 5
    [warmed] = _events(caplog, "ValueKeysWarmed")
    assert warmed.netmap_fields["endpoints"] == 5
    assert set(warmed.netmap_fields["blocks"]) == {
        "search_asset_fact_texts_pkey",
        "search_asset_texts_pkey",
    }
    assert all(blocks >= 1 for blocks in warmed.netmap_fields["blocks"].values())


def test_a_smaller_change_set_or_a_threshold_of_zero_does_not(pg_scans):
    _install_prewarm()
    small = _scans(pg_scans, warm_after_endpoints=5)
    small.scan(small.owner(), [NET], _endpoints(4), ports="22")
    small.settle()
    never = _scans(pg_scans, warm_after_endpoints=0)
    never.scan(never.owner(), [NET], _endpoints(6), ports="22")
    never.settle()
    assert "warm_value_keys" not in pg_scans.store.names()


def test_a_staged_rescan_without_changes_warms_too(pg_scans, caplog):
    """Staging copied every endpoint through shared buffers even though nothing changed."""
    caplog.set_level(logging.INFO)
    _install_prewarm()
    scans = _scans(pg_scans, warm_after_endpoints=6, slice_endpoints=2)
    owner = scans.owner()
    first = scans.scan(owner, [NET], _endpoints(6), ports="22")
    scans.settle()
    again = scans.scan(owner, [NET], _endpoints(6), ports="22")
    [outcome] = scans.settle()
    assert changes_of(again) == [] and outcome.counts.slices > 1
    assert [r.netmap_fields["execution_id"] for r in _events(caplog, "ValueKeysWarmed")] == [
        first,
        again,
    ]


def _not_warmed_after_a_complete_analysis(pg_scans, caplog) -> list[logging.LogRecord]:
    """Three new endpoints, every change set warming: the analysis completes whole, and
    the ``ValueKeysNotWarmed`` events it logged."""
    scans = _scans(pg_scans, warm_after_endpoints=1)
    execution = scans.scan(scans.owner(), [NET], _endpoints(3), ports="22")
    [outcome] = scans.settle()
    assert outcome.result == "completed" and len(changes_of(execution)) == 3
    return _events(caplog, "ValueKeysNotWarmed")


def test_without_pg_prewarm_the_analysis_says_so_and_completes(pg_scans, caplog):
    caplog.set_level(logging.INFO)
    [skipped] = _not_warmed_after_a_complete_analysis(pg_scans, caplog)
    assert skipped.levelno == logging.INFO
    assert "pg_prewarm" in skipped.netmap_fields["error"]
    assert _events(caplog, "ValueKeysWarmed") == []


def test_a_failing_store_leaves_the_analysis_complete(pg_scans, caplog):
    caplog.set_level(logging.INFO)
    _install_prewarm()

    def fail() -> None:
        raise StoreUnavailable("the database went away mid-warming")

    pg_scans.store.before["warm_value_keys"] = fail
    [failed] = _not_warmed_after_a_complete_analysis(pg_scans, caplog)
    assert failed.levelno == logging.WARNING
    assert "went away" in failed.netmap_fields["error"]
