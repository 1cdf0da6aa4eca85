"""The ``netmap traffic`` commands: one rollup run, and a chart of stored rollups.

``netmap traffic rollup`` has three set-ups:

* ``--endpoint URL`` (on the nginx host): checkpoints in ``--state-dir``
  (default ``[traffic] state_dir``, else ``<data_dir>/traffic-state``), rows
  posted in batches to the server with the token from ``--token-env``; no
  database is needed;
* no ``--endpoint``: rows written to the configured database; checkpoints in
  ``--state-dir`` when given, else in the database (shared with the runner;
  compare-and-set commits keep the two from double counting).

Either way it prints one JSON summary line on stdout (progress goes to stderr)
and exits 1 when a domain was incomplete or rows could not be delivered.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from app.traffic.store_directory import DirectoryCheckpointStore

_DATE = click.DateTime(formats=["%Y-%m-%d"])


class StderrProgress:
    """Progress lines on stderr: messages as they come, bytes read at most every 2 s."""

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self.bytes = 0
        self.started = time.monotonic()
        self._last = self.started

    def message(self, text: str) -> None:
        click.echo(f"[traffic] {text}", err=True)

    def read(self, count: int) -> None:
        self.bytes += count
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            rate = self.bytes / max(now - self.started, 1e-9) / 1e6
            self.message(f"read {self.bytes / 1e6:,.0f} MB ({rate:,.0f} MB/s)")


@click.group("traffic")
def traffic() -> None:
    """Traffic rollups from nginx access logs."""


def _domains(raw: str | None, configured: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        domains = configured
    else:
        domains = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not domains:
        raise click.UsageError("no domains: pass --domains a,b or set [traffic] domains")
    from app.config import DOMAIN_NAME

    for domain in domains:
        if not DOMAIN_NAME.match(domain):
            raise click.UsageError(f"--domains: {domain!r} is not a host name")
    return tuple(dict.fromkeys(domains))


def _directory_store(state_path: Path) -> DirectoryCheckpointStore:
    """Checkpoints in the state directory (the standalone and ``--state-dir`` runs)."""
    from app.traffic.store_directory import DirectoryCheckpointStore, StateLocked

    try:
        return DirectoryCheckpointStore(state_path)
    except StateLocked as exc:
        raise click.ClickException(str(exc)) from None


@traffic.command("rollup")
@click.option("--granularity", type=click.Choice(["5m", "day"]), default="5m", show_default=True)
@click.option("--start-date", type=_DATE, help="First business date (5m: today, day: yesterday).")
@click.option("--end-date", type=_DATE, help="Last business date (default like --start-date).")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Default [traffic] log_dir.")
@click.option("--domains", help="Comma-separated domains (default [traffic] domains).")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Checkpoints directory.")
@click.option("--force-full-scan", is_flag=True, help="Re-read every file; republish the window.")
@click.option("--endpoint", help="Post rows to this netmap server instead of the database.")
@click.option(
    "--token-env",
    default="NETMAP_TRAFFIC_TOKEN",
    show_default=True,
    help="Environment variable holding the rollup token (with --endpoint).",
)
@click.option("--source-server", help="sourceServer of the rows (default: host name).")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 50000),
    help="Rows per delivery batch (standalone: per POST); default [traffic] batch_size.",
)
@click.pass_obj
def rollup_command(
    state,
    granularity: str,
    start_date: datetime | None,
    end_date: datetime | None,
    log_dir: str | None,
    domains: str | None,
    state_dir: str | None,
    force_full_scan: bool,
    endpoint: str | None,
    token_env: str,
    source_server: str | None,
    batch_size: int | None,
) -> None:
    """Run one rollup; prints one JSON summary line."""
    from app.traffic.rollup import RollupOptions, RollupRun

    settings = state.settings()
    traffic_settings = settings.traffic
    if batch_size is not None:
        traffic_settings = traffic_settings.replace(batch_size=batch_size)
    options = RollupOptions(
        granularity=granularity,
        start_date=start_date.date() if start_date else None,
        end_date=end_date.date() if end_date else None,
        domains=_domains(domains, traffic_settings.domains),
        log_dir=Path(log_dir) if log_dir else settings.resolve_path(traffic_settings.log_dir),
        force_full_scan=force_full_scan,
        source_server=source_server or traffic_settings.source_server or socket.gethostname(),
    )
    progress = StderrProgress()
    # An option's path is the operator's, from the working directory; the setting's is
    # resolved as settings are.
    if state_dir:
        state_path = Path(state_dir).expanduser().absolute()
    elif traffic_settings.state_dir:
        state_path = settings.resolve_path(traffic_settings.state_dir)
    else:
        state_path = settings.data_dir / "traffic-state"
    with contextlib.ExitStack() as stack:
        if endpoint:
            from app.traffic.remote import RemoteRowSink

            token = os.environ.get(token_env, "").strip()
            if not token:
                raise click.UsageError(f"--endpoint needs the rollup token in ${token_env}")
            try:
                sink = RemoteRowSink(
                    endpoint,
                    token,
                    retries=traffic_settings.post_retries,
                    timeout=traffic_settings.post_timeout_seconds,
                    report=progress.message,
                )
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            store = _directory_store(state_path)
        elif state_dir:
            from app.cli_support import database_for_command
            from app.traffic.sinks import DatabaseRowSink

            # Rows go through the row sink's upsert: one pooled connection serves the
            # run's few short transactions.
            stack.enter_context(
                database_for_command(
                    settings,
                    application_name="netmap-traffic",
                    pool_size=1,
                    max_overflow=0,
                    pool_pre_ping=False,
                )
            )
            sink = DatabaseRowSink()
            store = _directory_store(state_path)
        else:
            from app.cli_support import direct_connection_for_command
            from app.traffic.sinks import DatabaseRowSink
            from app.traffic.store_postgres import PostgresCheckpointStore

            # Checkpoints and rows in the database, all in SQL through one psycopg2
            # connection: a cron job every five minutes does not import SQLAlchemy or
            # pay a connection set-up per transaction.
            connection = stack.enter_context(
                direct_connection_for_command(settings, application_name="netmap-traffic")
            )
            sink = DatabaseRowSink()
            store = PostgresCheckpointStore(connection.cursor)
        stack.callback(store.close)
        run = RollupRun(
            traffic_settings, store, sink, on_bytes=progress.read, report=progress.message
        )
        try:
            summary = run.execute(options)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    click.echo(json.dumps(summary.as_dict(), ensure_ascii=False))
    if not summary.ok:
        sys.exit(1)


def _instant(raw: str, tz) -> datetime:
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise click.BadParameter(f"{raw!r} is not a date or ISO 8601 timestamp") from None
    return value if value.tzinfo else value.replace(tzinfo=tz)


@traffic.command("chart")
@click.option("--domain", required=True)
@click.option("--from", "start", required=True, help="Date or ISO timestamp (business zone).")
@click.option("--to", "end", required=True, help="Date or ISO timestamp; a date includes that day.")
@click.option("--granularity", type=click.Choice(["5m", "day"]), default="5m", show_default=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="PNG file to write.")
@click.pass_obj
def chart_command(state, domain: str, start: str, end: str, granularity: str, out: str) -> None:
    """Draw requests and bytes over time from stored rollups into a PNG."""
    from app.cli_support import database_for_command
    from app.db import transaction
    from app.traffic.business_time import BusinessCalendar
    from app.traffic.chart import draw_chart
    from app.traffic.rows import series

    calendar = BusinessCalendar(state.settings().traffic.timezone)
    start_at = _instant(start, calendar.tz)
    end_at = _instant(end, calendar.tz)
    if len(end.strip()) == 10:  # a bare date: include the whole day
        end_at = end_at + timedelta(days=1)
    if end_at <= start_at:
        raise click.BadParameter("--to must be after --from")
    with database_for_command(state.settings()), transaction() as conn:
        points = series(conn, domain=domain, granularity=granularity, start=start_at, end=end_at)
    draw_chart(points, domain=domain, granularity=granularity, tz=calendar.tz, out=out)
    click.echo(
        json.dumps(
            {
                "out": str(out),
                "buckets": len(points),
                "requests": sum(p[1] for p in points),
                "responseBytes": sum(p[2] for p in points),
            }
        )
    )
