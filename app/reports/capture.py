"""Phase 1, capture: one REPEATABLE READ snapshot of everything a report needs (REP-1).

One transaction checks the claim (token and a live lease), then reads the
definition, the report's period and revision, the published template, and the
statistics, and commits; nothing after this phase talks to the database until
the commit phase. The numbers come from counters the ingest path maintains
per execution (``scan_executions.endpoint_count`` / ``ip_count``) and from
``report_execution_aggregates`` (top services, products, ports and first-seen
counts per hour of each succeeded execution), which ``prepare_aggregates`` has
the search store compute once per execution before capture
(``SearchStore.execution_aggregates``, the same on PostgreSQL and Elasticsearch),
so the snapshot reads small rows whatever the number of endpoints. A definition scoped
by a search (``{"search"}``/``{"query"}``, docs/inventory.md) takes its endpoint figures
from the current assets the search finds instead: the store aggregates them
(``SearchStore.asset_aggregates``) just before the snapshot, with no connection held.

Each task of the scope is reported by one run: its latest finished run that was not
cancelled (as ``scan_control.runs.latest_finished_run_id`` chooses), or its latest run
before any finished (``_REPORTED_RUNS``); deleted tasks are left out.
Completeness: a scope whose reported runs still have queued/running executions or
whose projection is not ``ready`` is not complete. The job then waits (it is
postponed without spending an attempt) until ``wait_seconds`` after the
report was created; after that the report is made with what there is and its
statistics say so (``completeness.complete = false`` and a note).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis.queries import execution_change_counts, new_endpoints_by_hour
from app.db import transaction
from app.projection.status import aggregate_projection_status, projection_status_sql
from app.reports.records import ReportClaim
from app.reports.templates import TemplateVersion, published_template
from app.saved_searches import records as saved_records
from app.search.aggregates import ExecutionAggregates
from app.search.port import AssetAggregates, AssetQuery, SearchStore
from app.search.query_language import parse_query

TOP_N = 10
INCOMPLETE_WAIT_SECONDS = 1800.0


class LeaseLostError(Exception):
    """The claim is no longer ours (lease expired and taken, or the report was withdrawn)."""


@dataclass(frozen=True)
class Capture:
    report_id: int
    revision: int
    report_name: str
    recipients: tuple[str, ...]
    template_name: str
    template: TemplateVersion | None
    statistics: dict[str, Any]
    period: dict[str, str]
    scope_label: str
    wait_for_data: bool  # incomplete and still inside the bounded wait


def change_counts(per_execution: dict[int, dict[str, Any] | None]) -> dict[str, Any] | None:
    """The change sets of the period's executions (new/changed/gone/reappeared), summed,
    from ``execution_change_counts`` read inside this same snapshot; an execution not
    analysed yet (None) is counted as pending so the report can say so. None when the
    period has no executions.
    """
    if not per_execution:
        return None
    from app.analysis.changes import CHANGE_KINDS

    totals: dict[str, Any] = dict.fromkeys(CHANGE_KINDS, 0)
    analysed = 0
    for counts in per_execution.values():
        if counts is None:
            continue
        analysed += 1
        for kind in CHANGE_KINDS:
            totals[kind] += counts[kind]
    return {
        **totals,
        "analysed_executions": analysed,
        "pending_executions": len(per_execution) - analysed,
    }


def _check_claim(conn: Connection, claim: ReportClaim) -> None:
    owned = conn.execute(
        sa.text(
            "SELECT 1 FROM report_jobs WHERE report_id = :id AND claim_token = :token "
            "AND status = 'running' AND lease_expires_at > now()"
        ),
        {"id": claim.report_id, "token": claim.claim_token},
    ).scalar()
    if not owned:
        raise LeaseLostError("report claim lost before capture")


AGGREGATE_TOP = 50

_AGGREGATE_INSERT = sa.text(
    """
    INSERT INTO report_execution_aggregates (execution_id, services, products, ports,
                                             first_seen_hours)
    VALUES (:e, CAST(:services AS jsonb), CAST(:products AS jsonb), CAST(:ports AS jsonb),
            CAST(:hours AS jsonb))
    ON CONFLICT (execution_id) DO NOTHING
    """
)
# Rounds of "read the missing aggregates from the store, then take the snapshot" before a
# snapshot goes on without an execution that succeeded in between (it then counts nothing).
CAPTURE_ROUNDS = 3


class _AggregatesMissing(Exception):
    """An execution in the snapshot has no aggregates yet (it succeeded meanwhile)."""


# The run a report shows of each task: the run asked for (an on-demand report of one
# task may name one: ``:run``), else its latest finished run, else (before any run
# finished) its latest run; a run in progress after a finished one does not hold the
# report back (docs/architecture.md "Runs").
_REPORTED_RUNS = """
    SELECT t.id AS task_id,
           coalesce(
               CAST(:run AS bigint),
               (SELECT r.id FROM task_runs r WHERE r.task_id = t.id AND r.finished_at IS NOT NULL
                   AND r.status <> 'cancelled'
                 ORDER BY r.number DESC LIMIT 1),
               (SELECT r.id FROM task_runs r WHERE r.task_id = t.id
                 ORDER BY r.number DESC LIMIT 1)) AS run_id
      FROM scan_tasks t WHERE t.id = ANY(:tasks)
