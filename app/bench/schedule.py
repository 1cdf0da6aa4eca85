"""`netmap bench schedule`: the scheduler's tick with many scheduled tasks, and the delay
from a fire time to its run's first claimable execution.

On a scratch database: ``--tasks`` tasks of one owner (one address, one port each), each
with an interval schedule of ``--every`` seconds whose fire times are spread evenly over
the interval (so about tasks/every schedules fire per second). Then, for
``--duration`` seconds, the scheduler's own tick (``app.scan_control.schedules.tick``,
the function the runner's ``task-schedules`` job calls) runs every ``--tick-seconds``
with the real clock. Timed:

* ``idle_tick``: ticks with every schedule set and none due (the cost of looking);
* ``busy_tick``: every tick of the run (locking the due schedules, inserting their slots,
  queueing their runs and executions, advancing them; one short transaction per batch);
* ``fire_to_claimable``: for each run started, from its fire time until the commit that
  made its executions claimable (the tick's transaction); each such run's executions are
  checked to be queued and claimable afterwards.

Goals (docs/performance.md): a tick ≤ 1 s with 10,000 scheduled tasks, p95
fire-to-claimable ≤ 2 s. Printed as one JSON object; progress on stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime

import click
import sqlalchemy as sa

from app.db import transaction

_SEED_TASKS = """
    INSERT INTO scan_tasks (owner_id, name, status, targets, ports, transports, scan_plan,
                            execution_count)
    SELECT :owner, 'bench-' || n, 'succeeded',
           jsonb_build_array(host('10.0.0.0'::inet + n)), '80', ARRAY['tcp'],
           '{"version": 1}'::jsonb, 0
      FROM generate_series(:low, :high - 1) AS n
"""

# Fire times spread evenly: task i's grid starts at :start + i * every / tasks.
_SEED_SCHEDULES = """
    INSERT INTO scan_task_schedules (task_id, kind, every_seconds, anchor_at, next_fire_at,
                                     due_at)
    SELECT t.id, 'interval', :every, a.anchor, a.anchor + make_interval(secs => :every),
           a.anchor + make_interval(secs => :every)
      FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS i FROM scan_tasks) t
     CROSS JOIN LATERAL (
         SELECT CAST(:start AS timestamptz)
                + make_interval(secs => (t.i * :every)::float8 / :tasks)
                - make_interval(secs => :every) AS anchor
     ) a
"""


def _summary(values: list[float]) -> dict[str, float]:
    from app.bench.stats import summary_ms

    return summary_ms(values)


@click.command("schedule")
@click.option("--tasks", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@click.option(
    "--every",
    type=click.IntRange(1, 86_400),
    default=600,
    show_default=True,
    help="each schedule's interval in seconds",
)
@click.option("--duration", type=click.FloatRange(1, 3600), default=30.0, show_default=True)
@click.option("--tick-seconds", type=click.FloatRange(0.05, 60), default=1.0, show_default=True)
def command(tasks: int, every: int, duration: float, tick_seconds: float) -> None:
    """Time the scheduler's tick with N scheduled tasks and fire-to-claimable delays."""
    from app.bench.progress import Progress
    from app.bench.scratch import scratch_database
    from app.scan_control.schedules import tick

    with scratch_database(overrides={"scan": {"min_schedule_seconds": 1}}) as scratch:
        limits = scratch.settings.scan
        progress = Progress("seed tasks", total=tasks)
        with transaction() as conn:
            owner = conn.execute(
                sa.text(
                    "INSERT INTO users (username, password_hash) VALUES ('bench', 'x') RETURNING id"
                )
            ).scalar_one()
        for low in range(0, tasks, 5000):
            high = min(tasks, low + 5000)
            with transaction() as conn:
                conn.execute(sa.text(_SEED_TASKS), {"owner": owner, "low": low, "high": high})
            progress.advance(high - low)
        progress.finish()
        # The first fire times land one second after seeding ends, spread over ``every``.
        start = time.time() + 1.0
        with transaction() as conn:
            conn.execute(
                sa.text(_SEED_SCHEDULES),
                {
                    "every": every,
                    "tasks": tasks,
                    "start": datetime.fromtimestamp(start, UTC),
                },
            )
            conn.execute(sa.text("ANALYZE scan_task_schedules"))
            conn.execute(sa.text("ANALYZE scan_tasks"))

        idle: list[float] = []
        for _ in range(5):  # nothing is due yet: the cost of looking
            began = time.perf_counter()
            result = tick(limits=limits, clock=lambda: datetime.fromtimestamp(start - 0.5, UTC))
            idle.append(time.perf_counter() - began)
            assert not result.slots
        while time.time() < start:
            time.sleep(0.01)

        busy: list[float] = []
        delays: list[float] = []
        started_runs: list[int] = []
        skipped = 0
        progress = Progress("runs started")
        ends = time.time() + duration
        while time.time() < ends:
            began = time.perf_counter()
            result = tick(limits=limits)
            busy.append(time.perf_counter() - began)
            for slot, committed in zip(result.slots, result.committed_at, strict=True):
                if slot.outcome == "started":
                    delays.append(committed - slot.fire_at.timestamp())
                    started_runs.append(slot.run_id)
                elif slot.outcome == "skipped":
                    skipped += 1
            progress.advance(len(result.started))
            pause = tick_seconds - (time.perf_counter() - began)
            if pause > 0:
                time.sleep(pause)
        progress.finish()

        with transaction() as conn:
            claimable = conn.execute(
                sa.text(
                    """
                    SELECT count(DISTINCT run_id) FROM scan_executions
                     WHERE run_id = ANY(:runs) AND status = 'queued'
                       AND available_at <= now()
                    """
                ),
                {"runs": started_runs},
            ).scalar_one()
            doubled = conn.execute(
                sa.text(
                    """
                    SELECT count(*) FROM (
                        SELECT task_id, fire_at FROM scan_schedule_slots
                         GROUP BY task_id, fire_at HAVING count(*) > 1) d
                    """
                )
            ).scalar_one()
        report = {
            "benchmark": "schedule",
            "tasks": tasks,
            "every_seconds": every,
            "duration_seconds": duration,
            "tick_seconds": tick_seconds,
            "idle_tick": _summary(idle),
            "busy_tick": _summary(busy),
            "ticks": len(busy),
            "runs_started": len(started_runs),
            "slots_skipped": skipped,
            "runs_with_claimable_executions": claimable,
            "doubled_slots": doubled,
            "fire_to_claimable": _summary(delays),
            "goals": {
                "tick_max_ms": 1000,
                "fire_to_claimable_p95_ms": 2000,
                "tick_met": bool(busy) and max(busy + idle) <= 1.0,
                "delay_met": bool(delays) and _summary(delays)["p95_ms"] <= 2000,
            },
            "load_average": list(os.getloadavg()),
        }
        print(json.dumps(report), file=sys.stdout, flush=True)
