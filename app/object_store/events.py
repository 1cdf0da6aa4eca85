"""Redacted events and metrics for every object-store operation (EXP-5, OPS-5).

``InstrumentedObjectStore`` wraps an adapter: each call emits one
``ObjectStoreOperation`` event with the operation, the backend, the key's first
segment only (the rest of a key can name a user's task), bytes moved, duration,
retries, how many operations of that kind were in flight in this process when
it started, and success. An event never carries an access key, a secret, a
session token or a URL (a presigned URL's query string is a credential), and
errors are reduced to their class and our own message.

Metrics (``/metrics``): ``netmap_object_store_operations_total`` by operation
and outcome, ``netmap_object_store_operation_seconds`` (histogram) by
operation, ``netmap_object_store_bytes_total``,
``netmap_object_store_retries_total`` and the ``netmap_object_store_in_flight``
gauge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from app.object_store.port import (
    InvalidObjectKey,
    ObjectNotFound,
    ObjectRef,
    ObjectStore,
    ObjectStoreError,
    Payload,
    key_prefix,
)
from app.observability import REGISTRY, emit

OPERATIONS_TOTAL = Counter(
    "netmap_object_store_operations_total",
    "Object-store operations by operation, backend and outcome",
    ["operation", "backend", "outcome"],
    registry=REGISTRY,
)
OPERATION_SECONDS = Histogram(
    "netmap_object_store_operation_seconds",
    "Object-store operation latency (including retries)",
    ["operation", "backend"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120),
    registry=REGISTRY,
)
BYTES_TOTAL = Counter(
    "netmap_object_store_bytes_total",
    "Bytes written (put) by the object store",
    ["operation", "backend"],
    registry=REGISTRY,
)
RETRIES_TOTAL = Counter(
    "netmap_object_store_retries_total",
    "Retried object-store requests (throttling, 5xx, dropped connections)",
    ["operation", "backend"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "netmap_object_store_in_flight",
    "Object-store operations in flight",
    ["operation", "backend"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)


@dataclass
class OperationStats:
    retries: int = 0
    last_retry_reason: str | None = None


_current: ContextVar[OperationStats | None] = ContextVar("netmap_object_op", default=None)


def note_retry(reason: str) -> None:
    """Adapters call this before each retry so the operation's event can count them."""
    stats = _current.get()
    if stats is not None:
        stats.retries += 1
        stats.last_retry_reason = reason


def _error_text(exc: BaseException) -> str:
    # Our own exceptions say nothing secret; foreign ones are reduced to their class name.
    if isinstance(exc, ObjectStoreError | ValueError):
        return f"{type(exc).__name__}: {exc}"[:300]
    return type(exc).__name__


T = TypeVar("T")


class InstrumentedObjectStore:
    """The port, with one event and metric update per call."""

    def __init__(self, inner: ObjectStore):
        self.inner = inner
        self.name = inner.name
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}

    def in_flight(self, operation: str) -> int:
        with self._lock:
            return self._in_flight.get(operation, 0)

    def _observe(
        self,
        operation: str,
        key: str,
        call: Callable[[], T],
        *,
        size_of: Callable[[T], int] | None = None,
        **extra: Any,
    ) -> T:
        with self._lock:
            in_flight = self._in_flight.get(operation, 0) + 1
            self._in_flight[operation] = in_flight
        IN_FLIGHT.labels(operation, self.name).inc()
        stats = OperationStats()
        token = _current.set(stats)
        started = time.perf_counter()
        success = False
        outcome = "error"
        result_bytes: int | None = None
        error: str | None = None
        try:
            result = call()
            success = True
            outcome = "ok"
            if size_of is not None:
                result_bytes = size_of(result)
            return result
        except ObjectNotFound:
            outcome = "not_found"
            error = "ObjectNotFound"
            raise
        except BaseException as exc:
            outcome = "invalid_key" if isinstance(exc, InvalidObjectKey) else "error"
            error = _error_text(exc)
            raise
        finally:
            elapsed = time.perf_counter() - started
            _current.reset(token)
            with self._lock:
                self._in_flight[operation] -= 1
            IN_FLIGHT.labels(operation, self.name).dec()
            OPERATIONS_TOTAL.labels(operation, self.name, outcome).inc()
            OPERATION_SECONDS.labels(operation, self.name).observe(elapsed)
            if stats.retries:
                RETRIES_TOTAL.labels(operation, self.name).inc(stats.retries)
            if result_bytes and operation == "put":
                BYTES_TOTAL.labels(operation, self.name).inc(result_bytes)
            emit(
                "ObjectStoreOperation",
                level=logging.INFO if success or outcome == "not_found" else logging.WARNING,
                operation=operation,
                backend=self.name,
                key_prefix=key_prefix(key),
                bytes=result_bytes,
                duration_ms=round(elapsed * 1000, 2),
                retries=stats.retries,
                retry_reason=stats.last_retry_reason,
                in_flight=in_flight,
                success=success,
                outcome=outcome,
                error=error,
                **extra,
            )

    def put(self, key: str, payload: Payload, content_type: str) -> ObjectRef:
        return self._observe(
            "put",
            key,
            lambda: self.inner.put(key, payload, content_type),
            size_of=lambda ref: ref.size,
        )

    def open(self, key: str) -> BinaryIO:
        return self._observe("open", key, lambda: self.inner.open(key))

    def delete(self, key: str) -> bool:
        return self._observe("delete", key, lambda: self.inner.delete(key))

    def exists(self, key: str) -> bool:
        return self._observe("exists", key, lambda: self.inner.exists(key))

    def size(self, key: str) -> int:
        return self._observe("size", key, lambda: self.inner.size(key), size_of=lambda n: n)

    def url_for(self, key: str, expires: int, *, filename: str | None = None) -> str:
        # The URL is returned to the caller only; the event says how long it lives.
        return self._observe(
            "url_for",
            key,
            lambda: self.inner.url_for(key, expires, filename=filename),
            expires_seconds=int(expires),
        )

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Adapter extras (ensure_bucket, path_of, root) stay reachable.
        return getattr(self.inner, name)
