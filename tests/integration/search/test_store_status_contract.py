"""The asset-status part of the search-store contract (ANA-4), on every adapter.

Status is set by the change analysis through ``apply_asset_status`` and only
there: merges from the projection keep it, searches filter on it
(``open`` by default, ``gone``, ``all``), a document that was never given a
status counts as open, and an update of a missing asset is a 404 item.
"""

from __future__ import annotations

import itertools

import pytest

from app.errors import ValidationError
from app.search.port import AssetQuery, AssetStatusUpdate
from tests.support.search_documents import at, current_asset

pytestmark = pytest.mark.contract

_owners = itertools.count(20_000)


def _search(store, **query):
    items, cursor = [], None
    while True:
        page = store.search_assets(AssetQuery(cursor=cursor, limit=2, **query))
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return [(d.ip, d.port, d.status) for d in items]


def _gone(scope, owner, ip, port, execution_id=7):
    return AssetStatusUpdate(
        scope=scope,
        owner_id=owner if scope == "user" else None,
        ip=ip,
        port=port,
        transport="tcp",
        status="gone",
        gone_since=at(30),
        gone_execution_id=execution_id,
    )


def test_status_filters_default_to_open_and_survive_merges(store):
    owner, other = next(_owners), next(_owners)
    docs = [
        current_asset("user", "192.0.2.1", 22, owner_id=owner, service="ssh"),
        current_asset("user", "192.0.2.2", 22, owner_id=owner, service="ssh"),
        current_asset("user", "192.0.2.3", 22, owner_id=owner, service="ssh"),
        current_asset("user", "192.0.2.2", 22, owner_id=other, service="ssh"),
        current_asset("global", "192.0.2.2", 22, service="ssh"),
    ]
    assert store.publish_current(docs, max_operations=10, max_bytes=1 << 20).ok
    store.refresh_current()
    assert _search(store, scope="user", owner_id=owner) == [
        ("192.0.2.1", 22, "open"),
        ("192.0.2.2", 22, "open"),
        ("192.0.2.3", 22, "open"),
    ]

    result = store.apply_asset_status(
        [_gone("user", owner, "192.0.2.2", 22), _gone("global", None, "192.0.2.2", 22)]
    )
    assert result.ok and len(result.items) == 2
    store.refresh_current()

    assert _search(store, scope="user", owner_id=owner) == [
        ("192.0.2.1", 22, "open"),
        ("192.0.2.3", 22, "open"),
    ]
    assert _search(store, scope="user", owner_id=owner, status="gone") == [
        ("192.0.2.2", 22, "gone")
    ]
    assert [s for _ip, _p, s in _search(store, scope="user", owner_id=owner, status="all")] == [
        "open",
        "gone",
        "open",
    ]
    # Another owner's copy of the endpoint keeps its own status.
    assert _search(store, scope="user", owner_id=other) == [("192.0.2.2", 22, "open")]
    assert _search(store, scope="global", status="gone") == [("192.0.2.2", 22, "gone")]
    gone = store.search_assets(AssetQuery(scope="user", owner_id=owner, status="gone")).items[0]
    assert (gone.gone_since, gone.gone_execution_id) == (at(30), 7)
    assert gone.public()["status"] == "gone"

    # A newer sighting merged by the projection changes the values, never the status.
    newer = current_asset("user", "192.0.2.2", 22, owner_id=owner, service="ssh2", seen=at(60))
    assert store.publish_current([newer], max_operations=10, max_bytes=1 << 20).ok
    store.refresh_current()
    merged = store.search_assets(AssetQuery(scope="user", owner_id=owner, status="gone")).items
    assert [(d.service, d.status, d.gone_execution_id) for d in merged] == [("ssh2", "gone", 7)]

    # Back to open: the gone fields clear.
    reopened = AssetStatusUpdate(
        scope="user", owner_id=owner, ip="192.0.2.2", port=22, transport="tcp", status="open"
    )
    assert store.apply_asset_status([reopened]).ok
    store.refresh_current()
    assert _search(store, scope="user", owner_id=owner, status="gone") == []
    doc = store.search_assets(AssetQuery(scope="user", owner_id=owner, ip="192.0.2.2")).items[0]
    assert (doc.status, doc.gone_since, doc.gone_execution_id) == ("open", None, None)


def test_status_of_a_missing_asset_is_a_404_item(store):
    owner = next(_owners)
    result = store.apply_asset_status([_gone("user", owner, "198.51.100.1", 80)])
    assert [item.status for item in result.items] == [404]
    assert store.apply_asset_status([]).items == ()


def test_unknown_status_filter_is_rejected(store):
    with pytest.raises(ValidationError):
        store.search_assets(AssetQuery(scope="user", owner_id=1, status="closed"))


def test_elasticsearch_asset_indices_from_before_the_analysis_gain_the_status_fields(
    es_settings,
):
    from elasticsearch import Elasticsearch

    from app.search.elasticsearch_schema import ENDPOINT_MAPPING, IndexNames
    from app.search.elasticsearch_store import ElasticsearchStore

    old_mapping = {
        **ENDPOINT_MAPPING,
        "properties": {
            k: v
            for k, v in ENDPOINT_MAPPING["properties"].items()
            if k not in ("status", "gone_since", "gone_execution_id")
        },
    }
    names = IndexNames(es_settings.index_prefix)
    client = Elasticsearch(es_settings.url)
    try:
        for index in names.assets.values():
            client.indices.create(index=index, mappings=old_mapping)
    finally:
        client.close()
    store = ElasticsearchStore(es_settings)
    try:
        store.ensure_schema()
        owner = next(_owners)
        doc = current_asset("user", "192.0.2.50", 22, owner_id=owner)
        assert store.publish_current([doc], max_operations=10, max_bytes=1 << 20).ok
        assert store.apply_asset_status([_gone("user", owner, "192.0.2.50", 22)]).ok
        store.refresh_current()
        assert _search(store, scope="user", owner_id=owner, status="gone") == [
            ("192.0.2.50", 22, "gone")
        ]
    finally:
        store.close()
