"""`netmap bench retention`: a year of daily runs in minutes, and the database's size.

One monitoring task is scanned once a simulated day for ``--days`` days: each day a run
starts (``runs.start_run``, as the scheduler starts it), one scanner uploads the same
``--endpoints`` endpoints through a real ``netmap up --no-runner`` with ``observed_at``
on that day (time is compressed: the first day lies ``--days`` days back, so the facts
land in the monthly partitions of their day), the final commits, and the runner's
projection and change analysis run in this process. Then what the runner's periodic
jobs do, with the simulated day as "now":

* run retention (``[scan] keep_runs``): the executions of runs beyond the newest
  ``--keep-runs`` go, with their execution endpoints, facts and analysis rows
  (``jobs.task_purge.purge_old_runs``);
* fact retention (``[search] facts_retention_months``): the fact months before the
  kept window are dropped whole (``drop_fact_months_before``);
* a plain ``VACUUM`` (no lock, no rewrite) of the tables holding a thousand dead rows or
  more: in production autovacuum has a day between two runs to make the purged rows'
  space reusable; compressed into seconds it would not, and the database would grow
  for that reason alone.

Every ``--sample-days`` days (and on the last) it records the database's size, each
table's, the fact partitions, runs and executions kept. ``growth_after_window`` is the
last sample's size over the first sample's taken once both retention windows had
passed: about 1 when the size stays bounded. One JSON object on stdout; progress on
stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import sqlalchemy as sa

from app.bench.scale import BATCH, PORT_SPEC, Laps, observations, relation_bytes

_STATE = """
    SELECT (SELECT count(*) FROM task_runs WHERE task_id = :t) AS runs,
           (SELECT count(*) FROM scan_executions WHERE task_id = :t) AS executions,
           (SELECT count(*) FROM search_execution_endpoints WHERE task_id = :t)
               AS execution_endpoints,
           (SELECT count(*) FROM search_facts) AS facts,
           (SELECT count(*) FROM search_assets_user) AS assets,
           pg_database_size(current_database()) AS database_bytes
"""


def _state(conn, task_id: int) -> dict[str, Any]:
    from app.search.postgres_retention import fact_partitions

    row = conn.execute(sa.text(_STATE), {"t": task_id}).one()
    tables, indexes = relation_bytes(conn)
    return {
        **{key: int(value) for key, value in row._mapping.items()},
        "fact_months": [month.strftime("%Y-%m") for _name, month in fact_partitions(conn)],
        "table_bytes": tables,
        "index_bytes_total": sum(indexes.values()),
    }


# Tables with at least this many dead rows are vacuumed after a day's purge (autovacuum's
# own threshold is 50 rows plus a fifth of the table).
_DEAD_ROWS = 1000


def _vacuum() -> None:
    """VACUUM the tables the day left dead rows in, as autovacuum would pick them."""
    from app.db import get_engine

    with get_engine().connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        tables = conn.execute(
            sa.text(
                "SELECT relid::regclass::text FROM pg_stat_user_tables "
                "WHERE schemaname = 'public' AND n_dead_tup >= :dead"
            ),
            {"dead": _DEAD_ROWS},
        ).scalars()
        for table in list(tables):
            # The name comes from the catalogue (regclass text is quoted where needed).
            conn.execute(sa.text(f"VACUUM {table}"))


# The phases of one simulated day, in order; the sampled day's seconds go in its sample:
# what run and fact retention cost at this size, beside what the day's scan cost.
_PHASES = ("upload", "projection", "analysis", "run_purge", "fact_month_drop", "vacuum")


def _queue_day(task_id: int, day: int, settings) -> None:
    """Day 0's run came with the task; later days start the next run as the scheduler
    does. Its execution may upload the bench's addresses (10.0.0.0/8)."""
    from app.bench.upload_http import widen_targets
    from app.db import transaction
    from app.scan_control.runs import start_run

    if not day:
        return  # created with the task, its execution already widened
    start_run(task_id, trigger="schedule", limits=settings.scan)
    with transaction() as conn:
        widen_targets(conn, task_id, ["10.0.0.0/8"])


