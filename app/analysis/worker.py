"""One claimed execution, start to end: stage, analyse, push statuses, complete (ANA-1).

A heartbeat thread renews the lease every ``[analysis] heartbeat_seconds``
while the worker stages pages or pushes statuses (during the analysis
statement itself the queue row is locked by the worker's own transaction, so
nobody can take it; the renewal simply waits). A renewal that finds the row
no longer ours makes every later step stop with ``LeaseLost`` before it
writes. A failure keeps the error and backs the row off; a crash leaves the
lease to expire, and the next claim continues from the committed phase: the
change set is computed once, the status push is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from app.analysis import changes, queue, status_sync
from app.analysis.queue import AnalysisClaim, LeaseLost
from app.config import Settings
from app.observability import emit
from app.search.port import SearchStore, sightings_in_database


@dataclass(frozen=True)
class AnalysisOutcome:
    execution_id: int
    result: str  # "completed" | "retrying" | "lease_lost"
    counts: changes.ChangeCounts | None = None
    pushed: int = 0


class _Heartbeat:
    def __init__(self, claim: AnalysisClaim, interval: float):
        self.claim = claim
        self.interval = interval
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"analysis-heartbeat-{claim.execution_id}", daemon=True
        )
        self._deadline = claim.claimed_monotonic + claim.lease_seconds * 0.9

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def extended(self, started: float) -> None:
        """The lease was extended by a write that began at ``started`` (monotonic)."""
        self._deadline = max(self._deadline, started + self.claim.lease_seconds * 0.9)

    def check(self) -> None:
        if self.lost.is_set() or time.monotonic() >= self._deadline:
            raise LeaseLost(f"analysis of execution {self.claim.execution_id}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            started = time.monotonic()
            try:
                owned = queue.renew(self.claim)
            except Exception as exc:  # noqa: BLE001 - database trouble: the deadline still bounds us
                emit(
                    "AnalysisHeartbeatFailed",
                    level=logging.WARNING,
                    execution_id=self.claim.execution_id,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                continue
            if owned is None:
                continue  # our own analysis holds the row; it extends the lease itself
            if not owned:
                self.lost.set()
                return
            self._deadline = max(self._deadline, started + self.claim.lease_seconds * 0.9)


class AnalysisWorker:
    """Claims and analyses executions with one search store."""

    def __init__(self, settings: Settings, store: SearchStore):
        self.settings = settings
        self.store = store

    def claim(self) -> AnalysisClaim | None:
        return queue.claim_next(lease_seconds=self.settings.analysis.lease_seconds)

    def run(self, claim: AnalysisClaim) -> AnalysisOutcome:
        config = self.settings.analysis
        started = time.perf_counter()
        counts = None
        pushed = 0
        try:
            with _Heartbeat(claim, config.heartbeat_seconds) as beat:
                phase = claim.phase
                if phase == "analyse":
                    in_database = sightings_in_database(self.store)
                    sql = in_database.execution_sightings_sql() if in_database else None
                    if sql is None and claim.kind == "ports" and claim.status == "succeeded":
                        changes.stage_sightings(
                            claim,
                            self.store,
                            page_size=config.stage_page_size,
                            check_lease=beat.check,
                        )
                    beat.check()
                    counts = changes.analyse(claim, sightings_sql=sql, alerts=self.settings.alerts)
                    beat.extended(time.monotonic())
                    if sql is None:
                        changes.drop_staged(claim.execution_id)
                pushed = status_sync.push_statuses(claim, self.store, check_lease=beat.check)
                beat.check()
            if not queue.complete(claim):
                raise LeaseLost(f"analysis of execution {claim.execution_id} (complete)")
        except LeaseLost as exc:
            emit(
                "AnalysisLeaseLost",
                level=logging.WARNING,
                execution_id=claim.execution_id,
                operation=str(exc),
            )
            return AnalysisOutcome(claim.execution_id, "lease_lost", counts, pushed)
        except Exception as exc:  # noqa: BLE001 - any failure is kept on the row and retried
            error = f"{type(exc).__name__}: {exc}"
            retry_in = queue.retry(
                claim,
                error,
                base_seconds=config.retry_base_seconds,
                max_backoff_seconds=config.max_backoff_seconds,
            )
            emit(
                "AnalysisFailed",
                level=logging.ERROR,
                execution_id=claim.execution_id,
                error=error[:300],
                retry_in_seconds=retry_in,
            )
            return AnalysisOutcome(claim.execution_id, "retrying", counts, pushed)
        emit(
            "AnalysisCompleted",
            execution_id=claim.execution_id,
            owner_id=claim.owner_id,
            recovered=claim.recovered,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
            pushed=pushed,
            **(counts.as_dict() if counts else {}),
        )
        return AnalysisOutcome(claim.execution_id, "completed", counts, pushed)
