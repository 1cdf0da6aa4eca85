"""`netmap bench pages`: server-side render times of the console's pages at N current assets.

On a scratch database it creates an admin, one task whose execution holds
``--results`` endpoints, and ``--assets`` current assets owned by the admin
(published through the search store, as the projection does). It then requests
every console page ``--repeats`` times through the real Flask app in process
(routing, session check, queries, template rendering; no network) and prints
p50/p95 per page in one JSON object. The console's pages promise keyset queries
and bounded counts only, so their times should not grow with ``--assets``
(WEB-3, WEB-4, WEB-5). Progress goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

import click

from app.bench.progress import Progress
from app.bench.stats import summary_ms

TARGET_P95_MS = 150.0
BENCH_PASSWORD = "bench pages password 1"  # noqa: S105 - a scratch database's throwaway user


def _seed(store, owner_id: int, execution_id: int, task_id: int, assets: int, results: int):
    from app.bench.store import _document, _endpoints
    from app.projection.pages import current_asset_documents
    from app.search.documents import merge_all

    seen = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    progress = Progress("assets", assets)
    chunk = 5000
    endpoints = _endpoints(max(assets, results))
    for start in range(0, assets, chunk):
        docs = [
            _document(
                "execution",
                e,
                execution_id=execution_id,
                task_id=task_id,
                owner_id=owner_id,
                seen=seen,
            )
            for e in endpoints[start : start + chunk]
        ]
        store.publish_current(
            merge_all(current_asset_documents(docs)), max_operations=chunk * 2, max_bytes=50_000_000
        ).raise_for_failures()
        progress.advance(len(docs))
    progress.finish()
    result_docs = [
        _document(
            "execution",
            e,
            execution_id=execution_id,
            task_id=task_id,
            owner_id=owner_id,
            seen=seen,
        )
        for e in endpoints[:results]
    ]
    for start in range(0, len(result_docs), chunk):
        store.write_execution_endpoints(result_docs[start : start + chunk]).raise_for_failures()


def _next_link(html: str) -> str | None:
    import html as html_module
    import re

    found = re.search(r'href="([^"]+)" rel="next"', html)
    return html_module.unescape(found.group(1)) if found else None


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
            "scanners": "/console/scanners",
            "users": "/console/users",
        }
        for name, first in (
            ("assets_page_2", "/console/assets"),
            ("results_page_2", pages["results"]),
        ):
            following = _next_link(client.get(first).get_data(as_text=True))
            if following:
                pages[name] = following
        timings: dict[str, dict[str, float]] = {}
        for name, path in pages.items():
            samples = []
            client.get(path)  # warm the template cache and the page's index pages
            for _ in range(repeats):
                started = time.perf_counter()
                response = client.get(path)
                samples.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise click.ClickException(f"{path} answered {response.status_code}")
            timings[name] = summary_ms(samples)
            print(f"[pages] {name}: p95 {timings[name]['p95_ms']} ms", file=sys.stderr)
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
                    "max_p95_ms": worst,
                    "target_p95_ms": TARGET_P95_MS,
                    "within_target": worst <= TARGET_P95_MS,
                }
            )
        )
