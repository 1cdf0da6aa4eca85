"""`netmap traffic rollup` into the database starts without SQLAlchemy (PRF-3).

The cron job runs every five minutes; most of a short run used to be spent
importing. In database mode (no ``--endpoint``, no ``--state-dir``) the
command reaches PostgreSQL through one psycopg2 connection. Each check runs a
fresh interpreter (a real ``python -m app`` start) against the test database
and reads ``sys.modules`` at exit, so an import of SQLAlchemy anywhere on the
path (config, schema check, checkpoint store, embedded server helpers) fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from tests.support.import_probe import heavy_imports_after
from tests.support.nginx_logs import CST, LogDir, nginx_line, reference_sums

PROJECT = Path(__file__).resolve().parents[2]
DOMAIN = "imports.example.com"
# pydantic is not here: the settings every command loads are pydantic-settings models.
HEAVY = ("sqlalchemy", "alembic", "flask", "werkzeug", "matplotlib", "elasticsearch")


def _env(tmp_path: Path, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env.update(NETMAP_DATA_DIR=str(tmp_path / "var"), NETMAP_DATABASE_URL=database_url)
    return env


def _rollup(args: list[str], tmp_path: Path, database_url: str) -> tuple[list[str], str, str]:
    loaded, done = heavy_imports_after(
        ["traffic", "rollup", *args], heavy=HEAVY, env=_env(tmp_path, database_url), timeout=120
    )
    return loaded, done.stdout, done.stderr


def _failed_rollup(
    args: list[str], tmp_path: Path, database_url: str
) -> subprocess.CompletedProcess[str]:
    """``python -m app traffic rollup`` as cron starts it, expected to exit 1."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "traffic", "rollup", *args],
        cwd=PROJECT,
        env=_env(tmp_path, database_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


def _args(logs: LogDir) -> list[str]:
    return [
        "--log-dir",
        str(logs.root),
        "--domains",
        DOMAIN,
        "--source-server",
        "probe",
        "--start-date",
        "2026-08-01",
        "--end-date",
        "2026-08-01",
    ]


def _summary(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_database_rollup_imports_no_sqlalchemy_and_writes_exact_rows(tmp_path, database_url):
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    start = datetime(2026, 8, 1, 9, tzinfo=CST)
    first = [nginx_line(start + timedelta(seconds=7 * i), path=f"/p{i % 3}") for i in range(40)]
    logs.write_lines(first)
    loaded, stdout, stderr = _rollup(_args(logs), tmp_path, database_url)
    assert loaded == [], stderr
    summary = _summary(stdout)
    assert summary["ok"] and summary["scannedLines"] == 40 and summary["scanMode"] == "full"

    # The next run reads only what was appended, still without SQLAlchemy.
    later = [nginx_line(start + timedelta(minutes=6, seconds=i), path="/p1") for i in range(5)]
    logs.write_lines(later)
    loaded, stdout, stderr = _rollup(_args(logs), tmp_path, database_url)
    assert loaded == [], stderr
    summary = _summary(stdout)
    assert summary["ok"] and summary["scannedLines"] == 5 and summary["scanMode"] == "incremental"

    expected = {
        (bucket, method, path): sums
        for (granularity, bucket, method, path), sums in reference_sums(first + later).items()
        if granularity == "5m"
    }
    engine = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT CAST(extract(epoch FROM bucket_start) AS bigint), method, path, "
                    "response_bytes, COALESCE(request_bytes, 0), request_bytes_known_count, "
                    "total_requests, status_1xx, status_2xx, status_3xx, status_4xx, "
                    "status_5xx, status_other FROM traffic_rollups "
                    "WHERE domain = :domain AND granularity = '5m'"
                ),
                {"domain": DOMAIN},
            ).all()
    finally:
        engine.dispose()
    assert {(int(r[0]), r[1], r[2]): [int(v) for v in r[3:]] for r in rows} == expected


def test_database_rollup_on_an_unmigrated_database_names_the_upgrade_command(
    tmp_path, empty_database_url
):
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    logs.write_lines([nginx_line(datetime(2026, 8, 1, 9, tzinfo=CST))])
    done = _failed_rollup(_args(logs), tmp_path, empty_database_url)
    assert "netmap db upgrade" in done.stderr


def test_database_rollup_with_an_unreachable_database_says_so(tmp_path):
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    logs.write_lines([nginx_line(datetime(2026, 8, 1, 9, tzinfo=CST))])
    unreachable = "postgresql://netmap@127.0.0.1:9/netmap?connect_timeout=2"
    done = _failed_rollup(_args(logs), tmp_path, unreachable)
    assert "database is not reachable" in done.stderr
