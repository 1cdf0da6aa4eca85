"""Result exports as the HTTP layer and the runner see them (EXP-7 .. EXP-10).

``request_export`` validates and queues (owner or admin; nothing is written
for bad input), ``describe`` adds a download link to a ready export,
``delete_export`` withdraws one and deletes its object through the bounded
deleter, ``expire_exports`` (the ``export_expiry`` runner job) deletes the
objects of exports older than ``[exports] retention_hours`` the same way.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from app.config import Settings
from app.db import transaction
from app.errors import Conflict, NotFound, TooManyQueued, ValidationError
from app.exports import records
from app.identity.users import User
from app.json_input import checked_object
from app.object_store.deleter import DeleteResult, delete_objects
from app.object_store.port import ObjectStore
from app.observability import emit
from app.scan_control.query import get_task, succeeded_execution_ids
from app.search.asset_params import ASSET_PARAMETERS, asset_query_from_params
from app.search.query_language import parse_body_query


def validate_export_request(body: Any) -> str:
    checked_object(body, {"format"})
    fmt = body.get("format")
    if fmt not in records.FORMATS:
        raise ValidationError(
            "format must be one of csv, jsonl, zip",
            code="invalid_format",
            details={"field": "format", "allowed": list(records.FORMATS)},
        )
    return fmt


# When a user at the queued-exports cap may try again: builds take seconds to minutes.
EXPORT_RETRY_AFTER_SECONDS = 30


def _check_queued_cap(conn: sa.Connection, user: User, max_queued: int | None) -> None:
    """``max_queued`` ([exports] max_queued_per_user): a user with that many exports queued
    or building gets 429 with Retry-After rather than one more build (the user's advisory
    lock makes the count and the insert one step for concurrent requests)."""
    if max_queued is None:
        return
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap-export-queue'), :u)"),
        {"u": user.id % 2**31},
    )
    pending = conn.execute(
        sa.text(
            "SELECT count(*) FROM exports WHERE owner_id = :u AND status IN ('queued', 'building')"
        ),
        {"u": user.id},
    ).scalar_one()
    if pending >= max_queued:
        raise TooManyQueued(
            f"{pending} of your exports are queued or building; request more when "
            f"they are done ([exports] max_queued_per_user = {max_queued})",
            code="too_many_exports",
            retry_after=EXPORT_RETRY_AFTER_SECONDS,
            details={"queued": pending, "limit": max_queued},
        )


# The body fields that choose the assets of an asset export (besides its format).
_SEARCH_FIELDS = ("query", "filters")


def request_query_export(user: User, body: Any, *, max_queued: int | None = None) -> dict[str, Any]:
    """Queue an export of the caller's current assets a search finds (``POST /api/exports
    {"query": …, "filters": {…}, "format": …}``; neither: all of them). ``query`` is the
    search language;
    ``filters`` are ``GET /api/assets`` parameters (what an Assets page was asked with),
    ANDed with the query when both are given. Anything refused is a 400 naming the field
    or parameter, and nothing is written."""
    if not isinstance(body, dict):
        raise ValidationError("the body must be a JSON object", details={"field": "body"})
    # Left out, query and filters choose nothing: every current asset of the caller, as
    # ``GET /api/assets`` with no parameters. Given, each must be what it says (null is
    # neither a query nor filters).
    query = body.get("query", "")
    filters = body.get("filters", {})
    if not isinstance(query, str):
        raise ValidationError(
            "query must be a search-language string (docs/search-language.md)",
            code="invalid_query",
            details={"field": "query"},
        )
    fmt = validate_export_request({k: v for k, v in body.items() if k not in _SEARCH_FIELDS})
    query_at = datetime.now(UTC)
    if query:
        parsed = parse_body_query(query, field="query", now=query_at)
        if parsed.plain_text is not None and len(parsed.plain_text) > 200:
            raise ValidationError(
                "free text is longer than 200 characters", details={"field": "query"}
            )
    params = asset_filter_params(filters) if "filters" in body else None
    if params is not None:
        # The runner builds this same query again (app.exports.build): refuse here what it
        # would refuse there.
        asset_query_from_params(
            params,
            owner_id=user.id,
            may_search_global=user.is_admin,
            queries=[query] if query else [],
            now=query_at,
        )
    with transaction() as conn:
        _check_queued_cap(conn, user, max_queued)
        row = records.insert_export(
            conn,
            owner_id=user.id,
            task_id=None,
            task_name="assets",
            fmt=fmt,
            execution_ids=[],
            query=query or "",
            query_at=query_at,
            asset_filters=params,
        )
    emit(
        "ExportRequested",
        export_id=row.id,
        user_id=user.id,
        format=fmt,
        query=True,
        filters=sorted(params) if params else [],
    )
    return records.export_dict(row)


def asset_filter_params(filters: Any) -> dict[str, str]:
    """``filters`` as the query string ``GET /api/assets`` would carry them: names it
    knows, each a text or a whole number (kept as its text); empty values left out."""
    if not isinstance(filters, dict):
        raise ValidationError(
            "filters must be an object of GET /api/assets parameters",
            details={"field": "filters"},
        )
    params = {}
    for name, value in sorted(filters.items()):
        if name not in ASSET_PARAMETERS:
            raise ValidationError(
                f"unknown filter {name!r}; filters are " + ", ".join(ASSET_PARAMETERS),
                code="unknown_field",
                details={"field": f"filters.{name}"},
            )
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ValidationError(
                f"filters.{name} must be a string or a whole number",
                details={"field": f"filters.{name}"},
            )
        if value:
            params[name] = value
    return params


def request_export(
    user: User,
    task_id: int,
    body: Any,
    *,
    max_queued: int | None = None,
    run_id: int | None = None,
) -> dict[str, Any]:
    """Queue an export of the succeeded executions of a task's run (``POST
    /api/tasks/<id>/exports``, ``run=``; default its latest finished run);
    ``max_queued`` as in ``_check_queued_cap``."""
    fmt = validate_export_request(body)
    with transaction() as conn:
        task = get_task(conn, user, task_id)
        if task is None:
            raise NotFound("task not found", code="task_not_found")
        _check_queued_cap(conn, user, max_queued)
        executions = succeeded_execution_ids(conn, task_id, run_id)
        if not executions:
            raise Conflict(
                "the task has no succeeded execution to export yet",
                code="no_succeeded_execution",
                details={"task_id": task_id, "task_status": task["status"]},
            )
        row = records.insert_export(
            conn,
            owner_id=user.id,
            task_id=task_id,
            task_name=task["name"],
            fmt=fmt,
            execution_ids=executions,
        )
    emit(
        "ExportRequested",
        export_id=row.id,
        task_id=task_id,
        user_id=user.id,
        format=fmt,
        executions=len(executions),
    )
    return records.export_dict(row)


def describe(settings: Settings, row: Any, object_store: ObjectStore) -> dict[str, Any]:
    export = records.export_dict(row)
    export["download_url"] = None
    if row.status == "ready":
        export["download_url"] = object_store.url_for(
            row.object_key,
            settings.exports.download_url_seconds,
            filename=records.file_name(row.id, row.task_id, row.format),
        )
    return export


def list_exports(
    settings: Settings,
    object_store: ObjectStore,
    owner_id: int,
    *,
    limit: int,
    after_id: int | None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One keyset page of the owner's exports, described (ready ones with a download link),
    and the id to continue after. The database read is one short transaction; the links
    are made after it (the object store is never called with a connection held)."""
    with transaction() as conn:
        rows, next_id = records.list_exports(
            conn, owner_id=owner_id, limit=limit, after_id=after_id
        )
    return [describe(settings, row, object_store) for row in rows], next_id


