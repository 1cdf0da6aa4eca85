"""DNS answers and follow-up tasks (ING-7, SCN-2 "subtask generation").

DNS records are kept as facts in the store like every observation; the
answers are also written to ``scan_dns_answers`` in the confirming
transaction, so the final of a ``dns`` execution can create the follow-up
task from PostgreSQL alone: one child task (``parent_task_id`` set) scanning
the distinct resolved addresses with the parent's ports and transports.
The follow-up task obeys the same target rules as ``POST /api/tasks``:
resolved addresses in a special-use class ``[scan] special_use_targets``
refuses (a name resolving to 169.254.169.254, say) are kept as facts but not
scanned (``DnsFollowUpTargetsRefused``).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.observability import emit
from app.result_ingest.model import DnsRecordIn
from app.scan_control.creation import TaskRequest, create_task
from app.scan_control.targets import ParsedTargets, refused_special_use

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
    parent = conn.execute(
        sa.text("SELECT name, ports, transports FROM scan_tasks WHERE id = :id"), {"id": task_id}
    ).one()
    networks = []
    refused: dict[str, int] = {}
    for address in addresses:
        try:
            network = ipaddress.ip_network(address)
        except ValueError:
            refused["not_an_address"] = refused.get("not_an_address", 0) + 1
            continue
        special = refused_special_use(network, limits.special_use_targets)
        if special is not None:
            refused[special] = refused.get(special, 0) + 1
            continue
        networks.append(network)
    if refused:
        emit("DnsFollowUpTargetsRefused", execution_id=execution_id, classes=refused)
    if not networks:
        emit("DnsFollowUpSkipped", execution_id=execution_id, reason="no scannable addresses")
        return None
    if len(networks) > limits.max_addresses_per_task:
        emit(
            "DnsFollowUpTruncated",
            execution_id=execution_id,
            resolved=len(networks),
            limit=limits.max_addresses_per_task,
        )
        networks = networks[: limits.max_addresses_per_task]
    request = TaskRequest(
        name=f"{parent.name[:180]} (resolved)",
        targets=ParsedTargets(networks=networks, domains=[]),
        ports=parent.ports,
        transports=list(parent.transports),
    )
    child_id = create_task(
        conn,
        owner_id=owner_id,
        request=request,
        limits=limits,
        parent_task_id=task_id,
        parent_execution_id=execution_id,
        # Resolved addresses are the DNS task's business, not targets the owner entered.
        register_targets=False,
    )
    emit(
        "DnsFollowUpCreated",
        execution_id=execution_id,
        child_task_id=child_id,
        addresses=len(networks),
    )
    return child_id
