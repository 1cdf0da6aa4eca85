"""Reports and report templates as the API and the console read and change them, one
short transaction per call (docs/architecture.md, rule: services own transactions).
Report definitions have theirs in ``definitions``; the connection-taking functions
in ``records`` and ``templates`` stay for the pipeline, which composes them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.db import transaction
from app.errors import Conflict, NotFound
from app.identity.audit import record_audit
from app.identity.users import User
from app.reports import records, templates


def _report_not_found() -> NotFound:
    return NotFound("report not found", code="report_not_found")


def visible_report(user: User, report_id: int) -> tuple[Any, list[dict[str, Any]]]:
    """A report row and its deliveries, if the user owns it or is an admin (else 404)."""
    with transaction() as conn:
        row = records.get_report_row(conn, report_id)
        if row is None or (not user.is_admin and row.owner_id != user.id):
            raise _report_not_found()
        deliveries = records.deliveries_of(conn, [report_id]).get(report_id, [])
    return row, deliveries


def list_reports(
    owner_id: int, *, limit: int, after_id: int | None
) -> tuple[list[dict[str, Any]], int | None]:
    """One keyset page of the owner's reports (newest first) and the id to continue after."""
    with transaction() as conn:
        return records.list_reports(conn, owner_id=owner_id, limit=limit, after_id=after_id)


def retry_report(report_id: int) -> None:
    """A failed report is generated again; a ready one sends its failed deliveries again.
    404 for an unknown report, 409 ``report_not_failed`` when there is nothing to retry."""
    with transaction() as conn:
        exists = conn.execute(
            sa.text("SELECT 1 FROM reports WHERE id = :id"), {"id": report_id}
        ).scalar()
    if not exists:
        raise _report_not_found()
    if not records.retry_failed(report_id) and not records.resend_failed_deliveries(report_id):
        raise Conflict(
            "only a failed report, or one with failed deliveries, can be retried",
            code="report_not_failed",
        )


def list_templates() -> list[dict[str, Any]]:
    with transaction() as conn:
        return templates.list_templates(conn)


def add_template_version(body: dict[str, Any], *, user_id: int) -> None:
    """Store a validated template version (``templates.validate_template_version``),
    audited (an admin action: what every report of the template will look like)."""
    with transaction() as conn:
        templates.add_template_version(conn, body, user_id=user_id)
        record_audit(
            conn,
            actor_user_id=user_id,
            action="report_template.add",
            target_type="report_template",
            target_id=body["name"],
            details={"version": body["version"], "enabled": body.get("enabled")},
        )


def publish_template_version(name: str, version: Any, *, user_id: int | None) -> None:
    with transaction() as conn:
        templates.publish_template_version(conn, name, version)
        record_audit(
            conn,
            actor_user_id=user_id,
            action="report_template.publish",
            target_type="report_template",
            target_id=name,
            details={"version": version},
        )
