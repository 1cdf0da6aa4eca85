"""`netmap bench report`: capture hold time, reports per minute and mails per second (REP).

For each ``--endpoints`` size, on its own scratch database: one succeeded
execution with that many endpoints (the projection benchmark's seeding), one
report definition, then

* ``aggregate_seconds``: the one-off per-execution aggregation that runs
  before the first capture (outside the snapshot);
* ``capture_hold``: ``--captures`` capture transactions (REPEATABLE READ,
  claim check, statistics, template) timed end to end, p50/p95;
* ``end_to_end``: ``--reports`` reports through capture → generate (charts,
  builtin renderer through a registry generation) → commit, reports/minute;
* ``mail``: every delivery of those reports sent to an SMTP server started
  here on 127.0.0.1 (aiosmtpd, a dev extra) at a free port, mails/second; the
  outbox directory when aiosmtpd is not installed.

``end_to_end`` is measured twice: with the builtin renderer and with a
renderer release built into a scratch directory and run in its worker process.
One JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

import click

from app.bench.stats import summary_ms
from app.config import Settings


class _Sink:
    async def handle_DATA(self, server, session, envelope):
        return "250 OK"


def _smtp_server() -> tuple[int, Any] | None:
    try:
        from aiosmtpd.smtp import SMTP
    except ImportError:
        return None
    import logging

    logging.getLogger("mail.log").setLevel(logging.WARNING)  # one line per SMTP command
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(loop.create_server(lambda: SMTP(_Sink()), "127.0.0.1", 0))
        holder["server"] = server
        holder["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)

    def stop() -> None:
        def close() -> None:
            holder["server"].close()
            loop.stop()

        loop.call_soon_threadsafe(close)
        thread.join(10)

    return holder["port"], stop


def _reports_through(
    settings: Settings, renderer: str, store: Any, search: Any, queue_one: Any, reports: int
) -> dict[str, Any]:
    """Reports per minute through capture -> generate -> commit with one renderer.

    ``worker`` builds a renderer release into a scratch directory and runs it in
    its worker process, as a published release runs in production.
    """
    import shutil
    import tempfile
    from pathlib import Path

    from app.modules.build import build_renderer_release
    from app.modules.registry import ModuleRegistry
    from app.modules.report_render import (
        SLOT_NAME,
        BuiltinRenderModule,
        open_candidate,
        report_render_slot,
    )
    from app.reports import records
    from app.reports.pipeline import run_report

    scratch = Path(tempfile.mkdtemp(prefix="netmap-bench-report-"))
    registry = ModuleRegistry([report_render_slot(settings)], drain_timeout=5.0)
    try:
        if renderer == "builtin":
            registry.install(SLOT_NAME, BuiltinRenderModule(), release_id="builtin", revision=1)
        else:
            build_renderer_release("bench-report-worker", scratch)
            release_settings = settings.replace(
                report_renderer=settings.report_renderer.replace(releases_directory=str(scratch)),
            )
            module = open_candidate(release_settings, "bench-report-worker")
            registry.install(SLOT_NAME, module, release_id="bench-report-worker", revision=1)

        class Renderer:
            def acquire(self):
                return registry.acquire(SLOT_NAME)

        for _ in range(reports):
            queue_one()
        started = time.perf_counter()
        made = 0
        while (work := records.claim_next_job(lease_seconds=600)) is not None:
            outcome = run_report(
                work,
                renderer=Renderer(),
                object_store=store,
                search_store=search,
                delete_concurrency=3,
                wait_seconds=0,
            )
            if outcome.result != "ready":
                raise click.ClickException(f"report ended {outcome}")
            made += 1
        seconds = time.perf_counter() - started
    finally:
        registry.close(5.0)
        shutil.rmtree(scratch, ignore_errors=True)
    return {"reports": made, "reports_per_minute": round(made / seconds * 60, 1)}


def insert_definition(conn: Any, owner_id: int, task_id: int) -> Any:
    """An on-demand report definition of one task with two recipients (id, owner_id,
    task_id), in the caller's transaction."""
    import sqlalchemy as sa

    return conn.execute(
        sa.text(
            "INSERT INTO report_definitions (owner_id, name, task_id, period, recipients, "
            "template) VALUES (:o, 'bench', :t, 'on_demand', "
            "ARRAY['a@example.com', 'b@example.com'], 'default') "
            "RETURNING id, owner_id, task_id"
        ),
        {"o": owner_id, "t": task_id},
    ).one()


