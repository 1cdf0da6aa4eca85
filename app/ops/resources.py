"""Host and process resource samples: taken by the runner, kept bounded, served as series (OPS-2).

One runner at a time (a periodic job under a lease) samples the host it runs on
every ``[ops] sample_seconds``: CPU, load, memory, swap, the data directory's
volume (usage and I/O rates) and the RSS and CPU of this instance's processes on
that host: the runner's own tree and the web servers' (each master from its pid file
under the data directory, ``run/web/*.pid``, and its workers), never another netmap
instance's that happens to share the host. Samples
are rows ``(sampled_at, host, metric, process, value)``; each sampling run also
deletes rows older than ``resource_retention_hours`` and the oldest rows above
``resource_max_rows``, so the table stays bounded whatever the uptime.

Reading: ``series()`` groups by (metric, host, process) and averages into at
most 500 time buckets per series, so a month of 15-second samples is still one
small response. The latest values are Prometheus gauges on ``/metrics``, beside
the live figures of the web processes answering the scrape (so a host without a
runner still reports its own web processes).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.config import Settings
from app.db import transaction
from app.observability import register_scrape_collector

MAX_POINTS = 500
HOST_METRICS = (
    "cpu_percent",
    "load_1",
    "load_5",
    "load_15",
    "memory_total_bytes",
    "memory_available_bytes",
    "memory_used_percent",
    "swap_total_bytes",
    "swap_used_bytes",
    "swap_used_percent",
    "disk_total_bytes",
    "disk_free_bytes",
    "disk_used_percent",
    "disk_read_bytes_per_second",
    "disk_write_bytes_per_second",
    "disk_busy_percent",
)
PROCESS_METRICS = ("process_rss_bytes", "process_cpu_percent")
METRICS = HOST_METRICS + PROCESS_METRICS


def metric_unit(metric: str) -> str:
    """``bytes``, ``bytes_per_second``, ``percent`` or ``""`` (a load average)."""
    for suffix in ("bytes_per_second", "bytes", "percent"):
        if metric.endswith("_" + suffix):
            return suffix
    return ""


# What each metric is, in a reader's words (the console's tables and charts).
METRIC_LABELS = {
    "cpu_percent": "Host CPU used",
    "load_1": "Load average (1 min)",
    "load_5": "Load average (5 min)",
    "load_15": "Load average (15 min)",
    "memory_total_bytes": "Host memory",
    "memory_available_bytes": "Host memory available",
    "memory_used_percent": "Host memory used",
    "swap_total_bytes": "Swap",
    "swap_used_bytes": "Swap used",
    "swap_used_percent": "Swap used",
    "disk_total_bytes": "Data volume size",
    "disk_free_bytes": "Data volume free",
    "disk_used_percent": "Data volume used",
    "disk_read_bytes_per_second": "Data volume reads",
    "disk_write_bytes_per_second": "Data volume writes",
    "disk_busy_percent": "Data volume busy",
    "process_rss_bytes": "Memory (resident)",
    "process_cpu_percent": "CPU",
}

# Rates need the previous counters; kept per sampling process (the first sample has none).
_previous_io: dict[str, tuple[float, Any]] = {}
_process_handles: dict[int, psutil.Process] = {}


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def device_of(path: Path) -> str | None:
    """The block device (as named in /proc/diskstats) holding ``path``, if we can tell."""
    target = str(_existing(path).resolve())
    best = None
    for partition in psutil.disk_partitions(all=True):
        mount = partition.mountpoint
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and (
            best is None or len(mount) > len(best.mountpoint)
        ):
            best = partition
    if best is None or not best.device.startswith("/dev/"):
        return None
    return os.path.basename(os.path.realpath(best.device))


def _io_rates(data_dir: Path) -> list[tuple[str, float]]:
    device = device_of(data_dir)
    counters = None
    try:
        if device:
            counters = psutil.disk_io_counters(perdisk=True).get(device)
        if counters is None:
            device, counters = "*", psutil.disk_io_counters()
    except (OSError, RuntimeError):
        return []
    if counters is None:
        return []
    now = time.monotonic()
    previous = _previous_io.get(device or "*")
    _previous_io[device or "*"] = (now, counters)
    if previous is None or now <= previous[0]:
        return []
    elapsed = now - previous[0]
    before = previous[1]
    rates = [
        ("disk_read_bytes_per_second", max(counters.read_bytes - before.read_bytes, 0) / elapsed),
        (
            "disk_write_bytes_per_second",
            max(counters.write_bytes - before.write_bytes, 0) / elapsed,
        ),
    ]
    busy = getattr(counters, "busy_time", None)
    if busy is not None and getattr(before, "busy_time", None) is not None:
        rates.append(("disk_busy_percent", min(100.0, (busy - before.busy_time) / elapsed / 10)))
    return rates


def _role(process: psutil.Process, runner_root: int | None) -> str | None:
    try:
        cmdline = " ".join(process.cmdline())
    except (psutil.Error, OSError):
        return None
    if process.pid == runner_root:
        return "runner"
    if "wsgi:app" in cmdline:
        return "web"
    if "multiprocessing" in cmdline or "spawn_main" in cmdline:
        return "runner-worker"
    if "nmworker" in cmdline or "renderer" in cmdline:
        return "renderer"
    if " app " in f" {cmdline} " or "netmap" in cmdline:
        return "netmap"
    return None


def _web_master(pid_file: Path) -> psutil.Process | None:
    """The gunicorn master named by this instance's pid file, if it is still that process.

    A pid file left by a master that died may name a pid the system gave to something
    else since: the process must be a web server started before the file was written.
    """
    try:
        pid = int(pid_file.read_text().strip())
        written = pid_file.stat().st_mtime
        process = psutil.Process(pid)
        if "wsgi:app" not in " ".join(process.cmdline()):
            return None
        if process.create_time() > written + 1.0:
            return None
    except (OSError, ValueError, psutil.Error):
        return None
    return process


def netmap_processes(
    runner_root: int | None = None, web_pid_dir: Path | None = None
) -> dict[str, psutil.Process]:
    """This instance's processes on this host, labelled ``role:pid``.

    The runner's process tree (``runner_root``) and the web servers': each master, read
    from this instance's pid files (``Settings.web_pid_dir``, under the data directory),
    and the masters' workers. Other netmap instances on the host (other data
    directories) have their own pid files and trees, so their processes are not ours.
    """
    found: dict[int, psutil.Process] = {}
    roots = []
    if runner_root is not None:
        with contextlib.suppress(psutil.Error):
            roots.append(psutil.Process(runner_root))
    if web_pid_dir is not None:
        with contextlib.suppress(OSError):
            for pid_file in sorted(web_pid_dir.glob("*.pid")):
                if (master := _web_master(pid_file)) is not None:
                    roots.append(master)
    for root in roots:
        found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found[child.pid] = child
    labelled = {}
    for pid, process in found.items():
        role = _role(process, runner_root)
        if role:
            labelled[f"{role}:{pid}"] = process
    return labelled


def take_host_sample(
    settings: Settings, runner_root: int | None = None
) -> list[tuple[str, str, float]]:
    """(metric, process, value) for the host and netmap's processes, right now."""
    values: list[tuple[str, str, float]] = [("cpu_percent", "", psutil.cpu_percent(interval=None))]
    try:
        load = os.getloadavg()
        values += [("load_1", "", load[0]), ("load_5", "", load[1]), ("load_15", "", load[2])]
    except OSError:
        pass
    memory = psutil.virtual_memory()
    values += [
        ("memory_total_bytes", "", float(memory.total)),
        ("memory_available_bytes", "", float(memory.available)),
        ("memory_used_percent", "", float(memory.percent)),
    ]
    swap = psutil.swap_memory()
    values += [
        ("swap_total_bytes", "", float(swap.total)),
        ("swap_used_bytes", "", float(swap.used)),
        ("swap_used_percent", "", float(swap.percent)),
    ]
    try:
        disk = psutil.disk_usage(str(_existing(settings.data_dir)))
        values += [
            ("disk_total_bytes", "", float(disk.total)),
            ("disk_free_bytes", "", float(disk.free)),
            ("disk_used_percent", "", float(disk.percent)),
        ]
    except OSError:
        pass
    values += [(metric, "", value) for metric, value in _io_rates(settings.data_dir)]
    seen = set()
    for label, process in netmap_processes(runner_root, settings.web_pid_dir).items():
        # Keep one Process object per pid so cpu_percent measures since the last sample.
        handle = _process_handles.setdefault(process.pid, process)
        seen.add(process.pid)
        try:
            with handle.oneshot():
                values.append(("process_rss_bytes", label, float(handle.memory_info().rss)))
                values.append(("process_cpu_percent", label, float(handle.cpu_percent(None))))
        except psutil.Error:
            continue
    for pid in set(_process_handles) - seen:
        del _process_handles[pid]
    return values


