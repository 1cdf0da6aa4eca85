"""Report definitions: owner-scoped CRUD and the validation that keeps bad input out (REP-1).

A definition names one of the owner's tasks (``task_id``) or all of them
(``scope: "all"``, or ``scope: {"search": id}`` / ``{"query": "…"}`` to report only the
current assets a search finds, docs/inventory.md), a period (``daily`` | ``weekly`` |
``on_demand``), the recipients, the template and the time zone the period boundaries are taken
in. Every field is checked before anything is written; a task that is not the
caller's is reported as not found (its existence is nobody else's business).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.errors import Conflict, NotFound, TooManyQueued, ValidationError
from app.identity.users import User
from app.json_input import checked_name, checked_object
from app.reports import records
from app.reports.templates import TEMPLATE_NAME, published_template, template_exists
from app.saved_searches import references
from app.scan_control.query import get_task
from app.scan_control.runs import get_run
from app.scan_control.visibility import task_not_deleted_sql
from app.timezones import is_iana_zone

PERIODS = ("daily", "weekly", "on_demand")
MAX_RECIPIENTS = 50
# Deliberately plain: one @, no spaces or header-breaking characters, a dotted domain.
_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_FIELDS = {"name", "task_id", "scope", "period", "recipients", "template", "timezone", "enabled"}
_COLUMNS = (
    "id, owner_id, name, task_id, period, recipients, template, timezone, enabled, revision, "
    "search_id, query, created_at, updated_at"
)


def _bad(field: str, message: str, code: str = "validation_failed") -> ValidationError:
    return ValidationError(message, code=code, details={"field": field})


def validate_definition(
    body: Any, *, partial: bool = False, max_recipients: int = MAX_RECIPIENTS
) -> dict[str, Any]:
    """The definition's fields, checked; ``partial`` for an update (absent fields stay)."""
    checked_object(body, _FIELDS)
    out: dict[str, Any] = {}
    if "name" in body or not partial:
        out["name"] = checked_name(body.get("name"))
    if "task_id" in body or "scope" in body or not partial:
        task_id, scope = body.get("task_id"), body.get("scope")
        if (task_id is None) == (scope is None):
            raise _bad("task_id", 'give either task_id or "scope": "all"')
        out["search_id"], out["query"] = None, None
        if isinstance(scope, dict):
            # All the owner's tasks, the figures narrowed to the assets a search finds.
            checked_object(scope, {"search", "query"})
            if scope.get("search") is None and scope.get("query") is None:
                raise _bad("scope", 'scope must be "all", {"search": id} or {"query": "…"}')
            out["search_id"], out["query"] = references.checked(
                scope.get("search"), scope.get("query"), prefix="scope"
            )
        elif scope is not None and scope != "all":
            raise _bad("scope", 'scope must be "all", {"search": id} or {"query": "…"}')
        if task_id is not None and (
            isinstance(task_id, bool) or not isinstance(task_id, int) or not 1 <= task_id < 2**63
        ):
            raise _bad("task_id", "task_id must be a positive integer")
        out["task_id"] = task_id
    if "period" in body or not partial:
        if body.get("period") not in PERIODS:
            raise _bad("period", "period must be one of daily, weekly, on_demand")
        out["period"] = body["period"]
    if "recipients" in body or not partial:
        out["recipients"] = _recipients(body.get("recipients"), max_recipients)
    if "template" in body or not partial:
        template = body.get("template", "default")
        if not isinstance(template, str) or not TEMPLATE_NAME.fullmatch(template):
            raise _bad("template", "template must be a template name")
        out["template"] = template
    if "timezone" in body or not partial:
        zone = body.get("timezone", "UTC")
        try:
            if not is_iana_zone(zone):  # not "localtime", "Factory", "posixrules"
                raise ValueError(zone)
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise _bad("timezone", "timezone must be an IANA time zone name") from None
        out["timezone"] = zone
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise _bad("enabled", "enabled must be a boolean")
        out["enabled"] = body["enabled"]
    return out


