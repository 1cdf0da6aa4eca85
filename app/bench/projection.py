"""`netmap bench projection`: background asset publishing throughput and lease timeliness (PRF-2).

On a scratch database (``app.bench.scratch``) it creates succeeded executions
with ``--endpoints`` execution endpoints in all (one execution by default, the
PRF-1/PRF-2 sizes being "endpoints in an execution"), queues them in the
outbox, then runs the real projection worker (``ProjectionWorker``: claims,
pages, checkpoints, heartbeat thread, refresh, completion) in this process
until the outbox is empty. ``--workers`` runs that many workers in threads
(they only share work when there are several executions).

Printed (one JSON object): ``endpoints_per_s`` over the whole drain,
``page_p50_ms``/``page_p95_ms`` (a page = publish + checkpoint),
``heartbeat_late_max_ms`` (renewal committed minus its scheduled time; the
benchmark uses a 1 s heartbeat and long slices so renewals happen under load),
``pool_wait_p95_ms`` (pool waits of the worker's outbox writes:
renewals, checkpoints, release), ``cpu_seconds`` (this process plus, for the
PostgreSQL store, the scratch server: ``process_cpu_seconds`` and
``server_cpu_seconds``) with ``endpoints_per_cpu_s`` — the measure to compare on
a shared machine, where wall time depends on the neighbours (hence also
``load_average_1m``) — and with ``--republish`` the same execution
sizes published again as newer sightings (updates instead of inserts).

``--backend elasticsearch`` needs ``--es-url`` (a test cluster, or
``python -m tests.support.es_simulator``) and writes only under a fresh
``netmap-bench-*`` index prefix, deleted afterwards. Progress goes to stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa

from app.bench.cpu import CpuClock
from app.bench.executions import finished_execution
from app.bench.progress import Progress
from app.bench.stats import percentile
from app.bench.store import SERVICES
from app.config import Settings
from app.db import transaction
from app.search.documents import EndpointDocument, observation_key
from app.search.ids import execution_endpoint_id
from app.search.port import SearchStore, StorageScope, server_side_pages

BASE_TIME = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
SEED_BATCH = 2000


class _PoolWaits(logging.Handler):
    """Collects the pool waits of the projection's own transactions (stage events)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.waits_ms: list[float] = []
        self._lock_waits = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "netmap_event", None) != "ScanWriteConnectionAcquired":
            return
        fields = getattr(record, "netmap_fields", {})
        if str(fields.get("stage", "")).startswith("projection_"):
            with self._lock_waits:
                self.waits_ms.append(float(fields.get("wait_ms", 0.0)))


def _facts(ip: str, host: int) -> dict[str, Any]:
    """A web endpoint's facts as the standard profile records them (``--facts``)."""
    return {
        "tls": {
            "subject_cn": f"host-{host}.example.test",
            "issuer": ("CN=R11,O=Let's Encrypt", "CN=Bench CA,O=netmap")[host % 2],
            "sha256": hashlib.sha256(ip.encode()).hexdigest(),
            "not_after": "2027-03-01T00:00:00Z",
        },
        "http": {"title": f"Sign in - host {host}", "server": "nginx/1.24.0"},
    }


def _endpoint(
    n: int,
    *,
    execution_id: int,
    task_id: int,
    owner_id: int,
    seen: datetime,
    facts: bool = False,
    hostnames: bool = False,
) -> EndpointDocument:
    host = n // len(SERVICES)
    ip = f"10.{host >> 16 & 255}.{host >> 8 & 255}.{host & 255}"
    port, service, product, version, banner = SERVICES[n % len(SERVICES)]
    newest = {
        "state": "open",
        "service": service,
        "product": product,
        "version": version,
        "banner": banner,
        # ``--hostnames``: each host has its own name, so each endpoint's text (banner,
        # product, host name) is a distinct text of its own, as in an estate with reverse DNS.
        "hostname": f"host-{host}.corp{host % 7}.example.test" if hostnames else None,
        "tags": ("bench",),
        "details": {"address_family": "ipv4", **(_facts(ip, host) if facts else {})},
    }
    return EndpointDocument(
        id=execution_endpoint_id(execution_id, ip, port, "tcp"),
        scope="execution",
        ip=ip,
        port=port,
        transport="tcp",
        first_seen=seen,
        first_execution_id=execution_id,
        last_seen=seen,
        last_execution_id=execution_id,
        owner_id=owner_id,
        execution_id=execution_id,
        task_id=task_id,
        observation_key=observation_key(newest),
        **newest,
    )


def _create_execution(owner_id: int) -> tuple[int, int]:
    with transaction() as conn:
        made = finished_execution(conn, owner_id, targets=[], ports="1-65535")
    return made.task_id, made.execution_id


