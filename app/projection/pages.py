"""One projection page: execution endpoints after the cursor → current assets, verified (PRJ-4).

A page is up to ``projection_page_size`` endpoints of one execution read by
keyset from the execution projection (ordered by document id; the cursor is
the last id of the previous page). Each endpoint yields two current-asset
updates with deterministic ids: the global asset and the owner's asset. The
store shards them by operation count (``bulk_batch_size``) and real NDJSON
bytes (``projection_bulk_max_bytes``); one operation over the byte limit is
``OperationTooLarge`` before anything is sent. Every item of the answer is
checked against what was sent — same count, same id in the same position,
success status — before the caller may move the cursor; anything else is a
``BulkWriteError``, whose ``retryable`` says whether only 429s failed.

When the store can do the whole page server-side (the optional
``ServerSidePages`` capability of the port; PostgreSQL has it), that path is
used; it returns ``None`` for a page it leaves to the generic path (see
``app.search.postgres_pages``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from app.config import ElasticsearchSettings
from app.search.documents import EndpointDocument
from app.search.ids import current_asset_id
from app.search.port import (
    BulkItemResult,
    BulkResult,
    PagePublishResult,
    SearchStore,
    StoreUnavailable,
    server_side_pages,
)

RESPONSE_MISMATCH = "response_mismatch"


def current_asset_documents(endpoints: Sequence[EndpointDocument]) -> list[EndpointDocument]:
    """The global and per-owner current-asset versions of execution endpoints, in order."""
    documents = []
    for endpoint in endpoints:
        for scope in ("global", "user"):
            owner = endpoint.owner_id if scope == "user" else None
            if scope == "user" and owner is None:
                continue  # no owner, no per-user asset (ingest always sets one)
            documents.append(
                dataclasses.replace(
                    endpoint,
                    id=current_asset_id(
                        scope, owner, endpoint.ip, endpoint.port, endpoint.transport
                    ),
                    scope=scope,
                    owner_id=owner,
                    execution_id=None,
                    task_id=None,
                )
            )
    return documents


def verify_items(sent: Sequence[EndpointDocument], result: BulkResult) -> tuple[int, tuple]:
    """(confirmed, failed items): every answer item must be the one sent at its position."""
    if len(result.items) != len(sent):
        reason = f"{len(result.items)} items answered for {len(sent)} operations"
        return 0, tuple(BulkItemResult(d.id, "?", 500, RESPONSE_MISMATCH, reason) for d in sent)
    confirmed = 0
    failed: list[BulkItemResult] = []
    for document, item in zip(sent, result.items, strict=True):
        if item.id != document.id:
            failed.append(
                BulkItemResult(
                    document.id, item.index, 500, RESPONSE_MISMATCH, f"answer names {item.id}"
                )
            )
        elif item.ok:
            confirmed += 1
        else:
            failed.append(item)
    return confirmed, tuple(failed)


def publish_page(
    store: SearchStore,
    execution_id: int,
    *,
    after_id: str | None,
    settings: ElasticsearchSettings,
    cancel: threading.Event,
) -> PagePublishResult:
    """Publish the page after ``after_id``; the result says what the store confirmed."""
    server = server_side_pages(store)
    if server is not None:
        published = server.publish_execution_page(
            execution_id,
            after_id=after_id,
            limit=settings.projection_page_size,
            max_bytes=settings.projection_bulk_max_bytes,
            cancel=cancel,
        )
        if published is not None:
            return published
    endpoints = store.read_execution_endpoints(
        execution_id, after_id=after_id, limit=settings.projection_page_size
    )
    if not endpoints:
        return PagePublishResult(endpoints=0, last_id=after_id, operations=0, confirmed=0)
    if cancel.is_set():
        raise StoreUnavailable("publish cancelled")
    documents = current_asset_documents(endpoints)
    result = store.publish_current(
        documents,
        max_operations=settings.bulk_batch_size,
        max_bytes=settings.projection_bulk_max_bytes,
        cancel=cancel,
    )
    confirmed, failed = verify_items(documents, result)
    return PagePublishResult(
        endpoints=len(endpoints),
        last_id=endpoints[-1].id,
        operations=len(documents),
        confirmed=confirmed,
        failed=failed,
        requests=result.requests,
        request_bytes=result.request_bytes,
    )
