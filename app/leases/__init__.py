"""The one lease kit: claim/renew/complete/retry SQL, the token-and-expiry guard, Heartbeat.

Background work is claimed from PostgreSQL under a lease (docs/architecture.md, "Leases"):
a row gets a fresh ``claim_token`` and a ``lease_expires_at``; every later write of that
row checks both and treats zero rows as "ownership lost". A new leased queue needs:

1. its table with ``claim_token uuid`` and ``lease_expires_at timestamptz`` (owned by
   its domain package, which also writes its own claim: the choice of the next row is
   the domain's);
2. a renew: ``LeasedRows(table, key_column).renew(key, token, lease_seconds)``, or for an
   execution-keyed queue the statements of ``LeaseQueue`` (claim, retry with backoff,
   complete, backlog);
3. while the work runs: ``guard = LeaseGuard(lease_seconds, claimed_at=…,
   runner_cancel=…)`` and ``with Heartbeat(renew_callable, guard, interval=…)``;
   the work calls ``guard.raise_if_lost()`` before every write or send and catches
   ``LeaseLost`` to stop without writing.

Nothing here knows a domain's table; the domains import this package, never the other
way round.
"""

from app.leases.guard import LOST_BY_DATABASE, LeaseGuard, LeaseLost
from app.leases.heartbeat import RENEW_RETRY_SECONDS, Heartbeat
from app.leases.sql import (
    LEASE_EXPIRED_ERROR,
    MAX_ERROR_CHARS,
    OWNED,
    Backlog,
    LeasedRows,
    LeaseQueue,
    claim_parameters,
    owned,
    retry_parameters,
)

__all__ = [
    "LEASE_EXPIRED_ERROR",
    "LOST_BY_DATABASE",
    "MAX_ERROR_CHARS",
    "OWNED",
    "RENEW_RETRY_SECONDS",
    "Backlog",
    "Heartbeat",
    "LeaseGuard",
    "LeaseLost",
    "LeaseQueue",
    "LeasedRows",
    "claim_parameters",
    "owned",
    "retry_parameters",
]