"""


def _latest_executions(
    conn: Connection, task_ids: list[int], run_id: int | None = None
) -> list[Any]:
    """The succeeded executions with endpoints (scans and imports) of each task's reported run."""
    return conn.execute(
        sa.text(
            f"""
            SELECT e.id, e.endpoint_count, e.ip_count,
                   {projection_status_sql("e")} AS projection
              FROM ({_REPORTED_RUNS}) w
              JOIN scan_executions e ON e.run_id = w.run_id
             WHERE e.kind IN ('ports', 'import') AND e.status = 'succeeded'
             ORDER BY e.task_id, e.id
            """  # noqa: S608 - the projection expression is our own SQL; values are bound
        ),
        {"tasks": task_ids, "run": run_id},
    ).all()


def _pending_executions(conn: Connection, task_ids: list[int], run_id: int | None = None) -> int:
    return conn.execute(
        sa.text(
            f"SELECT count(*) FROM ({_REPORTED_RUNS}) w JOIN scan_executions e "  # noqa: S608 - a module constant; values are bound
            "ON e.run_id = w.run_id WHERE e.status IN ('queued', 'running')"
        ),
        {"tasks": task_ids, "run": run_id},
    ).scalar_one()


def _is_complete(pending: int, latest: list[Any]) -> bool:
    projection = aggregate_projection_status([row.projection for row in latest])
    return pending == 0 and projection in {"ready", "not_applicable"}


def input_still_complete(conn: Connection, report_id: int, statistics: dict[str, Any]) -> bool:
    """REP-3, in the commit transaction: is the captured input still whole?

    The executions the statistics were computed from must still be the scope's
    latest succeeded ones (none deleted, purged or superseded since capture), and a
    snapshot that was complete must still be complete (no execution of the scope
    queued or running again, every projection still ready). A report made with an
    incomplete snapshot after its bounded wait says so in its statistics; for it
    only the first rule applies.
    """
    task_ids, run_id = _scope_task_ids(conn, report_id), _report_run(conn, report_id)
    latest = _latest_executions(conn, task_ids, run_id)
    if sorted(row.id for row in latest) != sorted(statistics["latest_executions"]):
        return False
    if not statistics["complete"]:
        return True
    return _is_complete(_pending_executions(conn, task_ids, run_id), latest)


def _report_run(conn: Connection, report_id: int) -> int | None:
    """The run an on-demand report was asked to show (None: each task's latest)."""
    return conn.execute(
        sa.text("SELECT run_id FROM reports WHERE id = :id"), {"id": report_id}
    ).scalar()


def _scope_task_ids(conn: Connection, report_id: int) -> list[int]:
    return list(
        conn.execute(
            sa.text(
                """
                SELECT t.id FROM reports r JOIN scan_tasks t
                  ON (r.task_id IS NOT NULL AND t.id = r.task_id)
                  OR (r.task_id IS NULL AND t.owner_id = r.owner_id)
                 WHERE r.id = :id AND t.deleted_at IS NULL
                """
            ),
            {"id": report_id},
        ).scalars()
    )


def _unaggregated(report_id: int) -> list[int]:
    """The scope's latest executions that have no stored aggregates (one short transaction)."""
    with transaction() as conn:
        ids = [
            row.id
            for row in _latest_executions(
                conn, _scope_task_ids(conn, report_id), _report_run(conn, report_id)
            )
        ]
        done = set(
            conn.execute(
                sa.text(
                    "SELECT execution_id FROM report_execution_aggregates "
                    "WHERE execution_id = ANY(:ids)"
                ),
                {"ids": ids},
            ).scalars()
        )
    return [i for i in ids if i not in done]


