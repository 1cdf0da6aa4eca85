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
from app.json_input import has_control_characters
from app.scan_control.planning import plan_executions, scan_plan_document
from app.scan_control.runs import queue_run
from app.target_rules import (
    ParsedTargets,
    Problem,
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


# What a task scans; each may be changed on a task (``validate_scope_change``).
SCOPE_FIELDS = ("targets", "ports", "transports", "profile")


def _scope_values(
    body: dict[str, Any], limits: ScanSettings, fields: tuple[str, ...], problems: list[Problem]
) -> dict[str, Any]:
    """The scope ``fields`` of ``body`` parsed as stored; each refused value is added to
    ``problems`` (one validation for a new task and a changed one)."""
    values: dict[str, Any] = {}
    if "targets" in fields:
        values["targets"], found = parse_targets(body.get("targets"), limits)
        problems.extend(found)
    if "ports" in fields:
        ranges, found = parse_ports(body.get("ports"), limits)
        values["ports"] = format_ports(ranges)
        problems.extend(found)
    if "transports" in fields:
        if body.get("transports", ()) is None:
            # Left out, transports default to tcp; null is no list of them (a new task's
            # or a change's).
            problems.append(
                Problem("transports", None, None, "must be a non-empty list of 'tcp'/'udp'")
            )
        else:
            values["transports"], found = parse_transports(body.get("transports"))
            problems.extend(found)
    if "profile" in fields:
        values["profile"] = body.get("profile", DEFAULT_PROFILE)
        if values["profile"] not in SCAN_PROFILES:
            problems.append(
                Problem("profile", None, values["profile"], "must be quick, standard or deep")
            )
    return values


def unknown_fields_error(unknown: list[str]) -> ValidationError:
    """400 ``unknown_field``, as every other route names one (``details.field``: the
    first); ``details.fields`` lists them all."""
    return ValidationError(
        f"unknown field {unknown[0]!r}",
        code="unknown_field",
        details={"field": unknown[0], "fields": unknown},
    )


def validate_task_request(body: dict[str, Any], limits: ScanSettings) -> TaskRequest:
    unknown = sorted(set(body) - {"name", "targets", "ports", "transports", "profile", "scan"})
    if unknown:
        raise unknown_fields_error(unknown)
    name = body.get("name")
    problems: list[Problem] = []
    scope = _scope_values(body, limits, SCOPE_FIELDS, problems)
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME_LENGTH:
        problems.append(Problem("name", None, name, f"must be 1-{MAX_NAME_LENGTH} characters"))
    elif has_control_characters(name):
        problems.append(Problem("name", None, name[:64], "must not hold control characters"))
    scan = body.get("scan", True)
    if not isinstance(scan, bool):
        problems.append(Problem("scan", None, scan, "must be true or false"))
    raise_if_problems(problems)
    return TaskRequest(name=name.strip(), scan=scan, **scope)


def validate_scope_change(body: dict[str, Any], limits: ScanSettings) -> dict[str, Any]:
    """The scope fields ``body`` changes, parsed as a new task's are (the same 400 with
    each refused item); the others are left out."""
    problems: list[Problem] = []
    fields = tuple(f for f in SCOPE_FIELDS if f in body)
    values = _scope_values(body, limits, fields, problems)
    raise_if_problems(problems)
    return values


def change_scope(
    conn: Connection, task_id: int, owner_id: int, values: dict[str, Any], limits: ScanSettings
) -> None:
    """Store a task's new scope (``validate_scope_change``). Runs already started keep
    theirs: each execution carries its own targets, ports and profile, and a run's
    absences are concluded inside its executions' scope only (docs/architecture.md,
    "A task's scope changes")."""
    if not values:
        return
    columns = dict(values)
    params: dict[str, Any] = {"id": task_id}
    sets = []
    if "targets" in columns:
        parsed: ParsedTargets = columns.pop("targets")
        plan = scan_plan_document(
            plan_executions(parsed, limits.execution_max_addresses),
            limits.execution_max_addresses,
        )
        sets += ["targets = CAST(:targets AS jsonb)", "scan_plan = CAST(:plan AS jsonb)"]
        params |= {"targets": json.dumps(parsed.normalised), "plan": json.dumps(plan)}
        register_search_targets(conn, owner_id, parsed)
    for column, value in columns.items():  # ports, transports, profile
        sets.append(f"{column} = :{column}")
        params[column] = value
    conn.execute(
        sa.text(f"UPDATE scan_tasks SET {', '.join(sets)}, updated_at = now() WHERE id = :id"),  # noqa: S608 - column names from SCOPE_FIELDS
        params,
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
            VALUES (:owner, :name, CASE WHEN :scan THEN 'queued' ELSE 'idle' END,
                    CAST(:targets AS jsonb), :ports, :transports,
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
