"""The scanner protocol's lease calls as services: claim, renewal, failure (SCN-3).

Each is one short transaction. What the agent reports about itself (version, host,
engines) is kept in the same transaction as the call it came with
(``app.identity.scanners.record_agent_report``; unchanged values write nothing), so a
claim or a renewal is also the scanner's sign of life.
"""

from __future__ import annotations

from typing import Any

from app.db import transaction
from app.identity.scanners import record_agent_report
from app.scan_control.dispatch import (
    claim_next_execution,
    fail_execution,
    renew_execution_lease,
)


def claim(scanner_id: int, report: Any, *, kinds: tuple[str, ...], lease_seconds: int):
    """The next execution this scanner may run (None: nothing queued for it)."""
    with transaction() as conn:
        record_agent_report(conn, scanner_id, report)
        return claim_next_execution(
            conn, scanner_id=scanner_id, lease_seconds=lease_seconds, kinds=kinds
        )


def renew(scanner_id: int, report: Any, *, execution_id: int, claim_token, lease_seconds: int):
    """Extend the execution's lease; returns its new expiry."""
    with transaction() as conn:
        record_agent_report(conn, scanner_id, report)
        return renew_execution_lease(
            conn,
            execution_id=execution_id,
            scanner_id=scanner_id,
            claim_token=claim_token,
            lease_seconds=lease_seconds,
        )


def fail(scanner_id: int, *, execution_id: int, claim_token, reason: str) -> bool:
    """The scanner gives the execution up as failed; False for a repeated call."""
    with transaction() as conn:
        return fail_execution(
            conn,
            execution_id=execution_id,
            scanner_id=scanner_id,
            claim_token=claim_token,
            reason=reason,
        )
