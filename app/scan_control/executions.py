"""An execution row as the other domains see it, and the writes uploads make to it.

``scan_executions`` belongs to scan control. Result ingest needs the row
locked while it checks a claim and decides about a batch, a predicate that
says "this token still holds the claim" inside its own statements, and the
final's "succeeded" write; they take the caller's open connection, so the
final keeps its single transaction (ING-2) while the SQL stays here.

``ExecutionRow`` is the one mapping of an execution row: the claim's
``RETURNING``, the upload's lock and the creation of an import execution
select the same columns (``EXECUTION_COLUMNS``) and go through
``execution_from_row``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from app.errors import Conflict, NotFound

# Every column of ExecutionRow; ``e`` is scan_executions, ``t`` its task.
EXECUTION_COLUMNS = """
    e.id, e.task_id, t.owner_id, t.parent_task_id, e.kind, e.status, e.scanner_id,
    e.claim_token, e.lease_expires_at,
    (e.lease_expires_at IS NOT NULL AND e.lease_expires_at > now()) AS lease_valid,
    e.attempts, e.started_at, e.targets, e.ports, e.transports, e.profile
"""


@dataclass(frozen=True)
class ExecutionRow:
    id: int
    task_id: int
    owner_id: int
    parent_task_id: int | None
    kind: str
    status: str
    scanner_id: int | None
    claim_token: UUID | None
    lease_expires_at: datetime | None
    lease_valid: bool
    attempts: int
    started_at: datetime | None
    targets: list[str]
    ports: str
    transports: tuple[str, ...]
    profile: str = "standard"  # quick | standard | deep: what the scanner probes (issue 37)

    def holds_claim(self, token: UUID) -> bool:
        return self.status == "running" and self.claim_token == token and self.lease_valid

    def public(self) -> dict[str, Any]:
        """What a scanner receives when it claims the execution."""
        return {
            "id": self.id,
            "task_id": self.task_id,
            "kind": self.kind,
            "claim_token": str(self.claim_token),
            "lease_expires_at": (
                self.lease_expires_at.isoformat() if self.lease_expires_at else None
            ),
            "targets": self.targets,
            "ports": self.ports,
            "transports": list(self.transports),
            "profile": self.profile,
            "attempt": self.attempts,
        }


def execution_from_row(row: Row) -> ExecutionRow:
    return ExecutionRow(
        id=row.id,
        task_id=row.task_id,
        owner_id=row.owner_id,
        parent_task_id=row.parent_task_id,
        kind=row.kind,
        status=row.status,
        scanner_id=row.scanner_id,
        claim_token=row.claim_token,
        lease_expires_at=row.lease_expires_at,
        lease_valid=row.lease_valid,
        attempts=row.attempts,
        started_at=row.started_at,
        targets=list(row.targets),
        ports=row.ports,
        transports=tuple(row.transports),
        profile=row.profile,
    )


def claim_next(conn: Connection, *, scanner_id: int, lease_seconds: int, kinds: list[str]):
    """The oldest available queued execution of ``kinds``, now running under a fresh claim."""
    row = conn.execute(
        sa.text(
            f"""
            WITH next AS (
                SELECT id FROM scan_executions
                WHERE status = 'queued' AND available_at <= now() AND kind = ANY(:kinds)
                ORDER BY available_at, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED
            )
            UPDATE scan_executions e
               SET status = 'running', scanner_id = :scanner_id,
                   claim_token = gen_random_uuid(),
                   lease_expires_at = now() + make_interval(secs => :lease),
                   attempts = e.attempts + 1,
                   started_at = COALESCE(e.started_at, now()),
                   updated_at = now()
              FROM next, scan_tasks t
             WHERE e.id = next.id AND t.id = e.task_id
            RETURNING {EXECUTION_COLUMNS}
            """  # noqa: S608 - EXECUTION_COLUMNS is a module constant; values are bound
        ),
        {"scanner_id": scanner_id, "lease": lease_seconds, "kinds": kinds},
    ).one_or_none()
    return None if row is None else execution_from_row(row)


def lock_for_upload(conn: Connection, execution_id: int, scanner_id: int | None) -> ExecutionRow:
    """The execution row, locked until the caller's transaction ends.

    ``scanner_id`` None is the importer, which owns only the executions no scanner
    holds (kind ``import``); any other mismatch is "not found" (a scanner never learns
    about another scanner's executions).
    """
    row = conn.execute(
        sa.text(
            f"""
            SELECT {EXECUTION_COLUMNS}
            FROM scan_executions e JOIN scan_tasks t ON t.id = e.task_id
            WHERE e.id = :id
            FOR UPDATE OF e
            """  # noqa: S608 - EXECUTION_COLUMNS is a module constant; values are bound
        ),
        {"id": execution_id},
    ).one_or_none()
    if (
        row is None
        or row.scanner_id != scanner_id
        or (scanner_id is None and row.kind != "import")  # the importer writes imports only
    ):
        raise NotFound("execution not found", code="execution_not_found")
    if row.status == "cancelled":
        raise execution_cancelled(execution_id)
    return execution_from_row(row)


def execution_cancelled(execution_id: int) -> Conflict:
    """The answer to a scanner still working on an execution whose run was cancelled."""
    return Conflict(
        "the execution's run was cancelled; stop scanning it",
        code="execution_cancelled",
        details={"execution_id": execution_id},
    )


def raise_if_cancelled(conn: Connection, execution_id: int) -> None:
    """``execution_cancelled`` when the execution was cancelled (a claim check failed and
    the caller wants to tell the scanner why)."""
    status = conn.execute(
        sa.text("SELECT status FROM scan_executions WHERE id = :id"), {"id": execution_id}
    ).scalar()
    if status == "cancelled":
        raise execution_cancelled(execution_id)


def succeeded_claim(conn: Connection, execution_id: int) -> UUID | None:
    """The claim token an execution succeeded with; None while it has not succeeded.

    Upload receipts pending under any other token belong to a dead attempt (ING-18).
    """
    return conn.execute(
        sa.text("SELECT claim_token FROM scan_executions WHERE id = :id AND status = 'succeeded'"),
        {"id": execution_id},
    ).scalar()


def claim_held_sql(execution_id: str, token: str) -> str:
    """SQL condition: the execution ``execution_id`` (a column or a bind parameter) is
    running under claim ``token`` (a bind parameter) with an unexpired lease.

    For a caller's own statement, so its write and the claim check are one statement
    (no window between a check and the write).
    """
    return (
        "EXISTS (SELECT 1 FROM scan_executions x "  # noqa: S608 - arguments are our own column/parameter names
        f"WHERE x.id = {execution_id} AND x.claim_token = {token} "
        "AND x.status = 'running' AND x.lease_expires_at > now())"
    )


def mark_succeeded(
    conn: Connection, execution_id: int, *, observations: int, endpoints: int, ips: int
) -> None:
    """The final's write: the execution succeeded with these counts (ING-2).

    The caller holds the row lock from ``lock_for_upload`` and has checked the claim.
    """
    conn.execute(
        sa.text(
            """
            UPDATE scan_executions
               SET status = 'succeeded', finished_at = now(), updated_at = now(),
                   observation_count = :observations, endpoint_count = :endpoints,
                   ip_count = :ips, last_error = NULL
             WHERE id = :id
            """
        ),
        {"id": execution_id, "observations": observations, "endpoints": endpoints, "ips": ips},
    )
