"""One claimed execution, start to end: stage, analyse, push statuses, complete (ANA-1).

The lease kit's heartbeat (``app.leases``) renews the lease every
``[analysis] heartbeat_seconds``
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
import time
from dataclasses import dataclass

from app.analysis import changes, queue, status_sync
from app.analysis.queue import AnalysisClaim, LeaseLost
from app.config import Settings
from app.leases import Heartbeat, LeaseGuard
from app.observability import emit
from app.search.port import SearchStore, sightings_in_database, value_key_warming


@dataclass(frozen=True)
class AnalysisOutcome:
    execution_id: int
    result: str  # "completed" | "retrying" | "lease_lost"
    counts: changes.ChangeCounts | None = None
    pushed: int = 0


class AnalysisWorker:
    """Claims and analyses executions with one search store."""

    def __init__(
        self,
        settings: Settings,
        store: SearchStore,
        on_change_set: changes.ChangeSetHook | None = None,
        after_change_set: changes.ChangeSetFollowUp | None = None,
    ):
        self.settings = settings
        self.store = store
        # What commits with each change set (the alert messages; wired by the caller).
        self.on_change_set = on_change_set
        # What follows each committed change set (alerts that ask the search store).
        self.after_change_set = after_change_set

    def claim(self) -> AnalysisClaim | None:
        return queue.claim_next(lease_seconds=self.settings.analysis.lease_seconds)

    def run(self, claim: AnalysisClaim) -> AnalysisOutcome:
        config = self.settings.analysis
        started = time.perf_counter()
        counts = None
        pushed = 0
        try:
            guard = LeaseGuard(claim.lease_seconds, claimed_at=claim.claimed_monotonic)
            check = guard.raise_if_lost
            with Heartbeat(
                lambda: queue.renew(claim),
                guard,
                interval=config.heartbeat_seconds,
                name=f"analysis-heartbeat-{claim.execution_id}",
                failed_event="AnalysisHeartbeatFailed",
                event_fields={"execution_id": claim.execution_id},
            ):
                phase = claim.phase
                staged = 0
                if phase == "analyse":
                    in_database = sightings_in_database(self.store)
                    sql = in_database.execution_sightings_sql() if in_database else None
                    analysable = changes.is_analysable(claim)
                    if sql is None and analysable:
                        changes.stage_sightings(
                            claim,
                            self.store,
                            page_size=config.stage_page_size,
                            check_lease=check,
                        )
                    elif (
                        in_database is not None
                        and analysable
                        and changes.sightings_exceed(claim, sql, config.slice_endpoints)
                    ):
                        # Too large for one statement: copied into the analysis's own
                        # table, whose address order the slices follow.
                        staged = changes.stage_sightings_from_database(
                            claim,
                            in_database.execution_sightings_page_sql(),
                            page_size=config.slice_endpoints,
                            check_lease=check,
                        )
                        sql = None
                    check()
                    analysed = time.monotonic()
                    counts = changes.analyse(
                        claim,
                        sightings_sql=sql,
                        on_change_set=self.on_change_set,
                        slice_endpoints=config.slice_endpoints,
                    )
                    guard.renewed(analysed)
                    if sql is None:
                        changes.drop_staged(claim.execution_id)
                    written = sum(counts.as_dict().values())
                    self._warm_value_keys(claim, max(staged, written))
                if self.after_change_set is not None:
                    # Also on a claim recovered past ``analyse``: a crash may have come
                    # between the commit and this step (it finds nothing if it was done).
                    self.after_change_set(claim)
                pushed = status_sync.push_statuses(claim, self.store, check_lease=check)
                check()
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
            **({"slices": counts.slices} if counts else {}),
        )
        return AnalysisOutcome(claim.execution_id, "completed", counts, pushed)

    def _warm_value_keys(self, claim: AnalysisClaim, endpoints: int) -> None:
        """After a large change set, the store's value keys back into memory.

        Staging and recording that many endpoints went through PostgreSQL's shared
        buffers and pushed out the leaves the next projection looks every new value up in
        (``app.search.postgres_warming``). An optimisation only: a failure is logged, and
        the analysis completes as it would have.
        """
        threshold = self.settings.analysis.warm_after_endpoints
        warming = value_key_warming(self.store)
        if warming is None or threshold == 0 or endpoints < threshold:
            return
        started = time.perf_counter()
        try:
            blocks = warming.warm_value_keys()
        except Exception as exc:  # noqa: BLE001 - the change set is committed whatever happens here
            emit(
                "ValueKeysNotWarmed",
                level=logging.WARNING,
                execution_id=claim.execution_id,
                endpoints=endpoints,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            return
        if blocks is None:
            emit(
                "ValueKeysNotWarmed",
                execution_id=claim.execution_id,
                endpoints=endpoints,
                error="the pg_prewarm extension is not installed",
            )
            return
        emit(
            "ValueKeysWarmed",
            execution_id=claim.execution_id,
            endpoints=endpoints,
            blocks=blocks,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )
