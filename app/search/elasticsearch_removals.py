"""Reading and deleting the facts of batches that were never confirmed (Elasticsearch store).

``app.result_ingest.abandoned`` removes what a dead attempt wrote (ING-18). Facts
are found by their batch fields (``upload_id``, ``stream``, ``batch_index``: indexed
keywords) in the scope's monthly indices, paged with ``search_after`` over the
batch identity and position (unique within an execution). The facts of given endpoints
are found by the ``endpoint`` keyword observation facts carry (their ``body`` is
not indexed); facts written before that field existed lack it and are read too,
then matched by their body. Deletes are bulk
``delete`` operations; a document already gone (404) counts as deleted, so a
removal that is repeated after a failure converges.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from app.config import ElasticsearchSettings
from app.search.documents import FactDocument
from app.search.elasticsearch_bulk import BulkSender, operation, shard_operations
from app.search.elasticsearch_schema import IndexNames, fact_endpoint
from app.search.encoding import fact_from_source
from app.search.port import BatchKey, BulkItemResult, BulkResult, StorageScope

# ``ElasticsearchStore._search``: search(indices, body, what=...) → the answer.
Search = Callable[..., dict[str, Any]]

PAGE = 1_000
_ORDER = [{"upload_id": "asc"}, {"stream": "asc"}, {"batch_index": "asc"}, {"position": "asc"}]


def _as_deleted(result: BulkResult) -> BulkResult:
    """A 404 of a delete means the document is gone already: the goal, not a failure."""
    items = tuple(
        BulkItemResult(item.id, item.index, 200) if item.status == 404 else item
        for item in result.items
    )
    return BulkResult(
        items=items,
        requests=result.requests,
        request_bytes=result.request_bytes,
        attempts=result.attempts,
    )


class ElasticsearchRemovals:
    """The removal half of ``ElasticsearchStore``: its settings, index names, bulk
    sender, search (``search``) and the fact indices of a scope (``fact_indices``)."""

    def __init__(
        self,
        settings: ElasticsearchSettings,
        names: IndexNames,
        bulk: BulkSender,
        search: Search,
        fact_indices: Callable[[StorageScope], list[str]],
    ):
        self._settings = settings
        self._names = names
        self._bulk = bulk
        self._search = search
        self._fact_indices = fact_indices

    def _walk(
        self, scope: StorageScope, execution_id: int, filters: list[dict[str, Any]]
    ) -> Iterator[FactDocument]:
        if scope.empty:
            return
        indices = self._fact_indices(scope)
        query = {"bool": {"filter": [{"term": {"execution_id": execution_id}}, *filters]}}
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": PAGE,
                "track_total_hits": False,
                "query": query,
                "sort": _ORDER,
            }
            if after is not None:
                body["search_after"] = after
            hits = self._search(indices, body, what="fact removal")["hits"]["hits"]
            for hit in hits:
                yield fact_from_source(hit["_id"], hit["_source"])
            if len(hits) < PAGE:
                return
            after = hits[-1]["sort"]

    def batch_facts(
        self, scope: StorageScope, execution_id: int, batches: Sequence[BatchKey]
    ) -> list[FactDocument]:
        if not batches:
            return []
        one_of = {
            "bool": {
                "should": [
                    {
                        "bool": {
                            "filter": [
                                {"term": {"upload_id": b.upload_id}},
                                {"term": {"stream": b.stream}},
                                {"term": {"batch_index": b.batch_index}},
                            ]
                        }
                    }
                    for b in batches
                ],
                "minimum_should_match": 1,
            }
        }
        return list(self._walk(scope, execution_id, [one_of]))

    def endpoint_facts(
        self, scope: StorageScope, execution_id: int, endpoints: Collection[tuple[str, int, str]]
    ) -> list[FactDocument]:
        wanted = set(endpoints)
        if not wanted:
            return []
        # Facts carry their endpoint as an indexed keyword; those written before it existed
        # do not, and are read and matched by their body.
        of_endpoint = {
            "bool": {
                "should": [
                    {"terms": {"endpoint": sorted(fact_endpoint(*e) for e in wanted)}},
                    {"bool": {"must_not": [{"exists": {"field": "endpoint"}}]}},
                ],
                "minimum_should_match": 1,
            }
        }
        return [
            fact
            for fact in self._walk(
                scope, execution_id, [{"term": {"kind": "observation"}}, of_endpoint]
            )
            if (fact.body.get("ip"), fact.body.get("port"), fact.body.get("transport")) in wanted
        ]

    def _delete(self, operations: list[Any], kind: str) -> BulkResult:
        if not operations:
            return BulkResult()
        settings = self._settings
        shards = shard_operations(
            operations, max_operations=settings.bulk_batch_size, max_bytes=settings.bulk_max_bytes
        )
        return _as_deleted(self._bulk.send(shards, kind=kind))

    def delete_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        names = self._names
        return self._delete(
            [operation("delete", names.facts(f.month), f.id, None) for f in facts], "facts"
        )

    def delete_execution_endpoints(self, execution_id: int, ids: Sequence[str]) -> BulkResult:
        # Document ids are unique across executions: the execution only narrows a lookup
        # in the PostgreSQL store, whose key leads with it.
        index = self._names.execution_endpoints
        return self._delete(
            [operation("delete", index, i, None) for i in dict.fromkeys(ids)],
            "execution_endpoints",
        )