def time_captures(search: Any, definition: Any, captures: int) -> tuple[float, list[float]]:
    """Queue and claim one report of ``definition``, prepare its aggregates (timed once),
    then time ``captures`` capture transactions of it; the job is left done, so the
    report pipeline does not pick it up. Returns (aggregate seconds, capture seconds)."""

    from app.db import transaction
    from app.reports import records
    from app.reports.capture import capture, prepare_aggregates

    with transaction() as conn:
        records.create_on_demand_report(conn, definition)
    work = records.claim_next_job(lease_seconds=600)
    started = time.perf_counter()
    prepare_aggregates(work.report_id, search)
    aggregate_seconds = time.perf_counter() - started
    holds = []
    for _ in range(captures):
        started = time.perf_counter()
        capture(work, store=search, wait_seconds=0)
        holds.append(time.perf_counter() - started)
    with transaction() as conn:
        records.mark_job_done(conn, work.report_id)
    return aggregate_seconds, holds


def _one_size(settings: Settings, endpoints: int, captures: int, reports: int) -> dict[str, Any]:
    import sqlalchemy as sa

    from app.bench.projection import BASE_TIME
    from app.bench.projection import _seed as seed_execution_endpoints
    from app.db import transaction
    from app.object_store import open_object_store
    from app.reports import records
    from app.reports.delivery import claim_next_delivery, deliver
    from app.search import open_store

    search = open_store(settings)
    search.ensure_schema()
    execution_ids = seed_execution_endpoints(search, endpoints, 1, BASE_TIME)
    with transaction() as conn:
        conn.execute(sa.text("ANALYZE search_execution_endpoints"))
        task = conn.execute(
            sa.text(
                "SELECT t.id, t.owner_id FROM scan_tasks t JOIN scan_executions e "
                "ON e.task_id = t.id WHERE e.id = :e"
            ),
            {"e": execution_ids[0]},
        ).one()
        conn.execute(
            sa.text("UPDATE scan_executions SET endpoint_count = :n WHERE id = :e"),
            {"n": endpoints, "e": execution_ids[0]},
        )
        definition = insert_definition(conn, task.owner_id, task.id)

    def queue_one() -> None:
        with transaction() as conn:
            records.create_on_demand_report(conn, definition)

    aggregate_seconds, holds = time_captures(search, definition, captures)
    print(f"[{endpoints}] capture {summary_ms(holds)}", file=sys.stderr, flush=True)

    store = open_object_store(settings)
    end_to_end = {}
    for renderer in ("builtin", "worker"):
        end_to_end[renderer] = _reports_through(
            settings, renderer, store, search, queue_one, reports
        )
        print(
            f"[{endpoints}] {renderer}: {end_to_end[renderer]['reports']} reports, "
            f"{end_to_end[renderer]['reports_per_minute']}/min",
            file=sys.stderr,
            flush=True,
        )

    server = _smtp_server()
    mail_settings = settings
    if server is not None:
        mail_settings = settings.replace(
            smtp=settings.smtp.replace(host="127.0.0.1", port=server[0], starttls=False, ssl=False),
        )
    started = time.perf_counter()
    sent = 0
    while (delivery := claim_next_delivery(lease_seconds=600)) is not None:
        if deliver(mail_settings, delivery, store) in {"sent", "written"}:
            sent += 1
    mail_seconds = time.perf_counter() - started
    if server is not None:
        server[1]()
    store.close()
    search.close()
    return {
        "endpoints": endpoints,
        "aggregate_seconds": round(aggregate_seconds, 3),
        "capture_hold": summary_ms(holds),
        "end_to_end": end_to_end,
        "mail": {
            "transport": "smtp" if server is not None else "outbox",
            "mails": sent,
            "mails_per_s": round(sent / mail_seconds, 1) if mail_seconds else None,
        },
    }


@click.command("report")
@click.option(
    "--endpoints",
    default="10000",
    show_default=True,
    help="comma-separated sizes, e.g. 10000,100000,1000000",
)
@click.option("--captures", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--reports", type=click.IntRange(1, 10_000), default=20, show_default=True)
def command(endpoints: str, captures: int, reports: int) -> None:
    """Report capture hold p50/p95, reports per minute (builtin renderer), mails per second."""
    from app.bench.scratch import scratch_database

    try:
        sizes = [int(s) for s in endpoints.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter("sizes must be integers", param_hint="--endpoints") from None
    if not sizes or any(not 1 <= s <= 10_000_000 for s in sizes):
        raise click.BadParameter("each size must be 1..10000000", param_hint="--endpoints")
    results = []
    for size in sizes:
        with scratch_database() as scratch:
            results.append(_one_size(scratch.settings, size, captures, reports))
    hold = {r["endpoints"]: r["capture_hold"]["p95_ms"] for r in results}
    ratio = None
    if len(results) > 1:
        ratio = round(hold[max(hold)] / max(hold[min(hold)], 1e-9), 2)
    click.echo(
        json.dumps(
            {
                "benchmark": "report",
                "sizes": results,
                "capture_p95_ratio_largest_to_smallest": ratio,
                "cpu_count": os.cpu_count(),
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )
    )