def store_sample(
    settings: Settings, values: list[tuple[str, str, float]], *, host: str | None = None
) -> int:
    """Insert one sample and enforce retention (age, then row cap); returns rows deleted."""
    host = host or socket.gethostname()
    with transaction() as conn:
        now = conn.execute(sa.text("SELECT now()")).scalar()
        if values:
            conn.execute(
                sa.text(
                    "INSERT INTO ops_resource_samples (sampled_at, host, metric, process, value) "
                    "VALUES (:at, :host, :metric, :process, :value)"
                ),
                [
                    {"at": now, "host": host, "metric": m, "process": p, "value": v}
                    for m, p, v in values
                ],
            )
        deleted = conn.execute(
            sa.text(
                "DELETE FROM ops_resource_samples "
                "WHERE sampled_at < now() - make_interval(secs => :age)"
            ),
            {"age": settings.ops.resource_retention_hours * 3600},
        ).rowcount
        deleted += conn.execute(
            sa.text(
                """
                DELETE FROM ops_resource_samples
                 WHERE id <= (SELECT id FROM ops_resource_samples
                               ORDER BY id DESC OFFSET :cap LIMIT 1)
                """
            ),
            {"cap": settings.ops.resource_max_rows},
        ).rowcount
    return deleted


def series(
    start: datetime,
    end: datetime,
    metrics: list[str] | None = None,
    *,
    max_points: int = MAX_POINTS,
) -> list[dict[str, Any]]:
    """Series per (metric, host, process) in [start, end], averaged into ≤ max_points buckets."""
    span_s = max((end - start).total_seconds(), 1e-3)
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                """
                SELECT metric, host, process,
                       LEAST(floor(extract(epoch FROM sampled_at - :start) / :width), :last)::int
                           AS bucket,
                       max(sampled_at) AS at, avg(value) AS value, max(value) AS peak
                  FROM ops_resource_samples
                 WHERE sampled_at >= :start AND sampled_at <= :end
                   AND (CAST(:metrics AS text[]) IS NULL OR metric = ANY(CAST(:metrics AS text[])))
                 GROUP BY metric, host, process, bucket
                 ORDER BY metric, host, process, bucket
                """
            ),
            {
                "start": start,
                "end": end,
                "width": span_s / max_points,
                "last": max_points - 1,
                "metrics": metrics,
            },
        ).all()
    grouped: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row.metric, row.host, row.process)
        entry = grouped.setdefault(
            key,
            {
                "metric": row.metric,
                "unit": metric_unit(row.metric),
                "host": row.host,
                "process": row.process or None,
                "points": [],
            },
        )
        entry["points"].append([row.at.isoformat(), round(row.value, 3), round(row.peak, 3)])
    return list(grouped.values())


