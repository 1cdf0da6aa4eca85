"""Child tasks: a DNS task's follow-up scan of the addresses it resolved (SCN-2).

Result ingest knows what a DNS execution resolved; the task it becomes is
scan control's: one child task (``parent_task_id`` set) scanning the distinct
addresses with the parent's ports and transports, created in the caller's
transaction (the final's, ING-2). The child obeys the same target rules as
``POST /api/tasks``: resolved addresses in a special-use class
``[scan] special_use_targets`` refuses (a name resolving to 169.254.169.254,
say) are not scanned (``DnsFollowUpTargetsRefused``).
"""

from __future__ import annotations

import ipaddress

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.observability import emit
from app.scan_control.creation import TaskRequest, create_task
from app.target_rules import ParsedTargets, refused_special_use


def create_child_task(
    conn: Connection,
    *,
    parent_task_id: int,
    parent_execution_id: int,
    owner_id: int,
    addresses: list[str],
    limits: ScanSettings,
) -> int | None:
    """The child task scanning ``addresses``; None when none of them may be scanned."""
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
        emit("DnsFollowUpTargetsRefused", execution_id=parent_execution_id, classes=refused)
    if not networks:
        emit(
            "DnsFollowUpSkipped", execution_id=parent_execution_id, reason="no scannable addresses"
        )
        return None
    if len(networks) > limits.max_addresses_per_task:
        emit(
            "DnsFollowUpTruncated",
            execution_id=parent_execution_id,
            resolved=len(networks),
            limit=limits.max_addresses_per_task,
        )
        networks = networks[: limits.max_addresses_per_task]
    parent = conn.execute(
        sa.text("SELECT name, ports, transports FROM scan_tasks WHERE id = :id"),
        {"id": parent_task_id},
    ).one()
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
        parent_task_id=parent_task_id,
        parent_execution_id=parent_execution_id,
        # Resolved addresses are the DNS task's business, not targets the owner entered.
        register_targets=False,
    )
    emit(
        "DnsFollowUpCreated",
        execution_id=parent_execution_id,
        child_task_id=child_id,
        addresses=len(networks),
    )
    return child_id
