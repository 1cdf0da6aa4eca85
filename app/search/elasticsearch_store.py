"""The Elasticsearch search store (STO-1), on the official elasticsearch-py client.

Client and cluster majors must match: the client sends
``compatible-with=<its major>`` and a cluster of another major refuses it.
Install ``elasticsearch>=8,<9`` for an 8.x cluster and ``elasticsearch>=9,<10``
for a 9.x cluster; ``ensure_schema`` checks the pair and says which to install.

Layout and scripts are in ``elasticsearch_schema``; bulk building, sharding,
retries, item checks and the ``ElasticsearchBulkCompleted`` event are in
``elasticsearch_bulk``. This module maps the ``SearchStore`` port onto them:

* facts are ``index`` operations into ``<prefix>-facts-YYYY.MM`` (the month
  index is created before the first write, so clusters without auto-create
  work); endpoint documents are scripted upserts through the stored merge
  script, merged in-batch first so each id travels once per call;
* a final's refreshes and counts follow the ING-9 plan (``request_plan``):
  chunks within the request-line budget, the execution-endpoint index refreshed
  once; counts check shard failures, non-negative values and overflow; each
  chunk is timed as a ``refresh_execution_index_chunk`` /
  ``count_execution_observation_chunk`` stage (``ScanWriteStageCompleted``);
* endpoint and IP totals come from a composite aggregation over ``ip``: the
  exact endpoint total from the first page (``track_total_hits``), later pages
  without it, IPs counted bucket by bucket (exact, ING-10); a task's results
  page is one sorted search (ip, port, transport, execution) of at most
  ``limit`` hits, ``search_after`` the cursor (``results_cursor``);
* asset search sorts by one of the orders of ``asset_sort`` (WEB-12; by default
  ip, port, transport) and pages with ``search_after``, in the same order and
  cursor format as the PostgreSQL adapter.

Transport trouble (unreachable cluster, 429/5xx after retries, shard failures
in a refresh or count) raises ``StoreUnavailable``; no call is retried forever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError
from elasticsearch import __versionstr__ as client_version

from app.config import ElasticsearchSettings
from app.cursors import bad_cursor
from app.errors import ValidationError
from app.observability import emit, stage
from app.search.aggregates import (
    UNKNOWN_SERVICE,
    ExecutionAggregates,
    hours,
    top_names,
    top_ports,
)
from app.search.asset_sort import (
    AssetPosition,
    AssetSort,
    asset_sort,
    decode_asset_cursor,
    encode_asset_cursor,
)
from app.search.documents import (
    ENDPOINT_SCOPES,
    EndpointDocument,
    FactDocument,
    merge_all,
)
from app.search.elasticsearch_bulk import BulkOperation, BulkSender, operation, shard_operations
from app.search.elasticsearch_language import query as language_query
from app.search.elasticsearch_purge import ElasticsearchPurge
from app.search.elasticsearch_removals import ElasticsearchRemovals
from app.search.elasticsearch_schema import (
    FACT_ENDPOINT_MAPPING,
    FACTS_MAPPING,
    MERGE_PARAMS,
    MERGE_SCRIPT,
    OBSERVED_MAPPING,
    STATUS_MAPPING,
    IndexNames,
    fact_endpoint,
    index_templates,
)
from app.search.encoding import (
    INVALID_DOCUMENT,
    endpoint_from_source,
    endpoint_problem,
    endpoint_source,
    fact_problem,
    fact_source,
    utc_text,
)
from app.search.endpoint_facts import FACT_INDEX_NAMES, searchable_facts
from app.search.ids import current_asset_id, normalise_ip
from app.search.port import (
    ASSET_STATUS_FILTERS,
    FACET_FIELDS,
    AssetAggregates,
    AssetFacets,
    AssetPage,
    AssetPurgeBatch,
    AssetQuery,
    AssetStatusUpdate,
    BatchKey,
    BulkItemResult,
    BulkResult,
    Capability,
    Endpoint,
    ExecutionCounts,
    FinalRequestPlan,
    ResultsPage,
    SearchTimedOut,
    StorageScope,
    StoreError,
    StoreRefused,
    StoreUnavailable,
)
from app.search.query_values import query_cidr, query_ip
from app.search.request_plan import FinalRequests, plan_final_requests, url_path_prefix
from app.search.results_cursor import (
    ResultsPosition,
    decode_results_cursor,
    encode_results_cursor,
)

# Assets asked for by id in one search (``matching_endpoints``): a bounded request body.
ASSET_MATCH_BATCH = 1000
COMPOSITE_PAGE = 10_000  # buckets per composite request when walking every IP
RETRY_ON_CONFLICT = 3
MAX_COUNT = 2**63 - 1
# A month index that does not exist holds no facts of anyone: refresh and count skip it
# rather than keep a final pending forever (e.g. after retention removed an old month).
MISSING_IS_EMPTY = "ignore_unavailable=true"


class ElasticsearchStore:
    """``SearchStore`` on an Elasticsearch cluster."""

    name = "elasticsearch"
    # Of the optional abilities (app/search/port.py): the task purge, and assets tested
    # against a search by their ids (the alert rules' search filters).
    capabilities: frozenset[Capability] = frozenset(
        {Capability.TASK_PURGE, Capability.ASSET_MATCHES}
    )

    def __init__(self, settings: ElasticsearchSettings, *, client: Elasticsearch | None = None):
        self._settings = settings
        self.names = IndexNames(settings.index_prefix)
        self._client = client or _client(settings)
        # A cluster behind a proxy (https://host/es/): the prefix is part of every request
        # line, so the final's refresh/count plan counts it (ING-9).
        self._path_prefix = url_path_prefix(settings.url)
        self._bulk = BulkSender(
            self._client,
            max_concurrency=settings.bulk_max_concurrency,
            retry_budget=settings.bulk_retry_budget,
            backoff_ms=settings.bulk_retry_backoff_ms,
        )
        self._ready = False  # set once ensure_schema succeeded (a bool store is atomic)
        self._known_fact_indices: set[str] = set()
        self._removals = ElasticsearchRemovals(
            settings, self.names, self._bulk, self._search, self._fact_indices
        )
        self._purge = ElasticsearchPurge(
            settings,
            self.names,
            self._client,
            self._bulk,
            self._call,
            self._search,
            self._refresh_for_purge,
        )

    # -- schema ---------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Check the cluster major; put the script and templates; create the shared indices."""
        client_major = client_version.split(".")[0]
        try:
            info = self._call(lambda: self._client.info())
        except StoreError as exc:
            if "media_type_header_exception" in str(exc):
                # The cluster refused our compatible-with=<client major> headers.
                raise StoreUnavailable(
                    f"the Elasticsearch cluster does not accept the {client_major}.x client "
                    f"({client_version}); install the client of the cluster's major: "
                    "pip install 'netmap[es8]' (elasticsearch>=8.15,<9) for an 8.x cluster, "
                    "'netmap[es9]' for 9.x"
                ) from exc
            raise
        cluster_major = str(info["version"]["number"]).split(".")[0]
        if cluster_major != client_major:
            extra = f"'netmap[es{cluster_major}]' or " if cluster_major in {"8", "9"} else ""
            raise StoreUnavailable(
                f"Elasticsearch {info['version']['number']} needs the {cluster_major}.x client "
                f"(pip install {extra}'elasticsearch>={cluster_major},<{int(cluster_major) + 1}'); "
                f"this process has {client_version}"
            )
        self._call(
            lambda: self._client.put_script(
                id=self.names.merge_script, script={"lang": "painless", "source": MERGE_SCRIPT}
            )
        )
        templates = index_templates(
            self.names, shards=self._settings.index_shards, replicas=self._settings.index_replicas
        )
        for name, body in templates.items():
            self._call(lambda n=name, b=body: self._client.indices.put_index_template(name=n, **b))
        for index in (self.names.execution_endpoints, *self.names.assets.values()):
            self._create_index(index)
        # Asset indices created before the change analysis lack its status fields.
        for index in self.names.assets.values():
            self._call(lambda i=index: self._client.indices.put_mapping(index=i, **STATUS_MAPPING))
        # The execution endpoints index created before probed fields kept their times.
        self._call(
            lambda: self._client.indices.put_mapping(
                index=self.names.execution_endpoints, **OBSERVED_MAPPING
            )
        )
        # Endpoint indices created before the search language lack its ``facts`` fields.
        for index in (self.names.execution_endpoints, *self.names.assets.values()):
            self._call(lambda i=index: self._client.indices.put_mapping(index=i, **FACTS_MAPPING))
        # Fact indices created before facts carried their endpoint lack that field.
        self._call(
            lambda: self._client.indices.put_mapping(
                index=self.names.facts_pattern,
                allow_no_indices=True,
                ignore_unavailable=True,
                **FACT_ENDPOINT_MAPPING,
            )
        )
        self._ready = True

    def _ensure_ready(self) -> None:
        if not self._ready:
            self.ensure_schema()

    def _create_index(self, index: str) -> None:
        try:
            self._client.indices.create(index=index)
        except ApiError as exc:
            if _error_type(exc) != "resource_already_exists_exception":
                raise _store_error(exc, f"creating index {index}") from exc
        except TransportError as exc:
            raise StoreUnavailable(f"Elasticsearch unreachable: {exc}") from exc

    def _ensure_fact_indices(self, months: Sequence[str]) -> None:
        for month in sorted(set(months)):
            index = self.names.facts(month)
            if index not in self._known_fact_indices:
                self._create_index(index)
                # An index made from a template an older process put back lacks the field.
                self._call(
                    lambda i=index: self._client.indices.put_mapping(
                        index=i, **FACT_ENDPOINT_MAPPING
                    )
                )
                self._known_fact_indices.add(index)

    # -- writes ---------------------------------------------------------------------

    def write_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        if not facts:
            return BulkResult()
        self._ensure_ready()
        rejected: dict[int, BulkItemResult] = {}
        operations: list[BulkOperation] = []
        for doc in facts:
            problem = fact_problem(doc)
            index = self.names.facts(doc.month)
            if problem is not None:
                rejected[id(doc)] = BulkItemResult(doc.id, index, 400, INVALID_DOCUMENT, problem)
                continue
            source = fact_source(doc)
            endpoint = _endpoint_of(doc)
            if endpoint is not None:
                source["endpoint"] = endpoint
            operations.append(operation("index", index, doc.id, source))
        self._ensure_fact_indices([doc.month for doc in facts if id(doc) not in rejected])
        shards = shard_operations(
            operations,
            max_operations=self._settings.bulk_batch_size,
            max_bytes=self._settings.bulk_max_bytes,
        )
        sent = self._bulk.send(shards, kind="facts")
        return _in_input_order(facts, rejected, sent)

    def write_execution_endpoints(self, docs: Sequence[EndpointDocument]) -> BulkResult:
        wrong = [d.id for d in docs if d.scope != "execution"]
        if wrong:
            raise ValueError(f"write_execution_endpoints got non-execution documents: {wrong[:3]}")
        return self._merge(
            docs,
            kind="execution_endpoints",
            max_operations=self._settings.bulk_batch_size,
            max_bytes=self._settings.bulk_max_bytes,
            cancel=None,
        )

    def publish_current(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> BulkResult:
        wrong = [d.id for d in docs if d.scope not in ("global", "user")]
        if wrong:
            raise ValueError(f"publish_current got non-current-asset documents: {wrong[:3]}")
        return self._merge(
            docs, kind="current", max_operations=max_operations, max_bytes=max_bytes, cancel=cancel
        )

    def merge_operations(
        self, docs: Sequence[EndpointDocument]
    ) -> tuple[list[BulkOperation], dict[int, BulkItemResult]]:
        """Scripted-upsert operations for ``docs`` (merged per id) and the rejected documents."""
        rejected: dict[int, BulkItemResult] = {}
        valid = []
        for doc in docs:
            problem = endpoint_problem(doc)
            if problem is None:
                valid.append(doc)
            else:
                known = doc.scope in ENDPOINT_SCOPES
                index = self.names.endpoint_index(doc.scope) if known else "?"
                rejected[id(doc)] = BulkItemResult(doc.id, index, 400, INVALID_DOCUMENT, problem)
        operations = []
        for doc in merge_all(valid):
            source = endpoint_source(doc)
            source["doc_id"] = doc.id
            # The certificate and HTTP facts of ``details``, typed for search (the
            # search language's ``cert.*``, ``title`` and ``server``).
            source["facts"] = searchable_facts(doc.details)
            body = {
                "script": {
                    "id": self.names.merge_script,
                    "params": {"doc": source, **MERGE_PARAMS},
                },
                "scripted_upsert": True,
                "upsert": {},
            }
            operations.append(
                operation(
                    "update",
                    self.names.endpoint_index(doc.scope),
                    doc.id,
                    body,
                    meta={"retry_on_conflict": RETRY_ON_CONFLICT},
                )
            )
        return operations, rejected

    def _merge(
        self,
        docs: Sequence[EndpointDocument],
        *,
        kind: str,
        max_operations: int,
        max_bytes: int,
        cancel: threading.Event | None,
    ) -> BulkResult:
        if not docs:
            return BulkResult()
        operations, rejected = self.merge_operations(docs)
        # Sharding raises OperationTooLarge before anything is sent.
        shards = shard_operations(operations, max_operations=max_operations, max_bytes=max_bytes)
        self._ensure_ready()
        sent = self._bulk.send(shards, kind=kind, cancel=cancel)
        return _in_input_order(docs, rejected, sent)

    # -- reads ----------------------------------------------------------------------

    def apply_asset_status(self, updates: Sequence[AssetStatusUpdate]) -> BulkResult:
        """Partial-document updates of the three status fields; a missing asset is a 404 item."""
        if not updates:
            return BulkResult()
        operations = []
        for update in updates:
            document_id = current_asset_id(
                update.scope, update.owner_id, update.ip, update.port, update.transport
            )
            doc = {
                "status": update.status,
                "gone_since": utc_text(update.gone_since) if update.gone_since else None,
                "gone_execution_id": update.gone_execution_id,
            }
            operations.append(
                operation(
                    "update",
                    self.names.assets[update.scope],
                    document_id,
                    {"doc": doc},
                    meta={"retry_on_conflict": RETRY_ON_CONFLICT},
                )
            )
        shards = shard_operations(
            operations,
            max_operations=self._settings.bulk_batch_size,
            max_bytes=self._settings.bulk_max_bytes,
        )
        self._ensure_ready()
        return self._bulk.send(shards, kind="asset_status")

    def read_execution_endpoints(
        self, execution_id: int, *, after_id: str | None, limit: int
    ) -> list[EndpointDocument]:
        body: dict[str, Any] = {
            "size": limit,
            "track_total_hits": False,
            "query": {"bool": {"filter": [{"term": {"execution_id": execution_id}}]}},
            "sort": [{"doc_id": "asc"}],
        }
        if after_id is not None:
            body["search_after"] = [after_id]
        answer = self._search(self.names.execution_endpoints, body)
        return [_document(hit) for hit in answer["hits"]["hits"]]

    def final_request_plan(self, scope: StorageScope) -> FinalRequestPlan:
        return self._final_requests(scope).plan

    def _fact_indices(self, scope: StorageScope) -> list[str]:
        if scope.legacy_full_history:
            return [self.names.facts_pattern]
        return [self.names.facts(month) for month in scope.months]

    def _final_requests(self, scope: StorageScope) -> FinalRequests:
        return plan_final_requests(
            self._fact_indices(scope),
            endpoint_index=self.names.execution_endpoints,
            max_line_bytes=self._settings.request_line_max_bytes,
            refresh_query=MISSING_IS_EMPTY,
            count_query=MISSING_IS_EMPTY,
            count_endpoint="_search",
            path_prefix=self._path_prefix,
        )

    def refresh(self, scope: StorageScope) -> None:
        for request in self._final_requests(scope).refreshes:
            with stage("refresh_execution_index_chunk", indices=len(request.indices)):
                answer = self._call(
                    lambda r=request: self._client.indices.refresh(
                        index=r.indices, ignore_unavailable=True
                    )
                )
                _check_shards(answer, "refresh")

    def _refresh_for_purge(self, indices: list[str]) -> None:
        answer = self._call(
            lambda: self._client.indices.refresh(index=indices, ignore_unavailable=True)
        )
        _check_shards(answer, "refresh before the task purge")

    def refresh_current(self) -> None:
        answer = self._call(
            lambda: self._client.indices.refresh(index=list(self.names.assets.values()))
        )
        _check_shards(answer, "refresh of current assets")

    def count(self, scope: StorageScope, execution_id: int) -> ExecutionCounts:
        if scope.empty:
            return ExecutionCounts(observations=0, endpoints=0, ips=0)
        by_kind = {"observation": 0, "dns_record": 0}
        for request in self._final_requests(scope).counts:
            body = {
                "size": 0,
                "track_total_hits": True,
                "query": {"term": {"execution_id": execution_id}},
                "aggs": {"kinds": {"terms": {"field": "kind", "size": 10}}},
            }
            with stage("count_execution_observation_chunk", indices=len(request.indices)):
                answer = self._search(list(request.indices), body, what="count")
            buckets = answer["aggregations"]["kinds"]["buckets"]
            total = _count_value(answer["hits"]["total"]["value"])
            if sum(_count_value(b["doc_count"]) for b in buckets) != total:
                raise StoreUnavailable("fact count disagrees with its per-kind buckets")
            for bucket in buckets:
                if bucket["key"] in by_kind:
                    by_kind[bucket["key"]] = _add_count(by_kind[bucket["key"]], bucket["doc_count"])
        endpoints, ips = self._walk_ips({"term": {"execution_id": execution_id}})
        return ExecutionCounts(
            observations=by_kind["observation"],
            endpoints=endpoints,
            ips=ips,
            dns_records=by_kind["dns_record"],
        )

    def _ip_buckets(
        self,
        query: dict[str, Any],
        *,
        after: str | None,
        track_total: bool,
        index: str | None = None,
    ) -> dict[str, Any]:
        """One page of the IP composite aggregation (the answer as Elasticsearch gave it)."""
        composite: dict[str, Any] = {
            "size": COMPOSITE_PAGE,
            "sources": [{"ip": {"terms": {"field": "ip"}}}],
        }
        if after is not None:
            composite["after"] = {"ip": after}
        body = {
            "size": 0,
            "track_total_hits": track_total,
            "query": query,
            "aggs": {"ips": {"composite": composite}},
        }
        return self._search(index or self.names.execution_endpoints, body)

    def _walk_ips(self, query: dict[str, Any], index: str | None = None) -> tuple[int, int]:
        """Walk the IP composite aggregation to its end: the exact endpoint total (first
        page, ``track_total_hits``) and the exact number of IPs (of the execution
        endpoints, or of ``index``)."""
        endpoints = 0
        ips = 0
        after: str | None = None
        first = True
        while True:
            answer = self._ip_buckets(query, after=after, track_total=first, index=index)
            if first:
                endpoints = _count_value(answer["hits"]["total"]["value"])
                first = False
            buckets = answer["aggregations"]["ips"]["buckets"]
            ips = _add_count(ips, len(buckets))
            if len(buckets) < COMPOSITE_PAGE:
                return endpoints, ips
            after = answer["aggregations"]["ips"]["after_key"]["ip"]

    # -- report aggregates (``app.search.aggregates``) ------------------------------------

    def execution_aggregates(self, execution_id: int, *, top: int) -> ExecutionAggregates:
        """Exact counts from composite aggregations walked to their end (a ``terms``
        aggregation's top list is approximate across shards); ranked like PostgreSQL."""
        query = {"bool": {"filter": [{"term": {"execution_id": execution_id}}]}}
        return self._aggregates(self.names.execution_endpoints, query, top)

    def asset_aggregates(self, query: AssetQuery, *, top: int) -> AssetAggregates:
        """The same lists over the current assets the search finds, with their exact count
        and distinct addresses (the IP composite walked to its end)."""
        index = self.names.assets.get(query.scope)
        if index is None:
            raise ValidationError(f"unknown asset scope {query.scope!r}", code="invalid_parameter")
        search = asset_search_body(replace(query, cursor=None, sort="ip", order="asc"))["query"]
        endpoints, ips = self._walk_ips(search, index)
        return AssetAggregates(
            endpoints=endpoints, ips=ips, lists=self._aggregates(index, search, top)
        )

    def _aggregates(self, index: str, query: dict[str, Any], top: int) -> ExecutionAggregates:
        services: dict[str, int] = {}
        total = 0
        for key, count, answer in self._composite(
            index, query, [{"service": {"terms": {"field": "service"}}}], track_total=True
        ):
            if answer is not None:
                total = _count_value(answer["hits"]["total"]["value"])
            if key is not None:
                services[key["service"]] = services.get(key["service"], 0) + count
        missing = total - sum(services.values())  # endpoints without a service
        if missing:
            services[UNKNOWN_SERVICE] = services.get(UNKNOWN_SERVICE, 0) + missing
        products = {
            key["product"]: count
            for key, count, _ in self._composite(
                index, query, [{"product": {"terms": {"field": "product"}}}]
            )
            if key is not None
        }
        ports = {
            (int(key["port"]), key["transport"]): count
            for key, count, _ in self._composite(
                index,
                query,
                [
                    {"port": {"terms": {"field": "port"}}},
                    {"transport": {"terms": {"field": "transport"}}},
                ],
            )
            if key is not None
        }
        first_seen = {
            datetime.fromtimestamp(int(key["hour"]) / 1000, UTC): count
            for key, count, _ in self._composite(
                index,
                query,
                [{"hour": {"date_histogram": {"field": "first_seen", "calendar_interval": "1h"}}}],
            )
            if key is not None
        }
        return ExecutionAggregates(
            services=top_names(services, top),
            products=top_names(products, top),
            ports=top_ports(ports, top),
            first_seen_hours=hours(first_seen),
        )

    def _composite(
        self,
        index: str,
        query: dict[str, Any],
        sources: list[dict[str, Any]],
        *,
        track_total: bool = False,
    ) -> Iterator[tuple[dict[str, Any] | None, int, dict[str, Any] | None]]:
        """Every bucket of a composite aggregation over ``index``, page by
        page: (key, doc_count, the first answer or None). An empty result still yields
        the first answer once, with key None, so its total is seen."""
        after: dict[str, Any] | None = None
        first = True
        while True:
            composite: dict[str, Any] = {"size": COMPOSITE_PAGE, "sources": sources}
            if after is not None:
                composite["after"] = after
            body = {
                "size": 0,
                "track_total_hits": track_total and first,
                "query": query,
                "aggs": {"buckets": {"composite": composite}},
            }
            answer = self._search(index, body, what="aggregates")
            result = answer.get("aggregations", {}).get("buckets", {"buckets": []})
            buckets = result["buckets"]
            if first and (track_total or not buckets):
                yield None, 0, answer
            for bucket in buckets:
                yield bucket["key"], int(bucket["doc_count"]), None
            first = False
            if len(buckets) < COMPOSITE_PAGE:
                return
            after = result["after_key"]

    # -- removals (facts of batches never confirmed; ``elasticsearch_removals``) ------

    def batch_facts(
        self, scope: StorageScope, execution_id: int, batches: Sequence[BatchKey]
    ) -> list[FactDocument]:
        self._ensure_ready()
        return self._removals.batch_facts(scope, execution_id, batches)

    def endpoint_facts(
        self, scope: StorageScope, execution_id: int, endpoints: Collection[tuple[str, int, str]]
    ) -> list[FactDocument]:
        self._ensure_ready()
        return self._removals.endpoint_facts(scope, execution_id, endpoints)

    def delete_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        self._ensure_ready()
        return self._removals.delete_facts(facts)

    def delete_execution_endpoints(self, execution_id: int, ids: Sequence[str]) -> BulkResult:
        self._ensure_ready()
        return self._removals.delete_execution_endpoints(execution_id, ids)

    # -- a deleted task's documents (``TaskPurge``; ``elasticsearch_purge``) -------------

    def purge_task_assets(
        self,
        task_ids: Sequence[int],
        *,
        excluded_task_ids: Sequence[int],
        after_key: int | None,
        limit: int,
    ) -> AssetPurgeBatch:
        self._ensure_ready()
        return self._purge.purge_task_assets(
            task_ids, excluded_task_ids=excluded_task_ids, after_key=after_key, limit=limit
        )

    def purge_execution_data(self, execution_ids: Sequence[int], *, limit: int) -> dict[str, int]:
        self._ensure_ready()
        return self._purge.purge_execution_data(execution_ids, limit=limit)

    def execution_results(
        self,
        task_id: int,
        *,
        cursor: str | None,
        limit: int,
        execution_ids: Sequence[int] | None = None,
    ) -> ResultsPage:
        """At most ``limit`` endpoints of a task sorted by (ip, port, transport, execution),
        ``search_after`` the cursor's position; the first page also walks the IP
        composite aggregation once for the exact totals (ING-10)."""
        position = decode_results_cursor(cursor)
        filters: list[dict[str, Any]] = [{"term": {"task_id": task_id}}]
        if execution_ids is not None:
            filters.append({"terms": {"execution_id": list(execution_ids)}})
        query = {"bool": {"filter": filters}}
        total: int | None = None
        if position is None:
            total, total_ips = self._walk_ips(query)
        else:
            total_ips = position.total_ips
        body: dict[str, Any] = {
            "size": limit + 1,
            "track_total_hits": False,
            "query": query,
            "sort": [
                {"ip": "asc"},
                {"port": "asc"},
                {"transport": "asc"},
                {"execution_id": "asc"},
            ],
        }
        if position is not None:
            body["search_after"] = [
                position.ip,
                position.port,
                position.transport,
                position.execution_id,
            ]
        hits = self._search(self.names.execution_endpoints, body)["hits"]["hits"]
        next_cursor = None
        if len(hits) > limit:
            # One hit more than the page holds, only to learn that another page exists.
            hits = hits[:limit]
            ip, port, transport, execution_id = hits[-1]["sort"]
            next_cursor = encode_results_cursor(
                ResultsPosition(
                    ip=normalise_ip(str(ip)),
                    port=int(port),
                    transport=str(transport),
                    execution_id=int(execution_id),
                    total_ips=total_ips,
                )
            )
        return ResultsPage(
            items=[_document(hit) for hit in hits],
            next_cursor=next_cursor,
            total_endpoints=total,
            total_ips=total_ips,
        )

    def search_assets(self, query: AssetQuery) -> AssetPage:
        index = self.names.assets.get(query.scope)
        if index is None:
            raise ValidationError(f"unknown asset scope {query.scope!r}", code="invalid_parameter")
        body = asset_search_body(query)
        answer = self._search(index, body, time_limit_ms=query.time_limit_ms)
        hits = answer["hits"]["hits"]
        next_cursor = None
        if len(hits) > query.limit:
            hits = hits[: query.limit]
            order = asset_sort(query.sort, query.order)
            next_cursor = encode_asset_cursor(order, _position(order.sort, hits[-1]["sort"]))
        return AssetPage(items=[_document(hit) for hit in hits], next_cursor=next_cursor)

    def matching_endpoints(
        self,
        owner_id: int,
        node: object | None,
        *,
        status: str,
        endpoints: Sequence[Endpoint],
    ) -> set[Endpoint]:
        """The owner's current assets among ``endpoints`` that the search finds, asked by
        document id in batches of ``ASSET_MATCH_BATCH``, ``status`` standing for each
        asset's status (the caller's, not the stored field: an analysis may not have
        published it yet)."""
        if status not in ("open", "gone"):
            raise ValueError(f"status must be open or gone, not {status!r}")
        filters: list[dict[str, Any]] = [{"term": {"owner_id": owner_id}}]
        if node is not None:
            filters.append(language_query(node, status=status))  # type: ignore[arg-type]
        found: set[Endpoint] = set()
        wanted = list(dict.fromkeys(endpoints))
        for start in range(0, len(wanted), ASSET_MATCH_BATCH):
            by_id = {
                current_asset_id("user", owner_id, ip, port, transport): (ip, port, transport)
                for ip, port, transport in wanted[start : start + ASSET_MATCH_BATCH]
            }
            body = {
                "size": len(by_id),
                "_source": False,
                "track_total_hits": False,
                "query": {"bool": {"filter": [{"ids": {"values": list(by_id)}}, *filters]}},
            }
            answer = self._search(self.names.assets["user"], body, what="asset_matches")
            found.update(by_id[hit["_id"]] for hit in answer["hits"]["hits"])
        return found

    def asset_facets(self, query: AssetQuery, *, size: int, sample: int) -> AssetFacets:
        """Facets over at most ``sample`` matching assets: ``terminate_after`` stops each
        shard's collection there, so the cost does not grow with the index."""
        index = self.names.assets.get(query.scope)
        if index is None:
            raise ValidationError(f"unknown asset scope {query.scope!r}", code="invalid_parameter")
        search = asset_search_body(replace(query, cursor=None, sort="ip", order="asc"))
        body: dict[str, Any] = {
            "size": 0,
            "query": search["query"],
            "terminate_after": sample,
            "track_total_hits": True,
            "aggs": {
                name: {"terms": {"field": _FACET_INDEX_FIELDS[name], "size": size}}
                for name in FACET_FIELDS
            },
        }
        answer = self._search(index, body, what="asset_facets", time_limit_ms=query.time_limit_ms)
        total = int(answer["hits"]["total"]["value"])
        aggregations = answer.get("aggregations") or {}
        facets = {
            name: [
                (bucket["key"], int(bucket["doc_count"]))
                for bucket in (aggregations.get(name) or {}).get("buckets", [])
            ]
            for name in FACET_FIELDS
        }
        capped = bool(answer.get("terminated_early")) or total > sample
        return AssetFacets(sampled=min(total, sample), capped=capped, facets=facets)

    def close(self) -> None:
        self._bulk.close()
        self._client.close()

    # -- plumbing -------------------------------------------------------------------

    def _call(self, request: Any) -> Any:
        try:
            response = request()
        except ApiError as exc:
            raise _store_error(exc, "request") from exc
        except TransportError as exc:
            raise StoreUnavailable(f"Elasticsearch unreachable: {exc}") from exc
        return response.body if hasattr(response, "body") else response

    def _search(
        self,
        index: str | list[str],
        body: dict[str, Any],
        *,
        what: str = "search",
        time_limit_ms: int | None = None,
    ) -> dict[str, Any]:
        """One search. ``time_limit_ms`` (a search a person waits for) is the search's own
        ``timeout``: each shard stops collecting there and the answer says ``timed_out``,
        which is a ``SearchTimedOut`` rather than a page of whatever was found by then."""
        if time_limit_ms is not None:
            body = {**body, "timeout": f"{max(1, int(time_limit_ms))}ms"}
        # A missing index holds nothing: an empty answer (a fresh cluster before the first
        # write, a month removed by retention), not an outage.
        answer = self._call(
            lambda: self._client.search(index=index, body=body, ignore_unavailable=True)
        )
        if time_limit_ms is not None and answer.get("timed_out"):
            emit("SearchTimedOut", level=logging.WARNING, statement=what, limit_ms=time_limit_ms)
            raise SearchTimedOut(time_limit_ms)
        _check_shards(answer, what)
        return answer


# -- module helpers -------------------------------------------------------------------


def _client(settings: ElasticsearchSettings) -> Elasticsearch:
    options: dict[str, Any] = {
        "request_timeout": settings.request_timeout_seconds,
        # Retries are ours (bounded, logged); the client must not add its own.
        "max_retries": 0,
        "retry_on_timeout": False,
        "connections_per_node": settings.bulk_max_concurrency + 4,
    }
    if settings.api_key:
        options["api_key"] = settings.api_key
    elif settings.username:
        options["basic_auth"] = (settings.username, settings.password)
    if settings.url.startswith("https"):
        options["verify_certs"] = settings.verify_certs
        if settings.ca_certs:
            options["ca_certs"] = settings.ca_certs
    return Elasticsearch(settings.url, **options)


def _error_type(exc: ApiError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    return str(error.get("type")) if isinstance(error, dict) else str(exc.message)


def _store_error(exc: ApiError, what: str) -> StoreError:
    status = exc.meta.status
    message = f"Elasticsearch {what} failed with {status} {_error_type(exc)}"
    if status in (401, 403, 404, 408, 429) or status >= 500:
        # Retry later (or fix credentials / run ensure_schema): not the caller's bug.
        return StoreUnavailable(message)
    return StoreRefused(message)


def _check_shards(answer: dict[str, Any], what: str) -> None:
    shards = answer.get("_shards") or {}
    failed = int(shards.get("failed") or 0)
    if failed:
        emit("ElasticsearchShardFailures", level=logging.WARNING, operation=what, failed=failed)
        raise StoreUnavailable(f"{what} failed on {failed} shard(s)")


def _count_value(value: Any) -> int:
    number = int(value)
    if number < 0 or number > MAX_COUNT:
        raise StoreUnavailable(f"count {value!r} is out of range")
    return number


def _add_count(total: int, value: Any) -> int:
    return _count_value(total + _count_value(value))


def _in_input_order(
    docs: Sequence[Any], rejected: dict[int, BulkItemResult], sent: BulkResult
) -> BulkResult:
    """One item per input document: rejected ones, else the result of its id's operation."""
    by_id = {item.id: item for item in sent.items}
    items = tuple(rejected.get(id(doc)) or by_id[doc.id] for doc in docs)
    return BulkResult(
        items=items,
        requests=sent.requests,
        request_bytes=sent.request_bytes,
        attempts=sent.attempts,
    )


def _endpoint_of(fact: FactDocument) -> str | None:
    """The indexed endpoint of an observation fact (None for a DNS record)."""
    body = fact.body
    if fact.kind != "observation" or not all(k in body for k in ("ip", "port", "transport")):
        return None
    return fact_endpoint(body["ip"], body["port"], body["transport"])


def _document(hit: dict[str, Any]) -> EndpointDocument:
    return endpoint_from_source(hit["_id"], hit["_source"])


def _cursor_ip(value: str) -> str:
    """A cursor's address in canonical form; anything else is ``bad_cursor``."""
    try:
        return normalise_ip(str(value))
    except ValueError:
        raise bad_cursor() from None


def _wildcard_text(text: str) -> str:
    cleaned = "".join(ch for ch in text if ch >= " ")
    escaped = cleaned.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?")
    return f"*{escaped}*"


def asset_search_body(query: AssetQuery) -> dict[str, Any]:
    """The ``_search`` body of one asset-search page (one hit more than the page)."""
    filters: list[dict[str, Any]] = []
    if query.scope == "user":
        if query.owner_id is None:
            raise ValueError("a user-scope asset search needs owner_id")
        filters.append({"term": {"owner_id": query.owner_id}})
    if query.ip:
        filters.append({"term": {"ip": query_ip(query.ip)}})
    if query.cidr:
        filters.append({"term": {"ip": query_cidr(query.cidr)}})
    if query.port is not None:
        filters.append({"term": {"port": query.port}})
    if query.transport:
        filters.append({"term": {"transport": query.transport.lower()}})
    if query.service:
        filters.append({"term": {"service": {"value": query.service, "case_insensitive": True}}})
    if query.product:
        filters.append({"term": {"product": {"value": query.product, "case_insensitive": True}}})
    if query.text:
        pattern = _wildcard_text(query.text)
        filters.append(
            {
                "bool": {
                    "should": [
                        {"wildcard": {name: {"value": pattern, "case_insensitive": True}}}
                        for name in ("banner", "product", "hostname")
                    ],
                    "minimum_should_match": 1,
                }
            }
        )
    if query.where is not None:
        filters.append(language_query(query.where))
    if query.status not in ASSET_STATUS_FILTERS:
        raise ValidationError(
            "status must be one of " + ", ".join(ASSET_STATUS_FILTERS),
            code="invalid_parameter",
            details={"parameter": "status"},
        )
    # A document the analysis never touched has no status field: it is open.
    must_not: list[dict[str, Any]] = []
    if query.status == "open":
        must_not.append({"term": {"status": "gone"}})
    elif query.status == "gone":
        filters.append({"term": {"status": "gone"}})
    for field_name, lower, upper in (
        ("first_seen", query.first_seen_from, query.first_seen_to),
        ("last_seen", query.last_seen_from, query.last_seen_to),
    ):
        bounds = {}
        if lower is not None:
            bounds["gte"] = utc_text(lower)
        if upper is not None:
            bounds["lt"] = utc_text(upper)
        if bounds:
            filters.append({"range": {field_name: bounds}})
    order = asset_sort(query.sort, query.order)
    body: dict[str, Any] = {
        "size": query.limit + 1,
        "track_total_hits": False,
        "query": {"bool": {"filter": filters, **({"must_not": must_not} if must_not else {})}},
        "sort": [{name: spec} for name, spec in _sort_fields(order)],
    }
    position = decode_asset_cursor(order, query.cursor)
    if position is not None:
        body["search_after"] = _search_after(order.sort, position)
    return body


_FACET_INDEX_FIELDS = {
    "service": "service",
    "product": "product",
    "port": "port",
    "cert.issuer": "facts." + FACT_INDEX_NAMES["cert.issuer"],
}


def _sort_fields(order: AssetSort) -> list[tuple[str, dict[str, Any]]]:
    """The ``sort`` of an asset search (WEB-12): the sort key, then the asset's address,
    port and transport, all in one direction, as the PostgreSQL adapter orders them."""
    direction = {"order": order.order}
    tiebreak = {
        "ip": ["ip", "port", "transport"],
        "port": ["port", "ip", "transport"],
        "last_seen": ["last_seen", "ip", "port", "transport"],
        "service": ["service", "ip", "port", "transport"],
    }[order.sort]
    # A missing service sorts as "" (a custom ``missing`` value comes back as the sort
    # value, so ``search_after`` never has to carry a null), like coalesce() in SQL.
    return [
        (name, {**direction, "missing": ""} if name == "service" else dict(direction))
        for name in tiebreak
    ]


def _search_after(sort: str, position: AssetPosition) -> list[Any]:
    ip = _cursor_ip(position.ip)
    if sort == "ip":
        return [ip, position.port, position.transport]
    if sort == "port":
        return [position.port, ip, position.transport]
    key = position.key
    if sort == "last_seen":
        # last_seen is date_nanos: its sort values are epoch nanoseconds.
        key = int(key or 0) * 1000
    return [key, ip, position.port, position.transport]


def _position(sort: str, values: list[Any]) -> AssetPosition:
    """The cursor position of a hit's ``sort`` values."""
    if sort == "ip":
        ip, port, transport = values
        return AssetPosition(key=None, ip=ip, port=port, transport=transport)
    if sort == "port":
        port, ip, transport = values
        return AssetPosition(key=None, ip=ip, port=port, transport=transport)
    key, ip, port, transport = values
    if sort == "last_seen":
        key = int(key) // 1000
    return AssetPosition(key=key, ip=ip, port=port, transport=transport)
