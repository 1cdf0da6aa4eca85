"""`netmap bench export`: export build throughput, memory and bounded-delete throughput (EXP).

On a scratch database it writes ``--endpoints`` execution endpoints for one
succeeded execution (the projection benchmark's seeding), queues one export
per ``--formats`` entry and builds each with the runner's own code
(``claim_next_build`` + ``build_export``: lease, heartbeat, keyset pages,
streaming ``put``) in a freshly spawned process, so the peak RSS growth of the
building process is measured from a clean baseline (sampled every 20 ms).

Then it stores ``--delete-objects`` small objects and deletes them through the
bounded deleter at concurrency 1, 3 and 8 (objects per second each).

``--backend s3`` talks to ``--s3-url`` (path style; credentials from the AWS
environment or ``--s3-access-key``), or, without it, to moto's S3 server
started here on 127.0.0.1 with a free port (``moto[server]``, a dev extra) and
stopped afterwards. The bucket is ``netmap-bench-<random>``. One JSON object
on stdout; progress on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from app.bench.cpu import server_cpu_seconds, tree_cpu_seconds
from app.config import Settings

DELETE_CONCURRENCIES = (1, 3, 8)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class _Server:
    url: str
    pid: int | None  # a server started here (its CPU time is measured), else None


@contextlib.contextmanager
def _moto_server() -> Iterator[_Server]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise click.ClickException(
                    "moto's S3 server did not start (pip install moto[server])"
                )
            time.sleep(0.2)
        yield _Server(f"http://127.0.0.1:{port}", process.pid)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def _build_in_child(settings: Settings, export_id: int, results: Any) -> None:
    """Runs in a spawned process: build one export and report time, size and RSS growth."""
    import psutil

    from app import db
    from app.exports import records
    from app.exports.build import build_export
    from app.object_store import open_object_store
    from app.search import open_store

    engine = db.create_engine(settings.database.url, settings.database, application_name="bench")
    db.set_engine(engine)
    search, objects = open_store(settings), open_object_store(settings)
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    claim, _ = records.claim_next_build(
        host="bench", concurrency=64, lease_seconds=600, max_attempts=3
    )
    assert claim is not None and claim.id == export_id
    cpu_before = time.process_time()
    started = time.perf_counter()
    outcome = build_export(
        settings, claim, search_store=search, object_store=objects, runner_cancel=threading.Event()
    )
    elapsed = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_before
    done.set()
    sampler.join()
    peak = max(peak, process.memory_info().rss)
    results.put(
        {
            "result": outcome.result,
            "error": outcome.error,
            "rows": outcome.rows,
            "bytes": outcome.size,
            "seconds": elapsed,
            "cpu_seconds": cpu_seconds,
            "rss_baseline_mib": baseline / 2**20,
            "rss_growth_mib": (peak - baseline) / 2**20,
        }
    )
    search.close()
    objects.close()
    db.dispose_engine()


def _queue_export(fmt: str, task_id: int, execution_ids: list[int]) -> int:
    import sqlalchemy as sa

    from app.db import transaction
    from app.exports import records

    with transaction() as conn:
        owner_id = conn.execute(
            sa.text("SELECT owner_id FROM scan_tasks WHERE id = :t"), {"t": task_id}
        ).scalar_one()
        row = records.insert_export(
            conn,
            owner_id=owner_id,
            task_id=task_id,
            task_name="bench",
            fmt=fmt,
            execution_ids=execution_ids,
        )
    return row.id


def _put_objects(store: Any, keys: list[str]) -> None:
    # Setting up is not measured: several puts at once keep it short.
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(lambda key: store.put(key, b"x" * 256, "application/octet-stream"), keys):
            pass


def _delete_throughput(
    settings: Settings, objects: int, repeats: int, server_pid: int | None
) -> dict[str, Any]:
    """Objects deleted per second at each concurrency: the median of ``repeats`` rounds,
    each round deleting ``objects`` fresh objects at every concurrency in turn (so drift
    in the machine's load touches all of them alike).

    With a store server started here (moto) the CPU time of this process and of the
    server per delete are measured too: on a machine with few cores, a request costs
    CPU on both sides, and ``cpu_bound_max_speedup`` (the best any concurrency could
    do over c1 given those costs: per-process and all-cores limits) says how much of
    a small speed-up is the machine rather than the deleter.
    """
    from app.object_store import open_object_store
    from app.object_store.deleter import delete_objects

    store = open_object_store(settings)
    own_cpu = time.process_time
    server_cpu = functools.partial(tree_cpu_seconds, server_pid) if server_pid else None
    cores = os.cpu_count() or 1
    rounds: dict[int, list[dict[str, float]]] = {c: [] for c in DELETE_CONCURRENCIES}
    for repeat in range(repeats):
        for concurrency in DELETE_CONCURRENCIES:
            keys = [f"bench/r{repeat}/c{concurrency}/object-{i:05d}" for i in range(objects)]
            _put_objects(store, keys)
            client_before = own_cpu()
            server_before = server_cpu() if server_cpu else 0.0
            started = time.perf_counter()
            results = delete_objects(
                store, keys, concurrency=concurrency, origin="bench", record_failures=False
            )
            elapsed = time.perf_counter() - started
            rounds[concurrency].append(
                {
                    "seconds": elapsed,
                    "client_cpu": own_cpu() - client_before,
                    "server_cpu": (server_cpu() - server_before) if server_cpu else 0.0,
                    "deleted": sum(r.status == "deleted" for r in results),
                    "failed": sum(r.status == "failed" for r in results),
                }
            )
            print(
                f"[delete round {repeat + 1}/{repeats} c={concurrency}] "
                f"{objects} in {elapsed:.2f}s",
                file=sys.stderr,
                flush=True,
            )
    measured: dict[str, Any] = {}
    for concurrency, runs in rounds.items():
        rates = [objects / run["seconds"] for run in runs]
        entry: dict[str, Any] = {
            "objects_per_s": round(statistics.median(rates), 1),
            "objects_per_s_runs": [round(rate, 1) for rate in rates],
            "seconds": round(statistics.median(run["seconds"] for run in runs), 3),
            "deleted": sum(int(run["deleted"]) for run in runs),
            "failed": sum(int(run["failed"]) for run in runs),
            "client_cpu_ms_per_delete": round(
                statistics.median(run["client_cpu"] for run in runs) / objects * 1000, 3
            ),
        }
        if server_cpu:
            entry["server_cpu_ms_per_delete"] = round(
                statistics.median(run["server_cpu"] for run in runs) / objects * 1000, 3
            )
        measured[f"c{concurrency}"] = entry
    base = measured["c1"]
    for concurrency in DELETE_CONCURRENCIES[1:]:
        entry = measured[f"c{concurrency}"]
        entry["speedup_vs_c1"] = round(entry["objects_per_s"] / base["objects_per_s"], 2)
        entry["speedup_vs_c1_runs"] = [
            round(rate / base_rate, 2)
            for rate, base_rate in zip(
                entry["objects_per_s_runs"], base["objects_per_s_runs"], strict=True
            )
        ]
    if server_cpu:
        client = base["client_cpu_ms_per_delete"]
        server = base["server_cpu_ms_per_delete"]
        c1_ms = 1000 / base["objects_per_s"]
        # Each side is one Python process (one core at most for its request handling);
        # together they cannot use more than every core.
        floor_ms = max(client, server, (client + server) / cores)
        measured["cpu_bound_max_speedup"] = round(c1_ms / floor_ms, 2) if floor_ms else None
    store.close()
    return measured


def _result_of(child: Any, results: Any) -> dict[str, Any]:
    """The child's result; a child that ends without one (it failed to start, or died)
    is an error, not a wait for ever."""
    import queue

    while True:
        try:
            return results.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                raise click.ClickException(
                    f"the export build process ended with status {child.exitcode} and no result"
                ) from None


def measure_build(
    settings: Settings,
    fmt: str,
    task_id: int,
    execution_ids: list[int],
    pgdata: Path | None,
) -> dict[str, Any]:
    """Queue one export of ``execution_ids`` and build it with the runner's code in a
    freshly spawned process: rows, bytes, rates, CPU and the builder's RSS growth. The
    built object is deleted afterwards (room for the next build and the disk)."""
    from app.object_store import open_object_store

    export_id = _queue_export(fmt, task_id, execution_ids)
    print(f"[build {fmt}] export {export_id} …", file=sys.stderr, flush=True)
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    child = spawn.Process(target=_build_in_child, args=(settings, export_id, queue))
    database_before = server_cpu_seconds(pgdata) if pgdata else 0.0
    child.start()
    measured = _result_of(child, queue)
    child.join()
    # Includes the claim and the child's connecting: a few milliseconds.
    database_cpu = server_cpu_seconds(pgdata) - database_before if pgdata else None
    if measured["result"] != "ready":
        raise click.ClickException(f"export build {fmt} ended {measured}")
    seconds = measured["seconds"]
    objects = open_object_store(settings)
    objects.delete(f"exports/{export_id}/netmap-task-{task_id}-export-{export_id}.{fmt}")
    objects.close()
    return {
        "rows": measured["rows"],
        "bytes": measured["bytes"],
        "seconds": round(seconds, 3),
        "rows_per_s": round(measured["rows"] / seconds, 1),
        "mb_per_s": round(measured["bytes"] / seconds / 1e6, 2),
        # This process's own CPU time (the database's is not in it): less sensitive to
        # other load on a shared machine than the wall-clock rate.
        "cpu_seconds": round(measured["cpu_seconds"], 2),
        "rows_per_cpu_s": round(measured["rows"] / max(measured["cpu_seconds"], 1e-9), 1),
        # The database server's CPU time during the build (it writes the export text).
        "database_cpu_seconds": None if database_cpu is None else round(database_cpu, 2),
        "rss_growth_mib": round(measured["rss_growth_mib"], 1),
        "rss_baseline_mib": round(measured["rss_baseline_mib"], 1),
    }


def run_benchmark(
    settings: Settings,
    *,
    endpoints: int,
    formats: list[str],
    delete_objects_count: int,
    delete_repeats: int = 5,
    pgdata: Path | None = None,
    store_server_pid: int | None = None,
) -> dict[str, Any]:
    import sqlalchemy as sa

    from app.bench.projection import BASE_TIME
    from app.bench.projection import _seed as seed_execution_endpoints
    from app.db import transaction
    from app.object_store import open_object_store
    from app.search import open_store

    objects = open_object_store(settings)
    if objects.name == "s3":
        objects.ensure_bucket()
    search = open_store(settings)
    search.ensure_schema()
    execution_ids = seed_execution_endpoints(search, endpoints, 1, BASE_TIME)
    search.close()
    with transaction() as conn:
        task_id = conn.execute(
            sa.text("SELECT task_id FROM scan_executions WHERE id = :e"), {"e": execution_ids[0]}
        ).scalar_one()
        conn.execute(sa.text("ANALYZE search_execution_endpoints"))
    builds: dict[str, Any] = {}
    for fmt in formats:
        builds[fmt] = measure_build(settings, fmt, task_id, execution_ids, pgdata)
        print(f"[build {fmt}] {builds[fmt]}", file=sys.stderr, flush=True)
    deletes = _delete_throughput(settings, delete_objects_count, delete_repeats, store_server_pid)
    objects.close()
    return {
        "benchmark": "export",
        "backend": settings.object_store.backend,
        "endpoints": endpoints,
        "page_size": settings.exports.page_size,
        "builds": builds,
        "delete_objects": delete_objects_count,
        "delete_repeats": delete_repeats,
        "delete_throughput": deletes,
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


@click.command("export")
@click.option("--endpoints", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
@click.option(
    "--backend", type=click.Choice(["filesystem", "s3"]), default="filesystem", show_default=True
)
@click.option("--s3-url", default=None, help="S3 endpoint; default: moto's server started here")
@click.option("--s3-access-key", default=None, help="default: the AWS environment")
@click.option("--s3-secret-key-env", default="AWS_SECRET_ACCESS_KEY", show_default=True)
@click.option(
    "--formats",
    default="zip",
    show_default=True,
    help="comma-separated: csv,jsonl,zip",
)
@click.option("--page-size", type=click.IntRange(10, 10000), default=1000, show_default=True)
@click.option(
    "--delete-objects",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="objects deleted at each concurrency in each round",
)
@click.option(
    "--delete-repeats",
    type=click.IntRange(1, 50),
    default=5,
    show_default=True,
    help="rounds of deletes; each concurrency's figure is the median",
)
def command(
    endpoints: int,
    backend: str,
    s3_url: str | None,
    s3_access_key: str | None,
    s3_secret_key_env: str,
    formats: str,
    page_size: int,
    delete_objects: int,
    delete_repeats: int,
) -> None:
    """Export build rows/s, MB/s and RSS growth; bounded delete throughput at 1, 3, 8."""
    from app.bench.scratch import scratch_database

    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in ("csv", "jsonl", "zip")]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown format(s) {unknown}", param_hint="--formats")
    with contextlib.ExitStack() as stack:
        overrides: dict[str, dict[str, object]] = {"exports": {"page_size": page_size}}
        server = None
        if backend == "s3":
            if s3_url:
                url = s3_url
            else:
                server = stack.enter_context(_moto_server())
                url = server.url
            store: dict[str, object] = {
                "backend": "s3",
                "endpoint_url": url,
                "bucket": f"netmap-bench-{uuid.uuid4().hex[:8]}",
                "path_style": True,
            }
            if s3_access_key:
                store["access_key_id"] = s3_access_key
                store["secret_access_key"] = os.environ.get(s3_secret_key_env, "")
            elif not s3_url:
                store["access_key_id"] = "bench"
                store["secret_access_key"] = "bench-secret"  # noqa: S105 - local moto only
            overrides["object_store"] = store
        scratch = stack.enter_context(scratch_database(overrides=overrides))
        result = run_benchmark(
            scratch.settings,
            endpoints=endpoints,
            formats=chosen,
            delete_objects_count=delete_objects,
            delete_repeats=delete_repeats,
            pgdata=scratch.directory / "pgdata",
            store_server_pid=server.pid if server else None,
        )
    click.echo(json.dumps(result))
