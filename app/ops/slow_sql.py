"""Slow SQL from ``pg_stat_statements``: availability, samples, top statements (OBS-4).

The sampler reads the extension's cumulative counters for this database and
keeps, per sample, the statements that cost most *between* two samples — by
total time and by mean time per call — plus the counters as the baseline for
the next sample. A counter that went down (stats reset) starts a new baseline.

Only three things make slow SQL ``unavailable``, each with its reason: the
extension is not installed in this database, the role may not read it, or the
library is not loaded via ``shared_preload_libraries``. Anything else that goes
wrong while reading — a pool timeout, a refused connection, a statement timeout
— is a *sampling failure*: the monitor is available, this sample is missing, and
the report says so separately. Mixing the two would tell an operator to install
an extension when the database is simply overloaded.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from app.config import Settings
from app.db import extension_schema, transaction
from app.errors import PoolTimeout, Unavailable
from app.observability import emit

EXTENSION_MISSING = "extension missing"
INSUFFICIENT_PRIVILEGE = "insufficient privilege"
NOT_LOADED = "not loaded in shared_preload_libraries"
BASELINE_LIMIT = 1000
_PASSWORD_LITERAL = re.compile(r"(?i)(password\s+)'(?:[^']|'')*'")


@dataclass
class Reading:
    """One read of the counters: ``ok`` with statements, ``unavailable`` or ``failed``."""

    status: str
    reason: str | None = None
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    stats_reset: datetime | None = None
    statements: list[dict[str, Any]] = field(default_factory=list)


def _clean_query(text: str) -> str:
    # Utility statements are not normalised by every server version; a password
    # literal in one must not reach the API or the diagnostics archive.
    return _PASSWORD_LITERAL.sub(r"\1'<redacted>'", text or "")[:2000]


def read_statements(engine: Engine | None = None, *, limit: int = BASELINE_LIMIT) -> Reading:
    """Read this database's statement counters, classifying what went wrong."""
    try:
        with transaction(engine=engine) as conn:
            schema = extension_schema(conn, "pg_stat_statements")
            if schema is None:
                return Reading("unavailable", EXTENSION_MISSING)
            view = f'"{schema}".pg_stat_statements'
            rows = conn.execute(
                sa.text(
                    f"""
                    SELECT queryid, query, calls, total_exec_time, max_exec_time, rows,
                           shared_blks_hit + shared_blks_read AS shared_blocks,
                           shared_blks_read, shared_blks_dirtied, wal_records
                      FROM {view}
                     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                       AND queryid IS NOT NULL
                     ORDER BY total_exec_time DESC
                     LIMIT :limit
                    """  # noqa: S608 - the schema is the one pg_extension names for the extension
                ),
                {"limit": limit},
            ).all()
            stats_reset = conn.execute(
                sa.text(f'SELECT stats_reset FROM "{schema}".pg_stat_statements_info')  # noqa: S608 - the schema is the one pg_extension names for the extension
            ).scalar()
    except PoolTimeout:
        return Reading("failed", "pool timeout")
    except Unavailable:
        return Reading("failed", "connection failed")
    except sa_exc.DBAPIError as exc:
        pgcode = getattr(exc.orig, "pgcode", None)
        message = str(exc.orig or "")
        if pgcode == "42501":
            return Reading("unavailable", INSUFFICIENT_PRIVILEGE)
        if pgcode == "55000" and "shared_preload_libraries" in message:
            return Reading("unavailable", NOT_LOADED)
        if isinstance(exc, sa_exc.OperationalError) or exc.connection_invalidated:
            return Reading("failed", "connection failed")
        return Reading("failed", f"{type(exc.orig).__name__}: {message.strip()[:200]}")
    statements = [
        {
            "queryid": str(r.queryid),
            "query": _clean_query(r.query),
            "calls": int(r.calls),
            "total_ms": float(r.total_exec_time),
            "max_ms": float(r.max_exec_time),
            "rows": int(r.rows),
            # Pages touched in shared buffers, of them read from outside, and dirtied;
            # WAL records: what a benchmark phase's statements did, beyond their time.
            "shared_blocks": int(r.shared_blocks),
            "read_blocks": int(r.shared_blks_read),
            "dirtied_blocks": int(r.shared_blks_dirtied),
            "wal_records": int(r.wal_records),
        }
        for r in rows
    ]
    if statements and all(s["query"] == "<insufficient privilege>" for s in statements):
        return Reading("unavailable", INSUFFICIENT_PRIVILEGE)
    return Reading("ok", statements=statements, stats_reset=stats_reset)


