"""Removing a deleted task's documents from the Elasticsearch store, in bounded batches (issue 33).

The Elasticsearch half of the ``TaskPurge`` capability (``app.search.port``); the
PostgreSQL half is ``postgres_purge``. Both leave the same end state, and both may be
repeated after a crash: what is gone stays gone and is not counted again.

``purge_task_assets`` reads the tasks' execution-endpoint documents in ``doc_id`` order,
at most ``limit`` after the cursor, and deletes (bulk ``delete`` by the deterministic id)
the current assets of those endpoints that no task outside ``excluded`` has evidence
for: the global view's when no such task has an execution endpoint for the endpoint,
the owner's when no such task of the same owner has. The other tasks' evidence comes
from a search over the batch's addresses and ports (a superset, matched exactly here),
paged with ``search_after``. The cursor the purge row keeps is a bigint: the first 64
bits of the last ``doc_id`` (hex, so their order is the keyword order), shifted into the
signed range. Ids are unique in their first 64 bits, as the PostgreSQL store's keys
(``ids.pg_key``) already assume.

``purge_execution_data`` runs ``_delete_by_query`` on the execution-endpoint index and on
the fact indices for the executions' ids, with ``max_docs`` (the bound of one batch),
``conflicts=proceed`` and ``refresh``, and reports the cluster's own ``deleted`` counts;
an empty answer means nothing is left. Delete by query sees only searchable documents,
so the indices are refreshed first: a document an upload wrote just before the task was
deleted is not missed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from elasticsearch import Elasticsearch

from app.config import ElasticsearchSettings
from app.search.elasticsearch_bulk import BulkSender, operation, shard_operations
from app.search.elasticsearch_schema import IndexNames
from app.search.ids import current_asset_id, cursor_after_id, cursor_key, normalise_ip
from app.search.port import (
    AssetPurgeBatch,
    BulkResult,
    BulkWriteError,
    StoreUnavailable,
)

# ``ElasticsearchStore._search``: search(indices, body, what=...) → the answer.
Search = Callable[..., dict[str, Any]]
# ``ElasticsearchStore._call``: runs one client request, mapping its errors.
Call = Callable[[Callable[[], Any]], Any]
# ``ElasticsearchStore._refresh_for_purge``: refreshes indices (missing ones skipped),
# a shard failure raising ``StoreUnavailable``.
Refresh = Callable[[list[str]], None]

EVIDENCE_PAGE = 5_000  # other tasks' execution endpoints read per search
CONFLICT_ATTEMPTS = 3  # delete-by-query rounds that met only documents changing meanwhile
_ENDPOINT_FIELDS = ["doc_id", "ip", "port", "transport", "owner_id"]

Endpoint = tuple[str, int, str]


def _endpoint(source: dict[str, Any]) -> Endpoint:
    return normalise_ip(str(source["ip"])), int(source["port"]), str(source["transport"])


class ElasticsearchPurge:
    """The purge half of ``ElasticsearchStore``: its client, index names, bulk sender,
    request wrapper (``call``) and search (``search``)."""

    def __init__(
        self,
        settings: ElasticsearchSettings,
        names: IndexNames,
        client: Elasticsearch,
        bulk: BulkSender,
        call: Call,
        search: Search,
        refresh: Refresh,
    ):
        self._settings = settings
        self._names = names
        self._client = client
        self._bulk = bulk
        self._call = call
        self._search = search
        self._refresh = refresh

    # -- assets -------------------------------------------------------------------------

    def purge_task_assets(
        self,
        task_ids: Sequence[int],
        *,
        excluded_task_ids: Sequence[int],
        after_key: int | None,
        limit: int,
    ) -> AssetPurgeBatch:
        # Evidence written since the last refresh must count: make it searchable first.
        self._refresh([self._names.execution_endpoints])
        query = {"bool": {"filter": [{"terms": {"task_id": list(task_ids)}}]}}
        after = None if after_key is None else [cursor_after_id(after_key)]
        hits = self._endpoint_page(query, size=limit, after=after)
        if not hits:
            return AssetPurgeBatch(last_key=None, endpoints=0, user_assets=0, global_assets=0)
        endpoints = {_endpoint(hit["_source"]) for hit in hits}
        owned = {
            (int(hit["_source"]["owner_id"]), *_endpoint(hit["_source"]))
            for hit in hits
            if hit["_source"].get("owner_id") is not None
        }
        excluded = sorted({*excluded_task_ids, *task_ids})
        seen, seen_by_owner = self._other_evidence(endpoints, excluded)
        global_ids = [
            current_asset_id("global", None, *endpoint) for endpoint in sorted(endpoints - seen)
        ]
        user_ids = [
            current_asset_id("user", owner, ip, port, transport)
            for owner, ip, port, transport in sorted(owned - seen_by_owner)
        ]
        removed_global = self._delete_assets("global", global_ids)
        removed_user = self._delete_assets("user", user_ids)
        if global_ids or user_ids:
            self._refresh(list(self._names.assets.values()))
        return AssetPurgeBatch(
            last_key=cursor_key(str(hits[-1]["_source"]["doc_id"])),
            endpoints=len(hits),
            user_assets=removed_user,
            global_assets=removed_global,
            unseen=tuple(sorted(owned - seen_by_owner)),
        )

    def _other_evidence(
        self, endpoints: set[Endpoint], excluded: list[int]
    ) -> tuple[set[Endpoint], set[tuple[int, str, int, str]]]:
        """Which of ``endpoints`` a task outside ``excluded`` saw: (any owner's, per owner)."""
        query = {
            "bool": {
                "filter": [
                    {"terms": {"ip": sorted({ip for ip, _, _ in endpoints})}},
                    {"terms": {"port": sorted({port for _, port, _ in endpoints})}},
                ],
                "must_not": [{"terms": {"task_id": excluded}}],
            }
        }
        seen: set[Endpoint] = set()
        seen_by_owner: set[tuple[int, str, int, str]] = set()
        after: list[Any] | None = None
        while True:
            hits = self._endpoint_page(query, size=EVIDENCE_PAGE, after=after)
            for hit in hits:
                endpoint = _endpoint(hit["_source"])
                if endpoint not in endpoints:
                    continue  # another port of a batch address, or the reverse
                seen.add(endpoint)
                owner = hit["_source"].get("owner_id")
                if owner is not None:
                    seen_by_owner.add((int(owner), *endpoint))
            if len(hits) < EVIDENCE_PAGE:
                return seen, seen_by_owner
            after = hits[-1]["sort"]

    def _endpoint_page(
        self, query: dict[str, Any], *, size: int, after: list[Any] | None
    ) -> list[dict[str, Any]]:
        """Up to ``size`` execution-endpoint hits in ``doc_id`` order after ``after``."""
        body: dict[str, Any] = {
            "size": size,
            "track_total_hits": False,
            "_source": _ENDPOINT_FIELDS,
            "query": query,
            "sort": [{"doc_id": "asc"}],
        }
        if after is not None:
            body["search_after"] = after
        answer = self._search(self._names.execution_endpoints, body, what="task purge")
        return answer["hits"]["hits"]

    def _delete_assets(self, scope: str, ids: list[str]) -> int:
        """Delete current assets by id; the count of those that were there (a 404 is one
        a previous attempt removed already: done, not counted again)."""
        if not ids:
            return 0
        index = self._names.assets[scope]
        shards = shard_operations(
            [operation("delete", index, i, None) for i in ids],
            max_operations=self._settings.bulk_batch_size,
            max_bytes=self._settings.bulk_max_bytes,
        )
        result = self._bulk.send(shards, kind="task_purge_assets")
        failed = tuple(item for item in result.items if item.status not in (200, 404))
        if failed:
            raise BulkWriteError(BulkResult(items=failed), total=len(ids))
        return sum(1 for item in result.items if item.status == 200)

    # -- execution data --------------------------------------------------------------------

    def purge_execution_data(self, execution_ids: Sequence[int], *, limit: int) -> dict[str, int]:
        ids = list(execution_ids)
        if not ids:
            return {}
        targets = (
            ("execution_endpoints", self._names.execution_endpoints),
            ("facts", self._names.facts_pattern),
        )
        self._refresh([index for _, index in targets])
        removed: dict[str, int] = {}
        for kind, index in targets:
            deleted = self._delete_by_query(index, {"terms": {"execution_id": ids}}, limit)
            if deleted:
                removed[kind] = deleted
        return removed

    def _delete_by_query(self, index: str, query: dict[str, Any], limit: int) -> int:
        """At most ``limit`` matching documents deleted; the cluster's count of them."""
        for _ in range(CONFLICT_ATTEMPTS):
            answer = self._call(
                lambda: self._client.delete_by_query(
                    index=index,
                    query=query,
                    max_docs=limit,
                    conflicts="proceed",
                    refresh=True,
                    ignore_unavailable=True,
                )
            )
            if answer.get("failures") or answer.get("timed_out"):
                raise StoreUnavailable(
                    f"delete by query on {index} failed: "
                    f"{(answer.get('failures') or ['timed out'])[0]}"
                )
            deleted = int(answer["deleted"])
            # A version conflict is a document changed since the searchable view was made
            # (``refresh`` made the change searchable): the next round finds it again.
            if deleted or not int(answer.get("version_conflicts") or 0):
                return deleted
        raise StoreUnavailable(f"delete by query on {index} kept meeting version conflicts")
