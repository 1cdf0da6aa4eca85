"""`netmap bench analysis`: change-analysis throughput of one execution (ANA-8).

On a scratch database (``app.bench.scratch``) with the PostgreSQL store it
builds an owner with ``--endpoints`` N current endpoints: a first execution of
N endpoints, analysed untimed (every endpoint ``new``; its rate is reported as
``first_scan_endpoints_per_s``). Then a second execution over the same scope
sees the same endpoints except that 1 % changed product, 1 % are missing
(gone) and 1 % are new. Its analysis is timed end to end with the real worker:
claim, the set-based change-set statement, pushing the gone statuses onto the
current assets, completion.

Execution endpoints are generated in SQL (``generate_series``), not through
the store's write path: the benchmark measures the analysis, not ingest. Only
the current assets whose status changes are written through the store, since
they are the only ones the analysis touches there.

Printed (one JSON object): ``endpoints_per_s`` (second execution's endpoints
over its analysis wall time), ``cpu_seconds`` / ``endpoints_per_cpu_s`` (CPU
spent by the scratch server and this process meanwhile: the rate on an idle
machine, since the work is one backend's statement; wall time on a shared
machine depends on the neighbours, hence also ``load_average_1m``), counts
per change kind, and memory: the Python heap
peak during the timed analysis (``python_peak_mb``, flat in N because no row
is loaded into Python except pages of changed statuses) and the process's
peak RSS.
"""

from __future__ import annotations

import json
import os
import resource
import time
import tracemalloc
from typing import Any

import click
import sqlalchemy as sa

from app.bench.cpu import server_cpu_seconds
from app.bench.executions import finished_execution
from app.bench.progress import Progress
from app.db import transaction
from app.search.documents import EndpointDocument, observation_key

PORTS = (22, 80, 443, 3306, 8080)
CHANGED_EVERY, GONE_REMAINDER, CHANGED_REMAINDER = 100, 2, 1

_SEED_ENDPOINTS = """
    INSERT INTO search_execution_endpoints
        (key, id, execution_id, task_id, owner_id, ip, port, transport, first_seen,
         first_execution_id, last_seen, last_execution_id, observation_key, state, service,
         product, version, banner)
    SELECT (CAST(:execution_id AS bigint) << 40) + n, gen_random_uuid(), :execution_id, :task_id,
           :owner_id,
           '10.0.0.0'::inet + (n / 5), (ARRAY[22, 80, 443, 3306, 8080])[n % 5 + 1], 'tcp',
           now(), :execution_id, now(), :execution_id, md5(n::text), 'open',
           (ARRAY['ssh', 'http', 'https', 'mysql', 'http-proxy'])[n % 5 + 1],
           CASE WHEN :second AND n % 100 = 1 THEN 'changed-product' ELSE 'product' END,
           '1.0', 'banner ' || (n % 5)
      FROM generate_series(:low, :high - 1) AS n
     WHERE NOT (:second AND n % 100 = 2)
"""


def _execution(owner_id: int) -> tuple[int, int]:
    with transaction() as conn:
        made = finished_execution(
            conn, owner_id, targets=["10.0.0.0/8"], ports="22,80,443,3306,8080"
        )
    return made.task_id, made.execution_id


def _seed_execution(owner_id: int, low: int, high: int, *, second: bool) -> int:
    task_id, execution_id = _execution(owner_id)
    progress = Progress(f"seed execution {execution_id}", high - low)
    step = 200_000
    for start in range(low, high, step):
        with transaction() as conn:
            conn.execute(
                sa.text(_SEED_ENDPOINTS),
                {
                    "execution_id": execution_id,
                    "task_id": task_id,
                    "owner_id": owner_id,
                    "low": start,
                    "high": min(high, start + step),
                    "second": second,
                },
            )
        progress.advance(min(high, start + step) - start)
    progress.finish()
    with transaction() as conn:
        # The projection is done (the benchmark does not time it): the analysis may start.
        conn.execute(
            sa.text(
                "INSERT INTO scan_projection_outbox (execution_id, processed_at, phase) "
                "VALUES (:e, now(), 'done')"
            ),
            {"e": execution_id},
        )
        conn.execute(sa.text("ANALYZE search_execution_endpoints"))
        conn.execute(
            sa.text("INSERT INTO scan_analysis_queue (execution_id, task_id) VALUES (:e, :t)"),
            {"e": execution_id, "t": task_id},
        )
    return execution_id


