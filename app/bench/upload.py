"""`netmap bench upload`: upload latency by kind at growing execution sizes (PRF-1).

For each size an execution is first filled with that many distinct endpoints
through the real upload route (Flask test client, full validation, receipts,
store writes), then measured: normal batches, confirmed retries, DNS sidecar
batches and the final. The question the numbers answer is whether an upload's
cost depends on how much the execution already holds: it should not (the
identity check reads only the upload's stream counters, the final's count is
scoped to the execution).
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from app.bench.counts import execution_counts
from app.bench.cpu import postmaster_pid, tree_cpu_seconds
from app.bench.progress import Progress
from app.bench.scratch import drop_elasticsearch_prefix, scratch_database
from app.bench.stats import summary_ms
from app.bench.upload_data import observations
from app.upload_protocol import canonical_checksum


class UploadScanner:
    """A scanner holding one claimed execution, sending its batches through a test client."""

    def __init__(self, client, token: str, execution: dict[str, Any], upload_id: str):
        self.client, self.token, self.execution, self.upload_id = (
            client,
            token,
            execution,
            upload_id,
        )

    def body(self, index: int, observations=None, dns_records=None, *, stream="main", final=False):
        observations = observations or []
        body = {
            "protocol_version": 1,
            "claim_token": self.execution["claim_token"],
            "upload_id": self.upload_id,
            "stream": stream,
            "batch_index": index,
            "is_final": final,
            "checksum": canonical_checksum(observations, dns_records or []),
            "observations": observations,
        }
        if dns_records:
            body["dns_records"] = dns_records
        return body

    def send(self, body: dict[str, Any]) -> float:
        # The body is encoded here, as a scanner would, so the timing below is the server's.
        data = json.dumps(body).encode()
        started = time.perf_counter()
        response = self.client.post(
            f"/api/scanner/executions/{self.execution['id']}/uploads",
            data=data,
            content_type="application/json",
            headers={"Authorization": f"Bearer {self.token}"},
        )
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise click.ClickException(
                f"upload failed: {response.status_code} {response.get_data()!r}"
            )
        return elapsed

    def renew(self) -> None:
        self.client.post(
            f"/api/scanner/executions/{self.execution['id']}/lease",
            json={"claim_token": self.execution["claim_token"]},
            headers={"Authorization": f"Bearer {self.token}"},
        )


def claimed_bench_task(app, owner_id: int, token: str, name: str) -> UploadScanner:
    """A task of ``owner_id`` for the synthetic observations (``upload_data``), its one
    execution claimed by the scanner of ``token``."""
    from app.bench.upload_http import create_executions

    # The bench's synthetic addresses span 10.0.0.0/8 (more than a task may target);
    # uploads must stay inside the execution's targets, so its one execution says so.
    (task_id,) = create_executions(
        owner_id, 1, app.extensions["netmap.settings"], name, ports="443"
    )
    client = app.test_client()
    claimed = client.post("/api/scanner/claim", headers={"Authorization": f"Bearer {token}"})
    execution = claimed.get_json()["execution"]
    if execution is None or execution["task_id"] != task_id:
        raise click.ClickException(f"the scanner did not claim task {task_id}'s execution")
    return UploadScanner(client, token, execution, name.replace(" ", "-"))


def _measure_size(
    app, owner_id, token, size, samples, batch, fill_batch, latency_batches=(), postgres=None
) -> dict[str, Any]:
    from app.db import transaction

    scanner = claimed_bench_task(app, owner_id, token, f"bench {size}")
    observed_at = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()

    index, filled = 0, 0
    progress = Progress(f"fill {size}", total=size)
    fill_started = time.perf_counter()
    # CPU seconds of this process (client encoding + the whole server path): on a shared
    # machine wall time measures the neighbours too, CPU time mostly us.
    fill_cpu_started = time.process_time()
    # PostgreSQL's share too (its processes, not ours): the writes are set-based, so
    # their cost lands there.
    postgres_cpu_started = tree_cpu_seconds(postgres) if postgres else None
    while filled < size:
        count = min(fill_batch, size - filled)
        scanner.send(scanner.body(index, observations(filled, count, observed_at)))
        filled += count
        index += 1
        progress.advance(count)
        if index % 50 == 0:
            scanner.renew()
    progress.finish()
    fill_seconds = time.perf_counter() - fill_started
    fill_cpu_seconds = time.process_time() - fill_cpu_started
    postgres_cpu = (
        tree_cpu_seconds(postgres) - postgres_cpu_started
        if postgres_cpu_started is not None
        else None
    )

    normal, retries, dns = [], [], []
    sent = []
    for _ in range(samples):
        body = scanner.body(index, observations(filled, batch, observed_at))
        normal.append(scanner.send(body))
        sent.append(body)
        filled += batch
        index += 1
    by_batch_size: dict[str, Any] = {}
    for latency_size in latency_batches:
        wall, cpu = [], []
        for _ in range(samples):
            body = scanner.body(index, observations(filled, latency_size, observed_at))
            cpu_started = time.process_time()
            wall.append(scanner.send(body))
            cpu.append(time.process_time() - cpu_started)
            filled += latency_size
            index += 1
        by_batch_size[str(latency_size)] = {
            **summary_ms(wall),
            "cpu_ms_median": round(sorted(cpu)[len(cpu) // 2] * 1000, 2),
            "cpu_us_per_observation": round(min(cpu) / latency_size * 1e6, 1),
        }
    for body in sent:
        retries.append(scanner.send(body))
    for n in range(samples):
        records = [
            {
                "observed_at": observed_at,
                "name": f"host{n}-{r}.example.com",
                "type": "A",
                "value": f"10.200.{n % 256}.{r}",
                "ttl": 300,
            }
            for r in range(50)
        ]
        dns.append(scanner.send(scanner.body(n % index, dns_records=records, stream="dns")))
    final = scanner.send(scanner.body(index, final=True))
    # The final's counts must be exact whatever the size: check them, or the numbers
    # above would time a wrong answer.
    expected = {"observations": filled + samples * 50, "endpoints": filled, "ips": filled}
    with transaction() as conn:
        counted = execution_counts(conn, scanner.execution["id"])
    if counted != expected:
        raise click.ClickException(f"final counted {counted}, expected {expected}")
    return {
        "endpoints_before": size,
        "fill_seconds": round(fill_seconds, 2),
        "fill_endpoints_per_s": round(size / fill_seconds, 1),
        "fill_cpu_seconds": round(fill_cpu_seconds, 3),
        "fill_endpoints_per_cpu_s": round(size / fill_cpu_seconds, 1) if fill_cpu_seconds else None,
        "fill_postgres_cpu_seconds": round(postgres_cpu, 3) if postgres_cpu is not None else None,
        "normal": summary_ms(normal),
        "final": summary_ms([final]),
        "final_counts": counted,
        "confirmed_retry": summary_ms(retries),
        "dns_mixed": summary_ms(dns),
        **({"normal_by_batch_size": by_batch_size} if by_batch_size else {}),
    }


@click.command("upload")
@click.option(
    "--sizes",
    default="10000,100000,1000000",
    show_default=True,
    help="Comma-separated endpoint counts already in the execution.",
)
@click.option("--samples", default=30, show_default=True, type=click.IntRange(1, 10000))
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 100000),
    help="Observations per measured batch.",
)
@click.option("--fill-batch", default=5000, show_default=True, type=click.IntRange(1, 100000))
@click.option(
    "--latency-batches",
    default="",
    help="Comma-separated batch sizes (e.g. 500,5000) whose normal-batch latency and CPU "
    "time are measured too, --samples batches each.",
)
@click.option(
    "--backend",
    type=click.Choice(["postgres", "elasticsearch"]),
    default="postgres",
    show_default=True,
)
@click.option("--es-url", help="Elasticsearch (or simulator) URL for --backend elasticsearch.")
@click.option(
    "--http",
    is_flag=True,
    help="Upload over HTTP to a real gunicorn (`netmap up --no-runner`, the configured web "
    "workers) instead of the in-process test client; --sizes are observations per client.",
)
@click.option(
    "--clients",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="With --http: concurrent scanner clients, each its own scanner and execution.",
)
@click.option(
    "--shared-buffers",
    default="1GB",
    show_default=True,
    help="shared_buffers of the scratch PostgreSQL (a 1M-endpoint execution outgrows the "
    "128MB default, and then the measurement is of buffer eviction, not of the upload).",
)
def command(
    sizes: str,
    samples: int,
    batch: int,
    fill_batch: int,
    latency_batches: str,
    backend: str,
    es_url: str | None,
    http: bool,
    clients: int,
    shared_buffers: str,
):
    """Upload latency (p50/p95/p99) by kind for executions of growing size."""
    from app import close_app, create_app
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user

    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter("sizes must be integers", param_hint="--sizes") from None
    try:
        latency_sizes = [int(s) for s in latency_batches.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(
            "latency batches must be integers", param_hint="--latency-batches"
        ) from None
    if backend == "elasticsearch" and not es_url:
        raise click.UsageError("--backend elasticsearch needs --es-url (e.g. the simulator)")
    overrides: dict[str, dict[str, object]] = {
        "ingest": {"max_observations_per_batch": max(fill_batch, batch, *latency_sizes)},
        "scan": {"execution_lease_seconds": 3600},
    }
    prefix = f"netmap-bench-{uuid.uuid4().hex[:8]}"
    if es_url:
        overrides["elasticsearch"] = {"url": es_url, "index_prefix": prefix}
    tuning = {"shared_buffers": shared_buffers}
    if http:
        _http_command(
            size_list, samples, fill_batch, latency_sizes or [500, 5000], backend, es_url,
            clients, overrides, tuning, prefix,
        )  # fmt: skip
        return
    with scratch_database(overrides=overrides, server_tuning=tuning) as scratch:
        from app import db

        app = create_app(scratch.settings, engine=db.get_engine(), modules="off")
        try:
            from app.heap import settle_heap
            from app.http import context

            settle_heap()  # as a web worker does once booted (gunicorn_conf.post_worker_init)
            with app.app_context():
                context.store().ensure_schema()
            with transaction() as conn:
                # Nobody logs in as this owner; a random password passes the policy.
                owner = create_user(conn, "bench", secrets.token_urlsafe(24), is_admin=True)
                _, token = create_scanner(conn, "bench-scanner")
            results = {
                str(size): _measure_size(
                    app,
                    owner.id,
                    token,
                    size,
                    samples,
                    batch,
                    fill_batch,
                    latency_sizes,
                    postmaster_pid(scratch.directory / "pgdata"),
                )
                for size in size_list
            }
        finally:
            close_app(app)
            if es_url:
                drop_elasticsearch_prefix(es_url, prefix)  # only what this run created
    smallest, largest = str(min(size_list)), str(max(size_list))
    output = {
        "benchmark": "upload",
        "backend": backend,
        "samples": samples,
        "batch": batch,
        "postgres_shared_buffers": shared_buffers,
        "sizes": results,
        "normal_p95_ratio_largest_vs_smallest": round(
            results[largest]["normal"]["p95_ms"] / results[smallest]["normal"]["p95_ms"], 3
        ),
    }
    click.echo(json.dumps(output))


def _http_command(
    size_list: list[int],
    samples: int,
    fill_batch: int,
    latency_sizes: list[int],
    backend: str,
    es_url: str | None,
    clients: int,
    overrides: dict[str, dict[str, object]],
    tuning: dict[str, str],
    prefix: str,
) -> None:
    from app.bench import local_server, upload_http
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.search import open_store

    overrides["ingest"]["max_observations_per_batch"] = max(fill_batch, *latency_sizes)
    with scratch_database(overrides=overrides, server_tuning=tuning) as scratch:
        try:
            store = open_store(scratch.settings)
            store.ensure_schema()
            store.close()
            with transaction() as conn:
                # Nobody logs in as this owner; a random password passes the policy.
                owner = create_user(conn, "bench", secrets.token_urlsafe(24), is_admin=True)
                tokens = [create_scanner(conn, f"bench-scanner-{n}")[1] for n in range(clients)]
            server, url, workers, threads = upload_http.start_server(
                scratch, es_url, prefix, overrides["ingest"]["max_observations_per_batch"]
            )
            try:
                results = {
                    str(size): upload_http.measure_http(
                        scratch=scratch,
                        url=url,
                        server_pid=server.pid,
                        owner_id=owner.id,
                        tokens=tokens,
                        size=size,
                        fill_batch=fill_batch,
                        samples=samples,
                        latency_sizes=latency_sizes,
                    )
                    for size in size_list
                }
            finally:
                local_server.stop_server(server)
        finally:
            if es_url:
                drop_elasticsearch_prefix(es_url, prefix)  # only what this run created
    click.echo(
        json.dumps(
            {
                "benchmark": "upload",
                "mode": "http",
                "backend": backend,
                "clients": clients,
                "web_workers": workers,
                "web_threads": threads,
                "fill_batch": fill_batch,
                "samples": samples,
                "sizes": results,
            }
        )
    )
