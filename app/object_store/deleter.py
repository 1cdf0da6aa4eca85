"""Bounded compensation deletes and their later retry (EXP-6).

When work that already stored objects fails or is withdrawn (an export that
fails, is deleted or expires; a report commit that is refused), its objects are
deleted as compensation. ``delete_objects`` never sends one unbounded burst:
at most ``[object_store] delete_concurrency`` deletes are in flight (default 3,
what a small MinIO host tolerates next to its own background work). One failed
delete does not stop the others; the answer is one settled ``DeleteResult`` per
input key, in input order (``deleted`` | ``missing`` | ``failed`` with the
error), like a list of settled promises.

Failures are recorded in ``object_delete_failures`` (one short transaction
after every delete settled; no connection is held while talking to the
store), and ``retry_failed_deletes`` (the ``object_delete_retry`` runner job)
tries them again with growing backoff until the store says deleted or missing,
so no object stays orphaned for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import sqlalchemy as sa

from app.db import transaction
from app.object_store.events import _error_text
from app.object_store.port import InvalidObjectKey, ObjectStore
from app.observability import emit

DELETED, MISSING, FAILED = "deleted", "missing", "failed"


@dataclass(frozen=True)
class DeleteResult:
    key: str
    status: str  # "deleted" | "missing" | "failed"
    error: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"key": self.key, "status": self.status, "error": self.error}


@dataclass(frozen=True)
class RetrySummary:
    attempted: int
    deleted: int
    missing: int
    failed: int


def _delete_one(store: ObjectStore, key: str) -> DeleteResult:
    try:
        return DeleteResult(key, DELETED if store.delete(key) else MISSING)
    except Exception as exc:  # noqa: BLE001 - settled, never raised: the others go on
        return DeleteResult(key, FAILED, _error_text(exc))


def delete_objects(
    store: ObjectStore,
    keys: Iterable[str],
    *,
    concurrency: int,
    origin: str,
    record_failures: bool = True,
) -> list[DeleteResult]:
    """Delete ``keys`` with at most ``concurrency`` in flight; settled results in input order."""
    keys = list(keys)
    if not keys:
        return []
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    started = time.perf_counter()
    with ThreadPoolExecutor(
        max_workers=min(concurrency, len(keys)), thread_name_prefix="object-delete"
    ) as pool:
        futures = [pool.submit(_delete_one, store, key) for key in keys]
        results = [future.result() for future in futures]
    failed = [r for r in results if r.status == FAILED]
    # A key that can never be valid would only fail again: report it, do not queue it.
    retryable = [r for r in failed if not (r.error or "").startswith(InvalidObjectKey.__name__)]
    if record_failures and retryable:
        record_delete_failures(retryable, origin=origin)
    emit(
        "ObjectDeleteBatchSettled",
        level=logging.WARNING if failed else logging.INFO,
        origin=origin,
        keys=len(keys),
        deleted=sum(r.status == DELETED for r in results),
        missing=sum(r.status == MISSING for r in results),
        failed=len(failed),
        recorded=len(retryable) if record_failures else 0,
        concurrency=concurrency,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return results


def record_delete_failures(failures: Iterable[DeleteResult], *, origin: str) -> None:
    rows = [{"key": r.key, "origin": origin, "error": r.error or "?"} for r in failures]
    if not rows:
        return
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO object_delete_failures (key, origin, last_error)
                VALUES (:key, :origin, :error)
                ON CONFLICT (key) DO UPDATE
                   SET attempts = object_delete_failures.attempts + 1,
                       last_error = EXCLUDED.last_error, updated_at = now()
                """
            ),
            rows,
        )


def pending_delete_failures(limit: int = 100) -> list[dict[str, object]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT key, origin, attempts, last_error, next_attempt_at "
                "FROM object_delete_failures ORDER BY first_failed_at, key LIMIT :limit"
            ),
            {"limit": limit},
        ).all()
    return [dict(row._mapping) for row in rows]


def retry_failed_deletes(
    store: ObjectStore,
    *,
    concurrency: int,
    base_backoff_seconds: float,
    max_backoff_seconds: float,
    limit: int = 500,
) -> RetrySummary:
    """Try the recorded failures that are due again (run by one runner at a time)."""
    with transaction() as conn:
        keys = list(
            conn.execute(
                sa.text(
                    "SELECT key FROM object_delete_failures WHERE next_attempt_at <= now() "
                    "ORDER BY next_attempt_at, key LIMIT :limit"
                ),
                {"limit": limit},
            ).scalars()
        )
    if not keys:
        return RetrySummary(0, 0, 0, 0)
    results = delete_objects(
        store, keys, concurrency=concurrency, origin="retry", record_failures=False
    )
    done = [r.key for r in results if r.status != FAILED]
    still = [r for r in results if r.status == FAILED]
    with transaction() as conn:
        if done:
            conn.execute(
                sa.text("DELETE FROM object_delete_failures WHERE key = ANY(:keys)"),
                {"keys": done},
            )
        if still:
            conn.execute(
                sa.text(
                    """
                    UPDATE object_delete_failures
                       SET attempts = attempts + 1, last_error = :error, updated_at = now(),
                           next_attempt_at = now() + make_interval(
                               secs => LEAST(:max_backoff, :base * power(2, LEAST(attempts, 20))))
                     WHERE key = :key
                    """
                ),
                [
                    {
                        "key": r.key,
                        "error": r.error or "?",
                        "base": base_backoff_seconds,
                        "max_backoff": max_backoff_seconds,
                    }
                    for r in still
                ],
            )
    return RetrySummary(
        attempted=len(results),
        deleted=sum(r.status == DELETED for r in results),
        missing=sum(r.status == "missing" for r in results),
        failed=len(still),
    )
