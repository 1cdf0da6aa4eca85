"""Building one claimed export into the object store (EXP-7, EXP-8).

``build_export`` streams the export's executions' endpoints from the search
store in keyset pages (by id) through the format's chunk generator straight
into ``ObjectStore.put``. On the PostgreSQL store the database writes the CSV
and JSON text of each chunk itself (``read_execution_export_text``, one short
transaction per chunk, two chunks at a time on two connections, nothing held
while the chunk goes to the object store);
other stores' pages (``read_execution_endpoints``) are encoded here. Both give
the same bytes (tests/integration/exports/test_export_text.py). The lease kit's
heartbeat (``app.leases``) renews the lease every ``[exports] heartbeat_seconds``;
its guard (a lost renewal, the local lease deadline or the runner's shutdown) is
checked before every page, so a builder that lost its claim stops reading and its
upload is abandoned (a filesystem temporary file is removed, an S3 multipart upload
aborted).

Outcomes: ``ready`` (written with the claim token), requeued/failed on an
error (a failed build's object is deleted as compensation), or ownership lost.
A builder that lost ownership deletes the object it just wrote only if the
export was withdrawn meanwhile (deleted/expired/failed); if another runner
rebuilt it, the key is the same and belongs to that runner now.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from app.cancellation import EventLike
from app.config import Settings
from app.exports import records
from app.exports.formats import (
    EncodedPage,
    MemberStats,
    csv_chunks,
    encode_pages,
    jsonl_chunks,
    zip_chunks,
)
from app.exports.records import ExportClaim
from app.leases import Heartbeat, LeaseGuard, LeaseLost
from app.object_store.deleter import delete_objects
from app.object_store.port import ObjectStore
from app.observability import emit
from app.search.asset_params import asset_query_from_params
from app.search.documents import EndpointDocument
from app.search.port import SearchStore, export_text_in_database

# PostgreSQL writes the text of this many ``[exports] page_size`` pages per statement, up to
# DATABASE_CHUNK_MAX_ROWS rows (never less than a page): a statement costs a round trip
# and a transaction, so few rows each would be mostly overhead, while memory holds the
# text of the chunks read ahead (DATABASE_READERS + 2), a few MB each at typical row sizes.
DATABASE_CHUNK_PAGES = 10
DATABASE_CHUNK_MAX_ROWS = 5000
# Connections writing export text at once for one build: writing the text is most of an
# export's CPU, and two keep two cores busy (with the compression threads) on the
# smallest supported host; [exports] concurrency builds per host hold twice as many.
DATABASE_READERS = 2
# Keyset range bounds read per statement (a walk of the (execution_id, id) index over as
# many chunks).
BOUNDS_PER_STATEMENT = 16


def database_chunk_rows(page_size: int) -> int:
    return min(page_size * DATABASE_CHUNK_PAGES, max(page_size, DATABASE_CHUNK_MAX_ROWS))


@dataclass(frozen=True)
class BuildOutcome:
    result: str  # "ready" | "requeued" | "failed" | "lease_lost"
    rows: int = 0
    size: int = 0
    duration_seconds: float = 0.0
    error: str | None = None


def _raise_if_lost(guard: threading.Event | None) -> None:
    if isinstance(guard, LeaseGuard):
        guard.raise_if_lost()


def endpoint_pages(
    store: SearchStore,
    execution_ids: tuple[int, ...],
    *,
    page_size: int,
    guard: threading.Event | None = None,
) -> Iterator[list[EndpointDocument]]:
    """Every endpoint of the executions, one keyset page at a time."""
    for execution_id in execution_ids:
        after: str | None = None
        while True:
            _raise_if_lost(guard)
            page = store.read_execution_endpoints(execution_id, after_id=after, limit=page_size)
            if not page:
                break
            yield page
            if len(page) < page_size:
                break
            after = page[-1].id


def asset_query_pages(
    store: SearchStore,
    claim: ExportClaim,
    *,
    page_size: int,
    guard: threading.Event | None = None,
) -> Iterator[list[EndpointDocument]]:
    """The owner's current assets the claim's search finds, keyset page by page, in the
    order it asked for. The query is built by the function ``GET /api/assets`` and the
    Assets page use, from the claim's filters and search-language query, with durations
    relative to ``claim.query_at`` (when the export was requested), so a rebuild exports
    the same set; like the page, only open assets unless a status is named."""
    base = asset_query_from_params(
        claim.asset_filters or {},
        owner_id=claim.owner_id,
        # A global scope was allowed when the export was asked for (admins only).
        may_search_global=True,
        queries=[claim.query] if claim.query else [],
        now=claim.query_at,
        limit=page_size,
    )
    cursor: str | None = None
    while True:
        _raise_if_lost(guard)
        page = store.search_assets(dataclasses.replace(base, cursor=cursor))
        if page.items:
            yield page.items
        cursor = page.next_cursor
        if cursor is None:
            return


def _keyset_ranges(
    store: Any, execution_id: int, *, chunk_rows: int, guard: threading.Event | None
) -> Iterator[tuple[str | None, str | None]]:
    """``(after, upto)`` ranges of ``chunk_rows`` endpoints each, then the open rest
    ``(after, None)`` (fewer than ``chunk_rows`` endpoints, or none)."""
    after: str | None = None
    while True:
        _raise_if_lost(guard)
        bounds = store.read_execution_export_bounds(
            execution_id, after_id=after, chunk_rows=chunk_rows, chunks=BOUNDS_PER_STATEMENT
        )
        for upto in bounds:
            yield after, upto
            after = upto
        if len(bounds) < BOUNDS_PER_STATEMENT:
            yield after, None
            return


def _documents_in_range(
    store: Any, execution_id: int, after: str | None, upto: str | None, *, chunk_rows: int
) -> list[EndpointDocument]:
    """The range's endpoints as documents (the open rest: its next ``chunk_rows``)."""
    if upto is None:
        return store.read_execution_endpoints(execution_id, after_id=after, limit=chunk_rows)
    documents: list[EndpointDocument] = []
    while True:
        page = store.read_execution_endpoints(execution_id, after_id=after, limit=chunk_rows)
        inside = [doc for doc in page if doc.id <= upto]  # hex ids sort like the uuids
        documents.extend(inside)
        if len(inside) < chunk_rows:
            return documents
        after = inside[-1].id


