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

LEASE_EXPIRED_ERROR = (
    "the previous claim's lease expired before it ended (worker stopped or stalled)"
)
MAX_ERROR_CHARS = 1000


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


_CLAIM = sa.text(
    """
    WITH next AS (
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
    )
    UPDATE scan_projection_outbox o
       SET claim_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => :lease),
           attempts = o.attempts + CASE WHEN next.recovered THEN 1 ELSE 0 END,
           last_error = CASE WHEN next.recovered THEN :recovered_error ELSE o.last_error END,
           updated_at = now()
      FROM next
     WHERE o.execution_id = next.execution_id
    RETURNING o.execution_id, o.claim_token, o.cursor, o.phase, o.processed_endpoints,
              o.attempts, next.recovered
    """
)

_OWNED = "execution_id = :execution_id AND claim_token = :token AND lease_expires_at > now()"

_RENEW = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
     WHERE {_OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_CHECKPOINT = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET cursor = :cursor, processed_endpoints = :processed, phase = :phase,
           lease_expires_at = now() + make_interval(secs => :lease),
           attempts = 0, last_error = NULL, updated_at = now()
     WHERE {_OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_RELEASE = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET claim_token = NULL, lease_expires_at = NULL, available_at = now(), updated_at = now()
     WHERE {_OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

# Exponential backoff with "equal jitter": a delay between half and all of
# min(max, base * 2^(attempts - 1)), so failing rows spread out instead of
# returning in lockstep. Computed in the UPDATE from the row's own count.
_RETRY = sa.text(
    f"""
    WITH delay AS (
        SELECT least(CAST(:max_backoff AS double precision),
                     CAST(:base AS double precision) * power(2, least(attempts, 40)))
               * (0.5 + random() * 0.5) AS seconds
          FROM scan_projection_outbox WHERE {_OWNED}
    )
    UPDATE scan_projection_outbox
       SET claim_token = NULL, lease_expires_at = NULL,
           attempts = attempts + 1, last_error = :error,
           available_at = now() + make_interval(secs => (SELECT seconds FROM delay)),
           updated_at = now()
     WHERE {_OWNED}
    RETURNING attempts, (SELECT seconds FROM delay) AS retry_in
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)

_COMPLETE = sa.text(
    f"""
    UPDATE scan_projection_outbox
       SET processed_at = now(), phase = 'done', claim_token = NULL, lease_expires_at = NULL,
           attempts = 0, last_error = NULL, updated_at = now()
     WHERE {_OWNED}
    RETURNING 1
    """  # noqa: S608 - only the constant ownership predicate is spliced in
)


def _owned(claim: OutboxClaim) -> dict[str, object]:
    return {"execution_id": claim.execution_id, "token": claim.claim_token}


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
        row = conn.execute(
            _CLAIM, {"lease": lease_seconds, "recovered_error": LEASE_EXPIRED_ERROR}
        ).one_or_none()
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
                "error": error[:MAX_ERROR_CHARS],
                "base": base_seconds,
                "max_backoff": max_backoff_seconds,
            },
        ).one_or_none()
    if row is None:
        return None
    return RetryScheduled(attempts=row.attempts, retry_in_seconds=float(row.retry_in))


def complete(claim: OutboxClaim) -> bool:
    """All pages and the refresh are done: ``processed_at``; False: ownership lost."""
    with transaction(stage="projection_complete") as conn:
        return bool(conn.execute(_COMPLETE, _owned(claim)).scalar())


@dataclass(frozen=True)
class Backlog:
    rows: int
    oldest_age_seconds: float
    running: int
    retrying: int


def backlog() -> Backlog:
    """Unprocessed rows, the age of the oldest, live claims and rows holding an error."""
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                """
                SELECT count(*) AS rows,
                       coalesce(extract(epoch FROM now() - min(created_at)), 0) AS oldest,
                       count(*) FILTER (WHERE claim_token IS NOT NULL
                                          AND lease_expires_at > now()) AS running,
                       count(*) FILTER (WHERE last_error IS NOT NULL) AS retrying
                  FROM scan_projection_outbox
                 WHERE processed_at IS NULL
                """
            )
        ).one()
    return Backlog(
        rows=row.rows,
        oldest_age_seconds=float(row.oldest),
        running=row.running,
        retrying=row.retrying,
    )
