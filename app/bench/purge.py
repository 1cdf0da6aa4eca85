"""`netmap bench purge`: how long the runner's purge takes to remove a deleted task (issue 33).

On a scratch database (PostgreSQL store), one task's execution is filled with
``--endpoints`` distinct endpoints through the real upload route (``fill_task``: the
upload benchmark's observations, so receipts, facts, execution endpoints and counters
are what an upload writes), finalised, and projected by the projection worker. A second
task of the same owner sees ``--shared`` of those endpoints and 500 of its own. Then the
first task is deleted (``purge.request_delete``, what ``DELETE /api/tasks/<id>`` calls)
and the runner's purge job (``jobs.task_purge``) runs it to the end. Only the purge is
timed: its seconds, CPU seconds (this process and the scratch server), the batches it
checkpointed, what it removed, and endpoints purged per second. The run checks that the
purge removed every endpoint and that the other task's assets are all that is left.
Printed as one JSON object; progress on stderr.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import sqlalchemy as sa

from app.bench.progress import Progress
from app.bench.upload import claimed_bench_task
from app.bench.upload_data import observations
from app.db import transaction

BATCH = 5_000  # observations per upload (the default [ingest] max_observations_per_batch)
OWN = 500  # the other task's endpoints the deleted task never saw


def fill_task(
    app: Any, token: str, owner_id: int, name: str, chunks: Sequence[tuple[int, int]]
) -> tuple[int, int]:
    """A task of ``owner_id`` whose one execution the scanner of ``token`` claimed, filled
    with the observations of ``chunks`` ((start, count) ranges of ``observations``) through
    the upload route, and finalised: (task id, execution id)."""
    scanner = claimed_bench_task(app, owner_id, token, name)
    observed_at = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    progress = Progress(f"fill {name}", total=sum(count for _, count in chunks))
    index = 0
    for start, count in chunks:
        for low in range(start, start + count, BATCH):
            size = min(BATCH, start + count - low)
            scanner.send(scanner.body(index, observations(low, size, observed_at)))
            index += 1
            progress.advance(size)
            if index % 50 == 0:
                scanner.renew()
    scanner.send(scanner.body(index, final=True))
    progress.finish()
    return scanner.execution["task_id"], scanner.execution["id"]


def run_purges(settings: Any, store: Any) -> int:
    """Run the purge job on every claimable purge to its end; how many claims it took."""
    from jobs.base import JobContext
    from jobs.task_purge import TaskPurgeJob

    job = TaskPurgeJob(settings, store=store)
    ctx = JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )
    runs = 0
    while (work := job.claim(ctx)) is not None:
        job.run(ctx, work)
        runs += 1
    return runs


def _owner_assets(owner_id: int) -> int:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM search_assets_user WHERE owner_id = :o"), {"o": owner_id}
        ).scalar_one()


@click.command("purge")
@click.option("--endpoints", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
@click.option(
    "--shared",
    type=click.IntRange(0, 10_000_000),
    default=2_000,
    show_default=True,
    help="Of the endpoints, how many another task of the owner also saw (their assets stay).",
)
def command(endpoints: int, shared: int) -> None:
    """Time the purge of a deleted task with N endpoints (PostgreSQL store, scratch data)."""
    from app import close_app, create_app, db
    from app.bench.cpu import CpuClock
    from app.bench.projection import drain
    from app.bench.scratch import scratch_database
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.scan_control import purge
    from app.search import open_store

    shared = min(shared, endpoints)
    overrides: dict[str, dict[str, object]] = {"scan": {"execution_lease_seconds": 3600}}
    with scratch_database(overrides=overrides) as scratch:
        app = create_app(scratch.settings, engine=db.get_engine(), modules="off")
        store = open_store(scratch.settings)
        try:
            store.ensure_schema()
            with transaction() as conn:
                # Nobody logs in as this owner; a random password passes the policy.
                owner = create_user(conn, "bench", secrets.token_urlsafe(24), is_admin=True)
                _, token = create_scanner(conn, "bench-scanner")
            doomed, _ = fill_task(app, token, owner.id, "doomed", [(0, endpoints)])
            fill_task(app, token, owner.id, "kept", [(0, shared), (endpoints * 2, OWN)])
            projected = drain(
                scratch.settings, store, 1, endpoints + shared + OWN, "purge projection", None
            )
            if projected["failed_slices"]:
                raise click.ClickException(f"projection failed: {projected}")
            before = _owner_assets(owner.id)

            purge.request_delete(owner, doomed)
            cpu = CpuClock(scratch.directory / "pgdata").start()
            started = time.perf_counter()
            claims = run_purges(scratch.settings, store)
            seconds = time.perf_counter() - started
            used = cpu.read()
            status = purge.purge_status(owner, doomed)
            after = _owner_assets(owner.id)
        finally:
            store.close()
            close_app(app)
    removed = status["removed"]
    if status["status"] != "done" or removed.get("execution_endpoints") != endpoints:
        raise click.ClickException(f"the purge did not finish as expected: {status}")
    if (before, after) != (endpoints + OWN, shared + OWN):
        raise click.ClickException(f"assets before/after: {before}/{after}")
    click.echo(
        json.dumps(
            {
                "benchmark": "purge",
                "backend": "postgres",
                "endpoints": endpoints,
                "shared": shared,
                "purge_seconds": round(seconds, 3),
                "endpoints_per_s": round(endpoints / seconds, 1),
                **used,
                "claims": claims,
                "batches": status["batches"],
                "removed": removed,
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )
    )
