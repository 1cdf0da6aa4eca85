"""System resources (OPS-2): host and process samples, bounded storage, series, gauges."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import psutil
import sqlalchemy as sa

from app.db import transaction
from app.ops import resources
from tests.support.settings import make_settings


def _insert(rows):
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO ops_resource_samples (sampled_at, host, metric, process, value) "
                "VALUES (:at, :host, :metric, :process, :value)"
            ),
            rows,
        )


def _count(where: str = "true") -> int:
    with transaction() as conn:
        return conn.execute(
            sa.text(f"SELECT count(*) FROM ops_resource_samples WHERE {where}")
        ).scalar()


def test_a_sample_covers_the_host_and_the_process_tree(settings, engine):
    values = resources.take_host_sample(settings, runner_root=os.getpid())
    by_metric = {}
    for metric, process, value in values:
        by_metric.setdefault(metric, {})[process] = value
    for metric in (
        "cpu_percent",
        "load_1",
        "memory_total_bytes",
        "memory_available_bytes",
        "swap_total_bytes",
        "disk_total_bytes",
        "disk_free_bytes",
        "disk_used_percent",
    ):
        assert metric in by_metric, metric
    assert by_metric["memory_total_bytes"][""] > by_metric["memory_available_bytes"][""] > 0
    assert by_metric["process_rss_bytes"][f"runner:{os.getpid()}"] > 10 * 2**20
    # A second sample has I/O rates (they need the previous counters).
    again = {m for m, _p, _v in resources.take_host_sample(settings, runner_root=os.getpid())}
    assert "disk_read_bytes_per_second" in again and "disk_write_bytes_per_second" in again
    resources.store_sample(settings, values, host="host-a")
    assert _count("host = 'host-a'") == len(values)


def test_retention_by_age_and_row_cap(tmp_path, database_url, engine):
    settings = make_settings(
        database_url, tmp_path, ops={"resource_retention_hours": 1.0, "resource_max_rows": 1000}
    )
    now = datetime.now(UTC)
    _insert(
        [
            {
                "at": now - timedelta(hours=2),
                "host": "h",
                "metric": "cpu_percent",
                "process": "",
                "value": 1.0,
            }
            for _ in range(10)
        ]
        + [
            {
                "at": now - timedelta(minutes=30) + timedelta(seconds=i),
                "host": "h",
                "metric": "cpu_percent",
                "process": "",
                "value": float(i),
            }
            for i in range(1200)
        ]
    )
    deleted = resources.store_sample(settings, [("load_1", "", 0.5)], host="h")
    assert deleted == 10 + 201
    assert _count() == 1000
    assert _count("sampled_at < now() - interval '1 hour'") == 0
    # The newest rows are the ones kept.
    assert _count("metric = 'load_1'") == 1


def test_series_are_downsampled_to_500_points(api, engine):
    end = datetime.now(UTC).replace(microsecond=0)
    start = end - timedelta(hours=2)
    _insert(
        [
            {
                "at": start + timedelta(seconds=3 * i),
                "host": "h1",
                "metric": "memory_used_percent",
                "process": "",
                "value": float(i % 2),
            }
            for i in range(2400)
        ]
        + [
            {
                "at": end - timedelta(minutes=1),
                "host": "h1",
                "metric": "process_rss_bytes",
                "process": "web:1",
                "value": 100.0,
            },
        ]
    )
    admin = api.admin()
    query = urlencode({"from": start.isoformat(), "to": end.isoformat()})
    body = admin.get(f"/api/system/resources?{query}&metric=memory_used_percent").get_json()
    (series,) = body["series"]
    assert series["metric"] == "memory_used_percent" and series["host"] == "h1"
    assert 400 <= len(series["points"]) <= 500
    # Alternating 0/1 samples, about five per bucket: averages near 0.5, the peak keeps 1.
    assert all(0.3 <= p[1] <= 0.7 and p[2] == 1.0 for p in series["points"][1:-1])
    both = admin.get(f"/api/system/resources?{query}&metric=memory_used_percent,process_rss_bytes")
    assert {(s["metric"], s["process"]) for s in both.get_json()["series"]} == {
        ("memory_used_percent", None),
        ("process_rss_bytes", "web:1"),
    }
    unknown = admin.get("/api/system/resources?metric=cpu_percnt")
    assert unknown.status_code == 400
    assert unknown.get_json()["error"]["details"] == {"parameter": "metric"}
    backwards = admin.get(
        "/api/system/resources?" + urlencode({"from": end.isoformat(), "to": start.isoformat()})
    )
    assert backwards.status_code == 400
    assert backwards.get_json()["error"]["details"] == {"parameter": "from"}
    bad_time = admin.get("/api/system/resources?from=yesterday")
    assert bad_time.status_code == 400


def test_latest_samples_are_gauges_on_metrics(api, engine, settings):
    resources.store_sample(
        settings,
        [("memory_used_percent", "", 42.5), ("process_rss_bytes", "runner:7", 1234.0)],
        host="gauge-host",
    )
    text = api.admin().get("/metrics").get_data(as_text=True)  # /metrics is for operators
    assert 'netmap_host_memory_used_percent{host="gauge-host"} 42.5' in text
    assert 'netmap_process_rss_bytes{host="gauge-host",process="runner:7"} 1234.0' in text
    # The answering web process reports itself live.
    assert (
        f'netmap_web_process_rss_bytes{{host="{socket.gethostname()}",process="web:{os.getpid()}"}}'
        in text
    )
    assert f'netmap_web_process_cpu_seconds_total{{host="{socket.gethostname()}"' in text


def _web_server_lookalike() -> subprocess.Popen:
    """A process with a web server's command line (``wsgi:app``) and one worker child."""
    worker = "import time; time.sleep(120)"
    master = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {worker!r}, 'wsgi:app'])\n"
        "time.sleep(120)\n"
    )
    return subprocess.Popen([sys.executable, "-c", master, "wsgi:app"])


def _tree(process: subprocess.Popen) -> set[int]:
    def children():
        return psutil.Process(process.pid).children(recursive=True)

    deadline = time.monotonic() + 30
    while not children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {process.pid} | {child.pid for child in children()}


def _web_pids(values) -> set[int]:
    return {
        int(process.split(":")[1])
        for metric, process, _v in values
        if metric == "process_rss_bytes" and process.startswith("web:")
    }


def test_only_this_instances_web_processes_are_sampled(settings, tmp_path):
    # Two web servers on this host: this instance's (its pid file under its data
    # directory) and another instance's (its pid file under another data directory).
    ours, theirs = _web_server_lookalike(), _web_server_lookalike()
    try:
        our_tree, their_tree = _tree(ours), _tree(theirs)
        pid_file = settings.web_pid_dir / "127.0.0.1_8000.pid"
        settings.web_pid_dir.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{ours.pid}\n")
        other = tmp_path / "other-instance" / "run" / "web" / "127.0.0.1_8000.pid"
        other.parent.mkdir(parents=True)
        other.write_text(f"{theirs.pid}\n")

        sampled = _web_pids(resources.take_host_sample(settings))
        assert sampled == our_tree and len(our_tree) == 2
        assert not sampled & their_tree

        # A pid file older than the process it names was left by a master that died:
        # that pid now belongs to someone else.
        written = psutil.Process(ours.pid).create_time() - 60
        os.utime(pid_file, (written, written))
        assert _web_pids(resources.take_host_sample(settings)) == set()
        pid_file.unlink()
        assert _web_pids(resources.take_host_sample(settings)) == set()
    finally:
        for process in (ours, theirs):
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
            process.kill()
            process.wait()
