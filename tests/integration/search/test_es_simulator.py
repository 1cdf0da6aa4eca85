"""The Elasticsearch simulator itself, driven through the official client (it is a test edge,
so it gets tests of its own: protocol shapes, near-real-time search, merges, faults)."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest
import requests
from elasticsearch import ApiError, ConnectionError, ConnectionTimeout, Elasticsearch

from app.search.documents import merge_all
from app.search.encoding import dumps, endpoint_source
from tests.support.es_simulator import EsSimulator, Fault
from tests.support.search_documents import at, current_asset

MAPPING = {
    "dynamic": "strict",
    "properties": {
        "ip": {"type": "ip"},
        "port": {"type": "integer"},
        "name": {"type": "keyword"},
        "seen": {"type": "date_nanos"},
        "details": {"type": "object", "enabled": False},
    },
}


@pytest.fixture
def simulator():
    with EsSimulator() as sim:
        yield sim


@pytest.fixture
def es(simulator):
    client = Elasticsearch(simulator.url, request_timeout=1, max_retries=0)
    client.indices.put_index_template(
        name="t", index_patterns=["sim-*"], template={"mappings": MAPPING}
    )
    yield client
    client.close()


def bulk(es, lines):
    body = "".join(dumps(line) + "\n" for line in lines).encode()
    return es.perform_request(
        "POST", "/_bulk", body=body, headers={"content-type": "application/x-ndjson"}
    ).body


def test_cluster_info_satisfies_the_official_client(simulator, es):
    assert es.info()["version"]["number"].split(".")[0] == "9"
    response = requests.get(simulator.url, timeout=5)
    assert response.headers["X-Elastic-Product"] == "Elasticsearch"


def test_documents_become_searchable_on_refresh_and_mappings_are_enforced(es):
    result = bulk(
        es,
        [
            {"index": {"_index": "sim-a", "_id": "1"}},
            {"ip": "192.0.2.1", "port": 80, "name": "A", "seen": "2026-11-30T06:00:00.000001Z"},
            {"index": {"_index": "sim-a", "_id": "2"}},
            {"ip": "not-an-ip", "port": 80},
            {"index": {"_index": "sim-a", "_id": "3"}},
            {"ip": "192.0.2.3", "port": 99999999999},
            {"index": {"_index": "sim-a", "_id": "4"}},
            {"ip": "192.0.2.4", "surprise": True},
            {"index": {"_index": "sim-a", "_id": "5"}},
            {"ip": "2001:db8::5", "details": {"anything": ["goes"]}},
        ],
    )
    assert result["errors"] is True
    statuses = [(i["index"]["_id"], i["index"]["status"]) for i in result["items"]]
    assert statuses == [("1", 201), ("2", 400), ("3", 400), ("4", 400), ("5", 201)]
    assert result["items"][3]["index"]["error"]["type"] == "strict_dynamic_mapping_exception"
    assert es.count(index="sim-a")["count"] == 0  # not refreshed yet
    es.indices.refresh(index="sim-a")
    assert es.count(index="sim-a")["count"] == 2
    found = es.search(index="sim-a", query={"term": {"ip": "192.0.2.0/24"}})
    assert [h["_id"] for h in found["hits"]["hits"]] == ["1"]


def test_search_after_and_composite_paging_follow_ip_order(es):
    ips = ["10.0.0.2", "2001:db8::1", "10.0.0.10", "::1", "192.0.2.1"]
    lines = []
    for n, ip in enumerate(ips):
        for port in (22, 80):
            lines += [
                {"index": {"_index": "sim-b", "_id": f"{n}-{port}"}},
                {"ip": ip, "port": port},
            ]
    bulk(es, lines)
    es.indices.refresh(index="sim-b")
    expected = ["::1", "10.0.0.2", "10.0.0.10", "192.0.2.1", "2001:db8::1"]  # binary ip order

    seen, after = [], None
    while True:
        body = {"size": 3, "sort": [{"ip": "asc"}, {"port": "asc"}], "track_total_hits": False}
        if after:
            body["search_after"] = after
        hits = es.search(index="sim-b", body=body)["hits"]["hits"]
        if not hits:
            break
        seen += [(h["_source"]["ip"], h["_source"]["port"]) for h in hits]
        after = hits[-1]["sort"]
    assert seen == [(ip, port) for ip in expected for port in (22, 80)]

    buckets, after_key = [], None
    while True:
        composite = {"size": 2, "sources": [{"ip": {"terms": {"field": "ip"}}}]}
        if after_key:
            composite["after"] = after_key
        result = es.search(
            index="sim-b", size=0, aggs={"ips": {"composite": composite}}, track_total_hits=True
        )
        page = result["aggregations"]["ips"]["buckets"]
        buckets += [(b["key"]["ip"], b["doc_count"]) for b in page]
        if len(page) < 2:
            break
        after_key = result["aggregations"]["ips"]["after_key"]
    assert buckets == [(ip, 2) for ip in expected]


def test_stored_script_upserts_route_every_version_through_the_merge(es):
    # The simulator runs merge_endpoints for the stored script, so this checks its bulk
    # plumbing (upsert on first write, params.doc on later ones, noop on a replay), not the
    # Painless rule itself: that runs only against a real cluster (NETMAP_TEST_ES_URL).
    es.put_script(id="sim-merge-endpoint", script={"lang": "painless", "source": "// merge"})
    docs = [
        current_asset("global", "192.0.2.1", 80, seen=at(m), execution_id=e, banner=f"b{m}")
        for m, e in [(5, 2), (1, 3), (9, 1), (9, 4), (3, 3)]
    ]
    random.Random(7).shuffle(docs)
    lines = []
    for doc in docs:
        source = endpoint_source(doc)
        lines += [
            {"update": {"_index": "assets-sim", "_id": doc.id}},
            {"script": {"id": "sim-merge-endpoint", "params": {"doc": source}}, "upsert": source},
        ]
    result = bulk(es, lines + lines[:2])  # the replay of one version is a noop
    assert [i["update"]["status"] for i in result["items"]] == [201, 200, 200, 200, 200, 200]
    assert result["items"][-1]["update"]["result"] == "noop"
    stored = es.get(index="assets-sim", id=docs[0].id)["_source"]
    assert stored == endpoint_source(merge_all(docs)[0])

    missing = bulk(
        es,
        [
            {"update": {"_index": "assets-sim", "_id": docs[0].id}},
            {"script": {"id": "nope-merge-endpoint", "params": {"doc": {}}}, "upsert": {}},
        ],
    )
    assert missing["items"][0]["update"]["status"] == 400


def _fill(es, count: int, index: str = "sim-d") -> None:
    lines = []
    for n in range(count):
        lines += [{"index": {"_index": index, "_id": f"d{n:03}"}}, {"port": n % 4, "name": "x"}]
    assert bulk(es, lines)["errors"] is False


def test_delete_by_query_sees_the_searchable_view_and_counts_what_it_deleted(es):
    _fill(es, 30)
    # Nothing is searchable yet: nothing to delete, as on a cluster.
    nothing = es.delete_by_query(index="sim-d", query={"match_all": {}})
    assert (nothing["total"], nothing["deleted"], nothing["batches"]) == (0, 0, 0)
    es.indices.refresh(index="sim-d")
    first = es.delete_by_query(
        index="sim-d", query={"terms": {"port": [1, 2]}}, max_docs=10, scroll_size=4
    )
    assert (first["total"], first["deleted"], first["batches"]) == (10, 10, 3)
    assert first["version_conflicts"] == 0 and first["failures"] == []
    # Without refresh the deleted documents are still searchable; deleting them again
    # meets version conflicts (they are gone since the view was made).
    assert es.count(index="sim-d", query={"terms": {"port": [1, 2]}})["count"] == 15
    again = es.delete_by_query(
        index="sim-d",
        query={"terms": {"port": [1, 2]}},
        conflicts="proceed",
        refresh=True,
    )
    assert (again["deleted"], again["version_conflicts"], again["total"]) == (5, 10, 15)
    assert es.count(index="sim-d", query={"terms": {"port": [1, 2]}})["count"] == 0
    assert es.count(index="sim-d")["count"] == 15


def test_delete_by_query_aborts_on_a_version_conflict_unless_told_to_proceed(es):
    _fill(es, 6)
    es.indices.refresh(index="sim-d")
    # A document changed after the searchable view was made.
    bulk(es, [{"index": {"_index": "sim-d", "_id": "d000"}}, {"port": 9, "name": "y"}])
    with pytest.raises(ApiError) as conflict:
        es.delete_by_query(index="sim-d", query={"match_all": {}})
    assert conflict.value.meta.status == 409
    (failure,) = conflict.value.body["failures"]
    assert failure["id"] == "d000"
    assert failure["cause"]["type"] == "version_conflict_engine_exception"
    proceeded = es.delete_by_query(
        index="sim-d", query={"match_all": {}}, conflicts="proceed", refresh=True
    )
    assert (proceeded["deleted"], proceeded["version_conflicts"]) == (5, 1)
    assert es.count(index="sim-d")["count"] == 1  # the changed document, now searchable


def test_delete_by_query_refuses_what_a_cluster_refuses(es):
    _fill(es, 2)
    cases = [
        ({"conflicts": "sometimes"}, "illegal_argument_exception"),
        ({"max_docs": 0}, "action_request_validation_exception"),
        ({"slices": 2}, "illegal_argument_exception"),
        ({"wait_for_completion": False}, "illegal_argument_exception"),
    ]
    for options, error_type in cases:
        with pytest.raises(ApiError) as refused:
            es.delete_by_query(index="sim-d", query={"match_all": {}}, **options)
        assert refused.value.meta.status == 400
        assert refused.value.body["error"]["type"] == error_type
    with pytest.raises(ApiError) as missing:
        es.delete_by_query(index="sim-missing", query={"match_all": {}})
    assert missing.value.meta.status == 404
    skipped = es.delete_by_query(index="sim-none-*", query={"match_all": {}})
    assert skipped["deleted"] == 0


def test_search_returns_the_source_fields_asked_for(es):
    _fill(es, 1)
    es.indices.refresh(index="sim-d")
    (hit,) = es.search(index="sim-d", query={"match_all": {}}, source=["port"])["hits"]["hits"]
    assert hit["_source"] == {"port": 0}
    (bare,) = es.search(index="sim-d", query={"match_all": {}}, source=False)["hits"]["hits"]
    assert "_source" not in bare


def test_status_faults_hit_the_nth_matching_request(simulator, es):
    simulator.inject(Fault("status", endpoint="_count", nth=2, status=503))
    es.indices.create(index="sim-c")
    es.count(index="sim-c")
    with pytest.raises(ApiError) as caught:
        es.count(index="sim-c")
    assert caught.value.meta.status == 503
    es.count(index="sim-c")  # the fault fired once and is gone
    assert [r.status for r in simulator.requests_to("_count")] == [200, 503, 200]


def test_item_faults_fail_chosen_documents(simulator, es):
    simulator.inject(Fault("item_status", item_ids=frozenset({"b"}), status=429))
    result = bulk(
        es,
        [
            {"index": {"_index": "sim-d", "_id": "a"}},
            {"port": 1},
            {"index": {"_index": "sim-d", "_id": "b"}},
            {"port": 2},
        ],
    )
    items = [i["index"] for i in result["items"]]
    assert [(i["_id"], i["status"]) for i in items] == [("a", 201), ("b", 429)]
    assert items[1]["error"]["type"] == "es_rejected_execution_exception"


def test_dropped_connections_and_slow_answers(simulator, es):
    es.indices.create(index="sim-e")
    simulator.inject(Fault("drop", endpoint="_refresh"))
    with pytest.raises(ConnectionError):
        es.indices.refresh(index="sim-e")

    simulator.inject(Fault("delay", endpoint="_bulk", seconds=1.5))
    with pytest.raises(ConnectionTimeout):
        bulk(es, [{"index": {"_index": "sim-e", "_id": "late"}}, {"port": 1}])
    # The cluster still did the work after the client gave up.
    deadline = time.monotonic() + 5
    while simulator.live_source("sim-e", "late") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert simulator.live_source("sim-e", "late") == {"port": 1}


def test_shard_failures_are_reported_in_200_answers(simulator, es):
    es.indices.create(index="sim-f")
    simulator.inject(Fault("shard_failure", endpoint="_refresh"))
    simulator.inject(Fault("shard_failure", endpoint="_count"))
    assert es.indices.refresh(index="sim-f")["_shards"]["failed"] >= 1
    assert es.count(index="sim-f")["_shards"]["failed"] >= 1


def test_request_lines_over_the_cluster_limit_are_rejected(simulator, es):
    with pytest.raises(ApiError) as caught:
        es.indices.refresh(index=[f"sim-{n:04d}" for n in range(600)])
    assert caught.value.meta.status == 400
    assert caught.value.message == "too_long_http_line_exception"
    assert simulator.requests[-1].line_bytes > 4096


def test_missing_indices_are_404_unless_wildcarded(es):
    with pytest.raises(ApiError) as caught:
        es.count(index="sim-missing")
    assert caught.value.meta.status == 404
    assert es.count(index="sim-nothing-*")["count"] == 0


def test_standalone_server_prints_its_address_and_takes_faults_over_http():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.es_simulator", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.removeprefix("listening on ")
        assert requests.get(url, timeout=5).json()["tagline"] == "You Know, for Search"
        fault = {"action": "status", "endpoint": "_count", "status": 429}
        assert requests.post(f"{url}/_simulator/faults", json=fault, timeout=5).ok
        assert requests.post(f"{url}/_all/_count", json={}, timeout=5).status_code == 429
        assert requests.post(f"{url}/_all/_count", json={}, timeout=5).status_code == 200
        logged = requests.get(f"{url}/_simulator/requests", timeout=5).json()["requests"]
        assert [r["status"] for r in logged if r["endpoint"] == "_count"] == [429, 200]
    finally:
        process.terminate()
        process.wait(timeout=10)
