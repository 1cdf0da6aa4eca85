"""The analysis queue's leased protocol: claim, renew, advance, retry, complete, prune (ANA-1).

``scan_analysis_queue`` has one row per finished execution, written by
``enqueue`` in the final's transaction; this module owns the table. A worker
claims a row in one short transaction (``FOR UPDATE SKIP LOCKED``) with a
fresh claim token and lease, like projection work; every later write of the
row is guarded by
``claim_token = :token AND lease_expires_at > now()`` and zero rows means the
worker lost the row and must stop. A row whose lease expired while claimed (a
crashed or stalled worker) is claimable again and the claim counts that as a
failed attempt.

Order (ANA-1): a row is claimable only when no other unprocessed row of the
same owner finished earlier (finish time, then execution id), so one owner's
executions are analysed one at a time in finish order, and only once the
execution's projection is ready (or it has nothing to project: DNS-only, or
not succeeded), because the analysis pushes status onto current assets the
projection must already have written.

Phases: ``analyse`` (the change set is not committed yet) → ``publish`` (the
change set is committed; statuses still to be pushed to the search store) →
``done`` (``processed_at`` set). Processed rows are deleted after
``[analysis] retention_days``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.leases import (
    OWNED,
    Backlog,
    LeaseLost,
    LeaseQueue,
    claim_parameters,
    owned,
    retry_parameters,
)
from app.projection.status import projection_status_sql

PRUNE_BATCH_ROWS = 5000
# A lease queue like the projection outbox (app/leases/ builds the shared SQL).
QUEUE = LeaseQueue("scan_analysis_queue", enqueued_column="enqueued_at")
_RETRY = QUEUE.retry_statement()
_COMPLETE = QUEUE.complete_statement(in_phase="publish")


@dataclass(frozen=True)
class AnalysisClaim:
    execution_id: int
    task_id: int
    owner_id: int
    kind: str  # "ports" | "dns" | "import"
    status: str  # the execution's status
    finished_at: datetime
    targets: tuple[str, ...]
    ports: str
    transports: tuple[str, ...]
    claim_token: uuid.UUID
    phase: str
    attempts: int
    recovered: bool
    lease_seconds: float
    claimed_monotonic: float
    # The execution's run was cancelled: its sightings count, its absences do not.
    run_cancelled: bool = False
    # The run the execution belongs to (its change set is part of the run's).
    run_id: int | None = None


# The execution's order key; an execution without a finish time (it never ended)
# sorts by its last update, so it can neither block nor jump its owner's queue forever.
_FINISHED = "coalesce(e.finished_at, e.updated_at)"

# The next analysable execution: due, not under a live lease, its projection ready, and
# no earlier-finished unprocessed execution of the same owner ahead of it (ANA-1).
_CLAIM = QUEUE.claim_statement(
    f"""
    SELECT q.execution_id, q.claim_token IS NOT NULL AS recovered
      FROM scan_analysis_queue q
      JOIN scan_executions e ON e.id = q.execution_id
      JOIN scan_tasks t ON t.id = e.task_id
     WHERE q.processed_at IS NULL
       AND q.available_at <= now()
       AND (q.lease_expires_at IS NULL OR q.lease_expires_at <= now())
       AND (e.status <> 'succeeded'
            OR {projection_status_sql("e")} IN ('ready', 'not_applicable'))
       AND NOT EXISTS (
           SELECT 1
             FROM scan_analysis_queue q2
             JOIN scan_executions e2 ON e2.id = q2.execution_id
             JOIN scan_tasks t2 ON t2.id = e2.task_id
            WHERE q2.processed_at IS NULL
              AND t2.owner_id = t.owner_id
              AND q2.execution_id <> q.execution_id
              AND ({_FINISHED.replace("e.", "e2.")}, e2.id) < ({_FINISHED}, e.id))
     ORDER BY {_FINISHED}, e.id
     LIMIT 1
       FOR UPDATE OF q SKIP LOCKED
    """,  # noqa: S608 - fragments are module constants; values are bound
    returning=("execution_id", "claim_token", "phase", "attempts"),
)


def _owned(claim: AnalysisClaim) -> dict[str, object]:
    return owned(claim.execution_id, claim.claim_token)


def enqueue(conn: Connection, execution_id: int, task_id: int) -> None:
    """Queue a finished execution for analysis, in the caller's transaction.

    The upload's final calls this in the transaction that ends the execution
    (ING-2); enqueuing twice is harmless (a retried final).
    """
    conn.execute(
        sa.text(
            "INSERT INTO scan_analysis_queue (execution_id, task_id) VALUES (:e, :t) "
            "ON CONFLICT DO NOTHING"
        ),
        {"e": execution_id, "t": task_id},
    )


def run_awaits_analysis(conn: Connection, run_id: int, *, besides: int | None = None) -> bool:
    """True while an execution of the run (other than ``besides``) has a change set still to
    commit (queued, or claimed and not past ``analyse``). A row being analysed by another
    transaction counts until that transaction commits."""
    return bool(
        conn.execute(
            sa.text(
                """
                SELECT EXISTS (
                    SELECT 1 FROM scan_executions e
                      JOIN scan_analysis_queue q ON q.execution_id = e.id
                     WHERE e.run_id = :run AND e.id IS DISTINCT FROM :besides
                       AND q.processed_at IS NULL AND q.phase = 'analyse')
                """
            ),
            {"run": run_id, "besides": besides},
        ).scalar()
    )


def claim_next(*, lease_seconds: float) -> AnalysisClaim | None:
    """Claim the next analysable execution, or ``None`` when nothing is due."""
    sent_at = time.monotonic()
    with transaction() as conn:
        row = conn.execute(_CLAIM, claim_parameters(lease_seconds)).one_or_none()
        if row is None:
            return None
        execution = conn.execute(
            sa.text(
                f"""
                SELECT e.task_id, e.run_id, t.owner_id, e.kind, e.status,
                       {_FINISHED} AS finished_at,
                       e.targets, e.ports, e.transports,
                       EXISTS (SELECT 1 FROM task_runs r
                                WHERE r.id = e.run_id AND r.status = 'cancelled')
                       AS run_cancelled
                  FROM scan_executions e JOIN scan_tasks t ON t.id = e.task_id
                 WHERE e.id = :id
                """  # noqa: S608 - fragments are module constants; values are bound
            ),
            {"id": row.execution_id},
        ).one()
    targets = execution.targets if isinstance(execution.targets, list) else []
    return AnalysisClaim(
        execution_id=row.execution_id,
        task_id=execution.task_id,
        owner_id=execution.owner_id,
        kind=execution.kind,
        status=execution.status,
        finished_at=execution.finished_at,
        targets=tuple(str(t) for t in targets),
        ports=execution.ports,
        transports=tuple(execution.transports),
        claim_token=row.claim_token,
        phase=row.phase,
        attempts=row.attempts,
        recovered=row.recovered,
        lease_seconds=lease_seconds,
        claimed_monotonic=sent_at,
        run_cancelled=bool(execution.run_cancelled),
        run_id=execution.run_id,
    )


def hold(conn: Connection, claim: AnalysisClaim, *, phase: str) -> None:
    """Inside the caller's transaction: prove ownership, extend the lease, lock the row.

    The row stays locked until that transaction ends, so no other worker can
    claim it meanwhile even if the lease runs out during a long statement.
    """
    owned = conn.execute(
        sa.text(
            f"""
            UPDATE scan_analysis_queue
               SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
             WHERE {OWNED} AND phase = :phase
            RETURNING 1
            """  # noqa: S608 - fragments are module constants; values are bound
        ),
        {**_owned(claim), "lease": claim.lease_seconds, "phase": phase},
    ).scalar()
    if not owned:
        raise LeaseLost(f"analysis of execution {claim.execution_id} ({phase})")


def advance(conn: Connection, claim: AnalysisClaim, *, phase: str) -> None:
    """Inside the caller's transaction (after ``hold``): move to ``phase``, clear errors.

    The lease restarts from the statement's end (``clock_timestamp``), not from the
    transaction's start, so a long analysis leaves its worker a whole lease to go on.
    """
    conn.execute(
        sa.text(
            "UPDATE scan_analysis_queue SET phase = :phase, attempts = 0, last_error = NULL, "
            "lease_expires_at = clock_timestamp() + make_interval(secs => :lease), "
            "updated_at = now() WHERE execution_id = :execution_id AND claim_token = :token"
        ),
        {**_owned(claim), "phase": phase, "lease": claim.lease_seconds},
    )


def renew(claim: AnalysisClaim) -> bool | None:
    """Extend the lease. False: ownership lost; None: the row is locked, not renewed.

    While the worker's own analysis transaction holds the row (``hold``), nobody
    else can claim it, so a renewal does not wait for that lock: it skips the
    beat, and the analysis extends the lease itself when it commits (``advance``).
    """
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                f"""
                WITH lockable AS (
                    SELECT execution_id FROM scan_analysis_queue
                     WHERE execution_id = :execution_id
                       FOR UPDATE SKIP LOCKED
                ), renewed AS (
                    UPDATE scan_analysis_queue
                       SET lease_expires_at = now() + make_interval(secs => :lease),
                           updated_at = now()
                     WHERE {OWNED} AND execution_id IN (SELECT execution_id FROM lockable)
                    RETURNING 1
                )
                SELECT (SELECT count(*) FROM renewed) AS renewed,
                       (SELECT count(*) FROM lockable) AS lockable,
                       (SELECT claim_token = :token FROM scan_analysis_queue
                         WHERE execution_id = :execution_id) AS ours
                """  # noqa: S608 - fragments are module constants; values are bound
            ),
            {**_owned(claim), "lease": claim.lease_seconds},
        ).one()
    if row.renewed:
        return True
    if not row.lockable and row.ours:
        return None
    return False


def complete(claim: AnalysisClaim) -> bool:
    """Statuses pushed: the row is processed; False: ownership lost."""
    with transaction() as conn:
        return bool(conn.execute(_COMPLETE, _owned(claim)).scalar())


def retry(
    claim: AnalysisClaim, error: str, *, base_seconds: float, max_backoff_seconds: float
) -> float | None:
    """Keep the error, count the attempt, back off (equal jitter); ``None``: ownership lost."""
    with transaction() as conn:
        row = conn.execute(
            _RETRY,
            {
                **_owned(claim),
                **retry_parameters(
                    error, base_seconds=base_seconds, max_backoff_seconds=max_backoff_seconds
                ),
            },
        ).one_or_none()
    return None if row is None else float(row.retry_in)


def backlog() -> Backlog:
    """Unprocessed rows, the age of the oldest, live claims and rows holding an error."""
    return QUEUE.backlog()


def prune_processed(*, retention_days: int) -> int:
    """Delete processed rows older than the retention, in short batches; returns the count."""
    deleted = 0
    while True:
        with transaction() as conn:
            n = conn.execute(
                sa.text(
                    """
                    DELETE FROM scan_analysis_queue
                     WHERE execution_id IN (
                         SELECT execution_id FROM scan_analysis_queue
                          WHERE processed_at IS NOT NULL
                            AND processed_at < now() - make_interval(days => :days)
                          LIMIT :batch)
                    """
                ),
                {"days": retention_days, "batch": PRUNE_BATCH_ROWS},
            ).rowcount
        deleted += n
        if n < PRUNE_BATCH_ROWS:
            return deleted
