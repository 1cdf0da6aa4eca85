"""`netmap bench floor`: netmap's ingest as a fraction of what plain COPY of the same rows costs.

On a scratch database one scanner uploads ``--observations`` distinct endpoints through a
real ``netmap up --no-runner`` (gunicorn, HTTP, the full upload path: validation,
receipts, facts, execution endpoints, counters, the final), in batches of ``--batch``,
with ``--in-flight`` batches sent at once (the agent's ``[agent] upload_concurrency``:
1 waits for each answer before the next batch, as the measure was first taken; the agent
itself sends batches of 1000, 2 at a time); the wall time from the first batch to the
final's answer gives netmap's rate.

The rows that upload left are the floor's input: every table whose row count the upload
changed (read from the statistics counters, so nothing is named by hand and a new table
of the write path is picked up; a row it only updated, the execution's, is not) is copied
out in PostgreSQL's binary format. Then,
``--repeats`` times, those tables are emptied and the same rows are written back with
one ``COPY FROM`` per table in one transaction, with the tables' own indexes and
constraints and no triggers (``session_replication_role = replica``: the counters the
triggers maintain are among the copied rows). Timed is that transaction, commit
included; the scratch server runs as every bench's does (``fsync`` off).

Each COPY of the floor is also timed by itself (``by_table_cpu_ms_per_1k``), and the same
rows are written once more as netmap's own writes shape them (``text_batches``): COPY in
text format, ``--batch`` rows a statement, each statement in its own transaction inside
a savepoint, small tables whole. What that costs beyond the floor is the text format
and the statement shape; what netmap's PostgreSQL costs beyond it is the statements a
COPY does not make (receipts, counters, an execution's addresses).

``ratio_to_floor`` is netmap's observations per second over the floor's (best repeat);
the goal of the scale work is at least 0.6 with one client. Each side also reports the
CPU seconds it cost per thousand observations: the web server's process tree, the
PostgreSQL server's and this process (the client), so a change can be told apart from a
busy neighbour, and the gap named (Python or the database). One JSON object on stdout,
progress on stderr.
"""

from __future__ import annotations

import io
import json
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import sqlalchemy as sa

GOAL = 0.6
# Tables the statistics counters may see growing while the upload runs that are not the
# upload's rows: the web server's start (the renderer's runtime configuration) and the
# sessions and audit of API calls.
_NOT_WRITE_PATH = {
    "user_sessions",
    "login_throttle",
    "audit_log",
    "runtime_configuration",
    "runtime_configuration_revisions",
}


def _changes(conn) -> dict[str, int]:
    """Rows inserted per user table so far (the statistics counters). A counter row the
    upload creates and then updates counts by its insert; a row it only updates (the
    execution's own) is not the upload's."""
    rows = conn.execute(
        sa.text(
            "SELECT relname, n_tup_ins AS n FROM pg_stat_user_tables WHERE schemaname = 'public'"
        )
    ).all()
    return {row.relname: int(row.n) for row in rows}


def _settled_changes(engine) -> dict[str, int]:
    # Backends report their counters at transaction end, at most once a second; read
    # until two readings a second apart agree.
    last: dict[str, int] | None = None
    for _ in range(30):
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            now = _changes(conn)
        if now == last:
            return now
        last = now
        time.sleep(1.1)
    return last or {}


def _copy_out(engine, tables: list[str], options: str) -> dict[str, bytes]:
    """Each table's rows as ``COPY … TO STDOUT`` writes them with ``options``: ``(FORMAT
    binary)``, or empty for text (a row a line: text format escapes line breaks inside
    values)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        dumps = {}
        for table in tables:
            buffer = io.BytesIO()
            cursor.copy_expert(f'COPY "{table}" TO STDOUT {options}', buffer)
            dumps[table] = buffer.getvalue()
        raw.commit()
        return dumps
    finally:
        raw.close()


@dataclass
class CopyRun:
    """One timed writing of the rows: wall seconds, the PostgreSQL server's CPU seconds,
    and the writing backend's own CPU seconds per table."""

    seconds: float
    cpu: float
    by_table: dict[str, float]


def _copy_in(engine, dumps: dict[str, bytes], postgres: int | None) -> CopyRun:
    """Empty the tables, then time writing the dumps back in one transaction."""

    def write(cursor, table: str, data: bytes) -> None:
        cursor.copy_expert(f'COPY "{table}" FROM STDIN (FORMAT binary)', io.BytesIO(data))

    return _timed_writes(engine, postgres, list(dumps.items()), write, False)