def prepare_aggregates(report_id: int, store: SearchStore) -> int:
    """Compute the aggregates of the scope's latest executions that have none yet.

    Runs before capture: the search store computes each execution's aggregates once
    (``SearchStore.execution_aggregates``, no database connection held meanwhile) and a
    short transaction stores them, so the capture snapshot never scans endpoints.
    Returns how many executions were aggregated.
    """
    missing = _unaggregated(report_id)
    for execution_id in missing:
        found = store.execution_aggregates(execution_id, top=AGGREGATE_TOP)
        with transaction() as conn:
            conn.execute(
                _AGGREGATE_INSERT,
                {
                    "e": execution_id,
                    "services": json.dumps(found.services),
                    "products": json.dumps(found.products),
                    "ports": json.dumps(found.ports),
                    "hours": json.dumps(found.first_seen_hours),
                },
            )
    return len(missing)


def _aggregates(
    conn: Connection,
    execution_ids: list[int],
    preread: dict[int, ExecutionAggregates],
    *,
    last_round: bool,
) -> dict[int, Any]:
    """Each execution's aggregates (services, products, ports, first_seen_hours), stored
    or read from the store just before this snapshot."""
    rows: dict[int, Any] = {
        row.execution_id: row
        for row in conn.execute(
            sa.text(
                "SELECT execution_id, services, products, ports, first_seen_hours "
                "FROM report_execution_aggregates WHERE execution_id = ANY(:ids)"
            ),
            {"ids": execution_ids},
        )
    }
    for execution_id in execution_ids:
        if execution_id in rows:
            continue
        if execution_id in preread:
            # Read from the store just before this snapshot, not stored: the next
            # report's prepare step stores it.
            rows[execution_id] = preread[execution_id]
        elif not last_round:
            raise _AggregatesMissing(execution_id)
    return rows


def _top(rows: Iterable[Any], field: str, key: Any) -> list[dict[str, Any]]:
    totals: dict[Any, dict[str, Any]] = {}
    for row in rows:
        for entry in getattr(row, field):
            k = key(entry)
            if k in totals:
                totals[k]["count"] += entry["count"]
            else:
                totals[k] = dict(entry)
    return sorted(totals.values(), key=lambda e: (-e["count"], str(key(e))))[:TOP_N]


def _new_per_day(
    hourly: Iterable[list[dict[str, Any]]], start: datetime, end: datetime, zone: str
) -> dict[str, int]:
    """Endpoints first seen on each day of the period, from the hourly counts; days of
    the report's time zone, as its period is (they were UTC days). The counts are per UTC
    hour: in a zone off UTC by a half hour, an hour counts on the day it starts on."""
    local = ZoneInfo(zone)
    per_day: dict[str, int] = {}
    for counts in hourly:
        for entry in counts:
            hour = datetime.fromisoformat(entry["hour"])
            if hour.tzinfo is None:
                hour = hour.replace(tzinfo=UTC)
            if start <= hour < end:
                day = hour.astimezone(local).date().isoformat()
                per_day[day] = per_day.get(day, 0) + entry["count"]
    return per_day


@dataclass(frozen=True)
class SearchedAssets:
    """A search-scoped report's figures: the owner's current assets the search finds,
    aggregated by the search store (``SearchStore.asset_aggregates``) before the snapshot,
    with no connection held."""

    label: str | None  # None: an "all" scope, labelled by its tasks
    search_id: int | None
    query: str
    found: AssetAggregates

    def statistics(self, start: datetime, end: datetime, zone: str) -> dict[str, Any]:
        lists = self.found.lists
        per_day = _new_per_day([lists.first_seen_hours], start, end, zone)
        figures = {
            "endpoints": self.found.endpoints,
            "ips": self.found.ips,
            "new_endpoints": sum(per_day.values()),
            "new_endpoints_per_day": [{"day": d, "count": n} for d, n in sorted(per_day.items())],
            "top_services": lists.services[:TOP_N],
            "top_products": lists.products[:TOP_N],
            "top_ports": lists.ports[:TOP_N],
        }
        if self.label is not None:
            figures["search"] = {"search_id": self.search_id, "query": self.query}
        return figures