def find_export(user: User, export_id: int) -> Any:
    with transaction() as conn:
        row = records.get_export(conn, export_id, user_id=user.id, is_admin=user.is_admin)
    if row is None:
        raise NotFound("export not found", code="export_not_found")
    return row


def delete_export(
    settings: Settings, user: User, export_id: int, object_store: ObjectStore
) -> tuple[Any, list[DeleteResult]]:
    """Withdraw the export and delete its object; deleting a deleted export changes nothing."""
    with transaction() as conn:
        row = records.mark_deleted(conn, export_id, user_id=user.id, is_admin=user.is_admin)
        if row is None:
            existing = records.get_export(conn, export_id, user_id=user.id, is_admin=user.is_admin)
    if row is None:
        if existing is None:
            raise NotFound("export not found", code="export_not_found")
        return existing, []
    results = delete_objects(
        object_store,
        [row.object_key],
        concurrency=settings.object_store.delete_concurrency,
        origin="export_deleted",
    )
    emit("ExportDeleted", export_id=export_id, user_id=user.id, object=results[0].status)
    return row, results


def expire_exports(settings: Settings, object_store: ObjectStore, *, limit: int = 500) -> int:
    """Delete the objects of expired exports (bounded) and mark them expired."""
    due = records.due_for_expiry(limit)
    if not due:
        return 0
    results = delete_objects(
        object_store,
        [key for _, key in due],
        concurrency=settings.object_store.delete_concurrency,
        origin="export_expired",
    )
    # Failed deletes were recorded and will be retried; the export is expired either way.
    expired = records.mark_expired([export_id for export_id, _ in due])
    emit(
        "ExportsExpired",
        level=logging.WARNING if any(r.status == "failed" for r in results) else logging.INFO,
        exports=expired,
        failed_deletes=sum(r.status == "failed" for r in results),
    )
    return expired


def delete_task_exports(
    settings: Settings, object_store: ObjectStore, task_ids: list[int], *, limit: int = 500
) -> int:
    """A deleted task's exports (bounded): their objects through the bounded deleter, then
    the rows; returns how many went (0: none left). Failed object deletes are recorded
    and retried by the deleter's own job."""
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT id, object_key FROM exports WHERE task_id = ANY(:tasks) "
                "ORDER BY id LIMIT :limit"
            ),
            {"tasks": task_ids, "limit": limit},
        ).all()
    if not rows:
        return 0
    delete_objects(
        object_store,
        [row.object_key for row in rows if row.object_key],
        concurrency=settings.object_store.delete_concurrency,
        origin="task_deleted",
    )
    with transaction() as conn:
        return conn.execute(
            sa.text("DELETE FROM exports WHERE id = ANY(:ids)"), {"ids": [r.id for r in rows]}
        ).rowcount