def _copy_in_text_batches(
    engine, lines: dict[str, list[bytes]], postgres: int | None, batch: int
) -> CopyRun:
    """Empty the tables, then time writing the rows back as netmap's writes are shaped:
    text COPY of ``batch`` rows, each in its own transaction inside a savepoint."""
    statements = [
        (table, b"".join(rows[start : start + batch]))
        for table, rows in lines.items()
        for start in range(0, len(rows), batch)
    ]

    def write(cursor, table: str, data: bytes) -> None:
        cursor.execute("SAVEPOINT floor_batch")
        cursor.copy_expert(f'COPY "{table}" FROM STDIN', io.BytesIO(data))
        cursor.execute("RELEASE SAVEPOINT floor_batch")

    return _timed_writes(engine, postgres, statements, write, True)


def _timed_writes(engine, postgres: int | None, statements, write, commit_each: bool) -> CopyRun:
    """Empty the statements' tables, then time ``write`` of each (table, data) in turn,
    with no triggers (the counters they keep are among the rows): one transaction, or
    one per statement (``commit_each``). The whole server's CPU is read before and after;
    the connection's own backend's around each statement (commit included, one small
    read: a walk of every process here would lengthen the timed phase), added up by
    table."""
    from app.bench.cpu import own_cpu_seconds, tree_cpu_seconds

    tables = list(dict.fromkeys(table for table, _data in statements))
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("TRUNCATE " + ", ".join(f'"{table}"' for table in tables))
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
        raw.commit()
        by_table = dict.fromkeys(tables, 0.0)
        first = tree_cpu_seconds(postgres)
        started = time.perf_counter()
        mark = own_cpu_seconds(backend)
        for table, data in statements:
            write(cursor, table, data)
            if commit_each:
                raw.commit()
            now = own_cpu_seconds(backend)
            by_table[table] += now - mark
            mark = now
        raw.commit()
        seconds = time.perf_counter() - started
        cpu = tree_cpu_seconds(postgres) - first
        cursor.execute("RESET session_replication_role")
        raw.commit()
        return CopyRun(seconds, cpu, by_table)
    finally:
        raw.close()


def _per_k(seconds: float, observations: int) -> float:
    """CPU milliseconds per 1,000 observations."""
    return round(seconds * 1000 * 1000 / observations, 1)


def _send_window(client, bodies: list[bytes], in_flight: int) -> None:
    """Every batch, at most ``in_flight`` unanswered at once, as the agent's window
    sends them: each sending thread has its own HTTP session (the scanner's token)."""
    if in_flight == 1:
        for data in bodies:
            client.send(data)
        return
    local = threading.local()

    def send(data: bytes) -> float:
        if not hasattr(local, "client"):
            local.client = client.with_own_session()
        return local.client.send(data)

    with ThreadPoolExecutor(in_flight, thread_name_prefix="floor-upload") as pool:
        for _ in pool.map(send, bodies):
            pass  # a failed batch raises here, the others are still answered


def _row_counts(engine, tables: list[str]) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            t: int(conn.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar_one())  # noqa: S608 - names from pg_stat
            for t in tables
        }