@click.command("retention")
@click.option("--endpoints", default=2000, show_default=True, type=click.IntRange(1, 5_000_000))
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 3650))
@click.option("--keep-runs", default=7, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--retention-months", default=3, show_default=True, type=click.IntRange(1, 1200))
@click.option("--sample-days", default=30, show_default=True, type=click.IntRange(1, 3650))
@click.option("--shared-buffers", default="256MB", show_default=True)
def command(
    endpoints: int,
    days: int,
    keep_runs: int,
    retention_months: int,
    sample_days: int,
    shared_buffers: str,
) -> None:
    """Daily runs over a simulated span with run and fact retention; sizes over time."""
    from app.bench import local_server, upload_http
    from app.bench.projection import drain
    from app.bench.scale import analyse_queued, analysis_worker
    from app.bench.scratch import scratch_database
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.search import open_store
    from app.search.port import fact_retention
    from app.search.postgres_retention import months_to_keep_from
    from jobs.task_purge import purge_old_runs

    overrides: dict[str, dict[str, object]] = {
        "ingest": {"max_observations_per_batch": BATCH, "observed_at_max_age_days": days + 2},
        "scan": {"keep_runs": keep_runs},
        "search": {"facts_retention_months": retention_months},
    }
    tuning = {"shared_buffers": shared_buffers, "max_wal_size": "4GB"}
    now = datetime.now(UTC).replace(microsecond=0)
    first_day = now - timedelta(days=days)
    # Both windows passed: the runs kept and the fact months kept are all of the window.
    window_days = max(keep_runs, (retention_months + 1) * 31)
    samples: list[dict[str, Any]] = []
    started = time.perf_counter()
    with scratch_database(overrides=overrides, server_tuning=tuning) as scratch:
        settings = scratch.settings
        store = open_store(settings)
        store.ensure_schema()
        retention = fact_retention(store)
        if retention is None:
            raise click.ClickException(f"the {store.name} store does not drop fact months")
        worker = analysis_worker(settings, store)
        with transaction() as conn:
            owner = create_user(conn, "bench-retention", "bench retention password 1")
            token = create_scanner(conn, "bench-retention")[1]
        [task_id] = upload_http.create_executions(
            owner.id, 1, settings, "retention daily", ports=PORT_SPEC
        )
        env = local_server.server_environment(scratch, max_batch=BATCH, lease_seconds=3600)
        env["NETMAP_INGEST_OBSERVED_AT_MAX_AGE_DAYS"] = str(days + 2)  # the backdated days
        server, url = local_server.start_server(scratch, env)
        try:
            for day in range(days):
                today = first_day + timedelta(days=day)
                _queue_day(task_id, day, settings)
                laps = Laps(time.perf_counter)  # after the run is queued: the upload alone
                client = upload_http.ScannerClient(url, token)
                for offset in range(0, endpoints, BATCH):
                    items = observations(
                        offset, min(BATCH, endpoints - offset), today.isoformat(), today
                    )
                    client.send(client.body(items))
                client.send(client.body([], final=True))
                laps.lap()
                drain(settings, store, 1, endpoints, f"day {day + 1}", None)
                laps.lap()
                analyse_queued(worker)
                laps.lap()
                purge_old_runs(settings, store)
                laps.lap()
                retention.drop_fact_months_before(months_to_keep_from(today, retention_months))
                laps.lap()
                _vacuum()
                laps.lap()
                if (day + 1) % sample_days == 0 or day + 1 == days:
                    with transaction() as conn:
                        sample = {"day": day + 1, "date": today.date().isoformat()}
                        sample.update(_state(conn, task_id))
                    sample["day_phase_s"] = {
                        phase: round(ms / 1000, 3)
                        for phase, ms in zip(_PHASES, laps.spent, strict=True)
                    }
                    samples.append(sample)
                    print(f"[retention] {json.dumps(sample)}", file=sys.stderr, flush=True)
        finally:
            local_server.stop_server(server)
            store.close()
    settled = [s for s in samples if s["day"] >= window_days]
    growth = (
        round(settled[-1]["database_bytes"] / settled[0]["database_bytes"], 3)
        if len(settled) >= 2
        else None
    )
    click.echo(
        json.dumps(
            {
                "benchmark": "retention",
                "endpoints": endpoints,
                "days": days,
                "keep_runs": keep_runs,
                "facts_retention_months": retention_months,
                "observations": endpoints * days,
                "seconds": round(time.perf_counter() - started, 1),
                "window_days": window_days,
                "samples": samples,
                "growth_after_window": growth,
                "cpu_count": os.cpu_count(),
            }
        )
    )