# A report not of one task: of a search's assets, or of all one's tasks ("all"), which is
# the owner's current assets (the deduplicated view): an endpoint two tasks saw is one
# endpoint (summing each task's counts counted it twice).
_REPORT_SEARCH = sa.text(
    """
    SELECT r.owner_id, d.search_id, d.query
      FROM reports r JOIN report_definitions d ON d.id = r.definition_id
     WHERE r.id = :id AND r.task_id IS NULL
    """
)


def _searched_assets(report_id: int, store: SearchStore) -> SearchedAssets | None:
    """The figures of a search-scoped or "all" report (None for a task's): the query
    (a saved search as it is now) read in one short transaction, then aggregated by the
    store. Durations count from now; without ``status:`` open assets are counted, as the
    Assets page lists them."""
    with transaction() as conn:
        row = conn.execute(_REPORT_SEARCH, {"id": report_id}).one_or_none()
        if row is None:
            return None
        label: str | None
        if row.search_id is not None:
            saved = saved_records.get(conn, row.owner_id, row.search_id)
            # The foreign key keeps a used search; its owner is the definition's.
            text, label = (saved.query, f"Search {saved.name}") if saved else ("", "Search")
        elif row.query is not None:
            text, label = row.query, f"Search {row.query}"
        else:
            text, label = "", None  # every current asset of the owner
    parsed = parse_query(text)
    found = store.asset_aggregates(
        AssetQuery(
            scope="user",
            owner_id=row.owner_id,
            where=parsed.node,
            status="all" if parsed.names_status else "open",
        ),
        top=AGGREGATE_TOP,
    )
    return SearchedAssets(label=label, search_id=row.search_id, query=text, found=found)


def _statistics(
    conn: Connection,
    task_ids: list[int],
    start: datetime,
    end: datetime,
    preread: dict[int, ExecutionAggregates],
    *,
    last_round: bool,
    zone: str,
    run_id: int | None = None,
) -> dict[str, Any]:
    latest = _latest_executions(conn, task_ids, run_id)
    latest_ids = [row.id for row in latest]
    by_status = dict(
        conn.execute(
            sa.text(
                """
                SELECT status, count(*) FROM scan_executions
                 WHERE task_id = ANY(:tasks)
                   -- A report of one chosen run counts that run's executions, as its
                   -- other figures are that run's; otherwise the period's.
                   AND (CASE WHEN CAST(:run AS bigint) IS NULL
                             THEN coalesce(finished_at, created_at) >= :start
                                  AND coalesce(finished_at, created_at) < :end
                             ELSE run_id = CAST(:run AS bigint) END)
                 GROUP BY status
                """
            ),
            {"tasks": task_ids, "start": start, "end": end, "run": run_id},
        ).all()
    )
    pending = _pending_executions(conn, task_ids, run_id)
    aggregates = _aggregates(conn, latest_ids, preread, last_round=last_round)
    changes = execution_change_counts(conn, latest_ids)
    # New to the owner, from the change analysis; an execution not analysed yet counts
    # the endpoints its scan first saw in the period (its own first_seen).
    analysed_new = new_endpoints_by_hour(conn, [i for i, c in changes.items() if c is not None])
    per_day = _new_per_day(
        [analysed_new.get(i, row.first_seen_hours) for i, row in aggregates.items()],
        start,
        end,
        zone,
    )
    projection = aggregate_projection_status([row.projection for row in latest])
    complete = _is_complete(pending, latest)
    return {
        "tasks": len(task_ids),
        "endpoints": sum(row.endpoint_count for row in latest),
        "ips": sum(row.ip_count for row in latest),
        "new_endpoints": sum(per_day.values()),
        "new_endpoints_per_day": [{"day": d, "count": n} for d, n in sorted(per_day.items())],
        "top_services": _top(aggregates.values(), "services", lambda e: e["name"]),
        "top_products": _top(aggregates.values(), "products", lambda e: e["name"]),
        "top_ports": _top(aggregates.values(), "ports", lambda e: (e["port"], e["transport"])),
        "executions": {"total": sum(by_status.values()), "by_status": by_status},
        "executions_pending": pending,
        "latest_executions": latest_ids,
        "projection": projection,
        "changes": change_counts(changes),
        "complete": complete,
    }


