"""`netmap bench upload --http --clients N`: ingest through a real gunicorn (PRF-1).

The server is ``netmap up --no-runner`` (gunicorn, the configured web workers and
threads) on the bench's scratch database, in its own processes, as in production.
N scanner clients (threads here, each with its own scanner token and its own
execution) post their batches concurrently; every body is generated, checksummed
and encoded before the clock starts, so the clients' own work is not what is
timed. Reported per size (observations per client):

* ``fill_endpoints_per_s``: all clients' observations over the wall time of the
  concurrent fill (every observation is a distinct endpoint);
* CPU seconds of the fill, on a shared machine the fair comparison: the web
  server's process tree (``server_cpu_seconds``), PostgreSQL's
  (``postgres_cpu_seconds``) and this process (the HTTP clients);
* ``normal_by_batch_size``: latency of single batches of each size, one client
  sending while the others are idle;
* the finals' exact counts, checked per execution (a wrong count fails the bench).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import orjson
import sqlalchemy as sa

from app.bench import local_server
from app.bench.counts import execution_counts
from app.bench.cpu import ServedCpu, postmaster_pid
from app.bench.stats import summary_ms
from app.bench.upload_data import observations
from app.upload_protocol import canonical_checksum


class ScannerClient:
    """One scanner: its token, its claimed execution, its pre-encoded batches."""

    def __init__(self, url: str, token: str):
        import requests

        self.url, self.session = url, requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        claimed = self.session.post(f"{url}/api/scanner/claim", timeout=60)
        if claimed.status_code != 200 or not claimed.json().get("execution"):
            raise click.ClickException(f"claim failed: {claimed.status_code} {claimed.text}")
        self.execution = claimed.json()["execution"]
        self.index = 0
        self.latencies: list[float] = []
        self.error: str | None = None

    def with_own_session(self) -> ScannerClient:
        """The same scanner and execution on a session of its own, for another sending
        thread (a ``requests.Session`` is not meant to be shared between threads)."""
        import copy

        import requests

        twin = copy.copy(self)
        twin.session = requests.Session()
        twin.session.headers.update(self.session.headers)
        return twin

    def body(self, items: list[dict[str, Any]], *, final: bool = False) -> bytes:
        body = {
            "protocol_version": 1,
            "claim_token": self.execution["claim_token"],
            "upload_id": "bench-http",
            "stream": "main",
            "batch_index": self.index,
            "is_final": final,
            "checksum": canonical_checksum(items, [], float_free=True),
            "observations": items,
        }
        self.index += 1
        return orjson.dumps(body)

    def send(self, data: bytes) -> float:
        started = time.perf_counter()
        response = self.session.post(
            f"{self.url}/api/scanner/executions/{self.execution['id']}/uploads",
            data=data,
            headers={"Content-Type": "application/json"},
            timeout=600,
        )
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise click.ClickException(
                f"upload failed: {response.status_code} {response.text[:500]}"
            )
        return elapsed

    def send_all(self, bodies: list[bytes], start: threading.Barrier) -> None:
        import requests

        start.wait()
        try:
            for data in bodies:
                self.latencies.append(self.send(data))
        except (click.ClickException, requests.RequestException) as exc:
            self.error = str(exc)  # reported by the main thread


def start_server(scratch, es_url: str | None, prefix: str, max_batch: int):
    """``netmap up --no-runner`` on the scratch database: (process, url, its web workers
    and threads as configured by the environment it runs in)."""
    from app.config import load_settings

    env = local_server.server_environment(scratch, max_batch=max_batch, lease_seconds=3600)
    if es_url:
        env.update(NETMAP_ELASTICSEARCH_URL=es_url, NETMAP_ELASTICSEARCH_INDEX_PREFIX=prefix)
        # The bench is the whole deployment: its budget is what its processes may send.
        budget = load_settings(env=env)[0]
        env.setdefault(
            "NETMAP_ELASTICSEARCH_BULK_MAX_CONCURRENCY_TOTAL",
            str(
                (budget.server.web_workers + budget.runner.processes)
                * budget.elasticsearch.bulk_max_concurrency
            ),
        )
    configured = load_settings(env=env)[0].server
    server, url = local_server.start_server(scratch, env)
    return server, url, configured.web_workers, configured.web_threads


def widen_targets(conn, task_id: int, targets: list[str]) -> None:
    """Let the task's queued executions upload any address of ``targets`` (the bench's
    synthetic addresses span more than a task may name)."""
    conn.execute(
        sa.text(
            "UPDATE scan_executions SET targets = CAST(:targets AS jsonb) "
            "WHERE task_id = :t AND status = 'queued'"
        ),
        {"t": task_id, "targets": json.dumps(targets)},
    )


def create_executions(
    owner_id: int,
    count: int,
    settings,
    name: str,
    *,
    ports: str = "443-700",
    targets: list[str] | None = None,
) -> list[int]:
    """``count`` tasks of one queued execution each, named ``name`` and a number, whose
    execution may upload any address of ``targets`` (default 10.0.0.0/8, more than a
    task may name) on ``ports``; returns the task ids. The targets are also the scope
    in which the change analysis looks for endpoints gone."""
    from app.db import transaction
    from app.scan_control.creation import create_task, validate_task_request

    task_ids = []
    with transaction() as conn:
        for n in range(count):
            request = validate_task_request(
                {"name": f"{name} {n}", "targets": ["10.0.0.1"], "ports": ports}, settings.scan
            )
            task_id = create_task(conn, owner_id=owner_id, request=request, limits=settings.scan)
            widen_targets(conn, task_id, targets or ["10.0.0.0/8"])
            task_ids.append(task_id)
    return task_ids


def measure_http(
    *,
    scratch,
    url: str,
    server_pid: int,
    owner_id: int,
    tokens: list[str],
    size: int,
    fill_batch: int,
    samples: int,
    latency_sizes: list[int],
) -> dict[str, Any]:
    from app.db import transaction

    create_executions(owner_id, len(tokens), scratch.settings, f"bench http {size}")
    clients = [ScannerClient(url, token) for token in tokens]
    observed_at = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    # Each client its own addresses: every observation of the run is a distinct endpoint.
    span = size + samples * sum(latency_sizes)
    work = []
    for n, client in enumerate(clients):
        base = n * span
        work.append(
            [
                client.body(observations(base + start, min(fill_batch, size - start), observed_at))
                for start in range(0, size, fill_batch)
            ]
        )
    postgres = postmaster_pid(scratch.directory / "pgdata")
    barrier = threading.Barrier(len(clients) + 1)
    threads = [
        threading.Thread(target=client.send_all, args=(bodies, barrier), daemon=True)
        for client, bodies in zip(clients, work, strict=True)
    ]
    for thread in threads:
        thread.start()
    cpu_before = ServedCpu.read(server_pid, postgres)
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    spent = ServedCpu.read(server_pid, postgres) - cpu_before
    errors = [client.error for client in clients if client.error]
    if errors:
        raise click.ClickException(f"a client failed: {errors[0]}")

    by_batch_size: dict[str, Any] = {}
    first = clients[0]
    filled = size
    for latency_size in latency_sizes:
        wall = []
        for _ in range(samples):
            data = first.body(observations(filled, latency_size, observed_at))
            wall.append(first.send(data))
            filled += latency_size
        by_batch_size[str(latency_size)] = summary_ms(wall)
    counts = []
    for n, client in enumerate(clients):
        client.send(client.body([], final=True))
        expected = size + (filled - size if n == 0 else 0)
        with transaction() as conn:
            counted = execution_counts(conn, client.execution["id"])
        wanted = {"observations": expected, "endpoints": expected, "ips": expected}
        if counted != wanted:
            raise click.ClickException(f"final counted {counted}, expected {wanted}")
        counts.append(counted)
    total = size * len(clients)
    fill_cpu = spent.total  # PostgreSQL reads 0 when it is not this bench's to measure
    return {
        "clients": len(clients),
        "observations_per_client": size,
        "fill_observations": total,
        "fill_seconds": round(seconds, 2),
        "fill_endpoints_per_s": round(total / seconds, 1),
        "fill_batch_latency": summary_ms([s for c in clients for s in c.latencies]),
        "fill_cpu_seconds": round(fill_cpu, 3),
        "fill_endpoints_per_cpu_s": round(total / fill_cpu, 1) if fill_cpu else None,
        "server_cpu_seconds": round(spent.web, 3),
        "postgres_cpu_seconds": round(spent.postgres, 3) if postgres else None,
        "client_cpu_seconds": round(spent.client, 3),
        "normal_by_batch_size": by_batch_size,
        "final_counts": counts,
    }
