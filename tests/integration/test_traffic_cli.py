"""`netmap traffic rollup` and `netmap traffic chart` as operators run them.

The standalone run is a real ``netmap`` process posting to the real application
served over HTTP (werkzeug's server in a thread) against the test database.
The database mode and the chart go through the Click command line in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from werkzeug.serving import make_server

from app import close_app, create_app, db
from app.cli import main
from tests.support.nginx_logs import CST, LogDir, nginx_line, reference_sums
from tests.support.settings import make_settings

TOKEN = "cli-rollup-token-0123456789abcdef"
DOMAIN = "sc.example.com"
OTHER = "cp.example.com"
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served_app(database_url, tmp_path):
    settings = make_settings(database_url, tmp_path, traffic={"ingest_token": TOKEN})
    engine = db.create_engine(settings.database.url, settings.database)
    db.set_engine(engine)
    application = create_app(settings, engine=engine)
    server = make_server("127.0.0.1", 0, application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    # Stops the renderer's refresh thread, which would otherwise go on using whatever
    # engine a later test installs (a stray session in that test's database).
    close_app(application)
    db.set_engine(None)
    engine.dispose()


def run_cli(args: list[str], tmp_path: Path, token: str = TOKEN):
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("NETMAP_") or key == "NETMAP_TEST_DATABASE_URL"
    }
    env.update(
        {
            "NETMAP_DATA_DIR": str(tmp_path / "var"),
            "ROLLUP_TOKEN": token,
            "NETMAP_LOG_LEVEL": "ERROR",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "app", "traffic", "rollup", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def stored(database_url: str, granularity: str) -> dict:
    engine = sa.create_engine(db.normalise_url(database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    """
                    SELECT domain, granularity, CAST(extract(epoch FROM bucket_start) AS bigint),
                           method, path, response_bytes, COALESCE(request_bytes, 0),
                           request_bytes_known_count, total_requests, status_1xx, status_2xx,
                           status_3xx, status_4xx, status_5xx, status_other, frozen,
                           source_server
                      FROM traffic_rollups WHERE granularity = :g
                    """
                ),
                {"g": granularity},
            ).all()
    finally:
        engine.dispose()
    return {(r[0], r[1], r[2], r[3], r[4]): list(r[5:]) for r in rows}


def expected(logs: LogDir, granularity: str) -> dict:
    return {
        (logs.domain, *key): sums
        for key, sums in reference_sums(logs.written).items()
        if key[0] == granularity
    }


def sums_only(rows: dict) -> dict:
    return {key: values[:10] for key, values in rows.items()}


def test_standalone_cli_posts_to_a_running_server(served_app, database_url, tmp_path):
    log_dir = tmp_path / "nginx"
    logs = LogDir(log_dir, DOMAIN)
    other = LogDir(log_dir, OTHER)
    start = datetime(2026, 8, 1, 9, 58, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=13 * i)) for i in range(50)])
    other.write_lines([nginx_line(start, "/cp")])
    common = [
        "--log-dir",
        str(log_dir),
        "--domains",
        f"{DOMAIN},{OTHER}",
        "--state-dir",
        str(tmp_path / "state"),
        "--endpoint",
        served_app,
        "--token-env",
        "ROLLUP_TOKEN",
        "--source-server",
        "nginx-blue",
        "--start-date",
        "2026-08-01",
        "--end-date",
        "2026-08-01",
    ]
    first = run_cli(common, tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.strip().splitlines()
    assert len(lines) == 1  # one JSON summary line on stdout
    summary = json.loads(lines[0])
    assert summary["scanMode"] == "full"
    assert summary["matchedLines"] == 51
    assert summary["matchedLinesByDomain"] == {DOMAIN: 50, OTHER: 1}
    assert summary["domainComplete"] == {DOMAIN: True, OTHER: True}
    assert summary["rows"] == summary["accepted"] > 0
    assert summary["bytesRead"] > 0
    assert "[traffic]" in first.stderr  # progress goes to stderr
    # Rotation and more traffic; a lost token keeps rows pending until it is fixed.
    logs.write_lines([nginx_line(start + timedelta(minutes=20, seconds=i)) for i in range(7)])
    logs.rotate_rename()
    logs.compress(".1")
    logs.write_lines([nginx_line(start + timedelta(minutes=25))])
    refused = run_cli(common, tmp_path, token="wrong-token")
    assert refused.returncode == 1
    refused_summary = json.loads(refused.stdout)
    assert refused_summary["ok"] is False and "401" in refused_summary["errors"]["publish"]
    assert "wrong-token" not in refused.stdout + refused.stderr
    second = run_cli(common, tmp_path)
    assert second.returncode == 0, second.stderr
    second_summary = json.loads(second.stdout)
    assert second_summary["scannedLines"] == 0 and second_summary["rows"] > 0
    rows = stored(database_url, "5m")
    assert sums_only(rows) == {**expected(logs, "5m"), **expected(other, "5m")}
    assert {values[11] for values in rows.values()} == {"nginx-blue"}
    day = run_cli([*common, "--granularity", "day"], tmp_path)
    assert day.returncode == 0, day.stderr
    day_rows = stored(database_url, "day")
    assert sums_only(day_rows) == {**expected(logs, "day"), **expected(other, "day")}
    assert all(values[10] is True for values in day_rows.values())  # past days are frozen
    # Neither log has passed the day's end (no later line, no rotation since): the day is
    # read again rather than cached (TRF-5).
    unverified = run_cli([*common, "--granularity", "day"], tmp_path)
    assert json.loads(unverified.stdout)["scanModeByDomain"] == {DOMAIN: "full", OTHER: "full"}
    # logrotate after midnight (the files' real times are after 2026-08-01): now complete.
    logs.rotate_rename()
    other.rotate_rename()
    verified = run_cli([*common, "--granularity", "day"], tmp_path)
    assert verified.returncode == 0, verified.stderr
    again = run_cli([*common, "--granularity", "day"], tmp_path)
    assert json.loads(again.stdout)["scanMode"] == "cached"
    assert sums_only(stored(database_url, "day")) == sums_only(day_rows)


def test_cli_writes_to_the_database_and_draws_a_chart(database_url, tmp_path):
    log_dir = tmp_path / "nginx"
    logs = LogDir(log_dir, DOMAIN)
    start = datetime(2026, 8, 1, 9, 0, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=41 * i)) for i in range(80)])
    runner = CliRunner()
    env = {"NETMAP_DATABASE_URL": database_url, "NETMAP_DATA_DIR": str(tmp_path / "var")}
    args = [
        "traffic",
        "rollup",
        "--log-dir",
        str(log_dir),
        "--domains",
        DOMAIN,
        "--start-date",
        "2026-08-01",
        "--end-date",
        "2026-08-01",
    ]
    result = runner.invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["matchedLines"] == 80
    assert sums_only(stored(database_url, "5m")) == expected(logs, "5m")
    # Without --state-dir the checkpoints live in the database, shared with the runner.
    engine = sa.create_engine(db.normalise_url(database_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM traffic_files")).scalar() == 1
    engine.dispose()
    again = runner.invoke(main, args, env=env, catch_exceptions=False)
    assert json.loads(again.stdout.strip().splitlines()[-1])["scanMode"] == "cached"

    out = tmp_path / "traffic.png"
    chart = runner.invoke(
        main,
        [
            "traffic",
            "chart",
            "--domain",
            DOMAIN,
            "--from",
            "2026-08-01",
            "--to",
            "2026-08-01",
            "--out",
            str(out),
        ],
        env=env,
        catch_exceptions=False,
    )
    assert chart.exit_code == 0, chart.output
    drawn = json.loads(chart.stdout.strip().splitlines()[-1])
    assert drawn["requests"] == 80 and drawn["buckets"] == 11
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_cli_with_a_state_dir_writes_rows_to_the_database(database_url, tmp_path):
    # Checkpoints in a directory, rows through the row sink's upsert into the database.
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    start = datetime(2026, 8, 1, 9, 0, tzinfo=CST)
    logs.write_lines([nginx_line(start + timedelta(seconds=53 * i)) for i in range(30)])
    env = {"NETMAP_DATABASE_URL": database_url, "NETMAP_DATA_DIR": str(tmp_path / "var")}
    args = ["traffic", "rollup", "--log-dir", str(logs.root), "--domains", DOMAIN]
    args += ["--state-dir", str(tmp_path / "state")]
    args += ["--start-date", "2026-08-01", "--end-date", "2026-08-01"]
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["matchedLines"] == 30
    assert sums_only(stored(database_url, "5m")) == expected(logs, "5m")
    assert (tmp_path / "state").is_dir()


def test_cli_usage_errors(tmp_path):
    runner = CliRunner()
    env = {"NETMAP_DATA_DIR": str(tmp_path / "var")}
    no_domains = runner.invoke(main, ["traffic", "rollup", "--endpoint", "http://x"], env=env)
    assert no_domains.exit_code == 2 and "no domains" in no_domains.output
    no_token = runner.invoke(
        main,
        ["traffic", "rollup", "--domains", "a.example", "--endpoint", "http://x"],
        env={**env, "NETMAP_TRAFFIC_TOKEN": ""},
    )
    assert no_token.exit_code == 2 and "NETMAP_TRAFFIC_TOKEN" in no_token.output
    backwards = runner.invoke(
        main,
        [
            "traffic",
            "rollup",
            "--domains",
            "a.example",
            "--endpoint",
            "http://x",
            "--state-dir",
            str(tmp_path / "s"),
            "--start-date",
            "2026-08-02",
            "--end-date",
            "2026-08-01",
        ],
        env={**env, "NETMAP_TRAFFIC_TOKEN": "t"},
    )
    assert backwards.exit_code == 2 and "before start date" in backwards.output


def test_a_log_directory_that_does_not_exist_is_named_as_such(database_url, tmp_path):
    # It used to read "no log files for <domain>", as for an empty directory.
    env = {"NETMAP_DATABASE_URL": database_url, "NETMAP_DATA_DIR": str(tmp_path / "var")}
    missing = tmp_path / "no-such-dir"
    args = ["traffic", "rollup", "--log-dir", str(missing), "--domains", DOMAIN]
    args += ["--state-dir", str(tmp_path / "state")]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code != 0
    assert f"the log directory {missing} does not exist" in result.output
