"""`netmap bench soak`: reads that stay fast while scanners write (ingest and reads together).

On a scratch database it seeds ``--assets`` current assets of one user and starts
``netmap up --no-runner`` (gunicorn, as in production) on it. Then, for ``--minutes``:

* ``--writers`` processes, each a scanner with its own task and execution, upload
  batches of ``--batch`` new observations (16 ports per address) through
  ``POST /api/scanner/executions/<id>/uploads``, back to back;
* ``--readers`` processes, logged in as the tasks' owner, alternate
  ``GET /api/tasks/<id>/results?limit=500`` (a first page, then the page after it,
  of a task being written) and ``GET /api/assets`` (several filters and sorts, and
  next pages; with ``--language``, ``bench search``'s search-language queries, the
  port-443 assets given certificates as there).

Clients are separate processes so the timing of a read is not the wait for a writer's
JSON encoding in the same interpreter. After the window every writer sends its final
batch, and the bench checks that every uploaded observation was confirmed (receipts,
the execution's counts and the task's first results page all exact) before it prints
one JSON object: per minute the ingest rate (observations confirmed per second), the
CPU seconds of the server and of PostgreSQL, and the p50/p95/max latency of each read
route, and whether the goals hold — results and asset
search p95 ≤ 250 ms in every minute, and no minute's ingest rate below 80 % of the
first minute's. Progress goes to stderr.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from app.bench import local_server
from app.bench.cpu import postmaster_pid, tree_cpu_seconds
from app.bench.stats import percentile

READ_P95_GOAL_MS = 250.0
INGEST_FLOOR = 0.8  # of the first minute's rate
PORTS_PER_ADDRESS = 16
RESULTS_LIMIT = 500
SOAK_PASSWORD = "bench soak password 1"  # noqa: S105 - a scratch database's throwaway user
ASSET_QUERIES = (
    "/api/assets?limit=100",
    "/api/assets?port=443&limit=100",
    "/api/assets?cidr=10.0.8.0/21&limit=100",
    "/api/assets?sort=last_seen&limit=100",
    "/api/assets?service=ssh&limit=100",
)


def _observation(writer: int, i: int, observed_at: str) -> dict[str, Any]:
    """The ``i``-th observation of a writer: its own /16 (``10.<100 + writer>``), 16 ports
    an address, every observation a new endpoint."""
    address, port = divmod(i, PORTS_PER_ADDRESS)
    wrap, address = divmod(address, 65536)
    return {
        "observed_at": observed_at,
        "ip": f"10.{100 + writer}.{address >> 8}.{address & 255}",
        "port": 1 + port + PORTS_PER_ADDRESS * wrap,
        "transport": "tcp",
        "state": "open",
        "service": {"name": "https", "product": "nginx", "version": "1.26"},
    }


def _writer(url, writer, token, execution, batch, window, events) -> None:
    """Upload batches during ``window`` (start, end), then the final; every answer must be
    a 200."""
    import requests

    from app.agent.client import upload_body

    def body(index: int, observations: list[dict[str, Any]], final: bool) -> str:
        return json.dumps(
            upload_body(
                claim_token=execution["claim_token"],
                upload_id=upload_id,
                batch_index=index,
                is_final=final,
                observations=observations,
                dns_records=[],
            )
        )

    session = requests.Session()
    start_at, deadline = window
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    uploads = f"{url}/api/scanner/executions/{execution['id']}/uploads"
    upload_id = f"soak-{writer}"
    observed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 300))
    index = sent = 0
    time.sleep(max(0.0, start_at - time.time()))
    while time.time() < deadline:
        observations = [_observation(writer, sent + n, observed_at) for n in range(batch)]
        data = body(index, observations, False)
        started = time.perf_counter()
        answer = session.post(uploads, data=data, headers=headers, timeout=600)
        elapsed = time.perf_counter() - started
        if answer.status_code != 200:
            events.put(("error", f"upload {index}: {answer.status_code} {answer.text[:300]}"))
            return
        sent += batch
        index += 1
        events.put(("upload", time.time(), elapsed, batch))
        if index % 50 == 0:
            session.post(
                f"{url}/api/scanner/executions/{execution['id']}/lease",
                json={"claim_token": execution["claim_token"]},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
    data = body(index, [], True)
    answer = session.post(uploads, data=data, headers=headers, timeout=600)
    if answer.status_code != 200:
        events.put(("error", f"final: {answer.status_code} {answer.text[:300]}"))
        return
    events.put(("writer_done", writer, execution["id"], sent))


def language_queries() -> tuple[str, ...]:
    """``bench search``'s representative search-language queries as asset searches."""
    from urllib.parse import quote

    from app.bench.search import QUERIES

    return tuple(f"/api/assets?q={quote(text)}&limit=50" for text in QUERIES.values())


