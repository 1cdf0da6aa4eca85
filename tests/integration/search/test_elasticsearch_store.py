"""Elasticsearch adapter specifics against the simulator: retries, item checks, faults, plans.

Each test gets its own simulator, so injected faults never leak between tests.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from app.search.documents import merge_all
from app.search.elasticsearch_bulk import operation
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.port import (
    AssetQuery,
    OperationTooLarge,
    StorageScope,
    StoreError,
    StoreUnavailable,
)
from tests.support.es_simulator import EsSimulator, Fault
from tests.support.es_target import es_settings_for
from tests.support.search_documents import BASE_TIME, at, current_asset, execution_endpoint, fact

NOVEMBER = StorageScope(months=("2026.11",))
BULK_EVENT = "ElasticsearchBulkCompleted"


@pytest.fixture
def simulator():
    with EsSimulator() as sim:
        yield sim


def make_store(simulator, **overrides) -> ElasticsearchStore:
    store = ElasticsearchStore(es_settings_for(simulator.url, **overrides))
    store.ensure_schema()
    simulator.reset_requests()
    return store


@pytest.fixture
def store(simulator):
    store = make_store(simulator)
    yield store
    store.close()


@pytest.fixture
def events(caplog):
    caplog.set_level(logging.INFO, logger="netmap.events")

    def named(name):
        return [r.netmap_fields for r in caplog.records if getattr(r, "netmap_event", "") == name]

    return named


def assets(owner, n=3, **fields):
    return [current_asset("user", f"192.0.2.{i}", 80, owner_id=owner, **fields) for i in range(n)]


def test_whole_request_429_is_retried_with_backoff(simulator, store, events):
    simulator.inject(Fault("status", endpoint="_bulk", status=429))
    result = store.publish_current(assets(1), max_operations=100, max_bytes=1 << 20)
    assert result.ok and result.attempts == 2
    assert [r.status for r in simulator.requests_to("_bulk")] == [429, 200]
    (event,) = events(BULK_EVENT)
    assert event["attempts"] == 2 and event["success"] is True
    assert event["backoff_ms"] > 0 and event["operations"] == 3
    expected = {
        "duration_ms",
        "queue_wait_ms",
        "request_ms",
        "backoff_ms",
        "attempts",
        "request_bytes",
        "operations",
        "es_took_ms",
        "success",
        "trace_id",
    }
    assert expected <= set(event)
    assert event["request_bytes"] == simulator.requests_to("_bulk")[1].body_bytes


def test_5xx_beyond_the_retry_budget_is_unavailable(simulator, events):
    store = make_store(simulator, bulk_retry_budget=2)
    simulator.inject(Fault("status", endpoint="_bulk", status=503, times=10))
    with pytest.raises(StoreUnavailable):
        store.publish_current(assets(2), max_operations=100, max_bytes=1 << 20)
    assert len(simulator.requests_to("_bulk")) == 3
    (event,) = events(BULK_EVENT)
    assert (event["attempts"], event["success"]) == (3, False)
    store.close()


def test_rejected_items_are_resent_alone(simulator, store):
    docs = assets(3, n=4)
    simulator.inject(Fault("item_status", item_ids=frozenset({docs[2].id}), status=429))
    result = store.publish_current(docs, max_operations=100, max_bytes=1 << 20)
    assert result.ok
    first, second = simulator.requests_to("_bulk")
    lone = operation("update", "x", docs[2].id, None)  # only to size the retry below
    assert second.body_bytes < first.body_bytes / 2 and second.body_bytes > lone.size
    store.refresh_current()
    assert len(store.search_assets(_query(3)).items) == 4


def test_other_item_failures_are_reported_not_retried(simulator, store):
    docs = assets(4, n=3)
    simulator.inject(
        Fault(
            "item_status",
            item_ids=frozenset({docs[1].id}),
            status=400,
            error_type="document_parsing_exception",
        )
    )
    result = store.publish_current(docs, max_operations=100, max_bytes=1 << 20)
    assert len(simulator.requests_to("_bulk")) == 1
    (failed,) = result.failed
    assert (failed.id, failed.status, failed.error_type) == (
        docs[1].id,
        400,
        "document_parsing_exception",
    )
    assert not failed.retryable


def test_items_still_rejected_after_the_budget_come_back_as_retryable(simulator):
    store = make_store(simulator, bulk_retry_budget=1)
    docs = assets(5, n=2)
    simulator.inject(Fault("item_status", item_ids=frozenset({docs[0].id}), status=429, times=5))
    result = store.publish_current(docs, max_operations=100, max_bytes=1 << 20)
    (failed,) = result.failed
    assert failed.status == 429 and failed.retryable
    with pytest.raises(StoreError) as caught:
        result.raise_for_failures()
    assert caught.value.retryable
    store.close()


def test_an_answer_missing_items_fails_every_item(simulator, store):
    simulator.inject(Fault("mangle_items", endpoint="_bulk"))
    result = store.publish_current(assets(6, n=3), max_operations=100, max_bytes=1 << 20)
    assert len(result.failed) == 3
    assert {i.error_type for i in result.failed} == {"response_mismatch"}


def test_a_timed_out_request_is_resent_and_converges(simulator):
    store = make_store(simulator, request_timeout_seconds=1.0)
    versions = [
        current_asset("user", "192.0.2.50", 443, owner_id=7, seen=at(m), banner=f"v{m}")
        for m in (10, 5, 20)
    ]
    simulator.inject(Fault("delay", endpoint="_bulk", seconds=1.5))
    result = store.publish_current(versions, max_operations=100, max_bytes=1 << 20)
    assert result.ok and result.attempts == 2
    # The first, timed-out request was still applied by the cluster; the merge absorbs it.
    deadline = time.monotonic() + 10
    while simulator.cluster.in_flight.get("_bulk") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(simulator.requests_to("_bulk")) == 2
    store.refresh_current()
    (stored,) = store.search_assets(_query(7)).items
    assert stored == merge_all(versions)[0]
    store.close()


def test_a_dropped_connection_is_resent(simulator, store):
    simulator.inject(Fault("drop", endpoint="_bulk"))
    result = store.write_execution_endpoints([execution_endpoint(9, "192.0.2.9", 22)])
    assert result.ok and result.attempts == 2


def test_bulk_concurrency_is_bounded(simulator):
    store = make_store(simulator, bulk_max_concurrency=2)
    simulator.inject(Fault("delay", endpoint="_bulk", seconds=0.2, times=6))
    docs = [current_asset("global", f"10.0.0.{n}", 80) for n in range(60)]
    threads = [
        threading.Thread(
            target=store.publish_current,
            args=(docs[i::2],),
            kwargs={"max_operations": 10, "max_bytes": 1 << 20},
        )
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(simulator.requests_to("_bulk")) == 6
    assert simulator.peak_in_flight("_bulk") == 2
    store.close()


def test_a_failed_shard_leaves_nothing_of_its_call_queued_or_in_flight(simulator, events):
    """Six shards on two connections: the first request is refused outright while the
    second is slow. The call raises only once the slow one is answered and reported, and
    the four queued shards are never sent, not even after the call has returned."""
    store = make_store(simulator, bulk_max_concurrency=2)
    simulator.inject(Fault("status", endpoint="_bulk", status=400))
    simulator.inject(Fault("delay", endpoint="_bulk", nth=2, seconds=0.5))
    docs = [current_asset("global", f"10.0.0.{n}", 80) for n in range(60)]
    with pytest.raises(StoreError, match="rejected with 400"):
        store.publish_current(docs, max_operations=10, max_bytes=1 << 20)
    assert simulator.cluster.in_flight.get("_bulk", 0) == 0
    sent = len(simulator.requests_to("_bulk"))
    assert 1 <= sent <= 2
    assert len(events(BULK_EVENT)) == sent
    time.sleep(1.0)
    assert len(simulator.requests_to("_bulk")) == sent
    store.close()


def test_a_shard_backing_off_stops_when_another_fails_and_the_call_names_that_failure(
    simulator, events
):
    """Two shards at once: one is refused outright (400), the other answered 503, which
    it would retry after a backoff of 10 to 20 s. The refusal ends that backoff; the
    call raises the refusal, not the retrying shard's abandonment."""
    store = make_store(
        simulator, bulk_max_concurrency=2, bulk_retry_backoff_ms=20_000, bulk_retry_budget=3
    )
    simulator.inject(Fault("status", endpoint="_bulk", status=400))
    simulator.inject(Fault("status", endpoint="_bulk", nth=2, status=503, times=5))
    docs = [current_asset("global", f"10.0.0.{n}", 80) for n in range(20)]
    with pytest.raises(StoreError, match="rejected with 400"):
        store.publish_current(docs, max_operations=10, max_bytes=1 << 20)
    statuses = sorted(r.status for r in simulator.requests_to("_bulk"))
    assert statuses in ([400], [400, 503])  # the 503 shard may not have sent at all
    shard_events = events(BULK_EVENT)
    # One attempt for each shard that sent; a shard the refusal stopped before its first
    # request reports none (the race the statuses above allow).
    assert sum(event["attempts"] for event in shard_events) == len(statuses)
    for event in shard_events:
        assert event["attempts"] == (1 if event["bytes_sent"] else 0)
        assert event["backoff_ms"] < 10_000  # the shortest backoff it could have slept
    store.close()


