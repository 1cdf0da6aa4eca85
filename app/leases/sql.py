"""The lease SQL the queues share: claim, renew, retry with backoff, complete, backlog.

Every leased row carries ``claim_token`` and ``lease_expires_at`` (docs/architecture.md,
rule: leases): a claim sets a fresh token and lease; every later write repeats the
ownership predicate and zero rows means the worker lost the row.

- ``LeasedRows(table, key_column, condition)``: any leased table (exports, report jobs,
  periodic jobs …): ``renew(key, token, lease_seconds)`` extends an owned, unexpired
  lease; False means ownership lost.
- ``LeaseQueue(table, enqueued_column)``: the execution-keyed work queues
  (``scan_projection_outbox``, ``scan_analysis_queue``): the claim, retry-with-backoff
  and complete statements and the backlog.

Each owning package keeps its table, its own choice of the next row and its own extra
steps (checkpoints, phases, statuses); this module only builds the statements whose
shape is the same for all. Table and column names come from the owning module's
constants, never from input.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from app.db import transaction

LEASE_EXPIRED_ERROR = (
    "the previous claim's lease expired before it ended (worker stopped or stalled)"
)
MAX_ERROR_CHARS = 1000

# Ownership: the token of this claim, and a lease that has not run out.
OWNED = "execution_id = :execution_id AND claim_token = :token AND lease_expires_at > now()"


def owned(execution_id: int, token: uuid.UUID) -> dict[str, object]:
    return {"execution_id": execution_id, "token": token}


@dataclass(frozen=True)
class LeasedRows:
    """A table whose rows are claimed with ``claim_token`` + ``lease_expires_at``.

    ``condition`` is an extra SQL predicate an owned row must also meet (e.g.
    ``status = 'building'``); constant text of the owner, never input.
    """

    table: str
    key_column: str
    condition: str = ""

    def renew_statement(self) -> sa.TextClause:
        extra = f" AND {self.condition}" if self.condition else ""
        return sa.text(
            f"""
            UPDATE {self.table}
               SET lease_expires_at = now() + make_interval(secs => :lease)
             WHERE {self.key_column} = :key AND claim_token = :token
               AND lease_expires_at > now(){extra}
            RETURNING 1
            """  # noqa: S608 - table, key and condition are the owner's constants
        )

    def renew(self, key: object, token: uuid.UUID, lease_seconds: float) -> bool:
        """Extend the lease of the owned row; False: ownership lost (or the lease ran out)."""
        with transaction() as conn:
            row = conn.execute(
                self.renew_statement(), {"key": key, "token": token, "lease": lease_seconds}
            ).scalar()
        return bool(row)


@dataclass(frozen=True)
class Backlog:
    rows: int
    oldest_age_seconds: float
    running: int
    retrying: int


@dataclass(frozen=True)
class LeaseQueue:
    """One queue table keyed by ``execution_id`` with the lease columns."""

    table: str
    enqueued_column: str  # when a row was queued, for the backlog's oldest age

    def claim_statement(self, candidate_sql: str, returning: Sequence[str]) -> sa.TextClause:
        """Claim the row ``candidate_sql`` picks (a SELECT of ``execution_id`` and
        ``recovered`` that ends ``FOR UPDATE … SKIP LOCKED``): fresh token and lease; a
        recovered row (its previous lease expired) counts a failed attempt.
        Parameters: ``claim_parameters``; ``returning`` columns are of the queue row."""
        columns = ", ".join(f"q.{column}" for column in returning)
        return sa.text(
            f"""
            WITH next AS ({candidate_sql})
            UPDATE {self.table} q
               SET claim_token = gen_random_uuid(),
                   lease_expires_at = now() + make_interval(secs => :lease),
                   attempts = q.attempts + CASE WHEN next.recovered THEN 1 ELSE 0 END,
                   last_error = CASE WHEN next.recovered THEN :recovered_error
                                     ELSE q.last_error END,
                   updated_at = now()
              FROM next
             WHERE q.execution_id = next.execution_id
            RETURNING {columns}, next.recovered
            """  # noqa: S608 - table, columns and candidate are the owner's constants
        )

    def retry_statement(self) -> sa.TextClause:
        """Give the row up with its error, count the attempt, and make it available again
        after an exponential backoff with "equal jitter": between half and all of
        min(max, base * 2^attempts), so failing rows spread out instead of returning in
        lockstep. Returns ``attempts`` and ``retry_in`` (seconds); no row: ownership lost."""
        return sa.text(
            f"""
            WITH delay AS (
                SELECT least(CAST(:max_backoff AS double precision),
                             CAST(:base AS double precision) * power(2, least(attempts, 40)))
                       * (0.5 + random() * 0.5) AS seconds
                  FROM {self.table} WHERE {OWNED}
            )
            UPDATE {self.table}
               SET claim_token = NULL, lease_expires_at = NULL,
                   attempts = attempts + 1, last_error = :error,
                   available_at = now() + make_interval(secs => (SELECT seconds FROM delay)),
                   updated_at = now()
             WHERE {OWNED}
            RETURNING attempts, (SELECT seconds FROM delay) AS retry_in
            """  # noqa: S608 - the table and the ownership predicate are constants
        )

    def complete_statement(self, *, in_phase: str | None = None) -> sa.TextClause:
        """Mark the owned row processed (``phase = 'done'``) and end the claim; with
        ``in_phase`` only from that phase. Returns 1; no row: ownership lost."""
        phase = " AND phase = :in_phase" if in_phase else ""
        statement = sa.text(
            f"""
            UPDATE {self.table}
               SET processed_at = now(), phase = 'done', claim_token = NULL,
                   lease_expires_at = NULL, attempts = 0, last_error = NULL, updated_at = now()
             WHERE {OWNED}{phase}
            RETURNING 1
            """  # noqa: S608 - the table and the ownership predicate are constants
        )
        return statement.bindparams(in_phase=in_phase) if in_phase else statement

    def backlog(self) -> Backlog:
        """Unprocessed rows, the age of the oldest, live claims and rows holding an error."""
        with transaction() as conn:
            row = conn.execute(
                sa.text(
                    f"""
                    SELECT count(*) AS rows,
                           coalesce(extract(epoch FROM now() - min({self.enqueued_column})), 0)
                               AS oldest,
                           count(*) FILTER (WHERE claim_token IS NOT NULL
                                              AND lease_expires_at > now()) AS running,
                           count(*) FILTER (WHERE last_error IS NOT NULL) AS retrying
                      FROM {self.table}
                     WHERE processed_at IS NULL
                    """  # noqa: S608 - the table and column are the owner's constants
                )
            ).one()
        return Backlog(
            rows=row.rows,
            oldest_age_seconds=float(row.oldest),
            running=row.running,
            retrying=row.retrying,
        )


def claim_parameters(lease_seconds: float) -> dict[str, object]:
    return {"lease": lease_seconds, "recovered_error": LEASE_EXPIRED_ERROR}


def retry_parameters(
    error: str, *, base_seconds: float, max_backoff_seconds: float
) -> dict[str, object]:
    return {
        "error": error[:MAX_ERROR_CHARS],
        "base": base_seconds,
        "max_backoff": max_backoff_seconds,
    }
