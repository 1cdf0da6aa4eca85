"""The PostgreSQL checkpoint store and database sink (runner mode), real files, real database."""

from __future__ import annotations

import random
import tempfile
from datetime import date, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import load_settings
from app.db import transaction
from app.traffic.rollup import RollupOptions, RollupRun
from app.traffic.rows import row_from_db
from app.traffic.sinks import DatabaseRowSink
from app.traffic.store_postgres import PostgresCheckpointStore
from tests.support.nginx_logs import CST, LogDir, MemorySink, nginx_line, reference_sums
from tests.support.rotation_scenarios import DOMAIN, Player, steps

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=CST).timestamp()
TRAFFIC_TABLES = "traffic_files, traffic_file_partials, traffic_dirty_keys, traffic_verified_days"


def _settings(log_dir: Path, **traffic):
    values = {"domains": [DOMAIN], "log_dir": str(log_dir)}
    values.update(traffic)
    settings, _ = load_settings(env={}, overrides={"traffic": values})
    return settings.traffic


def _run(traffic, sink, granularity="5m", on_bytes=None, now=NOW) -> dict:
    run = RollupRun(traffic, PostgresCheckpointStore(), sink, clock=lambda: now, on_bytes=on_bytes)
    return run.execute(
        RollupOptions(
            granularity=granularity,
            start_date=date(2026, 7, 30),
            end_date=date(2026, 8, 2),
            source_server="runner-test",
        )
    ).as_dict()


def _stored_rows(granularity: str) -> dict:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                """
                SELECT granularity, CAST(extract(epoch FROM bucket_start) AS bigint) AS b,
                       method, path, response_bytes, COALESCE(request_bytes, 0) AS rb,
                       request_bytes_known_count, total_requests, status_1xx, status_2xx,
                       status_3xx, status_4xx, status_5xx, status_other
                  FROM traffic_rollups WHERE granularity = :g AND total_requests > 0
                """
            ),
            {"g": granularity},
        ).all()
    return {(r[0], r[1], r[2], r[3]): [int(v) for v in r[4:]] for r in rows}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=steps, seed=st.integers(0, 2**32 - 1))
def test_postgres_store_gives_the_totals_of_one_full_scan(engine, history, seed):
    with transaction() as conn:
        conn.execute(sa.text(f"TRUNCATE {TRAFFIC_TABLES}"))
    with tempfile.TemporaryDirectory() as directory:
        player = Player(
            logs=LogDir(Path(directory) / "logs", DOMAIN),
            sink=MemorySink(),
            make_store=PostgresCheckpointStore,
            rng=random.Random(seed),
        )
        player.play(history)
        player.check()


class StoredRows:
    """The database sink, read back: ``rows`` are what ``traffic_rollups`` holds.

    With the PostgreSQL store the rollup writes these rows in SQL (inside the commit
    for changed keys, by batch for older dirty marks), never through ``write``.
    """

    writes_database = True

    def __init__(self) -> None:
        self.sink = DatabaseRowSink()

    def write(self, rows: list[dict]) -> int:
        return self.sink.write(rows)

    @property
    def rows(self) -> dict:
        with transaction() as conn:
            stored = conn.execute(sa.text("SELECT * FROM traffic_rollups")).all()
        return {
            (r.domain, r.granularity, r.bucket_start, r.method, r.path): row_from_db(r)
            for r in stored
        }


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=steps, seed=st.integers(0, 2**32 - 1))
def test_rows_written_in_sql_give_the_totals_of_one_full_scan(engine, history, seed):
    with transaction() as conn:
        conn.execute(sa.text(f"TRUNCATE {TRAFFIC_TABLES}, traffic_rollups"))
    with tempfile.TemporaryDirectory() as directory:
        sink = StoredRows()
        player = Player(
            logs=LogDir(Path(directory) / "logs", DOMAIN),
            sink=sink,  # type: ignore[arg-type]
            make_store=PostgresCheckpointStore,
            rng=random.Random(seed),
        )
        player.play(history)
        player.check()
        assert sink.sink.written == 0  # no row went through the Python sink
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM traffic_dirty_keys")).scalar() == 0


def test_paths_with_backslashes_tabs_and_quotes_survive_copy(engine, tmp_path):
    logs = LogDir(tmp_path / "logs", DOMAIN)
    traffic = _settings(tmp_path / "logs")
    start = datetime(2026, 8, 1, 9, tzinfo=CST)
    odd = ["/a\\x22b", "/tab\there", "/new\\nline", "/\u00e9t\u00e9", "/q'uote", "/back\\"]
    logs.write_lines([nginx_line(start + timedelta(seconds=i), path) for i, path in enumerate(odd)])
    assert _run(traffic, DatabaseRowSink())["ok"]
    expected = reference_sums(logs.written)
    assert _stored_rows("5m") == {k: v for k, v in expected.items() if k[0] == "5m"}


