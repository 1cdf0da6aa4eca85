"""`netmap bench pages`: server-side render times of the console's pages at N current assets.

On a scratch database it creates an admin, one task whose execution holds
``--results`` endpoints (written through the search store), ``--assets``
current assets owned by the admin (set-based with ``generate_series``: the very
rows the projection's publish leaves, see ``app.search.seed``) and a few
domains' traffic rollups. It then requests
every console page ``--repeats`` times through the real Flask app in process
(routing, session check, queries, template rendering; no network) and prints
p50/p95 per page in one JSON object. The console's pages promise keyset queries
and bounded counts only, so their times should not grow with ``--assets``
(WEB-3, WEB-4, WEB-5), sorted asset lists included (WEB-12). Under ``api`` it also
times the JSON results and asset pages at 500 items, with the process CPU each request
cost (``cpu_p50_ms``). Progress goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from app.bench.progress import Progress
from app.bench.stats import summary_ms

TARGET_P95_MS = 150.0
BENCH_PASSWORD = "bench pages password 1"  # noqa: S105 - a scratch database's throwaway user


SEED_CHUNK = 100_000
TRAFFIC_DOMAINS = 5
TRAFFIC_PATHS = 50
TRAFFIC_DAYS = 2
# Assets seen over the last week, about assets/10,080 per minute: sorting by last_seen
# meets both a spread of keys and ties inside each minute.
SEEN_SPREAD_MINUTES = 7 * 24 * 60


def _seed(store, owner_id: int, execution_id: int, task_id: int, assets: int, results: int):
    """Current assets set-based in SQL (``app.search.seed``: the rows publishing would leave,
    one statement per chunk, no Python documents); the task's results through the store."""
    from app.bench.store import SERVICES, _document, _endpoints
    from app.db import transaction
    from app.search.seed import seed_current_assets

    seen = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    if store.name != "postgres":
        raise click.ClickException("bench pages seeds the PostgreSQL search store only")
    progress = Progress("assets", assets)
    for low in range(0, assets, SEED_CHUNK):
        high = min(low + SEED_CHUNK, assets)
        with transaction() as conn:
            seed_current_assets(
                conn,
                owner_id=owner_id,
                execution_id=execution_id,
                low=low,
                high=high,
                seen=seen,
                services=SERVICES,
                spread_minutes=SEEN_SPREAD_MINUTES,
            )
        progress.advance(high - low)
    progress.finish()
    chunk = 5000
    result_docs = [
        _document(
            "execution",
            e,
            execution_id=execution_id,
            task_id=task_id,
            owner_id=owner_id,
            seen=seen,
        )
        for e in _endpoints(results)
    ]
    for start in range(0, len(result_docs), chunk):
        store.write_execution_endpoints(result_docs[start : start + chunk]).raise_for_failures()


def _seed_traffic(newest: datetime) -> None:
    """Rollups of a few busy domains (5-minute buckets of the last days, many paths each),
    written by the traffic domain's own upsert."""
    from datetime import timedelta

    from app.db import transaction
    from app.traffic.rows import RollupRecord, upsert_rows

    buckets = TRAFFIC_DAYS * 288
    for d in range(TRAFFIC_DOMAINS):
        records = []
        for b in range(buckets):
            start = newest - timedelta(minutes=5 * b)
            for p in range(TRAFFIC_PATHS):
                requests = 1 + (b * 7 + p * 13 + d) % 40
                records.append(
                    RollupRecord(
                        domain=f"site{d}.example.com",
                        granularity="5m",
                        bucket_start=start,
                        bucket_end=start + timedelta(minutes=5),
                        business_date=(start + timedelta(hours=8)).date(),
                        method="GET",
                        path=f"/page/{p}",
                        response_bytes=requests * 2048,
                        request_bytes=requests * 300,
                        request_bytes_known_count=requests,
                        total_requests=requests,
                        status_counts=(0, requests, 0, 0, 0, 0),
                        source_server="bench",
                        generated_at=newest,
                        frozen=False,
                    )
                )
        with transaction() as conn:
            upsert_rows(conn, records)


def _next_link(html: str) -> str | None:
    import html as html_module
    import re

    found = re.search(r'href="([^"]+)" rel="next"', html)
    return html_module.unescape(found.group(1)) if found else None


def timed_gets(client, path: str, repeats: int) -> tuple[list[float], list[float], Any]:
    """Wall and process-CPU seconds of ``repeats`` GETs of ``path`` (after one that warms
    the template cache and the page's index pages), and the last response."""
    samples: list[float] = []
    cpu: list[float] = []
    client.get(path)
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        response = client.get(path)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        if response.status_code != 200:
            raise click.ClickException(f"{path} answered {response.status_code}")
    return samples, cpu, response