def _range_pages(
    store: Any,
    execution_id: int,
    after: str | None,
    upto: str | None,
    *,
    chunk_rows: int,
    csv: bool,
    jsonl: bool,
    guard: threading.Event | None,
) -> list[EncodedPage]:
    """One keyset range as export text: one short transaction, its connection given back
    before the text is handed on. A chunk the database cannot write byte for byte like
    the generic encoder (``exact`` false: rare values, see app.search.export_text) is read
    again as documents and encoded in Python. The open rest is read on by keyset until a
    chunk comes back short (more than one chunk only if rows were added meanwhile)."""
    pages: list[EncodedPage] = []
    while True:
        _raise_if_lost(guard)
        chunk = store.read_execution_export_text(
            execution_id,
            after_id=after,
            upto_id=upto,
            limit=chunk_rows if upto is None else None,
            csv=csv,
            jsonl=jsonl,
        )
        if chunk.rows == 0:
            return pages
        if chunk.exact:
            pages.append(EncodedPage(rows=chunk.rows, csv=chunk.csv, jsonl=chunk.jsonl))
            last_id, rows = chunk.last_id, chunk.rows
        else:
            docs = _documents_in_range(store, execution_id, after, upto, chunk_rows=chunk_rows)
            if not docs:
                return pages
            pages.extend(encode_pages([docs], csv=csv, jsonl=jsonl))
            last_id, rows = docs[-1].id, len(docs)
        if upto is not None or rows < chunk_rows:
            return pages
        after = last_id


def database_text_pages(
    store: Any,
    execution_ids: tuple[int, ...],
    *,
    chunk_rows: int,
    csv: bool,
    jsonl: bool,
    guard: threading.Event | None = None,
    readers: int = 1,
    name: str = "export-text",
) -> Iterator[EncodedPage]:
    """Every endpoint of the executions as export text written by PostgreSQL, in order.

    The endpoints are cut into keyset ranges of ``chunk_rows`` (their bounds come from
    the index, a few dozen ranges per statement), and ``readers`` threads each have the
    database write one range at a time, on its own connection, in one short transaction
    (docs/architecture.md, rule: short transactions): PostgreSQL writes text on as many
    cores while the caller compresses and stores. At most ``readers + 1`` ranges are read
    ahead, so memory holds a few chunks whatever the export's size. An exception in a
    reader (``LeaseLost`` included) is raised here; a caller that stops early stops the
    readers, and every reader thread has ended when this generator has.
    """
    pool = ThreadPoolExecutor(max_workers=max(1, readers), thread_name_prefix=name)
    pending: deque[Future[list[EncodedPage]]] = deque()
    try:
        for execution_id in execution_ids:
            for after, upto in _keyset_ranges(
                store, execution_id, chunk_rows=chunk_rows, guard=guard
            ):
                pending.append(
                    pool.submit(
                        _range_pages,
                        store,
                        execution_id,
                        after,
                        upto,
                        chunk_rows=chunk_rows,
                        csv=csv,
                        jsonl=jsonl,
                        guard=guard,
                    )
                )
                if len(pending) > readers:
                    yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


def writes_text_in_database(store: SearchStore) -> bool:
    return export_text_in_database(store) is not None


