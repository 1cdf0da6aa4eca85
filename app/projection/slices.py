"""One slice of work on a claimed outbox row: some pages, maybe the refresh, then let go (PRJ-2..6).

``ProjectionWorker.claim()`` claims the next row; ``run_slice`` then works on it
without holding a database connection except for the short outbox writes:

1. up to ``projection_pages_per_tick`` pages (``pages.publish_page``), each
   verified item by item and followed by a checkpoint (cursor, progress,
   phase); a page shorter than the page size was the last one, so its
   checkpoint moves the row to ``refreshing``;
2. in ``refreshing``: exactly one ``refresh_current`` of the current-asset
   store, then ``complete`` (``processed_at``); a failed refresh keeps the
   phase, so the retry redoes only the refresh, never a confirmed page;
3. otherwise ``release``: the row is free again with ``available_at = now()``,
   behind executions that waited longer, so one huge execution cannot starve
   the others.

A heartbeat thread renews the lease meanwhile (``app.leases.Heartbeat``). Any
failure — a bulk item that failed (429s after the store's own retries, or
anything else), an operation too large (kept, never truncated), a 413, an
unreachable store, a failed refresh — is written back with ``retry``: the error
text is kept, ``attempts`` grows and the row waits out an exponential backoff
with jitter; the cursor stays where the last verified page left it. Losing the
lease ends the slice without writing anything (the new owner's row is not
ours to touch); a runner shutdown stops before the next page and releases the
row, and a shutdown deadline that passes mid-page releases it if the page
could not finish. A checkpoint that fails after the store accepted the page
leaves the cursor behind, so the page is published again later: merges are
idempotent, delivery is at-least-once.

Events (OBS-1): ``ScanProjectionClaimed``, ``ScanProjectionPageCompleted``,
``ScanProjectionCompleted``, ``ScanProjectionOutboxError`` (failures and lost
leases) and ``ScanProjectionSliceReleased``, with the execution id, phase,
page endpoint count, slice duration and error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from app.cancellation import EventLike
from app.config import Settings
from app.leases import LOST_BY_DATABASE, MAX_ERROR_CHARS, Heartbeat, LeaseGuard, LeaseLost
from app.observability import emit
from app.projection import outbox
from app.projection.outbox import OutboxClaim
from app.projection.pages import publish_page
from app.search.port import SearchStore


@dataclass
class SliceOutcome:
    """What a slice did; ``result`` is completed, released, retry, lease_lost or cancelled."""

    execution_id: int
    result: str = "released"
    pages: int = 0
    endpoints: int = 0
    page_seconds: list[float] = field(default_factory=list)
    heartbeat_late_seconds: list[float] = field(default_factory=list)
    error: str | None = None
    duration_seconds: float = 0.0


def describe_error(exc: BaseException) -> str:
    """The text kept in ``last_error``: the failure, plus what to do where we know it."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    status = getattr(getattr(cause, "meta", None), "status", None)
    if status == 413:
        text += (
            " (the cluster refused the request size: lower"
            " elasticsearch.projection_bulk_max_bytes or raise its http.max_content_length)"
        )
    return text[:MAX_ERROR_CHARS]


