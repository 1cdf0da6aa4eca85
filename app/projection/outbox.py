"""The projection outbox table and its leased protocol: claim, renew, checkpoint, end (PRJ-1..6).

``scan_projection_outbox`` has one row per ports execution whose current
assets must be published (written by the final's transaction, ING-2). A worker
claims a row with one short transaction (``FOR UPDATE SKIP LOCKED`` picks the
next succeeded execution by ``available_at`` then ``execution_id``; the
``UPDATE … RETURNING`` sets a fresh claim token and lease), then works without
holding any connection. Every later write of the row — renew, checkpoint,
release, retry, complete — is a short transaction guarded by
``claim_token = :token AND lease_expires_at > now()``; zero rows means the
worker no longer owns the row (its lease expired and someone else may have it)
and the caller must stop, so a stale worker can never overwrite the new
owner's state.

Row state: ``phase`` is ``pages`` (cursor = last published execution-endpoint
id), ``refreshing`` (all pages done, only the final refresh is left) or
``done`` (``processed_at`` set). ``attempts`` counts consecutive failures and
drives the backoff (``available_at``), ``last_error`` keeps the latest one;
both clear when a page or the refresh succeeds. A row whose lease expired
while claimed (a worker crashed or stalled) is claimable again; the new claim
records that as a failure, so a row that keeps killing workers shows it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.leases import (
    OWNED,
    Backlog,
    LeaseQueue,
    claim_parameters,
    owned,
    retry_parameters,
)

# The outbox is a lease queue like the analysis queue (app/leases/ builds the shared SQL).
QUEUE = LeaseQueue("scan_projection_outbox", enqueued_column="created_at")


@dataclass(frozen=True)
class OutboxClaim:
    """A claimed row: the token proves ownership in every later write."""

    execution_id: int
    claim_token: uuid.UUID
    cursor: str | None
    phase: str
    processed_endpoints: int
    attempts: int
    recovered: bool  # the previous claim's lease had expired (crash or stall)
    lease_seconds: float
    claimed_monotonic: float  # local clock when the claim was sent: the lease ends after it


@dataclass(frozen=True)
class RetryScheduled:
    attempts: int
    retry_in_seconds: float


# The next publishable execution: succeeded, due, not under a live lease.
_CLAIM = QUEUE.claim_statement(
    """
    SELECT o.execution_id, o.claim_token IS NOT NULL AS recovered
      FROM scan_projection_outbox o
      JOIN scan_executions e ON e.id = o.execution_id
     WHERE o.processed_at IS NULL
       AND o.available_at <= now()
       AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
       AND e.status = 'succeeded'
     ORDER BY o.available_at, o.execution_id
     LIMIT 1
       FOR UPDATE OF o SKIP LOCKED
    """,
    returning=("execution_id", "claim_token", "cursor", "phase", "processed_endpoints", "attempts"),
)


_RENEW = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
     WHERE {OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_CHECKPOINT = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET cursor = :cursor, processed_endpoints = :processed, phase = :phase,
           lease_expires_at = now() + make_interval(secs => :lease),
           attempts = 0, last_error = NULL, updated_at = now()
     WHERE {OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_RELEASE = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET claim_token = NULL, lease_expires_at = NULL, available_at = now(), updated_at = now()
     WHERE {OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_RETRY = QUEUE.retry_statement()
_COMPLETE = QUEUE.complete_statement()


def _owned(claim: OutboxClaim) -> dict[str, object]:
    return owned(claim.execution_id, claim.claim_token)


def enqueue(conn: Connection, execution_id: int) -> None:
    """Queue a succeeded execution for projection, in the caller's transaction.

    The final calls this in the transaction that makes the execution succeed (ING-2),
    so an execution is succeeded exactly when its row exists. Enqueuing twice is
    harmless (a retried final).
    """
    conn.execute(
        sa.text(
            "INSERT INTO scan_projection_outbox (execution_id) VALUES (:e) ON CONFLICT DO NOTHING"
        ),
        {"e": execution_id},
    )


def claim_next(*, lease_seconds: float) -> OutboxClaim | None:
    """Claim the next publishable execution, or ``None`` when nothing is due."""
    sent_at = time.monotonic()
    # No stage events here: idle workers poll this, and a quiet runner should log nothing.
    with transaction() as conn:
        row = conn.execute(_CLAIM, claim_parameters(lease_seconds)).one_or_none()
    if row is None:
        return None
    return OutboxClaim(
        execution_id=row.execution_id,
        claim_token=row.claim_token,
        cursor=row.cursor,
        phase=row.phase,
        processed_endpoints=row.processed_endpoints,
        attempts=row.attempts,
        recovered=row.recovered,
        lease_seconds=lease_seconds,
        claimed_monotonic=sent_at,
    )


def renew(claim: OutboxClaim) -> bool:
    """Extend the lease; False: ownership lost."""
    with transaction(stage="projection_renew") as conn:
        return bool(conn.execute(_RENEW, {**_owned(claim), "lease": claim.lease_seconds}).scalar())


def checkpoint(claim: OutboxClaim, *, cursor: str | None, processed: int, phase: str) -> bool:
    """Save progress after a verified page (also renews the lease); False: ownership lost."""
    if phase not in ("pages", "refreshing"):
        raise ValueError(f"a checkpoint cannot move to phase {phase!r}")
    with transaction(stage="projection_checkpoint") as conn:
        return bool(
            conn.execute(
                _CHECKPOINT,
                {
                    **_owned(claim),
                    "cursor": cursor,
                    "processed": processed,
                    "phase": phase,
                    "lease": claim.lease_seconds,
                },
            ).scalar()
        )


def release(claim: OutboxClaim) -> bool:
    """End a slice: the row is free again and queues behind rows waiting since earlier."""
    with transaction(stage="projection_release") as conn:
        return bool(conn.execute(_RELEASE, _owned(claim)).scalar())


def retry(
    claim: OutboxClaim, error: str, *, base_seconds: float, max_backoff_seconds: float
) -> RetryScheduled | None:
    """Keep the error, count the attempt and back off; ``None``: ownership lost."""
    with transaction(stage="projection_retry") as conn:
        row = conn.execute(
            _RETRY,
            {
                **_owned(claim),
                **retry_parameters(
                    error, base_seconds=base_seconds, max_backoff_seconds=max_backoff_seconds
                ),
            },
        ).one_or_none()
    if row is None:
        return None
    return RetryScheduled(attempts=row.attempts, retry_in_seconds=float(row.retry_in))


def complete(claim: OutboxClaim) -> bool:
    """All pages and the refresh are done: ``processed_at``; False: ownership lost."""
    with transaction(stage="projection_complete") as conn:
        return bool(conn.execute(_COMPLETE, _owned(claim)).scalar())


def backlog() -> Backlog:
    """Unprocessed rows, the age of the oldest, live claims and rows holding an error."""
    return QUEUE.backlog()


def requeue_processed() -> int:
    """Project every processed execution again from its first page (a search store
    filled by ``netmap search migrate``: its current view is built by the projection)."""
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "UPDATE scan_projection_outbox SET processed_at = NULL, attempts = 0, "
                "last_error = NULL, available_at = now(), cursor = NULL, phase = 'pages', "
                "processed_endpoints = 0, updated_at = now() "
                "WHERE processed_at IS NOT NULL AND claim_token IS NULL"
            )
        ).rowcount


def discard(execution_ids: list[int]) -> float:
    """Drop the outbox rows of executions whose task was deleted: what is not projected
    yet never will be (the task purge, docs/architecture.md "Runs"). A worker holding
    one loses it at its next checkpoint; returns how many seconds such a holder's lease
    may still run (0: none in flight), so the caller waits before sweeping assets."""
    if not execution_ids:
        return 0.0
    with transaction() as conn:
        left = conn.execute(
            sa.text(
                """
                WITH gone AS (
                    DELETE FROM scan_projection_outbox WHERE execution_id = ANY(:ids)
                    RETURNING claim_token, lease_expires_at
                )
                SELECT coalesce(max(extract(epoch FROM lease_expires_at - now())), 0)
                  FROM gone WHERE claim_token IS NOT NULL AND lease_expires_at > now()
                """
            ),
            {"ids": execution_ids},
        ).scalar()
    return max(0.0, float(left or 0.0))