def _reader(url, reader, username, task_ids, window, events, asset_queries) -> None:
    """Alternate results pages and asset searches during ``window``; time each request."""
    import requests

    session = requests.Session()
    start_at, deadline = window
    login = session.post(
        f"{url}/api/auth/login",
        json={"username": username, "password": SOAK_PASSWORD},
        timeout=60,
    )
    if login.status_code != 200:
        events.put(("error", f"reader login: {login.status_code} {login.text[:300]}"))
        return
    step = 0
    next_results: str | None = None
    next_assets: str | None = None
    time.sleep(max(0.0, start_at - time.time()))
    while time.time() < deadline:
        task_id = task_ids[(reader + step // 4) % len(task_ids)]
        if step % 2 == 0:
            route = "results"
            path = f"/api/tasks/{task_id}/results?limit={RESULTS_LIMIT}"
            if next_results:
                path += f"&cursor={next_results}"
        else:
            route = "assets"
            path = next_assets or asset_queries[(reader + step // 2) % len(asset_queries)]
        started = time.perf_counter()
        answer = session.get(f"{url}{path}", timeout=600)
        elapsed = time.perf_counter() - started
        if answer.status_code != 200:
            events.put(("error", f"GET {path}: {answer.status_code} {answer.text[:300]}"))
            return
        cursor = answer.json().get("next_cursor")
        if route == "results":
            # A first page, then the page after it; then a first page again.
            next_results = cursor if next_results is None else None
        else:
            base = asset_queries[(reader + step // 2) % len(asset_queries)]
            next_assets = f"{base}&cursor={cursor}" if cursor and next_assets is None else None
        events.put(("read", time.time(), elapsed, route))
        step += 1


def _start_server(scratch, max_batch: int) -> tuple[subprocess.Popen, str]:
    env = local_server.server_environment(scratch, max_batch=max_batch, lease_seconds=3600)
    server, url = local_server.start_server(scratch, env, timeout=120)
    return server, url.rstrip("/")


def _prepare(
    scratch, writers: int, assets: int, certificates: bool = False
) -> tuple[str, list[int], list[str]]:
    """The owner (with ``assets`` current assets), one queued task per writer whose
    execution may receive any 10/8 address, and one scanner token per writer."""
    import sqlalchemy as sa

    from app.bench.scratch import vacuum_analyze
    from app.bench.store import SERVICES
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.scan_control.creation import create_task, validate_task_request
    from app.search import open_store
    from app.search.seed import seed_current_assets

    settings = scratch.settings
    store = open_store(settings)
    store.ensure_schema()
    store.close()
    tokens = []
    with transaction() as conn:
        owner = create_user(conn, "soak-owner", SOAK_PASSWORD)
        task_ids = []
        for w in range(writers):
            request = validate_task_request(
                {"name": f"soak {w}", "targets": ["10.0.0.1"], "ports": "1-65535"}, settings.scan
            )
            task_ids.append(
                create_task(conn, owner_id=owner.id, request=request, limits=settings.scan)
            )
            tokens.append(create_scanner(conn, f"soak-scanner-{w}")[1])
        # Uploads must stay inside the execution's targets; the bench's addresses span 10/8.
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET targets = CAST(:targets AS jsonb) "
                "WHERE task_id = ANY(:tasks)"
            ),
            {"tasks": task_ids, "targets": json.dumps(["10.0.0.0/8"])},
        )
        seed_execution = conn.execute(
            sa.text("SELECT min(id) FROM scan_executions WHERE task_id = :t"), {"t": task_ids[0]}
        ).scalar_one()
    seen = datetime.now(UTC) - timedelta(hours=1)
    for low in range(0, assets, 100_000):
        with transaction() as conn:
            seed_current_assets(
                conn,
                owner_id=owner.id,
                execution_id=seed_execution,
                low=low,
                high=min(low + 100_000, assets),
                seen=seen,
                services=SERVICES,
                spread_minutes=7 * 24 * 60,
            )
    if certificates:
        # As bench search seeds them: a certificate on every port-443 asset.
        from app.bench.search import certify

        certify(owner.id)
    # What autovacuum does soon after a bulk load, done before the window opens rather
    # than in its first minute: the assets' visibility map and statistics that know
    # them, and none of the tasks about to be written (as for every running task).
    vacuum_analyze()
    return "soak-owner", task_ids, tokens


def _claim(url: str, token: str) -> dict[str, Any]:
    import requests

    answer = requests.post(
        f"{url}/api/scanner/claim",
        json={"kinds": ["ports"]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    if answer.status_code != 200:
        raise click.ClickException(f"claim failed: {answer.status_code} {answer.text[:300]}")
    return answer.json()["execution"]


def _cpu_sample(server_pid: int, postmaster: int | None) -> dict[str, float]:
    """CPU seconds so far of the server (gunicorn and its workers) and of PostgreSQL (this
    process's embedded server), and the machine's load: on a shared machine wall-clock
    rates measure the neighbours too, CPU seconds mostly the work."""
    return {
        "server": tree_cpu_seconds(server_pid),
        "postgres": tree_cpu_seconds(postmaster),
        "load": os.getloadavg()[0],
    }


def _minutes(uploads, reads, started: float, ended: float, cpu_samples) -> list[dict[str, Any]]:
    """Per-minute ingest rate, read latencies and CPU seconds (the last minute may be
    partial); ``cpu_samples`` were taken at the minute boundaries and the window's end."""
    count = max(1, int((ended - started - 1e-9) // 60) + 1)
    out = []
    for m in range(count):
        low, high = started + 60 * m, min(started + 60 * (m + 1), ended)
        observations = sum(
            n for t, _, n in uploads if low <= t < high or (m == count - 1 and t >= high)
        )
        minute: dict[str, Any] = {
            "minute": m + 1,
            "seconds": round(high - low, 1),
            "observations": observations,
            "ingest_observations_per_s": round(observations / max(high - low, 1e-9), 1),
        }
        if m + 1 < len(cpu_samples):
            before, after = cpu_samples[m], cpu_samples[m + 1]
            server_cpu = after["server"] - before["server"]
            minute["server_cpu_seconds"] = round(server_cpu, 2)
            minute["postgres_cpu_seconds"] = round(after["postgres"] - before["postgres"], 2)
            minute["observations_per_server_cpu_s"] = (
                round(observations / server_cpu, 1) if server_cpu > 0 else None
            )
            minute["load_average_1m"] = round(after["load"], 2)
        for route in ("results", "assets"):
            ms = [s * 1000 for t, s, r in reads if r == route and low <= t < high]
            minute[route] = {
                "count": len(ms),
                "p50_ms": round(percentile(ms, 50), 1) if ms else None,
                "p95_ms": round(percentile(ms, 95), 1) if ms else None,
                "max_ms": round(max(ms), 1) if ms else None,
            }
        out.append(minute)
    return out


def _verify(url: str, username: str, done: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """Every uploaded observation confirmed: receipts, execution counts, results totals."""
    import requests
    import sqlalchemy as sa

    from app.bench.counts import confirmed_observations
    from app.db import transaction

    uploaded = sum(sent for _, sent in done.values())
    with transaction() as conn:
        confirmed = confirmed_observations(conn)
        counted = dict(
            conn.execute(
                sa.text("SELECT id, observation_count FROM scan_executions WHERE id = ANY(:ids)"),
                {"ids": [execution for execution, _ in done.values()]},
            ).all()
        )
    session = requests.Session()
    session.post(
        f"{url}/api/auth/login", json={"username": username, "password": SOAK_PASSWORD}, timeout=60
    )
    results_totals = 0
    for task_id in done:
        page = session.get(f"{url}/api/tasks/{task_id}/results?limit=1", timeout=600).json()
        results_totals += page["total_endpoints"]
    executions_exact = all(counted.get(e) == sent for e, sent in done.values())
    return {
        "uploaded_observations": uploaded,
        "confirmed_observations": confirmed,
        "execution_counts_exact": executions_exact,
        "results_total_endpoints": results_totals,
        "exact": confirmed == uploaded == results_totals and executions_exact,
    }


@click.command("soak")
@click.option("--minutes", type=click.FloatRange(0.05, 24 * 60), default=3.0, show_default=True)
@click.option("--writers", type=click.IntRange(1, 32), default=4, show_default=True)
@click.option("--readers", type=click.IntRange(1, 32), default=2, show_default=True)
@click.option("--batch", type=click.IntRange(1, 50_000), default=2000, show_default=True)
@click.option(
    "--assets",
    type=click.IntRange(0, 10_000_000),
    default=100_000,
    show_default=True,
    help="current assets of the owner, seeded before the soak (what asset search reads)",
)
@click.option(
    "--shared-buffers",
    default="1GB",
    show_default=True,
    help="shared_buffers of the scratch PostgreSQL: a soak writes millions of rows, and "
    "with the 128MB default it measures buffer eviction as much as the writes (as in "
    "bench upload and projection).",
)
@click.option(
    "--language",
    is_flag=True,
    help="asset searches are bench search's search-language queries (port-443 assets get "
    "certificates), instead of the filter parameters",
)
def command(
    minutes: float,
    writers: int,
    readers: int,
    batch: int,
    assets: int,
    shared_buffers: str,
    language: bool,
) -> None:
    """Ingest and reads together: per-minute ingest rate and read latency; one JSON object."""
    import sqlalchemy as sa

    from app.bench.scratch import scratch_database
    from app.db import transaction

    overrides = {
        "ingest": {"max_observations_per_batch": max(batch, 5000)},
        "scan": {"execution_lease_seconds": 3600},
    }
    tuning = {"shared_buffers": shared_buffers}
    with scratch_database(overrides=overrides, server_tuning=tuning) as scratch:
        with transaction() as conn:
            # What the server runs with, as it reports it (not the option's spelling).
            server_buffers = conn.execute(sa.text("SHOW shared_buffers")).scalar_one()
        print(f"[soak] seeding {assets} current assets", file=sys.stderr, flush=True)
        username, task_ids, tokens = _prepare(scratch, writers, assets, certificates=language)
        asset_queries = language_queries() if language else ASSET_QUERIES
        server, url = _start_server(scratch, max(batch, 5000))
        try:
            executions = [_claim(url, token) for token in tokens]
            by_execution = {e["id"]: e["task_id"] for e in executions}
            context = multiprocessing.get_context("spawn")
            events = context.Queue()
            started = time.time() + 5.0  # every client up before the window opens
            deadline = started + minutes * 60
            window = (started, deadline)
            processes = [
                context.Process(
                    target=_writer,
                    args=(url, w, tokens[w], executions[w], batch, window, events),
                )
                for w in range(writers)
            ] + [
                context.Process(
                    target=_reader,
                    args=(url, r, username, task_ids, window, events, asset_queries),
                )
                for r in range(readers)
            ]
            for process in processes:
                process.start()
            uploads, reads, done, errors = [], [], {}, []
            next_report = started + 10
            minutes_count = max(1, int((deadline - started - 1e-9) // 60) + 1)
            boundaries = [started + 60 * m for m in range(minutes_count)] + [deadline]
            cpu_samples: list[dict[str, float]] = []
            postmaster = postmaster_pid(scratch.directory / "pgdata")
            while len(done) < writers and not errors:
                if boundaries and time.time() >= boundaries[0]:
                    boundaries.pop(0)
                    cpu_samples.append(_cpu_sample(server.pid, postmaster))
                try:
                    event = events.get(timeout=1.0)
                except queue.Empty:
                    if not any(p.is_alive() for p in processes[:writers]):
                        errors.append("a writer stopped without its final")
                    continue
                if event[0] == "upload":
                    uploads.append(event[1:])
                elif event[0] == "read":
                    reads.append(event[1:])
                elif event[0] == "writer_done":
                    _, _w, execution_id, sent = event
                    done[by_execution[execution_id]] = (execution_id, sent)
                else:
                    errors.append(event[1])
                if time.time() >= next_report:
                    next_report += 10
                    print(
                        f"[soak] {time.time() - started:.0f}s: {sum(u[2] for u in uploads)} "
                        f"observations, {len(reads)} reads",
                        file=sys.stderr,
                        flush=True,
                    )
            if errors:
                for process in processes:
                    process.terminate()
                raise click.ClickException("; ".join(errors[:5]))
            # A process exits only once its queued events are read: drain while joining.
            while any(p.is_alive() for p in processes):
                try:
                    event = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                if event[0] == "read":
                    reads.append(event[1:])
            checks = _verify(url, username, done)
        finally:
            local_server.stop_server(server)
    per_minute = _minutes(uploads, reads, started, deadline, cpu_samples)
    first_rate = per_minute[0]["ingest_observations_per_s"]
    reads_ok = all(
        m[route]["p95_ms"] is not None and m[route]["p95_ms"] <= READ_P95_GOAL_MS
        for m in per_minute
        for route in ("results", "assets")
    )
    ingest_ok = all(m["ingest_observations_per_s"] >= INGEST_FLOOR * first_rate for m in per_minute)
    output = {
        "benchmark": "soak",
        "server": "netmap up --no-runner (gunicorn) on a scratch database",
        "minutes": minutes,
        "writers": writers,
        "readers": readers,
        "batch": batch,
        "assets": assets,
        "asset_queries": "search language" if language else "filters",
        "postgres_shared_buffers": server_buffers,
        "results_limit": RESULTS_LIMIT,
        "per_minute": per_minute,
        "counts": checks,
        "goals": {
            "read_p95_ms": READ_P95_GOAL_MS,
            "reads_p95_within_goal_every_minute": reads_ok,
            "ingest_floor_of_first_minute": INGEST_FLOOR,
            "ingest_within_floor_every_minute": ingest_ok,
            "met": reads_ok and ingest_ok and checks["exact"],
        },
    }
    click.echo(json.dumps(output))