def test_an_operation_over_the_limit_sends_nothing(simulator, store):
    huge = current_asset("user", "192.0.2.99", 1, owner_id=8, banner="x" * 9000)
    docs = [*assets(8, n=2), huge]
    with pytest.raises(OperationTooLarge):
        store.publish_current(docs, max_operations=100, max_bytes=8192)
    assert simulator.requests_to("_bulk") == []


def test_cancel_stops_before_sending(simulator, store):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(StoreUnavailable):
        store.publish_current(assets(9), max_operations=1, max_bytes=1 << 20, cancel=cancel)
    assert simulator.requests_to("_bulk") == []


def test_cancel_cuts_a_backoff_short(simulator):
    store = make_store(simulator, bulk_retry_backoff_ms=30_000)
    simulator.inject(Fault("status", endpoint="_bulk", status=503, times=5))
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    with pytest.raises(StoreUnavailable, match="cancelled"):
        store.publish_current(assets(10), max_operations=100, max_bytes=1 << 20, cancel=cancel)
    timer.join()
    store.close()


def test_refresh_and_count_failures_raise(simulator, store):
    store.write_facts([fact(11, 0)])
    simulator.inject(Fault("status", endpoint="_refresh", status=500))
    with pytest.raises(StoreUnavailable):
        store.refresh(NOVEMBER)
    simulator.inject(Fault("shard_failure", endpoint="_refresh"))
    with pytest.raises(StoreUnavailable):
        store.refresh(NOVEMBER)
    store.refresh(NOVEMBER)
    simulator.inject(Fault("shard_failure", endpoint="_search"))
    with pytest.raises(StoreUnavailable):
        store.count(NOVEMBER, 11)
    simulator.inject(Fault("status", endpoint="_search", status=503))
    with pytest.raises(StoreUnavailable):
        store.count(NOVEMBER, 11)
    assert store.count(NOVEMBER, 11).observations == 1