@click.command("floor")
@click.option(
    "--observations",
    default=100_000,
    show_default=True,
    type=click.IntRange(1000, 5_000_000),
    help="distinct endpoints one scanner uploads",
)
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 20_000))
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option(
    "--in-flight",
    default=1,
    show_default=True,
    type=click.IntRange(1, 16),
    help="batches the scanner has sent and not yet had answered (the final waits for all)",
)
def command(observations: int, batch: int, repeats: int, in_flight: int) -> None:
    """netmap's one-client ingest against COPY of the rows it writes; one JSON object."""
    from app.bench import local_server, upload_http
    from app.bench.counts import execution_counts
    from app.bench.cpu import ServedCpu, postmaster_pid
    from app.bench.scratch import scratch_database
    from app.bench.upload_data import observations as make_observations
    from app.db import get_engine, transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.search import open_store

    overrides: dict[str, dict[str, object]] = {"ingest": {"max_observations_per_batch": batch}}
    with scratch_database(overrides=overrides) as scratch:
        store = open_store(scratch.settings)
        store.ensure_schema()
        store.close()
        with transaction() as conn:
            owner = create_user(conn, "bench", secrets.token_urlsafe(24), is_admin=True)
            token = create_scanner(conn, "bench-floor")[1]
        upload_http.create_executions(owner.id, 1, scratch.settings, f"bench http {observations}")
        server, url, _, _ = upload_http.start_server(scratch, None, "", batch)
        try:
            client = upload_http.ScannerClient(url, token)
            observed_at = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
            bodies = [
                client.body(make_observations(start, min(batch, observations - start), observed_at))
                for start in range(0, observations, batch)
            ]
            final = client.body([], final=True)
            engine = get_engine()
            before = _settled_changes(engine)
            print(
                f"[floor] netmap: {len(bodies)} batches of {batch}, {in_flight} in flight",
                file=sys.stderr,
            )
            postgres = postmaster_pid(scratch.directory / "pgdata")
            cpu_before = ServedCpu.read(server.pid, postgres)
            started = time.perf_counter()
            _send_window(client, bodies, in_flight)
            client.send(final)
            netmap_seconds = time.perf_counter() - started
            spent = ServedCpu.read(server.pid, postgres) - cpu_before
            if client.error:
                raise click.ClickException(f"the upload failed: {client.error}")
        finally:
            local_server.stop_server(server)
        with transaction() as conn:
            counted = execution_counts(conn, client.execution["id"])
        if counted["observations"] != observations:
            raise click.ClickException(f"the final counted {counted}, expected {observations}")
        after = _settled_changes(engine)
        tables = sorted(
            t for t, n in after.items() if n > before.get(t, 0) and t not in _NOT_WRITE_PATH
        )
        rows = _row_counts(engine, tables)
        dumps = _copy_out(engine, tables, "(FORMAT binary)")
        text_lines = {
            table: text.splitlines(keepends=True)
            for table, text in _copy_out(engine, tables, "").items()
        }
        floor_runs: list[CopyRun] = []
        for n in range(repeats):
            floor_runs.append(_copy_in(engine, dumps, postgres))
            seconds = floor_runs[-1].seconds
            print(f"[floor] COPY {n + 1}/{repeats}: {seconds:.2f} s", file=sys.stderr)
        copied = _row_counts(engine, tables)
        if copied != rows:
            raise click.ClickException(f"COPY wrote {copied}, the upload left {rows}")
        batches = _copy_in_text_batches(engine, text_lines, postgres, batch)
        print(f"[floor] text COPY in batches of {batch}: {batches.seconds:.2f} s", file=sys.stderr)
        copied = _row_counts(engine, tables)
        if copied != rows:
            raise click.ClickException(f"text COPY wrote {copied}, the upload left {rows}")
    netmap_rate = observations / netmap_seconds
    best = min(floor_runs, key=lambda run: run.seconds)
    floor_rate = observations / best.seconds
    result: dict[str, Any] = {
        "benchmark": "floor",
        "observations": observations,
        "batch": batch,
        "in_flight": in_flight,
        "netmap": {
            "seconds": round(netmap_seconds, 3),
            "observations_per_s": round(netmap_rate, 1),
            "cpu_ms_per_1k_observations": {
                "web": _per_k(spent.web, observations),
                "postgres": _per_k(spent.postgres, observations),
                "client": _per_k(spent.client, observations),
            },
        },
        "floor": {
            "seconds": [round(run.seconds, 3) for run in floor_runs],
            "observations_per_s": round(floor_rate, 1),
            "cpu_ms_per_1k_observations": {"postgres": _per_k(best.cpu, observations)},
            "by_table_cpu_ms_per_1k": {
                t: _per_k(cpu, observations) for t, cpu in best.by_table.items()
            },
            "tables": rows,
            "bytes": {t: len(d) for t, d in dumps.items()},
        },
        "text_batches": {
            "batch": batch,
            "seconds": round(batches.seconds, 3),
            "cpu_ms_per_1k_observations": {"postgres": _per_k(batches.cpu, observations)},
            "by_table_cpu_ms_per_1k": {
                t: _per_k(cpu, observations) for t, cpu in batches.by_table.items()
            },
        },
        "ratio_to_floor": round(netmap_rate / floor_rate, 3),
        "goal_ratio": GOAL,
    }
    click.echo(json.dumps(result))