def _recipients(value: Any, limit: int = MAX_RECIPIENTS) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _bad("recipients", "recipients must be a non-empty list of mail addresses")
    if len(value) > limit:
        raise _bad("recipients", f"at most {limit} recipients ([reports] max_recipients)")
    seen: list[str] = []
    for index, address in enumerate(value):
        if not isinstance(address, str) or not _ADDRESS.fullmatch(address.strip()):
            raise ValidationError(
                "recipients must be mail addresses",
                code="invalid_recipient",
                details={"field": "recipients", "index": index},
            )
        if address.strip().lower() not in (s.lower() for s in seen):
            seen.append(address.strip())
    return seen


def _check_references(
    conn: Connection, user: User, fields: dict[str, Any], owner_id: int | None = None
) -> None:
    """The task must be visible to ``user``; a saved search must be the definition
    owner's (``owner_id``, default the user's own)."""
    if fields.get("task_id") is not None and get_task(conn, user, fields["task_id"]) is None:
        raise NotFound("task not found", code="task_not_found", details={"field": "task_id"})
    if fields.get("search_id") is not None:
        owner = user.id if owner_id is None else owner_id
        references.check_owned(conn, owner, fields["search_id"], field="scope.search")
    if "template" in fields and not template_exists(conn, fields["template"]):
        raise ValidationError(
            "unknown template", code="unknown_template", details={"field": "template"}
        )
    if "template" in fields and published_template(conn, fields["template"]) is None:
        # Its reports would be made and mail nothing (no version to render with).
        raise ValidationError(
            f"template {fields['template']!r} has no published version yet: publish one first",
            code="unpublished_template",
            details={"field": "template"},
        )


def definition_dict(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "owner_id": row.owner_id,
        "name": row.name,
        "task_id": row.task_id,
        "scope": _scope(row),
        "period": row.period,
        "recipients": list(row.recipients),
        "template": row.template,
        "timezone": row.timezone,
        "enabled": row.enabled,
        "revision": row.revision,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def _scope(row: Any) -> str | dict[str, Any]:
    """As written: "task" (see ``task_id``), "all", or the search object."""
    if row.task_id is not None:
        return "task"
    if row.search_id is not None:
        return {"search": row.search_id}
    if row.query is not None:
        return {"query": row.query}
    return "all"


# A deleted task's definitions are gone for their users at once (the purge removes them).
_LIVE_TASK = task_not_deleted_sql("report_definitions.task_id")


def _visible(user: User) -> tuple[str, dict[str, Any]]:
    return ("TRUE", {}) if user.is_admin else ("owner_id = :owner", {"owner": user.id})


def get_definition_row(conn: Connection, user: User, definition_id: int) -> Any:
    clause, params = _visible(user)
    row = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM report_definitions "  # noqa: S608 - fixed columns and clauses; values are bound
            f"WHERE id = :id AND {clause} AND {_LIVE_TASK}"
        ),
        {"id": definition_id, **params},
    ).one_or_none()
    if row is None:
        raise NotFound("report definition not found", code="report_definition_not_found")
    return row


def create_definition(
    user: User, body: Any, *, max_recipients: int = MAX_RECIPIENTS
) -> dict[str, Any]:
    fields = validate_definition(body, max_recipients=max_recipients)
    with transaction() as conn:
        _check_references(conn, user, fields)
        row = conn.execute(
            sa.text(
                f"""
                INSERT INTO report_definitions
                       (owner_id, name, task_id, period, recipients, template, timezone, enabled,
                        search_id, query)
                VALUES (:owner, :name, :task_id, :period, :recipients, :template, :timezone,
                        :enabled, :search_id, :query)
                RETURNING {_COLUMNS}
                """  # noqa: S608 - fixed column list; values are bound
            ),
            {"owner": user.id, "enabled": fields.get("enabled", True), **fields},
        ).one()
    return definition_dict(row)


def list_definitions(user: User) -> list[dict[str, Any]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT {_COLUMNS} FROM report_definitions "  # noqa: S608 - fixed columns and clause
                f"WHERE owner_id = :o AND {_LIVE_TASK} ORDER BY id DESC"
            ),
            {"o": user.id},
        ).all()
    return [definition_dict(r) for r in rows]


