"""The diagnostics archive an operator attaches to a bug report (OPS-3).

One zip with JSON members: versions (netmap, Python, PostgreSQL, search store),
the configuration check, the migration head, queue backlogs and ages, lease
holders, recent errors kept in the database and recent warning/error events
(this process's, and those of a log file the operator names), the slow-SQL sample and the last
hour of resource samples. Queues and leases are found by their shape rather
than by a fixed list — every table with ``processed_at`` and an enqueue time is
a queue, every table with ``claim_token`` and ``lease_expires_at`` holds leases —
so a domain that adds a queue shows up here without touching this module.

Redaction happens twice: every value passes through the credential scrubber,
and the finished members are searched for every configured secret (and the
generated secret key) as a last line of defence before anything is written.
"""

from __future__ import annotations

import collections
import json
import platform
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.config import ConfigCheck, Settings, secret_values
from app.db import transaction
from app.ops.config_check import (
    REDACTED,
    check_report,
    full_check,
    generated_secret_key_path,
    scrub,
)

ERROR_ROWS = 50


def configured_secrets(settings: Settings) -> list[str]:
    """Every secret value this deployment knows (to be kept out of any output)."""
    found: set[str] = set()
    for value in secret_values(settings):
        if not isinstance(value, str):
            continue
        found.add(value)
        if "://" in value:
            try:
                password = make_url(value).password
            except Exception:  # noqa: BLE001 - not an SQLAlchemy URL: keep the whole value
                password = None
            if password:
                found.add(str(password))
    path = generated_secret_key_path(settings)
    try:
        if path.is_file():
            found.add(path.read_text().strip())
    except OSError:
        pass
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def redact_bytes(data: bytes, secrets: list[str]) -> bytes:
    for secret in secrets:
        data = data.replace(secret.encode(), REDACTED.encode())
    return data


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _versions(conn: sa.Connection, settings: Settings) -> dict[str, Any]:
    return {
        "netmap": _version("netmap"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "postgresql": conn.execute(sa.text("SHOW server_version")).scalar(),
        "search_store": "elasticsearch" if settings.elasticsearch.url else "postgresql",
        "elasticsearch_client": _version("elasticsearch"),
        "sqlalchemy": _version("sqlalchemy"),
        "psycopg2": _version("psycopg2-binary") or _version("psycopg2"),
    }


def _tables_with(conn: sa.Connection, *columns: str) -> dict[str, set[str]]:
    rows = conn.execute(
        sa.text(
            """
            SELECT table_name, array_agg(column_name::text) AS columns
              FROM information_schema.columns
             WHERE table_schema = current_schema()
             GROUP BY table_name
            """
        )
    ).all()
    return {r.table_name: set(r.columns) for r in rows if all(c in r.columns for c in columns)}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def queues(conn: sa.Connection) -> list[dict[str, Any]]:
    """Backlog and age of every table shaped like a queue (``processed_at`` + enqueue time)."""
    found = []
    for table, columns in sorted(_tables_with(conn, "processed_at").items()):
        enqueued = next(
            (c for c in ("enqueued_at", "created_at", "available_at") if c in columns), None
        )
        if enqueued is None:
            continue
        row = conn.execute(
            sa.text(
                f"SELECT count(*) AS backlog, "  # noqa: S608 - names come from the catalog, quoted as identifiers
                f"extract(epoch FROM now() - min({enqueued})) AS oldest_age_seconds "
                f"FROM {_quoted(table)} WHERE processed_at IS NULL"
            )
        ).one()
        found.append(
            {
                "queue": table,
                "backlog": row.backlog,
                "oldest_age_seconds": round(float(row.oldest_age_seconds or 0.0), 1),
            }
        )
    return found


def leases(conn: sa.Connection) -> list[dict[str, Any]]:
    """Live and expired leases per table; holders where the table names them."""
    found = []
    for table, columns in sorted(_tables_with(conn, "claim_token", "lease_expires_at").items()):
        row = conn.execute(
            sa.text(
                f"SELECT count(*) FILTER (WHERE lease_expires_at > now()) AS live, "  # noqa: S608 - names come from the catalog, quoted as identifiers
                f"count(*) FILTER (WHERE lease_expires_at <= now()) AS expired "
                f"FROM {_quoted(table)} WHERE claim_token IS NOT NULL"
            )
        ).one()
        entry: dict[str, Any] = {"table": table, "live": row.live, "expired": row.expired}
        if "holder" in columns:
            key = "name" if "name" in columns else "holder"
            entry["holders"] = [
                {"key": r.key, "holder": r.holder, "lease_expires_at": r.lease_expires_at}
                for r in conn.execute(
                    sa.text(
                        f"SELECT {_quoted(key)}::text AS key, holder, lease_expires_at "  # noqa: S608 - names come from the catalog, quoted as identifiers
                        f"FROM {_quoted(table)} WHERE claim_token IS NOT NULL "
                        f"ORDER BY lease_expires_at LIMIT 100"
                    )
                )
            ]
        found.append(entry)
    return found


def recent_errors(conn: sa.Connection) -> list[dict[str, Any]]:
    """The latest errors the database remembers (every table with a ``last_error`` column)."""
    found = []
    for table, columns in sorted(_tables_with(conn, "last_error").items()):
        order = next(
            (
                c
                for c in ("updated_at", "last_finished_at", "available_at", "created_at")
                if c in columns
            ),
            None,
        )
        order_sql = f"ORDER BY {_quoted(order)} DESC NULLS LAST" if order else ""
        when = f"{_quoted(order)}" if order else "NULL::timestamptz"
        for r in conn.execute(
            sa.text(
                f"SELECT {when} AS at, last_error FROM {_quoted(table)} "  # noqa: S608 - names come from the catalog, quoted as identifiers
                f"WHERE last_error IS NOT NULL {order_sql} LIMIT {ERROR_ROWS}"
            )
        ):
            found.append({"table": table, "at": r.at, "error": str(r.last_error)[:2000]})
    return found


def problem_events_from_log(path: Path, limit: int = 200) -> list[dict[str, Any]]:
    """The last warning/error events of a JSON-lines log file (netmap's own log format)."""
    found: collections.deque[dict[str, Any]] = collections.deque(maxlen=limit)
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("level") in {"warning", "error", "critical"}:
                found.append(event)
    return list(found)


def collect(
    settings: Settings, loaded: ConfigCheck | None = None, *, event_log: Path | None = None
) -> dict[str, Any]:
    """Everything the archive holds, as JSON-able values (read in short transactions)."""
    from app.migrations import current_revisions, head_revisions
    from app.observability import recent_problem_events
    from app.ops import resources, slow_sql

    with transaction() as conn:
        versions = _versions(conn, settings)
        migration = {
            "current": sorted(current_revisions(conn)),
            "head": sorted(head_revisions()),
        }
        queue_state = queues(conn)
        lease_state = leases(conn)
        errors = recent_errors(conn)
    migration["at_head"] = migration["current"] == migration["head"]
    now = datetime.now(UTC)
    try:
        slow = slow_sql.report(settings)
    except Exception as exc:  # noqa: BLE001 - the archive is most useful when things are broken
        slow = {"error": type(exc).__name__}
    try:
        samples = resources.series(now - timedelta(hours=1), now)
    except Exception as exc:  # noqa: BLE001
        samples = {"error": type(exc).__name__}
    return {
        "versions.json": versions,
        "config_check.json": check_report(settings, full_check(settings, loaded)),
        "migrations.json": migration,
        "queues.json": queue_state,
        "leases.json": lease_state,
        "recent_errors.json": errors,
        "recent_events.json": {
            "this_process": recent_problem_events(),
            "log_file": problem_events_from_log(event_log) if event_log else None,
        },
        "slow_sql.json": slow,
        "resources_last_hour.json": samples,
        "manifest.json": {"generated_at": now, "kind": "netmap-diagnostics", "format": 1},
    }


def write_archive(
    settings: Settings,
    target: str | Path | IO[bytes],
    loaded: ConfigCheck | None = None,
    *,
    event_log: Path | None = None,
) -> list[str]:
    """Write the redacted zip to a path or a binary file object; returns the member names."""
    members = collect(settings, loaded, event_log=event_log)
    secrets = configured_secrets(settings)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in members.items():
            data = json.dumps(scrub(value), indent=2, default=str).encode()
            archive.writestr(name, redact_bytes(data, secrets))
    return list(members)