class ProjectionWorker:
    """Claims outbox rows and runs slices on them with one search store."""

    def __init__(self, settings: Settings, store: SearchStore):
        self.settings = settings
        self.store = store

    def claim(self) -> OutboxClaim | None:
        return outbox.claim_next(lease_seconds=self.settings.elasticsearch.projection_lease_seconds)

    def run_slice(
        self, claim: OutboxClaim, *, stopping: EventLike, cancelled: EventLike
    ) -> SliceOutcome:
        es = self.settings.elasticsearch
        started = time.perf_counter()
        outcome = SliceOutcome(execution_id=claim.execution_id)
        guard = LeaseGuard(
            claim.lease_seconds, claimed_at=claim.claimed_monotonic, runner_cancel=cancelled
        )
        heartbeat = Heartbeat(
            lambda: outbox.renew(claim),
            guard,
            interval=es.projection_heartbeat_seconds,
            name=f"projection-heartbeat-{claim.execution_id}",
            failed_event="ScanProjectionHeartbeatFailed",
            event_fields={"execution_id": claim.execution_id},
            on_lost=lambda: emit(
                "ScanProjectionOutboxError",
                level=logging.WARNING,
                execution_id=claim.execution_id,
                phase=claim.phase,
                operation="heartbeat",
                error="lease_lost",
            ),
        ).start()
        phase, cursor, processed = claim.phase, claim.cursor, claim.processed_endpoints
        emit(
            "ScanProjectionClaimed",
            execution_id=claim.execution_id,
            phase=phase,
            processed_endpoints=processed,
            attempts=claim.attempts,
            recovered=claim.recovered,
        )
        page_endpoints = 0
        try:
            while (
                phase == "pages"
                and outcome.pages < es.projection_pages_per_tick
                and not stopping.is_set()
            ):
                guard.raise_if_lost()
                page_started = time.perf_counter()
                page_endpoints = 0
                page = publish_page(
                    self.store, claim.execution_id, after_id=cursor, settings=es, cancel=guard
                )
                page_endpoints = page.endpoints
                page.raise_for_failures()
                next_phase = "refreshing" if page.endpoints < es.projection_page_size else "pages"
                saving = time.monotonic()
                if not outbox.checkpoint(
                    claim,
                    cursor=page.last_id,
                    processed=processed + page.endpoints,
                    phase=next_phase,
                ):
                    raise LeaseLost(LOST_BY_DATABASE, "checkpoint")
                guard.renewed(saving)
                phase, cursor, processed = next_phase, page.last_id, processed + page.endpoints
                outcome.pages += 1
                outcome.endpoints += page.endpoints
                outcome.page_seconds.append(time.perf_counter() - page_started)
                if page.endpoints:
                    emit(
                        "ScanProjectionPageCompleted",
                        execution_id=claim.execution_id,
                        phase=next_phase,
                        page_endpoints=page.endpoints,
                        operations=page.operations,
                        requests=page.requests,
                        request_bytes=page.request_bytes,
                        processed_endpoints=processed,
                        duration_ms=_ms(time.perf_counter() - page_started),
                    )
            page_endpoints = 0
            if phase == "refreshing" and not stopping.is_set():
                guard.raise_if_lost()
                refresh_started = time.perf_counter()
                self.store.refresh_current()
                refresh_ms = _ms(time.perf_counter() - refresh_started)
                heartbeat.stop()
                if not outbox.complete(claim):
                    raise LeaseLost(LOST_BY_DATABASE, "complete")
                outcome.result = "completed"
                emit(
                    "ScanProjectionCompleted",
                    execution_id=claim.execution_id,
                    phase="done",
                    processed_endpoints=processed,
                    slice_pages=outcome.pages,
                    refresh_ms=refresh_ms,
                    slice_duration_ms=_ms(time.perf_counter() - started),
                    heartbeat_renewals=heartbeat.renewals,
                )
                return outcome
            heartbeat.stop()
            if not outbox.release(claim):
                raise LeaseLost(LOST_BY_DATABASE, "release")
            emit(
                "ScanProjectionSliceReleased",
                execution_id=claim.execution_id,
                phase=phase,
                slice_pages=outcome.pages,
                slice_endpoints=outcome.endpoints,
                processed_endpoints=processed,
                slice_duration_ms=_ms(time.perf_counter() - started),
                heartbeat_renewals=heartbeat.renewals,
                stopping=stopping.is_set(),
            )
            return outcome
        except LeaseLost as lost:
            self._lost(claim, guard, heartbeat, outcome, phase, lost, page_endpoints, started)
            return outcome
        except Exception as exc:  # noqa: BLE001 - every failure is kept on the row and retried
            heartbeat.stop()
            if guard.is_set():
                # The failure came from being cut off (lost lease, local deadline, shutdown).
                lost = LeaseLost(guard.reason or "lease_lost", guard.operation or "store")
                self._lost(claim, guard, heartbeat, outcome, phase, lost, page_endpoints, started)
                return outcome
            error = describe_error(exc)
            scheduled = outbox.retry(
                claim,
                error,
                base_seconds=es.projection_retry_base_seconds,
                max_backoff_seconds=es.projection_max_backoff_seconds,
            )
            outcome.error = error
            outcome.result = "retry" if scheduled is not None else "lease_lost"
            emit(
                "ScanProjectionOutboxError",
                level=logging.WARNING,
                execution_id=claim.execution_id,
                phase=phase,
                operation="refresh" if phase == "refreshing" else "page",
                page_endpoints=page_endpoints,
                error=error,
                attempts=scheduled.attempts if scheduled else None,
                retry_in_s=round(scheduled.retry_in_seconds, 3) if scheduled else None,
                lease_lost=scheduled is None,
                slice_duration_ms=_ms(time.perf_counter() - started),
            )
            return outcome
        finally:
            heartbeat.stop()
            outcome.heartbeat_late_seconds = list(heartbeat.late_seconds)
            outcome.duration_seconds = time.perf_counter() - started

    def _lost(
        self,
        claim: OutboxClaim,
        guard: LeaseGuard,
        heartbeat: Heartbeat,
        outcome: SliceOutcome,
        phase: str,
        lost: LeaseLost,
        page_endpoints: int,
        started: float,
    ) -> None:
        """Cut off mid-slice. Unless the database already said the row is someone else's,
        try to hand it back at once (token-checked, so this cannot touch a new owner's row)."""
        heartbeat.stop()
        released = False
        if lost.reason != LOST_BY_DATABASE and guard.reason != LOST_BY_DATABASE:
            try:
                released = outbox.release(claim)
            except Exception as exc:  # noqa: BLE001 - the lease will expire instead
                emit(
                    "ScanProjectionReleaseFailed",
                    level=logging.WARNING,
                    execution_id=claim.execution_id,
                    error=type(exc).__name__,
                )
        cancelled = lost.reason == "runner_cancelled"
        outcome.result = "cancelled" if cancelled else "lease_lost"
        outcome.error = lost.reason
        emit(
            "ScanProjectionOutboxError",
            level=logging.WARNING,
            execution_id=claim.execution_id,
            phase=phase,
            operation=lost.operation,
            page_endpoints=page_endpoints,
            error=lost.reason,
            released=released,
            slice_duration_ms=_ms(time.perf_counter() - started),
        )


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