def test_database_sink_rows_are_exact_and_idempotent(engine, tmp_path):
    logs = LogDir(tmp_path / "logs", DOMAIN)
    traffic = _settings(tmp_path / "logs")
    start = datetime(2026, 7, 31, 23, 50, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=37 * i)) for i in range(40)])
    assert _run(traffic, DatabaseRowSink())["ok"]
    logs.rotate_rename()
    logs.compress(".1")
    logs.write_lines([nginx_line(start + timedelta(minutes=30, seconds=11 * i)) for i in range(9)])
    summary = _run(traffic, DatabaseRowSink())
    assert summary["scanMode"] == "incremental" and summary["scannedLines"] == 9
    _run(traffic, DatabaseRowSink(), "day")
    expected = reference_sums(logs.written)
    for granularity in ("5m", "day"):
        assert _stored_rows(granularity) == {
            k: v for k, v in expected.items() if k[0] == granularity
        }
    with transaction() as conn:
        before = conn.execute(
            sa.text("SELECT max(updated_at), count(*) FROM traffic_rollups")
        ).one()
    sink = DatabaseRowSink()
    again = _run(traffic, sink)
    assert again["rows"] == 0 and again["scanMode"] == "cached"
    with transaction() as conn:
        after = conn.execute(sa.text("SELECT max(updated_at), count(*) FROM traffic_rollups")).one()
    assert tuple(after) == tuple(before)


def test_concurrent_run_loses_the_compare_and_set_and_keeps_exact_totals(engine, tmp_path):
    logs = LogDir(tmp_path / "logs", DOMAIN)
    traffic = _settings(tmp_path / "logs")
    start = datetime(2026, 8, 1, 9, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=5 * i)) for i in range(30)])
    inner: list[dict] = []

    def second_runner_meanwhile(_bytes: int) -> None:
        if not inner:
            inner.append(_run(traffic, DatabaseRowSink()))  # commits first

    outer = _run(traffic, DatabaseRowSink(), on_bytes=second_runner_meanwhile)
    assert inner[0]["domainComplete"][DOMAIN] is True
    assert outer["domainComplete"][DOMAIN] is False
    assert "CheckpointConflict" in outer["errors"][DOMAIN]
    expected = reference_sums(logs.written)
    assert _stored_rows("5m") == {k: v for k, v in expected.items() if k[0] == "5m"}


def _count(sql: str) -> int:
    with transaction() as conn:
        return conn.execute(sa.text(sql)).scalar()


def test_prune_forgets_files_gone_longer_than_the_retention(engine, tmp_path):
    logs = LogDir(tmp_path / "logs", DOMAIN)
    traffic = _settings(tmp_path / "logs", retention_days=1)
    old = datetime(2026, 7, 20, 9, tzinfo=CST)
    logs.write_lines([nginx_line(old + timedelta(minutes=i)) for i in range(3)])
    _run(traffic, DatabaseRowSink())
    logs.path().unlink()
    logs.write_lines([nginx_line(datetime(2026, 8, 1, 9, tzinfo=CST))])
    _run(traffic, DatabaseRowSink())
    _run(traffic, DatabaseRowSink(), "day")  # day runs prune
    # Just vanished: remembered with its sums (a late rotation copy is not counted again).
    assert _count("SELECT count(*) FROM traffic_files") == 2
    assert _count("SELECT count(*) FROM traffic_file_partials") == 4
    _run(traffic, DatabaseRowSink(), "day", now=NOW + 2 * 86400)
    assert _count("SELECT count(*) FROM traffic_files") == 1
    assert _count("SELECT count(*) FROM traffic_file_partials") == 2  # the live file's 5m + day
    published = "SELECT sum(total_requests) FROM traffic_rollups WHERE granularity = '5m'"
    assert _count(published) == 4  # published rows stay; only the bookkeeping is forgotten


def test_force_full_scan_republishes_each_row_once_into_the_database(engine, tmp_path):
    logs = LogDir(tmp_path / "logs", DOMAIN)
    traffic = _settings(tmp_path / "logs")
    start = datetime(2026, 8, 1, 9, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=23 * i)) for i in range(60)])
    first = _run(traffic, DatabaseRowSink())
    with transaction() as conn:
        conn.execute(sa.text("DELETE FROM traffic_rollups"))  # the rows were lost
    run = RollupRun(traffic, PostgresCheckpointStore(), DatabaseRowSink(), clock=lambda: NOW)
    rebuilt = run.execute(
        RollupOptions(
            granularity="5m",
            start_date=date(2026, 7, 30),
            end_date=date(2026, 8, 2),
            force_full_scan=True,
            source_server="runner-test",
        )
    ).as_dict()
    assert rebuilt["scanMode"] == "full" and rebuilt["rows"] == first["rows"] > 0
    expected = reference_sums(logs.written)
    assert _stored_rows("5m") == {k: v for k, v in expected.items() if k[0] == "5m"}
    assert _count("SELECT count(*) FROM traffic_dirty_keys WHERE granularity = '5m'") == 0