def _deltas(current: list[dict[str, Any]], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    changed = []
    for statement in current:
        previous = baseline.get(statement["queryid"])
        calls, total, rows = statement["calls"], statement["total_ms"], statement["rows"]
        if previous and calls >= previous[0] and total >= previous[1]:
            calls, total, rows = calls - previous[0], total - previous[1], rows - previous[2]
        if calls <= 0:
            continue
        changed.append(
            {
                "queryid": statement["queryid"],
                "query": statement["query"],
                "calls": calls,
                "total_ms": round(total, 3),
                "mean_ms": round(total / calls, 3),
                "max_ms": round(statement["max_ms"], 3),
                "rows": max(rows, 0),
            }
        )
    return changed


def _latest_baseline(conn: sa.Connection) -> tuple[datetime | None, dict[str, Any]]:
    row = conn.execute(
        sa.text(
            "SELECT sampled_at, baseline FROM ops_slow_sql_samples "
            "WHERE status = 'ok' ORDER BY sampled_at DESC, id DESC LIMIT 1"
        )
    ).one_or_none()
    if row is None:
        return None, {}
    return row.sampled_at, row.baseline or {}


def take_sample(
    settings: Settings, *, engine: Engine | None = None, source: Engine | None = None
) -> dict[str, Any]:
    """Read the counters, store one sample (bounded history), return it as the API shows it.

    ``source`` is the database whose statements are read when it is not the one the
    samples are stored in (the same by default)."""
    reading = read_statements(source or engine)
    top = settings.ops.slow_sql_top
    by_total: list[dict[str, Any]] = []
    by_mean: list[dict[str, Any]] = []
    window_start = None
    try:
        with transaction(engine=engine) as conn:
            if reading.status == "ok":
                window_start, baseline = _latest_baseline(conn)
                if window_start is None or (
                    reading.stats_reset is not None and reading.stats_reset > window_start
                ):
                    window_start, baseline = reading.stats_reset, {}
                changed = _deltas(reading.statements, baseline)
                by_total = sorted(changed, key=lambda s: s["total_ms"], reverse=True)[:top]
                by_mean = sorted(changed, key=lambda s: s["mean_ms"], reverse=True)[:top]
            new_baseline = (
                {s["queryid"]: [s["calls"], s["total_ms"], s["rows"]] for s in reading.statements}
                if reading.status == "ok"
                else None
            )
            conn.execute(
                sa.text(
                    """
                    INSERT INTO ops_slow_sql_samples
                        (sampled_at, window_start, status, reason, by_total, by_mean, baseline)
                    VALUES (:at, :start, :status, :reason, CAST(:by_total AS jsonb),
                            CAST(:by_mean AS jsonb), CAST(:baseline AS jsonb))
                    """
                ),
                {
                    "at": reading.read_at,
                    "start": window_start,
                    "status": reading.status,
                    "reason": reading.reason,
                    "by_total": json.dumps(by_total),
                    "by_mean": json.dumps(by_mean),
                    "baseline": json.dumps(new_baseline) if new_baseline is not None else None,
                },
            )
            conn.execute(
                sa.text(
                    """
                    DELETE FROM ops_slow_sql_samples
                     WHERE id <= (SELECT id FROM ops_slow_sql_samples
                                   ORDER BY id DESC OFFSET :keep LIMIT 1)
                    """
                ),
                {"keep": settings.ops.slow_sql_retention_samples},
            )
    except (PoolTimeout, Unavailable):
        emit("SlowSqlSampleNotStored", level=logging.WARNING, status=reading.status)
    if reading.status == "failed":
        emit("SlowSqlSamplingFailed", level=logging.WARNING, reason=reading.reason)
    elif reading.status == "unavailable":
        emit("SlowSqlUnavailable", level=logging.WARNING, reason=reading.reason)
    return {
        "status": reading.status,
        "reason": reading.reason,
        "window": {"from": window_start, "to": reading.read_at},
        "by_total": by_total,
        "by_mean": by_mean,
    }


def report(settings: Settings, *, engine: Engine | None = None) -> dict[str, Any]:
    """What `GET /api/system/slow-sql` shows: availability, the last sampled window, and the
    last sampling failure if it is newer than that window."""
    with transaction(engine=engine) as conn:
        rows = conn.execute(
            sa.text(
                """
                (SELECT * FROM ops_slow_sql_samples WHERE status = 'ok'
                  ORDER BY sampled_at DESC, id DESC LIMIT 1)
                UNION ALL
                (SELECT * FROM ops_slow_sql_samples WHERE status <> 'ok'
                  ORDER BY sampled_at DESC, id DESC LIMIT 1)
                """
            )
        ).all()
    ok = next((r for r in rows if r.status == "ok"), None)
    other = next((r for r in rows if r.status != "ok"), None)
    if ok is None and other is None:
        # Nothing sampled yet (no runner): read live, cumulative since the last reset.
        reading = read_statements(engine)
        statements = _deltas(reading.statements, {})
        top = settings.ops.slow_sql_top
        return {
            "available": reading.status != "unavailable",
            "reason": reading.reason if reading.status == "unavailable" else None,
            "sampling_failure": (
                {"at": reading.read_at, "reason": reading.reason}
                if reading.status == "failed"
                else None
            ),
            "window": {"from": reading.stats_reset, "to": reading.read_at},
            "source": "live",
            "by_total": sorted(statements, key=lambda s: s["total_ms"], reverse=True)[:top],
            "by_mean": sorted(statements, key=lambda s: s["mean_ms"], reverse=True)[:top],
        }
    latest_is_unavailable = (
        other is not None
        and other.status == "unavailable"
        and (ok is None or other.sampled_at >= ok.sampled_at)
    )
    failure = (
        {"at": other.sampled_at, "reason": other.reason}
        if other is not None
        and other.status == "failed"
        and (ok is None or other.sampled_at >= ok.sampled_at)
        else None
    )
    return {
        "available": not latest_is_unavailable,
        "reason": other.reason if latest_is_unavailable else None,
        "sampling_failure": failure,
        "window": {
            "from": ok.window_start if ok else None,
            "to": ok.sampled_at if ok else None,
        },
        "source": "sample",
        "by_total": ok.by_total if ok else [],
        "by_mean": ok.by_mean if ok else [],
    }