def test_missing_month_indices_count_as_empty(store):
    scope = StorageScope(months=("2019.01", "2026.11"))
    store.refresh(scope)
    assert store.count(scope, 12).observations == 0


def test_final_requests_follow_the_plan_within_the_request_line_budget(simulator, events):
    store = make_store(simulator, request_line_max_bytes=300)
    months = [f"{year}.{month:02d}" for year in range(2020, 2027) for month in range(1, 13)]
    store.write_facts([fact(13, n, observed_at=at(0)) for n in range(3)])
    scope = StorageScope(months=tuple(months))
    plan = store.final_request_plan(scope)
    simulator.reset_requests()
    store.refresh(scope)
    counts = store.count(scope, 13)
    refreshes = simulator.requests_to("_refresh")
    searches = [r for r in simulator.requests_to("_search") if "-facts-" in r.target]
    assert counts.observations == 3
    assert len(refreshes) == plan.refresh_requests > 1
    assert len(searches) == plan.count_requests > 1
    assert max(r.line_bytes for r in refreshes + searches) == plan.max_request_line_bytes
    assert plan.max_request_line_bytes <= 300
    assert sum("execution-endpoints" in r.target for r in refreshes) == 1
    stages = [e["stage"] for e in events("ScanWriteStageCompleted")]
    assert stages.count("refresh_execution_index_chunk") == plan.refresh_requests
    assert stages.count("count_execution_observation_chunk") == plan.count_requests


def test_the_url_base_path_counts_against_the_request_line_budget(events):
    # A cluster behind a reverse proxy under /es/: the prefix is on every request line the
    # proxy forwards, so the plan counts it and no line exceeds the budget.
    with EsSimulator(base_path="/es") as proxied:
        store = make_store(proxied, request_line_max_bytes=300)
        try:
            assert proxied.url.endswith("/es")
            months = [f"{year}.{month:02d}" for year in range(2020, 2027) for month in range(1, 13)]
            store.write_facts([fact(16, n, observed_at=at(0)) for n in range(2)])
            scope = StorageScope(months=tuple(months))
            plan = store.final_request_plan(scope)
            proxied.reset_requests()
            store.refresh(scope)
            assert store.count(scope, 16).observations == 2
            sent = proxied.requests_to("_refresh") + [
                r for r in proxied.requests_to("_search") if "-facts-" in r.target
            ]
            assert all(r.target.startswith("/es/") for r in sent)
            assert len(proxied.requests_to("_refresh")) == plan.refresh_requests > 1
            assert max(r.line_bytes for r in sent) == plan.max_request_line_bytes <= 300
        finally:
            store.close()


def test_few_months_make_one_refresh_request(simulator, store):
    store.write_facts([fact(14, 0)])
    simulator.reset_requests()
    store.refresh(StorageScope(months=("2026.10", "2026.11")))
    (request,) = simulator.requests_to("_refresh")
    assert "execution-endpoints" in request.target and "facts-2026.10" in request.target