def get_definition(user: User, definition_id: int) -> dict[str, Any]:
    with transaction() as conn:
        return definition_dict(get_definition_row(conn, user, definition_id))


def update_definition(
    user: User, definition_id: int, body: Any, *, max_recipients: int = MAX_RECIPIENTS
) -> dict[str, Any]:
    fields = validate_definition(body, partial=True, max_recipients=max_recipients)
    with transaction() as conn:
        existing = get_definition_row(conn, user, definition_id)
        owner = User(id=existing.owner_id, username="", is_admin=False, disabled=False)
        _check_references(
            conn, owner if not user.is_admin else user, fields, owner_id=existing.owner_id
        )
        if not fields:
            return definition_dict(existing)
        assignments = ", ".join(f"{name} = :{name}" for name in fields)
        row = conn.execute(
            sa.text(
                f"""
                UPDATE report_definitions SET {assignments}, revision = revision + 1,
                       updated_at = now()
                WHERE id = :id RETURNING {_COLUMNS}
                """  # noqa: S608 - column names come from the validated field set; values are bound
            ),
            {"id": definition_id, **fields},
        ).one()
    return definition_dict(row)


def delete_definition(user: User, definition_id: int) -> None:
    with transaction() as conn:
        get_definition_row(conn, user, definition_id)
        conn.execute(
            sa.text("DELETE FROM report_definitions WHERE id = :id"), {"id": definition_id}
        )


def run_now(
    user: User,
    definition_id: int,
    *,
    now: datetime | None = None,
    cooldown_seconds: float = 0.0,
    run_id: int | None = None,
) -> dict[str, Any]:
    """Queue an on-demand report of the definition (the last day up to now); ``run_id``
    shows that run of the definition's task instead of its latest finished one.

    ``cooldown_seconds`` ([reports] run_now_cooldown_seconds): a second run-now of one
    definition within that time answers 429 with Retry-After, so repeated clicks cannot
    fan out into as many reports and mails. The definition's advisory lock makes the
    check and the insert one step for concurrent requests."""
    with transaction() as conn:
        row = get_definition_row(conn, user, definition_id)
        if run_id is not None:
            _check_run_of_task(conn, row, run_id)
        if cooldown_seconds > 0:
            conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap-run-now'), :d)"),
                {"d": definition_id % 2**31},
            )
            # clock_timestamp(), not now(): this transaction may have started before the
            # one it waited for on the lock, so now() can precede that report's created_at.
            elapsed = conn.execute(
                sa.text(
                    "SELECT extract(epoch FROM clock_timestamp() - max(created_at)) FROM reports "
                    "WHERE definition_id = :d AND period_kind = 'on_demand'"
                ),
                {"d": definition_id},
            ).scalar_one()
            if elapsed is not None and float(elapsed) < cooldown_seconds:
                wait = math.ceil(cooldown_seconds - max(0.0, float(elapsed)))
                raise TooManyQueued(
                    f"this definition was run {float(elapsed):.0f}s ago; run it again in "
                    f"{wait}s ([reports] run_now_cooldown_seconds)",
                    code="run_now_cooldown",
                    retry_after=wait,
                    details={"definition_id": definition_id, "retry_after_seconds": wait},
                )
        report = records.create_on_demand_report(conn, row, now=now, run_id=run_id)
    return report


def _check_run_of_task(conn: Connection, definition: Any, run_id: int) -> None:
    if definition.task_id is None:
        raise _bad("run", "run needs a definition of one task (this one reports all tasks)")
    run = get_run(conn, definition.task_id, run_id)  # 404 run_not_found: not this task's
    if run.status in ("cancelled", "failed") and not run.counts["executions"]["succeeded"]:
        # Its report would say the task has no endpoints: there is nothing of it to report.
        raise Conflict(
            f"run {run.number} was {run.status} before any of its scans finished: it has "
            "nothing to report",
            code="run_not_reportable",
            details={"field": "run", "run_id": run.id, "status": run.status},
        )
