"""Creating tasks: validate, plan, and insert task + executions + search targets at once.

One transaction stores the task, its scan plan, every queued execution and the
owner's ``search_targets`` rows (so freshness has something to update), so a
task is either fully dispatchable or absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.errors import ValidationError
from app.scan_control.planning import plan_executions, scan_plan_document
from app.scan_control.runs import queue_run
from app.target_rules import (
    ParsedTargets,
    format_ports,
    parse_ports,
    parse_targets,
    parse_transports,
    raise_if_problems,
    target_kind,
)

MAX_NAME_LENGTH = 200
# What a scanner probes (issue 37; app.agent.profiles): ports only, ports with service and
# version detection plus the certificate/HTTP/banner scripts, or all of that deeper.
SCAN_PROFILES = ("quick", "standard", "deep")
DEFAULT_PROFILE = "standard"


@dataclass(frozen=True)
class TaskRequest:
    name: str
    targets: ParsedTargets
    ports: str
    transports: list[str]
    profile: str = DEFAULT_PROFILE
    # False: an import-only task; nothing is queued, each import becomes a run.
    scan: bool = True


def validate_task_request(body: dict[str, Any], limits: ScanSettings) -> TaskRequest:
    unknown = sorted(set(body) - {"name", "targets", "ports", "transports", "profile", "scan"})
    if unknown:
        raise ValidationError(
            "unknown fields in task", code="unknown_fields", details={"fields": unknown}
        )
    name = body.get("name")
    problems = []
    parsed, target_problems = parse_targets(body.get("targets"), limits)
    problems.extend(target_problems)
    ranges, port_problems = parse_ports(body.get("ports"), limits)
    problems.extend(port_problems)
    transports, transport_problems = parse_transports(body.get("transports"))
    problems.extend(transport_problems)
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME_LENGTH:
        from app.target_rules import Problem

        problems.append(Problem("name", None, name, f"must be 1-{MAX_NAME_LENGTH} characters"))
    profile = body.get("profile", DEFAULT_PROFILE)
    if profile not in SCAN_PROFILES:
        from app.target_rules import Problem

        problems.append(Problem("profile", None, profile, "must be quick, standard or deep"))
    scan = body.get("scan", True)
    if not isinstance(scan, bool):
        from app.target_rules import Problem

        problems.append(Problem("scan", None, scan, "must be true or false"))
    raise_if_problems(problems)
    return TaskRequest(
        name=name.strip(),
        targets=parsed,
        ports=format_ports(ranges),
        transports=transports,
        profile=profile,
        scan=scan,
    )


def create_task(
    conn: Connection,
    *,
    owner_id: int,
    request: TaskRequest,
    limits: ScanSettings,
    parent_task_id: int | None = None,
    parent_execution_id: int | None = None,
    register_targets: bool = True,
) -> int:
    """Insert the task, its plan and run 1 with its queued executions; returns the task id.

    Run 1 is started through ``runs.queue_run``, the path every later run takes; an
    import-only task (``scan`` false) gets no run until its first import.
    """
    planned = plan_executions(request.targets, limits.execution_max_addresses)
    plan = scan_plan_document(planned, limits.execution_max_addresses)
    task_id = conn.execute(
        sa.text(
            """
            INSERT INTO scan_tasks (owner_id, name, status, targets, ports, transports, scan_plan,
                                    parent_task_id, parent_execution_id, execution_count,
                                    profile, scan)
            VALUES (:owner, :name, 'queued', CAST(:targets AS jsonb), :ports, :transports,
                    CAST(:plan AS jsonb), :parent, :parent_execution, 0, :profile, :scan)
            RETURNING id
            """
        ),
        {
            "owner": owner_id,
            "name": request.name,
            "targets": json.dumps(request.targets.normalised),
            "ports": request.ports,
            "transports": request.transports,
            "plan": json.dumps(plan),
            "parent": parent_task_id,
            "parent_execution": parent_execution_id,
            "profile": request.profile,
            "scan": request.scan,
        },
    ).scalar_one()
    if request.scan:
        queue_run(conn, task_id, trigger="manual", limits=limits, planned=planned)
    if register_targets:
        register_search_targets(conn, owner_id, request.targets)
    return task_id


def register_search_targets(conn: Connection, owner_id: int, targets: ParsedTargets) -> None:
    rows = [
        {
            "kind": target_kind(n),
            "key": str(n) if target_kind(n) == "cidr" else str(n.network_address),
        }
        for n in targets.networks
    ]
    rows.extend({"kind": "domain", "key": d} for d in targets.domains)
    if not rows:
        return
    conn.execute(
        sa.text(
            """
            INSERT INTO search_targets (owner_id, kind, key)
            SELECT :owner, r.kind, r.key
            FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(kind text, key text)
            ON CONFLICT DO NOTHING
            """
        ),
        {"owner": owner_id, "rows": json.dumps(rows)},
    )
