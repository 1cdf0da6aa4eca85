"""`netmap bench scale`: how each operation's cost grows with the database, step by step.

One scratch database grows through the real write path to each of ``--steps`` endpoint
counts (and ``--endpoints``, the last): ``--fill-clients`` scanners upload distinct
endpoints in 500-observation batches to a real ``netmap up --no-runner`` (gunicorn,
HTTP, validation, receipts, facts, execution endpoints, counters, the final), then the
runner's own projection and change-analysis workers, run in this process, publish them
to the owner's current assets and analyse them. Every endpoint of the database is one
owner's, so the asset searches run over all of them.

At each size a probe of ``--probe`` new endpoints (a task of its own; the fill stops
that many short of the step, so the step's count holds after it) measures the
operations whose cost must not depend on the database's size:

* ``upload_500_p95_ms`` (one scanner's 500-observation batches) and ``final_ms``;
* ``projection_endpoints_per_s`` (the probe's endpoints through the projection worker);
* ``analysis_ms`` / ``analysis_endpoints_per_s`` (the probe run's change analysis);
* ``export_rows_per_s`` (a CSV export of the probe run, built as the runner builds it);
* ``report_capture_hold_p95_ms`` (report captures of the probe task);
* ``results_page_p95_ms`` (``GET /api/tasks/<id>/results``, 50 rows, in-process app);
* ``search`` and ``facets``: ``bench search``'s representative queries over all assets;
* ``statements``: for the upload and the projection, the buffers their statements
  touched per endpoint and the costliest statements per call (``pg_stat_statements``,
  which the scratch server preloads): where a cost that grew with the database went;
  ``search_statements``, the same for each search query and facet, per run;
* ``relations``: for the same two phases (the upload's with its final), the blocks each
  table and index gave them per 1,000 endpoints, touched and read from outside shared
  buffers (``pg_statio``), and the tables vacuumed or analyzed meanwhile: which
  relation's pages a database larger than its buffers reads;
* ``disk``: for the same two phases, what the block device under the database read and
  wrote (``/proc/diskstats``), with each read's mean wait: what those reads cost;
* ``value_keys_resident_at_projection``: per value key, its blocks and how many were in
  shared buffers as the probe's projection began (``pg_buffercache``), after the
  analysis of the fill warmed them (``[analysis] warm_after_endpoints``);

and the state at that size: database bytes per million endpoints by table and by index
(partitions summed into their parent), autovacuum's backlog right after the fill (dead
and not yet analysed rows, workers running; then the bench runs ``VACUUM (ANALYZE)``,
``vacuum_analyze_ms``: what autovacuum would do over the next minutes, so every step is
measured with fresh statistics and visibility maps, and not while autovacuum works
through the bulk load of the fill, which a database growing at a scanner fleet's pace
spreads over days; then a ``CHECKPOINT``, ``checkpoint_ms``, so the pages the fill and
VACUUM left dirty are written by the checkpointer and not by the probe's statements
evicting them; then a ``sync``, ``sync_ms``, with what the kernel held unwritten before
it, ``unwritten_before_sync_mib``: the scratch runs with ``fsync`` off, so the
checkpoint's writes would otherwise still be on their way to the disk, queued ahead of
the probe's reads), the web
server's RSS (its process tree) and this process's RSS, which runs the runner's
projection and analysis work. The fill itself reports its rate
and the CPU the web server and PostgreSQL spent per thousand observations.

The observations (``observations`` below) spread five services over each address so
that every representative query has rows to find: SSH, HTTP (nginx, Apache, Tomcat),
HTTPS with a certificate (``tls``: issuer, subject, fingerprint, expiry spread over four
weeks), MySQL/MariaDB and an HTTP proxy.

One JSON document on stdout, ``{"steps": [{"endpoints": N, …}, …]}`` (latencies in keys
ending ``_ms``, rates in keys ending ``_per_s``); ``--plot FILE`` draws each measure
against N (matplotlib PNG). Progress on stderr.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa

from app.bench.cpu import server_background_cpu_seconds, server_foreground_cpu_seconds
from app.bench.disk import phase_disk, read_disk, settle
from app.bench.relations import phase_relations, read_blocks
from app.bench.resident import value_keys_resident
from app.bench.scratch import vacuum_analyze
from app.bench.statements import phase_statements, read_counters
from app.bench.stats import summary_ms

BATCH = 500
PORTS = (22, 80, 443, 3306, 8080)
PORT_SPEC = ",".join(str(port) for port in PORTS)
_HTTP_PRODUCTS = ("nginx", "Apache httpd", "Apache Tomcat")
BENCH_PASSWORD = "bench scale password 1"  # noqa: S105 - a scratch database's throwaway user
MAX_ENDPOINTS = 5 * (1 << 24)  # five ports on every address of 10.0.0.0/8


def _address(host: int) -> str:
    return f"10.{(host >> 16) & 255}.{(host >> 8) & 255}.{host & 255}"


def observations(start: int, count: int, observed_at: str, now: datetime) -> list[dict[str, Any]]:
    """``count`` distinct endpoints from index ``start``: endpoint ``i`` is port
    ``PORTS[i % 5]`` of host ``i // 5`` (an address of 10.0.0.0/8)."""
    items = []
    for i in range(start, start + count):
        host, port = i // 5, PORTS[i % 5]
        ip = _address(host)
        item: dict[str, Any] = {
            "observed_at": observed_at,
            "ip": ip,
            "port": port,
            "transport": "tcp",
            "state": "open",
        }
        if port == 22:
            item["service"] = {"name": "ssh", "product": "OpenSSH", "version": "9.6"}
        elif port == 80:
            item["service"] = {"name": "http", "product": _HTTP_PRODUCTS[host % 3]}
        elif port == 443:
            item["service"] = {"name": "https", "product": "nginx", "version": "1.26"}
            item["tls"] = {
                "issuer": "CN=Bench CA,O=netmap",
                "subject_cn": ip,
                "sha256": hashlib.sha256(ip.encode()).hexdigest(),
                "not_after": (now + timedelta(days=host % 28)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        elif port == 3306:
            item["service"] = {"name": "mysql", "product": "MySQL" if host % 2 else "MariaDB"}
        else:
            item["service"] = {"name": "http-proxy", "product": "Apache Tomcat"}
        items.append(item)
    return items


def targets(start: int, count: int) -> list[str]:
    """The CIDRs of exactly the addresses of endpoints ``start`` .. ``start + count - 1``
    (whole hosts: both multiples of five). An execution's targets are the scope in
    which its change analysis looks for endpoints gone; one covering every address
    would find all the other executions' endpoints gone."""
    first = ipaddress.IPv4Address(_address(start // 5))
    last = ipaddress.IPv4Address(_address((start + count) // 5 - 1))
    return [str(net) for net in ipaddress.summarize_address_range(first, last)]


def parse_steps(text: str | None, endpoints: int) -> list[int]:
    """``1e6,3e6`` -> [1000000, 3000000], with ``endpoints`` as the last step."""
    if endpoints % 5:
        raise click.BadParameter("a multiple of 5 (whole hosts)", param_hint="--endpoints")
    steps = set()
    for part in (text or "").split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise click.BadParameter(f"{part!r} is not a number", param_hint="--steps") from None
        if value != int(value) or not 1 <= value <= endpoints or value % 5:
            raise click.BadParameter(
                f"{part!r}: a multiple of 5 (whole hosts) between 5 and --endpoints",
                param_hint="--steps",
            )
        steps.add(int(value))
    steps.add(endpoints)
    return sorted(steps)


def analysis_worker(settings, store):
    """The runner's change-analysis worker, with the alert rules' hooks as the runner has."""
    from app.alerts.evaluate import change_set_hook
    from app.alerts.searched_changes import follow_up
    from app.analysis.worker import AnalysisWorker

    return AnalysisWorker(
        settings,
        store,
        on_change_set=change_set_hook(settings.alerts, store),
        after_change_set=follow_up(settings.alerts, store),
    )


def analyse_queued(worker) -> float:
    """Analyse every queued execution whose projection is ready; the seconds it took."""
    started = time.perf_counter()
    while (claim := worker.claim()) is not None:
        outcome = worker.run(claim)
        if outcome.result != "completed":
            raise click.ClickException(f"analysis ended {outcome.result}")
    return time.perf_counter() - started


class Laps:
    """Milliseconds of consecutive phases by ``read`` (CPU seconds here, the wall clock in
    ``bench retention``); what runs ``aside`` (the benchmark's own bookkeeping, such as
    reading statement counters) is charged to no phase."""

    def __init__(self, read) -> None:
        self._read = read
        self._mark = read()
        self.spent: list[float] = []

    def lap(self) -> None:
        now = self._read()
        self.spent.append((now - self._mark) * 1000)
        self._mark = now

    def aside(self, work):
        """``work()``'s result, its CPU charged to no phase."""
        result = work()
        self._mark = self._read()
        return result


class _Grower:
    """Everything one step needs: the server, the scanners, the workers, the readers."""

    def __init__(self, scratch, store, url: str, server_pid: int, owner_id: int, tokens):
        from app import create_app
        from app.db import get_engine

        self.scratch, self.settings, self.store = scratch, scratch.settings, store
        self.url, self.server_pid, self.owner_id = url, server_pid, owner_id
        self.fill_tokens, self.probe_token = tokens[:-1], tokens[-1]
        self.pgdata = scratch.directory / "pgdata"
        self.analysis = analysis_worker(self.settings, store)
        self.app = create_app(self.settings, engine=get_engine(), modules="off")
        self.reader = self.app.test_client()
        login = self.reader.post(
            "/api/auth/login", json={"username": "bench-scale", "password": BENCH_PASSWORD}
        )
        if login.status_code != 200:
            raise click.ClickException(f"login failed: {login.get_data(as_text=True)}")
        self.now = datetime.now(UTC)
        self.observed_at = (self.now - timedelta(minutes=5)).isoformat()
        self.endpoints = 0  # distinct endpoints uploaded so far (the next index)

    # -- growing -------------------------------------------------------------------------

    def fill(self, count: int, label: str) -> dict[str, Any]:
        """``count`` new endpoints from all fill scanners at once, each its own execution
        ending with its final; then projected and analysed."""
        from app.bench.cpu import ServedCpu, postmaster_pid
        from app.bench.progress import Progress
        from app.bench.upload_http import ScannerClient, create_executions

        clients_n = len(self.fill_tokens)
        hosts = count // 5
        shares = [(hosts // clients_n + (n < hosts % clients_n)) * 5 for n in range(clients_n)]
        starts = [self.endpoints + sum(shares[:n]) for n in range(clients_n)]
        clients = []
        # One execution at a time, claimed at once: each scanner uploads its own range.
        for token, start, share in zip(self.fill_tokens, starts, shares, strict=True):
            create_executions(
                self.owner_id, 1, self.settings, label, ports=PORT_SPEC,
                targets=targets(start, share),
            )  # fmt: skip
            clients.append(ScannerClient(self.url, token))
        progress = Progress(label, total=count, interval=5.0)
        lock = threading.Lock()
        finals: list[float] = []

        def upload(client, start: int, share: int) -> None:
            import requests

            try:
                for offset in range(0, share, BATCH):
                    size = min(BATCH, share - offset)
                    items = observations(start + offset, size, self.observed_at, self.now)
                    client.latencies.append(client.send(client.body(items)))
                    with lock:
                        progress.advance(size)
                finals.append(client.send(client.body([], final=True)))
            except (click.ClickException, requests.RequestException) as exc:
                client.error = str(exc)

        postgres = postmaster_pid(self.pgdata)
        cpu_before = ServedCpu.read(self.server_pid, postgres)
        started = time.perf_counter()
        threads = [
            threading.Thread(target=upload, args=(client, start, share), daemon=True)
            for client, start, share in zip(clients, starts, shares, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        spent = ServedCpu.read(self.server_pid, postgres) - cpu_before
        progress.finish()
        errors = [client.error for client in clients if client.error]
        if errors:
            raise click.ClickException(f"a fill scanner failed: {errors[0]}")
        self.endpoints += count
        projection = self.project(count, f"{label} projection")
        analysed = analyse_queued(self.analysis)
        return {
            "endpoints": count,
            "clients": clients_n,
            "seconds": round(seconds, 2),
            "endpoints_per_s": round(count / seconds, 1),
            "batch_p95_ms": summary_ms([s for c in clients for s in c.latencies])["p95_ms"],
            "final_max_ms": round(max(finals) * 1000, 3),
            # What the write path costs per thousand observations, whatever the wall time
            # on a shared machine: the web server's processes and PostgreSQL's.
            "web_cpu_s_per_1k": round(spent.web / count * 1000, 4),
            "postgres_cpu_s_per_1k": round(spent.postgres / count * 1000, 4),
            "projection_endpoints_per_s": projection["endpoints_per_s"],
            "projection_cpu_s_per_1k": round(projection["cpu_seconds"] / count * 1000, 4),
            "analysis_endpoints_per_s": round(count / analysed, 1) if analysed else None,
        }

    def project(self, count: int, label: str) -> dict[str, Any]:
        from app.bench.projection import drain

        result = drain(self.settings, self.store, 1, count, label, self.pgdata)
        if result["failed_slices"]:
            raise click.ClickException(f"projection failed: {result}")
        return result

    # -- the probe -----------------------------------------------------------------------

    def probe(self, count: int, repeats: int, captures: int) -> dict[str, Any]:
        from app.bench.export import measure_build
        from app.bench.report import insert_definition, time_captures
        from app.bench.upload_http import ScannerClient, create_executions
        from app.db import transaction

        [task_id] = create_executions(
            self.owner_id, 1, self.settings, f"scale probe {self.endpoints}", ports=PORT_SPEC,
            targets=targets(self.endpoints, count),
        )  # fmt: skip
        client = ScannerClient(self.url, self.probe_token)
        bodies = [
            client.body(
                observations(
                    self.endpoints + offset, min(BATCH, count - offset), self.observed_at, self.now
                )
            )
            for offset in range(0, count, BATCH)
        ]
        # CPU milliseconds of each phase (web server, PostgreSQL and this process): on a
        # shared machine the wall times carry the neighbours' load, the CPU the work.
        background = server_background_cpu_seconds(self.pgdata)
        counters, blocks = [read_counters()], [read_blocks()]
        disk = [read_disk(self.pgdata)]
        laps = Laps(self.cpu_seconds)
        uploads = [client.send(body) for body in bodies]
        laps.lap()
        counters.append(laps.aside(read_counters))
        final = client.send(client.body([], final=True))
        laps.lap()
        # What the projection will find of the value keys in memory (warmed after the
        # fill's large analyses, ``[analysis] warm_after_endpoints``); read here, outside
        # the projection's statement and relation windows, and nothing writes between.
        resident = laps.aside(value_keys_resident)
        disk.append(read_disk(self.pgdata))
        counters.append(laps.aside(read_counters))
        # The upload's and the final's relations together: each reading waits seconds.
        blocks.append(laps.aside(read_blocks))
        self.endpoints += count
        execution_id = int(client.execution["id"])
        disk.append(read_disk(self.pgdata))  # after read_blocks' wait: the projection's start
        projection = self.project(count, "probe projection")
        laps.lap()
        disk.append(read_disk(self.pgdata))
        counters.append(laps.aside(read_counters))
        blocks.append(laps.aside(read_blocks))
        analysis_seconds = analyse_queued(self.analysis)
        laps.lap()
        export = measure_build(self.settings, "csv", task_id, [execution_id], self.pgdata)
        with transaction() as conn:
            definition = insert_definition(conn, self.owner_id, task_id)
        laps.lap()
        _aggregate, holds = time_captures(self.store, definition, captures)
        laps.lap()
        hold = summary_ms(holds)
        results = self._results_page(task_id, repeats)
        laps.lap()
        background = server_background_cpu_seconds(self.pgdata) - background
        spent = laps.spent
        upload = summary_ms(uploads)
        export_cpu_ms = (export["cpu_seconds"] + (export["database_cpu_seconds"] or 0)) * 1000
        return {
            "upload_500_p50_ms": upload["p50_ms"],
            "upload_500_p95_ms": upload["p95_ms"],
            "upload_500_cpu_ms": round(spent[0] / len(bodies), 2),
            "final_ms": round(final * 1000, 3),
            "final_cpu_ms": round(spent[1], 2),
            "projection_endpoints_per_s": projection["endpoints_per_s"],
            "projection_page_p95_ms": projection["page_p95_ms"],
            "projection_cpu_ms_per_1k": round(spent[2] / count * 1000, 2),
            "value_keys_resident_at_projection": resident,
            "analysis_ms": round(analysis_seconds * 1000, 3),
            "analysis_endpoints_per_s": round(count / analysis_seconds, 1),
            "analysis_cpu_ms": round(spent[3], 2),
            "export_rows_per_s": export["rows_per_s"],
            "export_rows": export["rows"],
            "export_cpu_ms_per_1k_rows": round(export_cpu_ms / export["rows"] * 1000, 2),
            "report_capture_hold_p50_ms": hold["p50_ms"],
            "report_capture_hold_p95_ms": hold["p95_ms"],
            "report_capture_cpu_ms": round(spent[5] / captures, 2),
            "results_page_p95_ms": results["p95_ms"],
            # The timed requests and the one that warms the page up.
            "results_page_cpu_ms": round(spent[6] / (repeats + 1), 2),
            # The same without the neighbours: the requesting thread and the server's
            # live client backends only (``results_page_cpu_ms`` counts every process).
            "results_page_request_cpu_ms": results["request_cpu_ms"],
            "results_page_thread_cpu_ms": results["thread_cpu_ms"],
            # What the server's checkpointer, writers and autovacuum spent meanwhile,
            # over the whole probe: CPU the phases above were charged for but did not do.
            "probe_server_background_cpu_ms": round(background * 1000, 1),
            # Where the upload's and the projection's work went: buffers touched per
            # endpoint and the costliest statements per call (pg_stat_statements).
            "statements": {
                "upload": phase_statements(counters[0], counters[1], count),
                "projection": phase_statements(counters[2], counters[3], count),
            },
            # From which tables and indexes they came, and which were read from outside
            # shared buffers (pg_statio), per 1,000 endpoints.
            "relations": {
                "upload": phase_relations(blocks[0], blocks[1], count),
                "projection": phase_relations(blocks[1], blocks[2], count),
            },
            # What each read from outside shared buffers cost on the device: the pages
            # above came from the kernel's cache or from the disk, and waited this long.
            "disk": {
                "upload": phase_disk(disk[0], disk[1]),
                "projection": phase_disk(disk[2], disk[3]),
            },
        }

    def cpu_seconds(self) -> float:
        from app.bench.cpu import ServedCpu, postmaster_pid

        return ServedCpu.read(self.server_pid, postmaster_pid(self.pgdata)).total

    def _results_page(self, task_id: int, repeats: int) -> dict[str, float]:
        from app.bench.pages import timed_gets

        path = f"/api/tasks/{task_id}/results?limit=50"
        thread, server = time.thread_time(), self._server_foreground_cpu_seconds()
        samples, _cpu, response = timed_gets(self.reader, path, repeats)
        thread = time.thread_time() - thread
        server = self._server_foreground_cpu_seconds() - server
        if len(response.get_json()["items"]) != 50:
            raise click.ClickException(f"{path} did not answer 50 rows")
        return {
            **summary_ms(samples),
            "request_cpu_ms": round((thread + server) * 1000 / (repeats + 1), 2),
            "thread_cpu_ms": round(thread * 1000 / (repeats + 1), 2),
        }

    def _server_foreground_cpu_seconds(self) -> float:
        return server_foreground_cpu_seconds(self.pgdata)

    def search(self, repeats: int) -> dict[str, Any]:
        from app.bench.search import FACETS, time_queries

        before = self.cpu_seconds()
        work: dict[str, Any] = {}
        timings, _found = time_queries(
            self.store, self.owner_id, repeats, datetime.now(UTC), statements=work
        )
        spent = (self.cpu_seconds() - before) * 1000
        queries = {f"{k}_p95_ms": v["p95_ms"] for k, v in timings.items() if k not in FACETS}
        facets = {f"{k}_p95_ms": v["p95_ms"] for k, v in timings.items() if k in FACETS}
        return {
            # Mean CPU per query, the facets included.
            "search_cpu_ms": round(spent / (len(timings) * repeats), 2),
            "search": queries,
            "search_max_p95_ms": max(queries.values()),
            "facets": facets,
            "facets_max_p95_ms": max(facets.values()),
            "search_statements": work,
        }

    # -- the state -----------------------------------------------------------------------

    def rss(self) -> dict[str, float]:
        import psutil

        server = psutil.Process(self.server_pid)
        tree = [server, *server.children(recursive=True)]
        sizes = []
        for process in tree:
            try:
                sizes.append(process.memory_info().rss)
            except psutil.NoSuchProcess:
                continue
        return {
            "web_rss_mb": round(sum(sizes) / 2**20, 1),
            "web_rss_max_process_mb": round(max(sizes) / 2**20, 1),
            "web_processes": len(sizes),
            "runner_rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
        }


_SIZES = """
    SELECT COALESCE(pg_partition_root(c.oid), c.oid)::regclass::text AS name,
           c.relkind = 'i' AS is_index,
           sum(CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid)
                    ELSE pg_table_size(c.oid) END) AS bytes
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'm')
     GROUP BY 1, 2
"""

_ASSETS = """
    SELECT count(*) AS total, count(*) FILTER (WHERE status = 'gone') AS gone
      FROM search_assets_user WHERE owner_id = :o
"""

_AUTOVACUUM = """
    SELECT relname, n_live_tup, n_dead_tup, n_mod_since_analyze
      FROM pg_stat_user_tables WHERE schemaname = 'public'
"""
# A table of a few rows (alembic_version) is "all dead" after one update: not a backlog.
_BACKLOG_MIN_ROWS = 1000


def relation_bytes(conn) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes of each table (with its TOAST) and of each index, the monthly partitions
    summed into their parent; relations under 64 KiB left out: (tables, indexes)."""
    tables: dict[str, int] = {}
    indexes: dict[str, int] = {}
    for row in conn.execute(sa.text(_SIZES)):
        if int(row.bytes) >= 65536:
            (indexes if row.is_index else tables)[row.name] = int(row.bytes)
    return tables, indexes


def database_sizes(conn, endpoints: int) -> dict[str, Any]:
    """The database's bytes, and per million endpoints by table and by index."""
    per_million = 1e6 / endpoints
    found = relation_bytes(conn)
    tables, indexes = ({k: round(v * per_million) for k, v in f.items()} for f in found)
    total = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
    return {
        "database_bytes": int(total),
        "database_bytes_per_million_endpoints": round(total * per_million),
        "table_bytes_per_million_endpoints": dict(sorted(tables.items(), key=lambda x: -x[1])),
        "index_bytes_per_million_endpoints": dict(sorted(indexes.items(), key=lambda x: -x[1])),
    }


def autovacuum_backlog(conn) -> dict[str, Any]:
    """What autovacuum has not caught up with yet: dead rows, rows changed since the last
    analyze, the table worst off (of those with at least ``_BACKLOG_MIN_ROWS`` rows),
    and the autovacuum workers running now."""
    conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
    rows = conn.execute(sa.text(_AUTOVACUUM)).all()
    sizable = [r for r in rows if r.n_live_tup + r.n_dead_tup >= _BACKLOG_MIN_ROWS] or rows
    worst = max(sizable, key=lambda r: r.n_dead_tup / max(r.n_live_tup + r.n_dead_tup, 1))
    workers = conn.execute(
        sa.text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")
    ).scalar_one()
    return {
        "dead_tuples": sum(r.n_dead_tup for r in rows),
        "modified_since_analyze": sum(r.n_mod_since_analyze for r in rows),
        "worst_table": worst.relname,
        "worst_dead_fraction": round(
            worst.n_dead_tup / max(worst.n_live_tup + worst.n_dead_tup, 1), 4
        ),
        "workers_running": int(workers),
    }


def checkpoint() -> None:
    """Write out what the fill and VACUUM left dirty in shared buffers. Without it the
    probe's own statements evict those pages, each backend writing them itself (``EXPLAIN
    (BUFFERS)``: ``written=``), and charge the step's operations for the bulk load."""
    from app.db import get_engine

    with get_engine().connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("CHECKPOINT"))


def flat_measures(step: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The step's latencies and rates (keys ending ``_ms`` / ``_per_s``), nested keys
    joined with dots."""
    found: dict[str, float] = {}
    for key, value in step.items():
        if isinstance(value, dict):
            found.update(flat_measures(value, f"{prefix}{key}."))
        elif isinstance(value, int | float) and key.endswith(("_ms", "_per_s")):
            found[prefix + key] = float(value)
    return found


def plot(steps: list[dict[str, Any]], path: Path) -> None:
    """Latencies, rates and bytes per million endpoints against N, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    sizes = [step["endpoints"] for step in steps]
    measures = [flat_measures(step) for step in steps]
    names = sorted({name for m in measures for name in m})
    figure, (latency, rate, disk) = pyplot.subplots(3, 1, figsize=(11, 15))
    # Ten colours repeat: the line style tells the lines of one colour apart.
    styles = ("-", "--", ":", "-.")
    for n, name in enumerate(names):
        values = [m.get(name, float("nan")) for m in measures]
        axis = latency if name.endswith("_ms") else rate
        axis.plot(sizes, values, marker="o", linestyle=styles[n // 10 % 4], label=name)
    for table in steps[-1]["table_bytes_per_million_endpoints"]:
        values = [s["table_bytes_per_million_endpoints"].get(table, 0) / 2**20 for s in steps]
        disk.plot(sizes, values, marker="o", label=table)
    for axis, title, unit in (
        (latency, "latencies", "ms"),
        (rate, "rates", "per second"),
        (disk, "table size per million endpoints", "MiB"),
    ):
        axis.set_xscale("log")
        if axis is not disk:  # measures of very different sizes: each line's shape shows
            axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xlabel("endpoints in the database")
        axis.set_ylabel(unit)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


@click.command("scale")
@click.option(
    "--endpoints",
    required=True,
    type=click.IntRange(100, MAX_ENDPOINTS),
    help="endpoints in the database at the last step",
)
@click.option("--steps", default=None, help="comma-separated sizes before it, e.g. 1e6,3e6")
@click.option("--probe", default=10_000, show_default=True, type=click.IntRange(BATCH, 1_000_000))
@click.option("--fill-clients", default=2, show_default=True, type=click.IntRange(1, 32))
@click.option("--repeats", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--captures", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--shared-buffers", default="1GB", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path))
def command(
    endpoints: int,
    steps: str | None,
    probe: int,
    fill_clients: int,
    repeats: int,
    captures: int,
    shared_buffers: str,
    plot_path: Path | None,
) -> None:
    """Per-operation latencies and rates as one database grows; one JSON document."""
    from app.bench import local_server, upload_http
    from app.bench.scratch import scratch_database
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.search import open_store

    sizes = parse_steps(steps, endpoints)
    if probe > sizes[0] or probe % 5:
        raise click.BadParameter(
            "a multiple of 5 (whole hosts), at most the smallest step", param_hint="--probe"
        )
    overrides: dict[str, dict[str, object]] = {
        "ingest": {"max_observations_per_batch": BATCH},
        "analysis": {"lease_seconds": 600, "heartbeat_seconds": 30},
    }
    tuning = {"shared_buffers": shared_buffers, "max_wal_size": "8GB"}
    results: list[dict[str, Any]] = []
    with scratch_database(overrides=overrides, server_tuning=tuning) as scratch:
        store = open_store(scratch.settings)
        store.ensure_schema()
        with transaction() as conn:
            owner = create_user(conn, "bench-scale", BENCH_PASSWORD, is_admin=True)
            tokens = [create_scanner(conn, f"bench-scale-{n}")[1] for n in range(fill_clients + 1)]
        server, url, _, _ = upload_http.start_server(scratch, None, "", BATCH)
        try:
            grower = _Grower(scratch, store, url, server.pid, owner.id, tokens)
            for size in sizes:
                print(f"[scale] step {size:,} endpoints", file=sys.stderr, flush=True)
                step: dict[str, Any] = {"endpoints": size}
                grow = size - probe - grower.endpoints
                if grow > 0:
                    step["fill"] = grower.fill(grow, f"fill {size}")
                with transaction() as conn:
                    step["autovacuum"] = autovacuum_backlog(conn)
                # What autovacuum gives some minutes after a bulk load (its backlog right
                # after the fill is reported above): fresh statistics and visibility maps,
                # so every step measures the steady state's plans, not autovacuum's work.
                started = time.perf_counter()
                vacuum_analyze()
                step["vacuum_analyze_ms"] = round((time.perf_counter() - started) * 1000, 1)
                started = time.perf_counter()
                checkpoint()
                step["checkpoint_ms"] = round((time.perf_counter() - started) * 1000, 1)
                # The checkpoint's writes are still in the kernel's cache (fsync is off):
                # written out now, not by the device while the probe waits on its reads.
                step.update(settle())
                step.update(grower.probe(probe, repeats, captures))
                step.update(grower.search(repeats))
                with transaction() as conn:
                    assets = conn.execute(sa.text(_ASSETS), {"o": owner.id}).one()
                    # Every endpoint current and open: no run found another's endpoints gone.
                    step["assets"], step["assets_gone"] = int(assets.total), int(assets.gone)
                    step.update(database_sizes(conn, size))
                step.update(grower.rss())
                step["load_average_1m"] = round(os.getloadavg()[0], 2)
                results.append(step)
                print(f"[scale] {json.dumps(step)}", file=sys.stderr, flush=True)
        finally:
            local_server.stop_server(server)
            store.close()
    if plot_path is not None:
        plot(results, plot_path)
    document = {
        "benchmark": "scale",
        "probe_endpoints": probe,
        "fill_clients": fill_clients,
        "batch": BATCH,
        "postgres_shared_buffers": shared_buffers,
        "cpu_count": os.cpu_count(),
        "steps": results,
    }
    click.echo(json.dumps(document))
