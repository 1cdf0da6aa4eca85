"""A real `netmap runner` process with [traffic] enabled rolls up real logs into PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.db import normalise_url
from app.traffic.business_time import BusinessCalendar
from tests.support.nginx_logs import CST, LogDir, nginx_line
from tests.support.settings import TEST_SECRET_KEY

PROJECT = Path(__file__).resolve().parents[2]
DOMAIN = "sc.example.com"


@pytest.mark.e2e
def test_runner_process_runs_the_traffic_job(database_url, tmp_path):
    calendar = BusinessCalendar("+08:00")
    midnight = datetime.fromtimestamp(calendar.midnight(calendar.today(time.time())), CST)
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    logs.write_lines([nginx_line(midnight + timedelta(seconds=7 * i)) for i in range(25)])
    config = tmp_path / "netmap.toml"
    config.write_text(
        f"""
[database]
url = {json.dumps(database_url)}
[security]
secret_key = {json.dumps(TEST_SECRET_KEY)}
[runner]
processes = 1
shutdown_timeout_seconds = 10
[traffic]
enabled = true
domains = [{json.dumps(DOMAIN)}]
log_dir = {json.dumps(str(tmp_path / "nginx"))}
source_server = "runner-e2e"
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env["NETMAP_CONFIG"] = str(config)
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "runner"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    engine = sa.create_engine(normalise_url(database_url), poolclass=sa.pool.NullPool)
    try:
        total = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            with engine.connect() as conn:
                total = conn.execute(
                    sa.text(
                        "SELECT sum(total_requests) FROM traffic_rollups WHERE granularity = '5m'"
                    )
                ).scalar()
            if total:
                break
            time.sleep(0.3)
        assert total == 25
        with engine.connect() as conn:
            source = conn.execute(
                sa.text("SELECT DISTINCT source_server FROM traffic_rollups")
            ).scalar_one()
        assert source == "runner-e2e"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        engine.dispose()
    assert process.returncode == 0, stderr[-2000:]
    assert '"event": "TrafficRollupCompleted"' in stderr