def capture(
    claim: ReportClaim,
    *,
    store: SearchStore,
    wait_seconds: float = INCOMPLETE_WAIT_SECONDS,
) -> Capture:
    """The snapshot of one claimed report. Executions of the scope without stored
    aggregates (``prepare_aggregates`` did not run, or they succeeded since) are read
    from ``store`` first, with no connection held, and used without being stored."""
    searched = _searched_assets(claim.report_id, store)
    for attempt in range(CAPTURE_ROUNDS):
        preread = {
            execution_id: store.execution_aggregates(execution_id, top=AGGREGATE_TOP)
            for execution_id in _unaggregated(claim.report_id)
        }
        try:
            return _capture(
                claim,
                wait_seconds,
                preread,
                last_round=attempt == CAPTURE_ROUNDS - 1,
                searched=searched,
            )
        except _AggregatesMissing:
            continue
    raise AssertionError("unreachable: the last round does not raise")


def _capture(
    claim: ReportClaim,
    wait_seconds: float,
    preread: dict[int, ExecutionAggregates],
    *,
    last_round: bool,
    searched: SearchedAssets | None = None,
) -> Capture:
    with transaction(isolation_level="REPEATABLE READ") as conn:
        _check_claim(conn, claim)
        report = conn.execute(
            sa.text(
                """
                SELECT r.id, r.revision, r.period_kind, r.period_start, r.period_end,
                       r.owner_id, r.task_id, r.run_id, d.name, d.recipients, d.template,
                       d.timezone,
                       extract(epoch FROM now() - r.created_at) AS age
                  FROM reports r JOIN report_definitions d ON d.id = r.definition_id
                 WHERE r.id = :id
                """
            ),
            {"id": claim.report_id},
        ).one()
        task_ids = _scope_task_ids(conn, report.id)
        if report.task_id is not None:
            scope = conn.execute(
                sa.text("SELECT name FROM scan_tasks WHERE id = :id"), {"id": report.task_id}
            ).scalar()
            scope_label = f"Task {scope}"
        elif searched is not None and searched.label is not None:
            scope_label = searched.label
        else:
            scope_label = f"All tasks ({len(task_ids)})"
        stats = _statistics(
            conn,
            task_ids,
            report.period_start,
            report.period_end,
            preread,
            last_round=last_round,
            zone=report.timezone,
            run_id=report.run_id,
        )
        template = published_template(conn, report.template)
    if searched is not None:
        stats.update(searched.statistics(report.period_start, report.period_end, report.timezone))
    waiting = not stats["complete"] and float(report.age) < wait_seconds
    stats["completeness"] = {
        "complete": stats["complete"],
        "note": None
        if stats["complete"]
        else "Some executions were still running or not yet searchable when this report was made.",
    }
    return Capture(
        report_id=report.id,
        revision=report.revision,
        report_name=report.name,
        recipients=tuple(report.recipients),
        template_name=report.template,
        template=template,
        statistics=stats,
        period=period_in_zone(
            report.period_kind, report.period_start, report.period_end, report.timezone
        ),
        scope_label=scope_label,
        wait_for_data=waiting,
    )


def _local_time(moment: datetime) -> str:
    text = f"{moment:%Y-%m-%d %H:%M}"
    if moment.second:
        text += f":{moment:%S}"
    return f"{text} {moment:%Z}"


def period_in_zone(kind: str, start: datetime, end: datetime, zone: str) -> dict[str, str]:
    """The period as a reader of the mail sees it: in the report's time zone, no microseconds.

    ``start``/``end`` read like ``2026-12-01 00:00 CET``; ``start_iso``/``end_iso`` are the
    same instants as ISO 8601 with the zone's offset, whole seconds, for templates that
    format times themselves. The label names the local days the period covers.
    """
    tz = ZoneInfo(zone)
    local_start = start.astimezone(tz).replace(microsecond=0)
    local_end = end.astimezone(tz).replace(microsecond=0)
    last_day = (local_end - timedelta(microseconds=1)).date() if local_end > local_start else None
    label_end = last_day if last_day is not None else local_end.date()
    return {
        "kind": kind,
        "timezone": zone,
        "start": _local_time(local_start),
        "end": _local_time(local_end),
        "start_iso": local_start.isoformat(),
        "end_iso": local_end.isoformat(),
        "label": f"{local_start:%Y-%m-%d} to {label_end:%Y-%m-%d}"
        if label_end != local_start.date()
        else f"{local_start:%Y-%m-%d}",
    }


def input_checksum(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