def _seed(
    store: SearchStore,
    endpoints: int,
    executions: int,
    seen: datetime,
    facts: bool = False,
    hostnames: bool = False,
) -> list[int]:
    """Executions sharing ``endpoints`` between them, written through the store; outbox rows
    are added only afterwards, so the timed drain starts with all data in place."""
    with transaction() as conn:
        owner_id = (
            conn.execute(
                sa.text(
                    "INSERT INTO users (username, password_hash) VALUES (:u, 'x') "
                    "ON CONFLICT DO NOTHING RETURNING id"
                ),
                {"u": "bench-owner"},
            ).scalar()
            or conn.execute(
                sa.text("SELECT id FROM users WHERE username = 'bench-owner'")
            ).scalar_one()
        )
    ids = []
    per_execution = -(-endpoints // executions)
    progress = Progress("execution endpoints", total=endpoints)
    for index in range(executions):
        task_id, execution_id = _create_execution(owner_id)
        ids.append(execution_id)
        first = index * per_execution
        last = min(endpoints, first + per_execution)
        for start in range(first, last, SEED_BATCH):
            batch = [
                _endpoint(
                    n,
                    execution_id=execution_id,
                    task_id=task_id,
                    owner_id=owner_id,
                    seen=seen,
                    facts=facts,
                    hostnames=hostnames,
                )
                for n in range(start, min(last, start + SEED_BATCH))
            ]
            store.write_execution_endpoints(batch).raise_for_failures()
            progress.advance(len(batch))
    progress.finish()
    store.refresh(StorageScope(months=(seen.strftime("%Y.%m"),)))
    return ids


def _queue(execution_ids: list[int]) -> None:
    with transaction() as conn:
        conn.execute(sa.text("ANALYZE search_execution_endpoints"))
        for execution_id in execution_ids:
            conn.execute(
                sa.text("INSERT INTO scan_projection_outbox (execution_id) VALUES (:e)"),
                {"e": execution_id},
            )


def drain(
    settings: Settings,
    store: SearchStore,
    workers: int,
    total: int,
    label: str,
    pgdata: Path | None,
) -> dict:
    from app.projection.slices import ProjectionWorker

    waits = _PoolWaits()
    events = logging.getLogger("netmap.events")
    events.addHandler(waits)
    previous_level = events.level
    events.setLevel(logging.INFO)
    events.propagate = False
    pages: list[float] = []
    late: list[float] = []
    slices = completed = failures = 0
    lock = threading.Lock()
    progress = Progress(label, total=total)
    stopping, cancelled = threading.Event(), threading.Event()

    def work() -> None:
        nonlocal slices, completed, failures
        worker = ProjectionWorker(settings, store)
        while True:
            claim = worker.claim()
            if claim is None:
                with transaction() as conn:
                    left = conn.execute(
                        sa.text(
                            "SELECT count(*) FROM scan_projection_outbox WHERE processed_at IS NULL"
                        )
                    ).scalar_one()
                if not left:
                    return
                time.sleep(0.05)  # another worker holds the rest, or a retry is backing off
                continue
            outcome = worker.run_slice(claim, stopping=stopping, cancelled=cancelled)
            with lock:
                slices += 1
                completed += outcome.result == "completed"
                failures += outcome.result not in ("completed", "released")
                pages.extend(outcome.page_seconds)
                late.extend(outcome.heartbeat_late_seconds)
            progress.advance(outcome.endpoints)

    cpu = CpuClock(pgdata).start()
    started = time.perf_counter()
    threads = [threading.Thread(target=work, name=f"bench-worker-{n}") for n in range(workers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        events.removeHandler(waits)
        events.setLevel(previous_level)
        events.propagate = True
    elapsed = time.perf_counter() - started
    spent = cpu.read()
    progress.finish()
    return {
        "endpoints_per_s": round(total / elapsed, 1),
        "seconds": round(elapsed, 3),
        **spent,
        "endpoints_per_cpu_s": (
            round(total / spent["cpu_seconds"], 1) if spent["cpu_seconds"] else None
        ),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "page_p50_ms": round(percentile(pages, 50) * 1000, 3),
        "page_p95_ms": round(percentile(pages, 95) * 1000, 3),
        "page_p99_ms": round(percentile(pages, 99) * 1000, 3),
        "pages": len(pages),
        "slices": slices,
        "completed_executions": completed,
        "failed_slices": failures,
        "heartbeat_renewals": len(late),
        "heartbeat_late_max_ms": round(max(late, default=0.0) * 1000, 3),
        "heartbeat_late_p95_ms": round(percentile(late, 95) * 1000, 3) if late else 0.0,
        "pool_wait_p95_ms": round(percentile(waits.waits_ms, 95), 3) if waits.waits_ms else 0.0,
        "pool_wait_max_ms": round(max(waits.waits_ms, default=0.0), 3),
    }


def run_benchmark(
    settings: Settings,
    store: SearchStore,
    *,
    endpoints: int,
    executions: int,
    workers: int,
    republish: bool,
    pgdata: Path | None = None,
    facts: bool = False,
    hostnames: bool = False,
) -> dict[str, Any]:
    from app.heap import settle_heap

    store.ensure_schema()
    execution_ids = _seed(store, endpoints, executions, BASE_TIME, facts, hostnames)
    _queue(execution_ids)
    settle_heap()  # as a runner worker does once booted (jobs.runner.worker_main)
    first = drain(settings, store, workers, endpoints, "publish", pgdata)
    es = settings.elasticsearch
    result: dict[str, Any] = {
        "benchmark": "projection",
        "backend": store.name,
        "endpoints": endpoints,
        "executions": executions,
        "workers": workers,
        "server_side_pages": server_side_pages(store) is not None,
        **first,
        "settings": {
            "projection_page_size": es.projection_page_size,
            "projection_pages_per_tick": es.projection_pages_per_tick,
            "projection_lease_seconds": es.projection_lease_seconds,
            "projection_heartbeat_seconds": es.projection_heartbeat_seconds,
            "projection_bulk_max_bytes": es.projection_bulk_max_bytes,
            "bulk_batch_size": es.bulk_batch_size,
            "database_pool_size": settings.database.pool_size,
        },
    }
    if republish:
        later = _seed(store, endpoints, executions, BASE_TIME + timedelta(days=1), facts, hostnames)
        _queue(later)
        again = drain(settings, store, workers, endpoints, "republish", pgdata)
        result["republish"] = again
        result["republish_endpoints_per_s"] = again["endpoints_per_s"]
    return result


@contextlib.contextmanager
def _opened(
    backend: str, es_url: str | None, tuning: dict[str, Any], shared_buffers: str
) -> Iterator[tuple]:
    from app.bench.scratch import drop_elasticsearch_prefix, scratch_database
    from app.search import open_store

    overrides: dict[str, dict[str, object]] = {"elasticsearch": dict(tuning)}
    prefix = None
    if backend == "elasticsearch":
        prefix = f"netmap-bench-{uuid.uuid4().hex[:8]}"
        overrides["elasticsearch"].update(url=es_url, index_prefix=prefix)
    with scratch_database(
        overrides=overrides, server_tuning={"shared_buffers": shared_buffers}
    ) as scratch:
        store = open_store(scratch.settings)
        # The server's CPU counts only for the PostgreSQL store (an Elasticsearch
        # cluster's is out of reach; the scratch server then only holds the outbox).
        pgdata = scratch.directory / "pgdata" if backend == "postgres" else None
        try:
            yield scratch.settings, store, pgdata
        finally:
            store.close()
            if prefix is not None:
                drop_elasticsearch_prefix(str(es_url), prefix)


@click.command("projection")
@click.option(
    "--backend",
    type=click.Choice(["postgres", "elasticsearch"]),
    default="postgres",
    show_default=True,
)
@click.option(
    "--es-url", help="Elasticsearch test cluster or simulator (required for elasticsearch)."
)
@click.option("--endpoints", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
@click.option("--executions", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--workers", type=click.IntRange(1, 32), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 2000), default=1000, show_default=True)
@click.option("--pages-per-tick", type=click.IntRange(1, 32), default=32, show_default=True)
@click.option("--heartbeat-seconds", type=click.IntRange(1, 1200), default=1, show_default=True)
@click.option("--lease-seconds", type=click.IntRange(10, 3600), default=10, show_default=True)
@click.option(
    "--shared-buffers",
    default="1GB",
    show_default=True,
    help="shared_buffers of the scratch PostgreSQL (the asset tables outgrow the 128MB default).",
)
@click.option("--republish", is_flag=True, help="Publish newer sightings of the same endpoints.")
@click.option(
    "--facts", is_flag=True, help="Every endpoint carries TLS and HTTP facts (a web fleet)."
)
@click.option(
    "--hostnames",
    is_flag=True,
    help="Every host has a name of its own (a distinct free-text text per endpoint).",
)
def command(
    backend: str,
    es_url: str | None,
    endpoints: int,
    executions: int,
    workers: int,
    page_size: int,
    pages_per_tick: int,
    heartbeat_seconds: int,
    lease_seconds: int,
    shared_buffers: str,
    republish: bool,
    facts: bool,
    hostnames: bool,
) -> None:
    """Projection worker throughput, page latency, heartbeat lateness and pool waits."""
    if backend == "elasticsearch" and not es_url:
        raise click.UsageError("--backend elasticsearch needs --es-url")
    if heartbeat_seconds * 3 > lease_seconds:
        raise click.UsageError("--heartbeat-seconds must be at most --lease-seconds / 3")
    tuning = {
        "projection_page_size": page_size,
        "projection_pages_per_tick": pages_per_tick,
        "projection_heartbeat_seconds": heartbeat_seconds,
        "projection_lease_seconds": lease_seconds,
    }
    with _opened(backend, es_url, tuning, shared_buffers) as (settings, store, pgdata):
        result = run_benchmark(
            settings,
            store,
            endpoints=endpoints,
            executions=executions,
            workers=workers,
            republish=republish,
            pgdata=pgdata,
            facts=facts,
            hostnames=hostnames,
        )
    result["settings"]["postgres_shared_buffers"] = shared_buffers
    result["settings"]["facts"] = facts
    result["settings"]["hostnames"] = hostnames
    click.echo(json.dumps(result))
