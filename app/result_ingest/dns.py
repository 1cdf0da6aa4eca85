"""DNS answers and follow-up tasks (ING-7, SCN-2 "subtask generation").

DNS records are kept as facts in the store like every observation; the
answers are also written to ``scan_dns_answers`` in the confirming
transaction, so the final of a ``dns`` execution can hand the distinct
resolved addresses to scan control, which creates the follow-up task
(``app/scan_control/follow_up.py``: the parent's ports and transports, the
special-use target rules) in the same transaction. Refused addresses are
still kept as facts.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.db import transaction
from app.observability import emit
from app.result_ingest.model import DnsRecordIn
from app.scan_control.follow_up import create_child_task
from app.scan_control.ownership import OWNER_EXECUTION_IDS_SQL

ADDRESS_TYPES = ("A", "AAAA")


def record_answers(conn: Connection, execution_id: int, records: list[DnsRecordIn]) -> None:
    if not records:
        return
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        value = record.value
        if record.type in ADDRESS_TYPES:
            try:
                value = str(ipaddress.ip_address(value))
            except ValueError:
                continue  # not an address: nothing to scan, still kept as a fact
        key = (record.name, record.type, value)
        rows[key] = {
            "name": record.name,
            "type": record.type,
            "value": value,
            "ttl": record.ttl,
            "observed_at": record.observed_at.isoformat(),
        }
    conn.execute(
        sa.text(
            """
            INSERT INTO scan_dns_answers (execution_id, name, type, value, ttl, observed_at)
            SELECT :e, r.name, r.type, r.value, r.ttl, r.observed_at
            FROM jsonb_to_recordset(CAST(:rows AS jsonb))
                 AS r(name text, type text, value text, ttl integer, observed_at timestamptz)
            ON CONFLICT (execution_id, name, type, value) DO UPDATE
               SET ttl = EXCLUDED.ttl,
                   observed_at = GREATEST(scan_dns_answers.observed_at, EXCLUDED.observed_at)
            """
        ),
        {"e": execution_id, "rows": json.dumps(list(rows.values()))},
    )


def create_follow_up_task(
    conn: Connection, *, execution_id: int, task_id: int, owner_id: int, limits: ScanSettings
) -> int | None:
    """Child task scanning what the DNS execution resolved; None when nothing resolved."""
    addresses = (
        conn.execute(
            sa.text(
                "SELECT DISTINCT value FROM scan_dns_answers "
                "WHERE execution_id = :e AND type IN ('A', 'AAAA') ORDER BY value"
            ),
            {"e": execution_id},
        )
        .scalars()
        .all()
    )
    if not addresses:
        emit("DnsFollowUpSkipped", execution_id=execution_id, reason="no addresses resolved")
        return None
    return create_child_task(
        conn,
        parent_task_id=task_id,
        parent_execution_id=execution_id,
        owner_id=owner_id,
        addresses=list(addresses),
        limits=limits,
    )


# The names an owner's DNS executions resolved to an address (the host view's "dns"
# hostnames), newest first; ix_scan_dns_answers_address finds the address's answers.
_NAMES_FOR_ADDRESS = sa.text(
    f"""
    SELECT a.name, max(a.observed_at) AS last_seen
      FROM scan_dns_answers a
     WHERE a.type IN ('A', 'AAAA') AND a.value = :ip
       AND a.execution_id IN ({OWNER_EXECUTION_IDS_SQL})
     GROUP BY a.name
     ORDER BY max(a.observed_at) DESC, a.name
     LIMIT :limit
    """  # noqa: S608 - scan_control's constant; values are bound
)


def names_for_address(owner_id: int, ip: str, *, limit: int) -> list[dict[str, Any]]:
    """Names that resolved to ``ip`` (A/AAAA answers) in the owner's DNS executions."""
    with transaction() as conn:
        rows = conn.execute(
            _NAMES_FOR_ADDRESS, {"owner_id": owner_id, "ip": ip, "limit": limit}
        ).all()
    return [{"name": row.name, "last_seen": row.last_seen.isoformat()} for row in rows]
