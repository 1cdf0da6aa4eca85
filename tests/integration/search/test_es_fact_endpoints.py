"""Facts carry their endpoint as an indexed keyword on Elasticsearch (ING-18 removals).

A fact index created before the field existed gets it from ``ensure_schema``
(its strict mapping would otherwise refuse new facts), and the facts written
before it — without the field — are still found by their endpoint.
"""

from __future__ import annotations

import copy

from elasticsearch import Elasticsearch

from app.search.elasticsearch_schema import FACT_MAPPING
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.encoding import fact_source
from app.search.port import StorageScope
from tests.support.search_documents import fact

NOVEMBER = StorageScope(months=("2026.11",))


def _body(ip: str, port: int) -> dict:
    return {"ip": ip, "port": port, "transport": "tcp", "state": "open"}


def test_facts_from_before_the_endpoint_field_are_still_found(es_target, es_settings):
    store = ElasticsearchStore(es_settings)
    index = store.names.facts("2026.11")
    legacy_mapping = copy.deepcopy(FACT_MAPPING)
    del legacy_mapping["properties"]["endpoint"]
    client = Elasticsearch(es_target.url, request_timeout=5, max_retries=0)
    try:
        client.indices.create(index=index, mappings=legacy_mapping)
        old = fact(51, 0, body=_body("192.0.2.1", 80))
        written = client.bulk(
            operations=[{"index": {"_index": index, "_id": old.id}}, fact_source(old)]
        )
        assert not written["errors"]
        store.ensure_schema()  # adds the field to the existing index

        new = [fact(51, 1, body=_body("192.0.2.1", 80)), fact(51, 2, body=_body("192.0.2.2", 80))]
        assert store.write_facts(new).ok
        store.refresh(NOVEMBER)
        hits = client.search(index=index, query={"term": {"endpoint": "192.0.2.1 80 tcp"}})
        assert [h["_id"] for h in hits["hits"]["hits"]] == [new[0].id]

        found = store.endpoint_facts(NOVEMBER, 51, {("192.0.2.1", 80, "tcp")})
        assert sorted(f.id for f in found) == sorted([old.id, new[0].id])
    finally:
        client.close()
        store.close()