def export_chunks(
    claim: ExportClaim,
    store: SearchStore,
    *,
    page_size: int,
    guard: threading.Event | None,
    stats: dict[str, Any],
    database_text: bool | None = None,
) -> Iterator[bytes]:
    """The export file's bytes; ``stats["rows"]`` is the endpoint count once exhausted.

    ``database_text`` (default: whenever the store can) has PostgreSQL write the
    CSV and JSON text, in chunks of ``database_chunk_rows`` rows; otherwise the
    documents are encoded here. Both give the same bytes.
    """
    if database_text is None:
        database_text = writes_text_in_database(store)
    csv = claim.format in ("csv", "zip")
    jsonl = claim.format in ("jsonl", "zip")
    assets = claim.query is not None  # a search of current assets, not a task's results

    def pages() -> Iterator[EncodedPage]:
        if assets:
            found = asset_query_pages(store, claim, page_size=page_size, guard=guard)
            return encode_pages(found, csv=csv, jsonl=jsonl, assets=True)
        if database_text:
            return database_text_pages(
                store,
                claim.execution_ids,
                chunk_rows=database_chunk_rows(page_size),
                csv=csv,
                jsonl=jsonl,
                guard=guard,
                readers=DATABASE_READERS,
                name=f"export-text-{claim.id}",
            )
        documents = endpoint_pages(store, claim.execution_ids, page_size=page_size, guard=guard)
        return encode_pages(documents, csv=csv, jsonl=jsonl)

    if claim.format == "csv":
        member = MemberStats()
        yield from csv_chunks(pages(), member, assets=assets)
        stats["rows"] = member.rows
    elif claim.format == "jsonl":
        member = MemberStats()
        yield from jsonl_chunks(pages(), member)
        stats["rows"] = member.rows
    else:
        manifest: dict[str, Any] = {
            "export_id": claim.id,
            "task": {"id": claim.task_id, "name": claim.task_name},
            "executions": list(claim.execution_ids),
        }
        if claim.query is not None:
            manifest = {
                "export_id": claim.id,
                "query": claim.query,
                "query_at": claim.query_at.isoformat() if claim.query_at else None,
            }
            if claim.asset_filters:
                manifest["filters"] = claim.asset_filters
        members: dict[str, Any] = {}
        yield from zip_chunks(pages, manifest, members, assets=assets)
        stats["rows"] = members["endpoints.csv"]["rows"]


def build_export(
    settings: Settings,
    claim: ExportClaim,
    *,
    search_store: SearchStore,
    object_store: ObjectStore,
    runner_cancel: EventLike,
) -> BuildOutcome:
    config = settings.exports
    started = time.monotonic()
    guard = LeaseGuard(config.lease_seconds, claimed_at=started, runner_cancel=runner_cancel)
    heartbeat = Heartbeat(
        lambda: records.renew(claim),
        guard,
        interval=config.heartbeat_seconds,
        name=f"export-heartbeat-{claim.id}",
        failed_event="ExportHeartbeatFailed",
        event_fields={"export_id": claim.id},
    ).start()
    stats: dict[str, Any] = {}
    try:
        chunks = export_chunks(
            claim, search_store, page_size=config.page_size, guard=guard, stats=stats
        )
        ref = object_store.put(claim.object_key, chunks, records.CONTENT_TYPES[claim.format])
        guard.raise_if_lost()
    except LeaseLost as lost:
        heartbeat.stop()
        return _lost(settings, claim, object_store, started, lost.reason)
    except Exception as exc:  # noqa: BLE001 - recorded on the export, then requeued or failed
        heartbeat.stop()
        error = f"{type(exc).__name__}: {exc}"[:500]
        status = records.finish_failed(
            claim,
            error=error,
            max_attempts=config.max_attempts,
            backoff_seconds=config.retry_backoff_seconds,
        )
        if status is None:
            return _lost(settings, claim, object_store, started, "lease_lost")
        if status == "failed":
            delete_objects(
                object_store,
                [claim.object_key],
                concurrency=settings.object_store.delete_concurrency,
                origin="export_failed",
            )
        emit(
            "ExportBuildFailed",
            level=logging.WARNING,
            export_id=claim.id,
            attempt=claim.attempts,
            status=status,
            error=error,
        )
        return BuildOutcome(
            "requeued" if status == "queued" else "failed",
            duration_seconds=time.monotonic() - started,
            error=error,
        )
    heartbeat.stop()
    rows = int(stats.get("rows", 0))
    if not records.finish_ready(
        claim, size=ref.size, rows=rows, sha256=ref.sha256, retention_hours=config.retention_hours
    ):
        return _lost(settings, claim, object_store, started, "lease_lost")
    duration = time.monotonic() - started
    emit(
        "ExportBuilt",
        export_id=claim.id,
        format=claim.format,
        rows=rows,
        bytes=ref.size,
        executions=len(claim.execution_ids),
        duration_ms=round(duration * 1000, 1),
        heartbeats=heartbeat.renewals,
    )
    return BuildOutcome("ready", rows=rows, size=ref.size, duration_seconds=duration)


def _lost(
    settings: Settings,
    claim: ExportClaim,
    object_store: ObjectStore,
    started: float,
    reason: str,
) -> BuildOutcome:
    status, _token = records.current_status(claim.id)
    withdrawn = status in {"deleted", "expired", "failed", None}
    if withdrawn:
        delete_objects(
            object_store,
            [claim.object_key],
            concurrency=settings.object_store.delete_concurrency,
            origin="export_withdrawn",
        )
    emit(
        "ExportBuildLeaseLost",
        level=logging.WARNING,
        export_id=claim.id,
        reason=reason,
        status=status,
        compensated=withdrawn,
    )
    return BuildOutcome("lease_lost", duration_seconds=time.monotonic() - started, error=reason)