@click.command("pages")
@click.option("--assets", default=100_000, show_default=True, help="current assets of the user")
@click.option("--results", default=10_000, show_default=True, help="endpoints of the task")
@click.option("--repeats", default=30, show_default=True, help="requests per page")
def command(assets: int, results: int, repeats: int) -> None:
    """Console page render times (p50/p95) at N current assets; one JSON object on stdout."""
    import sqlalchemy as sa

    from app import create_app
    from app.bench.scratch import scratch_database
    from app.db import get_engine, transaction
    from app.http import context
    from app.identity.users import create_user
    from app.scan_control.creation import create_task, validate_task_request

    with scratch_database() as scratch:
        app = create_app(scratch.settings, engine=get_engine(), modules="off")
        with transaction() as conn:
            admin = create_user(conn, "bench-admin", BENCH_PASSWORD, is_admin=True)
            request = validate_task_request(
                {"name": "bench", "targets": ["10.0.0.0/16"], "ports": "22,80,443,3306,8080"},
                scratch.settings.scan,
            )
            task_id = create_task(
                conn, owner_id=admin.id, request=request, limits=scratch.settings.scan
            )
            execution_id = conn.execute(
                sa.text("SELECT min(id) FROM scan_executions WHERE task_id = :t"), {"t": task_id}
            ).scalar_one()
        with app.app_context():
            store = context.store()
        _seed(store, admin.id, execution_id, task_id, assets, results)
        _seed_traffic(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
        with transaction() as conn:
            # What autovacuum does soon after a bulk load in production: fresh statistics.
            conn.execute(sa.text("ANALYZE"))
        client = app.test_client()
        login = client.post(
            "/api/auth/login", json={"username": "bench-admin", "password": BENCH_PASSWORD}
        )
        assert login.status_code == 200, login.get_data(as_text=True)
        pages = {
            "dashboard": "/console/",
            "tasks": "/console/tasks",
            "task": f"/console/tasks/{task_id}",
            "results": f"/console/tasks/{task_id}/results",
            "assets": "/console/assets",
            "assets_service": "/console/assets?service=ssh",
            "assets_cidr": "/console/assets?cidr=10.0.8.0/21",
            "assets_text": "/console/assets?q=tomcat",
            "assets_port": "/console/assets?port=3306",
            # Sorted lists (WEB-12): each an index range scan, first pages and next pages.
            "assets_sort_port_desc": "/console/assets?sort=port&order=desc",
            "assets_sort_last_seen": "/console/assets?sort=last_seen",
            "assets_sort_service": "/console/assets?sort=service",
            "assets_sort_last_seen_port": "/console/assets?sort=last_seen&port=3306",
            "asset_history": "/console/assets/history?ip=10.0.0.1&port=80",
            "changes": f"/console/tasks/{task_id}/changes",
            "exports": "/console/exports",
            "reports": "/console/reports",
            "traffic": "/console/traffic?domain=site0.example.com",
            "traffic_day": "/console/traffic?domain=site0.example.com&granularity=day",
            "scanners": "/console/scanners",
            "users": "/console/users",
            "renderer": "/console/admin/renderer",
            "resources": "/console/admin/resources",
            "slow_sql": "/console/admin/slow-sql",
        }
        for name, first in (
            ("assets_page_2", "/console/assets"),
            ("assets_sort_port_desc_page_2", pages["assets_sort_port_desc"]),
            ("assets_sort_last_seen_page_2", pages["assets_sort_last_seen"]),
            ("results_page_2", pages["results"]),
        ):
            following = _next_link(client.get(first).get_data(as_text=True))
            if following:
                pages[name] = following
        timings: dict[str, dict[str, float]] = {}
        for name, path in pages.items():
            samples, _cpu, _response = timed_gets(client, path, repeats)
            timings[name] = summary_ms(samples)
            print(f"[pages] {name}: p95 {timings[name]['p95_ms']} ms", file=sys.stderr)
        # The JSON pages scanners' users and scripts read, at their largest page: wall
        # time as above, and the process CPU a request costs (what it takes from a web
        # worker's interpreter, shared with uploads under write load).
        api_pages = {
            "results_500": f"/api/tasks/{task_id}/results?limit=500",
            "assets_500": "/api/assets?limit=500",
        }
        api: dict[str, dict[str, float]] = {}
        for name, path in api_pages.items():
            samples, cpu, response = timed_gets(client, path, repeats)
            api[name] = {
                **summary_ms(samples),
                "cpu_p50_ms": summary_ms(cpu)["p50_ms"],
                "items": len(response.get_json()["items"]),
            }
            print(f"[pages] {name}: p95 {api[name]['p95_ms']} ms", file=sys.stderr)
        worst = max(t["p95_ms"] for t in timings.values())
        print(
            json.dumps(
                {
                    "benchmark": "pages",
                    "store": store.name,
                    "assets": assets,
                    "results": results,
                    "repeats": repeats,
                    "pages": timings,
                    "api": api,
                    "max_p95_ms": worst,
                    "target_p95_ms": TARGET_P95_MS,
                    "within_target": worst <= TARGET_P95_MS,
                }
            )
        )