@pytest.mark.parametrize("version", ["8.15.3", "10.0.0"])
def test_a_cluster_of_another_major_is_refused_with_advice(version):
    # 8.x refuses the 9.x client's compatible-with headers; a newer major would accept
    # them, and then the version check names the client to install.
    with EsSimulator(version=version) as other:
        store = ElasticsearchStore(es_settings_for(other.url))
        with pytest.raises(StoreUnavailable, match=r"elasticsearch>=") as info:
            store.ensure_schema()
        store.close()
    if version.startswith("8."):
        assert "pip install 'netmap[es8]'" in str(info.value)  # the extra pinning the client


def test_writes_set_up_the_schema_when_nobody_did(simulator):
    store = ElasticsearchStore(es_settings_for(simulator.url))
    assert store.write_facts([fact(15, 0)]).ok
    prefix = store.names.prefix
    assert f"{prefix}-facts-2026.11" in simulator.index_names()
    assert f"{prefix}-assets-user" in simulator.index_names()
    store.close()


def test_unreachable_cluster_is_unavailable():
    with EsSimulator() as gone:
        url = gone.url
    store = ElasticsearchStore(es_settings_for(url, bulk_retry_budget=1))
    with pytest.raises(StoreUnavailable):
        store.ensure_schema()
    with pytest.raises(StoreUnavailable):
        store.search_assets(_query(1))
    store.close()


def _query(owner):
    return AssetQuery(scope="user", owner_id=owner, limit=100)


def test_reads_before_any_write_are_empty(simulator):
    store = ElasticsearchStore(es_settings_for(simulator.url))
    assert store.search_assets(_query(1)).items == []
    page = store.execution_results(1, cursor=None, limit=10)
    assert (page.items, page.total_endpoints, page.total_ips) == ([], 0, 0)
    assert store.read_execution_endpoints(1, after_id=None, limit=10) == []
    assert simulator.index_names() == []  # reading created nothing
    store.close()


def test_matching_endpoints_asks_by_id_in_batches_with_the_status_given(
    simulator, store, monkeypatch
):
    """The alert rules' search filters (``AssetMatches``): the owner's assets among the
    endpoints that the search finds, ``status`` taken as given whatever is stored, in
    batches of ``ASSET_MATCH_BATCH`` ids."""
    from app.search import elasticsearch_store
    from app.search.port import AssetStatusUpdate, asset_matches
    from app.search.query_language import parse_query

    monkeypatch.setattr(elasticsearch_store, "ASSET_MATCH_BATCH", 2)
    docs = [
        current_asset("user", f"192.0.2.{i}", port, owner_id=7, service=service)
        for i, (port, service) in enumerate(((22, "ssh"), (22, "ssh"), (80, "http"), (22, "ssh")))
    ]
    docs.append(current_asset("user", "192.0.2.9", 22, owner_id=8, service="ssh"))
    store.publish_current(docs, max_operations=100, max_bytes=1 << 20).raise_for_failures()
    # One asset is stored as gone; the caller's status is what a search reads.
    store.apply_asset_status(
        [AssetStatusUpdate("user", 7, "192.0.2.3", 22, "tcp", "gone")]
    ).raise_for_failures()
    store.refresh_current()
    simulator.reset_requests()

    matcher = asset_matches(store)
    assert matcher is not None
    endpoints = [(f"192.0.2.{i}", p, "tcp") for i, p in ((0, 22), (1, 22), (2, 80), (3, 22))]
    endpoints += [("192.0.2.9", 22, "tcp"), ("192.0.2.50", 22, "tcp")]  # another's; none
    now = BASE_TIME
    ssh = parse_query("port:22 service:ssh", now=now).node
    assert matcher.matching_endpoints(7, ssh, status="open", endpoints=endpoints) == {
        ("192.0.2.0", 22, "tcp"),
        ("192.0.2.1", 22, "tcp"),
        ("192.0.2.3", 22, "tcp"),
    }
    assert len(simulator.requests_to("_search")) == 3  # six ids, two per request
    gone = parse_query("port:22 status:gone", now=now).node
    assert matcher.matching_endpoints(7, gone, status="open", endpoints=endpoints) == set()
    assert matcher.matching_endpoints(7, gone, status="gone", endpoints=endpoints) == {
        ("192.0.2.0", 22, "tcp"),
        ("192.0.2.1", 22, "tcp"),
        ("192.0.2.3", 22, "tcp"),
    }
    everything = matcher.matching_endpoints(7, None, status="gone", endpoints=endpoints)
    assert everything == set(endpoints[:4])
    assert matcher.matching_endpoints(7, ssh, status="open", endpoints=[]) == set()
    with pytest.raises(ValueError):
        matcher.matching_endpoints(7, ssh, status="all", endpoints=endpoints)
