"""Bulk requests to Elasticsearch: NDJSON built by us, sharded, sent, retried, checked item by item.

We build the NDJSON bodies ourselves so that the byte limit is measured on the
real bytes sent (PRJ-4): operations are packed greedily into shards of at most
``max_operations`` operations and ``max_bytes`` bytes, and one operation over
the byte limit raises ``OperationTooLarge`` before anything is sent (PRJ-6).

Sending is bounded by ``bulk_max_concurrency`` in-flight requests per store,
that is per process (the wait for a slot is reported as ``queue_wait_ms``,
never mistaken for Elasticsearch time); the deployment-wide budget is sized
against ``bulk_max_concurrency_total`` and checked at start-up (STO-4). A
whole-request 429/5xx or a transport failure is retried with exponential
backoff and jitter within ``bulk_retry_budget`` retries; every operation is
idempotent (deterministic ids, commutative merges), so re-sending
a request that may already have been applied is safe. After a 2xx answer every
item is checked: the item count, each item's action, ``_id`` and ``_index``, and
its status. Items rejected with 429 (and version conflicts of merge updates,
which the merge makes safe to repeat) are re-sent alone within the same budget;
other failed items are reported, never blindly retried. Each request ends with
one ``ElasticsearchBulkCompleted`` event (OBS-1), whose ``trace_id`` is also
sent as ``X-Opaque-Id`` so Elasticsearch's slow logs can be joined to it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from app.observability import emit
from app.search.encoding import dumps
from app.search.port import (
    BulkItemResult,
    BulkResult,
    OperationTooLarge,
    StoreRefused,
    StoreUnavailable,
)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_SECONDS = 30.0
RESPONSE_MISMATCH = "response_mismatch"
# Only what the checks need comes back: big bulk answers cost the cluster and us.
BULK_FILTER_PATH = (
    "took,errors,items.*._id,items.*._index,items.*.status,items.*.result,"
    "items.*.error.type,items.*.error.reason"
)


class _Abandoned(StoreUnavailable):
    """A shard that stopped before its next attempt because another shard of the same call
    failed; the call raises that other failure."""


@dataclass(frozen=True, slots=True)
class BulkOperation:
    """One NDJSON operation: the action line and (except for delete) its body line."""

    action: str  # "index" | "create" | "update" | "delete"
    index: str
    document_id: str
    payload: bytes  # both lines, newline-terminated

    @property
    def size(self) -> int:
        return len(self.payload)


def operation(
    action: str,
    index: str,
    document_id: str,
    body: dict[str, Any] | None,
    *,
    meta: dict[str, Any] | None = None,
) -> BulkOperation:
    header = {action: {"_index": index, "_id": document_id, **(meta or {})}}
    text = dumps(header) + "\n"
    if body is not None:
        text += dumps(body) + "\n"
    return BulkOperation(action, index, document_id, text.encode("utf-8"))


def shard_operations(
    operations: Sequence[BulkOperation], *, max_operations: int, max_bytes: int
) -> list[list[BulkOperation]]:
    """Greedy shards by count and bytes; an operation alone over ``max_bytes`` raises."""
    for op in operations:
        if op.size > max_bytes:
            raise OperationTooLarge(op.document_id, op.size, max_bytes)
    shards: list[list[BulkOperation]] = []
    current: list[BulkOperation] = []
    size = 0
    for op in operations:
        if current and (len(current) >= max_operations or size + op.size > max_bytes):
            shards.append(current)
            current, size = [], 0
        current.append(op)
        size += op.size
    if current:
        shards.append(current)
    return shards


@dataclass
class _Attempt:
    queue_wait: float = 0.0
    request: float = 0.0
    backoff: float = 0.0
    attempts: int = 0
    bytes_sent: int = 0
    es_took_ms: int = 0


class BulkSender:
    """Sends shards of operations with bounded concurrency, retries and item checks."""

    def __init__(
        self,
        client: Elasticsearch,
        *,
        max_concurrency: int,
        retry_budget: int,
        backoff_ms: int,
    ):
        self._client = client
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="es-bulk")
        self._retry_budget = retry_budget
        self._backoff_s = backoff_ms / 1000
        self._max_concurrency = max_concurrency

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def send(
        self,
        shards: Sequence[Sequence[BulkOperation]],
        *,
        kind: str,
        cancel: threading.Event | None = None,
    ) -> BulkResult:
        """Send every shard (up to ``max_concurrency`` at once); items in input order."""
        if not shards:
            return BulkResult()
        if len(shards) == 1 or self._max_concurrency == 1:
            results = [self._send_one(shard, kind, cancel) for shard in shards]
        else:
            results = self._send_concurrently(shards, kind, cancel)
        return BulkResult(
            items=tuple(item for result in results for item in result.items),
            requests=sum(r.requests for r in results),
            request_bytes=sum(r.request_bytes for r in results),
            attempts=sum(r.attempts for r in results),
        )

    def _send_concurrently(
        self,
        shards: Sequence[Sequence[BulkOperation]],
        kind: str,
        cancel: threading.Event | None,
    ) -> list[BulkResult]:
        """Each shard on the pool; returns only when none of them is queued or in flight.

        When a shard fails, the shards not yet started are cancelled and the running ones
        stop before their next attempt; the call waits for them, then raises the first
        failure. Otherwise a failed call would leave its other shards queued or running:
        sent after the caller has given up (and perhaps already retried the whole call
        beside them), and reported after the call returned."""
        abandon = threading.Event()
        futures = [
            self._pool.submit(self._send_one, shard, kind, cancel, abandon) for shard in shards
        ]
        wait(futures, return_when=FIRST_EXCEPTION)
        if abandon.is_set():
            for future in futures:
                future.cancel()
            wait(futures)
            failures = [f.exception() for f in futures if not f.cancelled() and f.exception()]
            # The shard that failed, not one that stopped because of it.
            raise next((e for e in failures if not isinstance(e, _Abandoned)), failures[0])
        return [future.result() for future in futures]

    # -- one request, with its retries ------------------------------------------------

    def _send_one(
        self,
        shard: Sequence[BulkOperation],
        kind: str,
        cancel: threading.Event | None,
        abandon: threading.Event | None = None,
    ) -> BulkResult:
        if abandon is not None and abandon.is_set():
            raise _Abandoned("bulk request abandoned: another shard failed")  # none sent
        try:
            return self._send_attempts(shard, kind, cancel, abandon)
        except BaseException:
            if abandon is not None:
                abandon.set()  # here, so that this worker's next queued shard is not sent
            raise

    def _send_attempts(
        self,
        shard: Sequence[BulkOperation],
        kind: str,
        cancel: threading.Event | None,
        abandon: threading.Event | None,
    ) -> BulkResult:
        trace_id = uuid.uuid4().hex
        started = time.perf_counter()
        stats = _Attempt()
        request_bytes = sum(op.size for op in shard)
        final: dict[int, BulkItemResult] = {}
        pending = list(range(len(shard)))  # positions still to be (re)sent
        success = False
        try:
            retries = 0
            while True:
                if cancel is not None and cancel.is_set():
                    raise StoreUnavailable("bulk request cancelled")
                if abandon is not None and abandon.is_set():
                    raise _Abandoned("bulk request abandoned: another shard failed")
                batch = [shard[i] for i in pending]
                outcome = self._request(batch, stats, trace_id)
                if isinstance(outcome, BaseException):
                    if retries >= self._retry_budget:
                        raise StoreUnavailable(
                            f"bulk request failed after {stats.attempts} attempts: {outcome}"
                        ) from outcome
                else:
                    again = []
                    for position, item in zip(pending, outcome, strict=True):
                        final[position] = item
                        if _retry_item(item, shard[position]):
                            again.append(position)
                    if not again or retries >= self._retry_budget:
                        break
                    pending = again
                retries += 1
                self._backoff(retries, stats, cancel, abandon)
            items = tuple(final[i] for i in range(len(shard)))
            success = all(item.ok for item in items)
            return BulkResult(
                items=items, requests=1, request_bytes=request_bytes, attempts=stats.attempts
            )
        finally:
            emit(
                "ElasticsearchBulkCompleted",
                level=logging.INFO if success else logging.WARNING,
                kind=kind,
                duration_ms=_ms(time.perf_counter() - started),
                queue_wait_ms=_ms(stats.queue_wait),
                request_ms=_ms(stats.request),
                backoff_ms=_ms(stats.backoff),
                attempts=stats.attempts,
                request_bytes=request_bytes,
                bytes_sent=stats.bytes_sent,
                operations=len(shard),
                failed_items=len(shard) - sum(1 for i in final.values() if i.ok),
                es_took_ms=stats.es_took_ms,
                success=success,
                trace_id=trace_id,
            )

    def _backoff(
        self,
        retry: int,
        stats: _Attempt,
        cancel: threading.Event | None,
        abandon: threading.Event | None = None,
    ) -> None:
        ceiling = min(self._backoff_s * (2 ** (retry - 1)), MAX_BACKOFF_SECONDS)
        delay = random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security
        waited_from = time.perf_counter()
        # One event can be waited on: the caller's when there is one (a sibling's failure
        # then stops this shard before its next attempt), else the siblings'.
        event = cancel if cancel is not None else abandon
        if event is not None:
            if event.wait(delay):
                stats.backoff += time.perf_counter() - waited_from
                if event is cancel:
                    raise StoreUnavailable("bulk request cancelled while backing off")
                raise _Abandoned("bulk request abandoned while backing off: another shard failed")
        else:
            time.sleep(delay)
        stats.backoff += time.perf_counter() - waited_from

    def _request(
        self, batch: Sequence[BulkOperation], stats: _Attempt, trace_id: str
    ) -> list[BulkItemResult] | BaseException:
        """One HTTP request; item results, or the retryable failure of the whole request."""
        body = b"".join(op.payload for op in batch)
        waiting = time.perf_counter()
        with self._slots:
            sending = time.perf_counter()
            stats.queue_wait += sending - waiting
            stats.attempts += 1
            stats.bytes_sent += len(body)
            try:
                response = self._client.perform_request(
                    "POST",
                    "/_bulk",
                    params={"filter_path": BULK_FILTER_PATH},
                    headers={
                        "content-type": "application/x-ndjson",
                        "accept": "application/json",
                        "x-opaque-id": trace_id,
                    },
                    body=body,
                )
            except ApiError as exc:
                if exc.meta.status in RETRYABLE_STATUSES:
                    return exc
                raise StoreRefused(
                    f"bulk request rejected with {exc.meta.status}: {exc.message}"
                ) from exc
            except TransportError as exc:  # connection refused/reset, timeout
                return exc
            finally:
                stats.request += time.perf_counter() - sending
        answer = response.body if isinstance(response.body, dict) else {}
        stats.es_took_ms += int(answer.get("took") or 0)
        return check_items(batch, answer.get("items"))


def _retry_item(item: BulkItemResult, op: BulkOperation) -> bool:
    if item.status == 429:
        return True
    # A merge update that lost a version race is safe to repeat: the merge is a join.
    return item.status == 409 and op.action == "update"


def check_items(batch: Sequence[BulkOperation], items: Any) -> list[BulkItemResult]:
    """Item results for ``batch``; anything not matching the request is a failed item."""
    if not isinstance(items, list) or len(items) != len(batch):
        count = len(items) if isinstance(items, list) else 0
        reason = f"bulk answer has {count} items for {len(batch)} operations"
        return [
            BulkItemResult(op.document_id, op.index, 500, RESPONSE_MISMATCH, reason) for op in batch
        ]
    results = []
    for op, entry in zip(batch, items, strict=True):
        body = entry.get(op.action) if isinstance(entry, dict) else None
        if not isinstance(body, dict):
            results.append(
                BulkItemResult(
                    op.document_id, op.index, 500, RESPONSE_MISMATCH, "item action differs"
                )
            )
            continue
        if body.get("_id") != op.document_id or body.get("_index") != op.index:
            reason = f"item names {body.get('_index')}/{body.get('_id')}"
            results.append(BulkItemResult(op.document_id, op.index, 500, RESPONSE_MISMATCH, reason))
            continue
        status = int(body.get("status") or 500)
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if 200 <= status < 300 and error is None:
            results.append(BulkItemResult(op.document_id, op.index, status))
        else:
            error = error or {}
            results.append(
                BulkItemResult(
                    op.document_id,
                    op.index,
                    status if status >= 300 else 500,
                    str(error.get("type") or "unknown_error"),
                    str(error.get("reason") or "")[:500] or None,
                )
            )
    return results


def iter_shard_bytes(shards: Sequence[Sequence[BulkOperation]]) -> Iterator[bytes]:
    """The request bodies the shards make (benchmarks measure building them)."""
    for shard in shards:
        yield b"".join(op.payload for op in shard)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