def latest(max_age_seconds: float) -> list[Any]:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                """
                SELECT DISTINCT ON (host, metric, process) host, metric, process, value
                  FROM ops_resource_samples
                 WHERE sampled_at > now() - make_interval(secs => :age)
                 ORDER BY host, metric, process, sampled_at DESC
                """
            ),
            {"age": max_age_seconds},
        ).all()


class ResourceCollector(Collector):
    """The latest sample of every host and process as gauges (read at scrape time)."""

    max_age_seconds = 300.0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        for row in latest(self.max_age_seconds):
            name = f"netmap_{'' if row.metric.startswith('process_') else 'host_'}{row.metric}"
            labels = ["host", "process"] if row.process else ["host"]
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    name, f"Latest sampled {row.metric.replace('_', ' ')}", labels=labels
                )
            family.add_metric([row.host, row.process] if row.process else [row.host], row.value)
        yield from families.values()


class WebProcessCollector(Collector):
    """This process and its gunicorn siblings, read live at scrape time.

    Web processes do no background work, so they report their own figures when
    scraped; this covers hosts that run web processes but no runner.
    """

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        host = socket.gethostname()
        rss = GaugeMetricFamily(
            "netmap_web_process_rss_bytes",
            "Resident memory of this host's web processes (read at scrape time)",
            labels=["host", "process"],
        )
        cpu = CounterMetricFamily(
            "netmap_web_process_cpu_seconds",
            "CPU time (user + system) of this host's web processes",
            labels=["host", "process"],
        )
        me = psutil.Process()
        processes = {me.pid: me}
        try:
            parent = me.parent()
            if parent is not None and "wsgi:app" in " ".join(parent.cmdline()):
                processes[parent.pid] = parent
                processes.update({child.pid: child for child in parent.children()})
        except psutil.Error:
            pass
        for pid, process in sorted(processes.items()):
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    rss.add_metric([host, f"web:{pid}"], float(process.memory_info().rss))
                    cpu.add_metric([host, f"web:{pid}"], float(times.user + times.system))
            except psutil.Error:
                continue
        yield rss
        yield cpu


def register_resource_metrics() -> None:
    """Add the resource gauges to ``/metrics`` (once per process)."""
    register_scrape_collector("resources", ResourceCollector)
    register_scrape_collector("web_processes", WebProcessCollector)
