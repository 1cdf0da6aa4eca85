"""Building one claimed export into the object store (EXP-7, EXP-8).

``build_export`` streams the export's executions' endpoints from the search
store in keyset pages (by id) through the format's chunk generator straight
into ``ObjectStore.put``. On the PostgreSQL store the database writes the CSV
and JSON text of each chunk itself (``read_execution_export_text``, one short
transaction per chunk, nothing held while the chunk goes to the object store);
other stores' pages (``read_execution_endpoints``) are encoded here. Both give
the same bytes (tests/integration/exports/test_export_text.py). A heartbeat thread
renews the lease every ``[exports] heartbeat_seconds``; the guard (the same
rule as the projection's: a lost renewal, the local lease deadline or the
runner's shutdown) is checked before every page, so a builder that lost its
claim stops reading and its upload is abandoned (a filesystem temporary file
is removed, an S3 multipart upload aborted).

Outcomes: ``ready`` (written with the claim token), requeued/failed on an
error (a failed build's object is deleted as compensation), or ownership lost.
A builder that lost ownership deletes the object it just wrote only if the
export was withdrawn meanwhile (deleted/expired/failed); if another runner
rebuilt it, the key is the same and belongs to that runner now.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
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
from app.object_store.deleter import delete_objects
from app.object_store.port import ObjectStore
from app.observability import emit
from app.projection.lease import LeaseGuard, LeaseLost
from app.search.documents import EndpointDocument
from app.search.port import SearchStore

RENEW_RETRY_SECONDS = 0.5
# PostgreSQL writes the text of this many ``[exports] page_size`` pages per statement, up to
# DATABASE_CHUNK_MAX_ROWS rows (never less than a page): a statement costs a round trip
# and a transaction, so few rows each would be mostly overhead, while memory holds up to
# three chunks' text (prefetch), a few MB each at typical row sizes.
DATABASE_CHUNK_PAGES = 10
DATABASE_CHUNK_MAX_ROWS = 5000


def database_chunk_rows(page_size: int) -> int:
    return min(page_size * DATABASE_CHUNK_PAGES, max(page_size, DATABASE_CHUNK_MAX_ROWS))


@dataclass(frozen=True)
class BuildOutcome:
    result: str  # "ready" | "requeued" | "failed" | "lease_lost"
    rows: int = 0
    size: int = 0
    duration_seconds: float = 0.0
    error: str | None = None


class ExportHeartbeat:
    """Renews the build lease in a thread; a renewal that finds the row not ours trips the guard."""

    def __init__(self, claim: ExportClaim, guard: LeaseGuard, *, interval: float):
        self.claim, self.guard, self.interval = claim, guard, interval
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"export-heartbeat-{claim.id}", daemon=True
        )

    def start(self) -> ExportHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            started = time.monotonic()
            try:
                owned = records.renew(self.claim)
            except Exception as exc:  # noqa: BLE001 - database trouble: try again soon
                emit("ExportHeartbeatFailed", level=logging.WARNING, error=type(exc).__name__)
                due = time.monotonic() + min(self.interval, RENEW_RETRY_SECONDS)
                continue
            if not owned:
                self.guard.lose("lease_lost", "heartbeat")
                return
            self.guard.renewed(started)
            self.renewals += 1
            due = max(due + self.interval, time.monotonic())


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
            if isinstance(guard, LeaseGuard):
                guard.raise_if_lost()
            page = store.read_execution_endpoints(execution_id, after_id=after, limit=page_size)
            if not page:
                break
            yield page
            if len(page) < page_size:
                break
            after = page[-1].id


def database_text_pages(
    store: Any,
    execution_ids: tuple[int, ...],
    *,
    chunk_rows: int,
    csv: bool,
    jsonl: bool,
    guard: threading.Event | None = None,
) -> Iterator[EncodedPage]:
    """Every endpoint of the executions as export text written by PostgreSQL, one chunk at a time.

    One short transaction per keyset chunk (``read_execution_export_text``); the
    connection is back in the pool before the chunk goes on to the object store
    (docs/architecture.md, rule: short transactions), and the chunk is all the
    memory held. A chunk the database cannot write byte for byte like the
    generic encoder (``exact`` false: rare values, see app.search.export_text)
    is read again as documents and encoded in Python.
    """
    for execution_id in execution_ids:
        after: str | None = None
        while True:
            if isinstance(guard, LeaseGuard):
                guard.raise_if_lost()
            chunk = store.read_execution_export_text(
                execution_id, after_id=after, limit=chunk_rows, csv=csv, jsonl=jsonl
            )
            if chunk.rows == 0:
                break
            if chunk.exact:
                yield EncodedPage(rows=chunk.rows, csv=chunk.csv, jsonl=chunk.jsonl)
                last_id, rows = chunk.last_id, chunk.rows
            else:
                docs = store.read_execution_endpoints(
                    execution_id, after_id=after, limit=chunk_rows
                )
                if not docs:
                    break
                yield from encode_pages([docs], csv=csv, jsonl=jsonl)
                last_id, rows = docs[-1].id, len(docs)
            if rows < chunk_rows:
                break
            after = last_id


class _Done:
    """Ends a prefetch queue; carries the producer's exception, if any."""

    def __init__(self, error: BaseException | None = None):
        self.error = error


def prefetched(pages: Iterator[EncodedPage], *, name: str) -> Iterator[EncodedPage]:
    """``pages`` produced by a helper thread one page ahead of the consumer.

    While the consumer compresses and stores one chunk, PostgreSQL writes the
    next (two cores instead of one). The producer holds a connection only inside
    each chunk's statement, never while waiting for the consumer; memory holds at
    most three chunks. An exception in the producer (``LeaseLost`` included) is
    raised here; a consumer that stops early stops the producer.
    """
    ready: queue.Queue[EncodedPage | _Done] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(item: EncodedPage | _Done) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for page in pages:
                if not offer(page):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            offer(_Done(exc))
            return
        offer(_Done())

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, _Done):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        stop.set()
        thread.join()
        close = getattr(pages, "close", None)
        if close is not None:
            close()


def writes_text_in_database(store: SearchStore) -> bool:
    return callable(getattr(store, "read_execution_export_text", None))


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

    def pages() -> Iterator[EncodedPage]:
        if database_text:
            chunks = database_text_pages(
                store,
                claim.execution_ids,
                chunk_rows=database_chunk_rows(page_size),
                csv=csv,
                jsonl=jsonl,
                guard=guard,
            )
            return prefetched(chunks, name=f"export-text-{claim.id}")
        documents = endpoint_pages(store, claim.execution_ids, page_size=page_size, guard=guard)
        return encode_pages(documents, csv=csv, jsonl=jsonl)

    if claim.format == "csv":
        member = MemberStats()
        yield from csv_chunks(pages(), member)
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
        members: dict[str, Any] = {}
        yield from zip_chunks(pages, manifest, members)
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
    heartbeat = ExportHeartbeat(claim, guard, interval=config.heartbeat_seconds).start()
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