def _gone_assets(owner_id: int, endpoints: int) -> list[EndpointDocument]:
    """The current assets whose status the second analysis changes (1 % of N)."""
    from datetime import UTC, datetime

    seen = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    docs = []
    from app.search.ids import current_asset_id

    for n in range(GONE_REMAINDER, endpoints, CHANGED_EVERY):
        host = n // 5
        ip = f"10.{host >> 16 & 255}.{host >> 8 & 255}.{host & 255}"
        port = PORTS[n % 5]
        newest: dict[str, Any] = {"state": "open", "service": "svc", "tags": (), "details": {}}
        for scope, owner in (("user", owner_id), ("global", None)):
            docs.append(
                EndpointDocument(
                    id=current_asset_id(scope, owner, ip, port, "tcp"),
                    scope=scope,
                    ip=ip,
                    port=port,
                    transport="tcp",
                    first_seen=seen,
                    first_execution_id=1,
                    last_seen=seen,
                    last_execution_id=1,
                    owner_id=owner,
                    observation_key=observation_key(newest),
                    **newest,
                )
            )
    return docs


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@click.command("analysis")
@click.option(
    "--endpoints", type=click.IntRange(1000, 5_000_000), default=100_000, show_default=True
)
@click.option(
    "--slice-endpoints",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help="[analysis] slice_endpoints for this run (default: the setting's default)",
)
def command(endpoints: int, slice_endpoints: int | None) -> None:
    """Time the change analysis of one N-endpoint execution against N current endpoints."""
    from app.alerts.evaluate import change_set_hook
    from app.analysis.worker import AnalysisWorker
    from app.bench.scratch import scratch_database
    from app.search.postgres_store import PostgresStore

    with scratch_database(
        overrides={
            "analysis": {
                "lease_seconds": 600,
                "heartbeat_seconds": 30,
                **({"slice_endpoints": slice_endpoints} if slice_endpoints else {}),
            }
        },
        server_tuning={"shared_buffers": "256MB", "max_wal_size": "4GB"},
    ) as scratch:
        store = PostgresStore(scratch.settings)
        worker = AnalysisWorker(
            scratch.settings, store, on_change_set=change_set_hook(scratch.settings.alerts, store)
        )
        with transaction() as conn:
            owner_id = conn.execute(
                sa.text(
                    "INSERT INTO users (username, password_hash) VALUES ('bench', 'x') RETURNING id"
                )
            ).scalar_one()
        _seed_execution(owner_id, 0, endpoints, second=False)
        started = time.perf_counter()
        claim = worker.claim()
        assert claim is not None
        first = worker.run(claim)
        first_seconds = time.perf_counter() - started
        click.echo(f"[first scan analysed] {first_seconds:.1f}s", err=True)

        docs = _gone_assets(owner_id, endpoints)
        for start in range(0, len(docs), 2000):
            store.publish_current(
                docs[start : start + 2000], max_operations=2000, max_bytes=16_000_000
            ).raise_for_failures()
        second_id = _seed_execution(
            owner_id, 0, endpoints + endpoints // CHANGED_EVERY, second=True
        )
        with transaction() as conn:
            conn.execute(sa.text("ANALYZE analysis_assets"))
            observed = conn.execute(
                sa.text("SELECT count(*) FROM search_execution_endpoints WHERE execution_id = :e"),
                {"e": second_id},
            ).scalar_one()

        pgdata = scratch.directory / "pgdata"
        server_cpu = server_cpu_seconds(pgdata)
        own_cpu = time.process_time()
        tracemalloc.start()
        started = time.perf_counter()
        claim = worker.claim()
        assert claim is not None and claim.execution_id == second_id
        outcome = worker.run(claim)
        seconds = time.perf_counter() - started
        _current, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        cpu = (server_cpu_seconds(pgdata) - server_cpu) + (time.process_time() - own_cpu)
        store.close()
        if outcome.result != "completed" or outcome.counts is None:
            raise click.ClickException(f"analysis did not complete: {outcome.result}")
        result = {
            "benchmark": "analysis",
            "backend": "postgres",
            "endpoints": endpoints,
            "execution_endpoints": int(observed),
            "seconds": round(seconds, 3),
            "endpoints_per_s": round(observed / seconds),
            "cpu_seconds": round(cpu, 3),
            "endpoints_per_cpu_s": round(observed / cpu) if cpu else None,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "changes": outcome.counts.as_dict(),
            "slice_endpoints": scratch.settings.analysis.slice_endpoints,
            "slices": outcome.counts.slices,
            "statuses_pushed": outcome.pushed,
            "first_scan_seconds": round(first_seconds, 3),
            "first_scan_endpoints_per_s": round(endpoints / first_seconds),
            "first_scan_new": first.counts.new if first.counts else None,
            "python_peak_mb": round(python_peak / 1_048_576, 2),
            "process_peak_rss_mb": _peak_rss_mb(),
        }
        click.echo(json.dumps(result))
