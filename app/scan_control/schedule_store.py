"""The SQL of ``scan_task_schedules`` and ``scan_schedule_slots``, on the caller's connection.

``app.scan_control.schedules`` owns the transactions (the API's services and the
scheduler's tick); ``app.scan_control.query`` reads a task's schedule for its detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.scan_control.schedule_rules import (
    ScheduleSpec,
    fire_times_after,
    jitter_offset,
    next_fire_after,
)

RECENT_SLOTS = 5

_COLUMNS = """
    s.task_id, s.kind, s.cron, s.timezone, s.every_seconds, s.start_at, s.end_at,
    s.jitter_seconds, s.paused, s.next_fire_at, s.due_at, s.anchor_at
"""


@dataclass(frozen=True)
class ScheduleRow:
    task_id: int
    spec: ScheduleSpec
    paused: bool
    next_fire_at: datetime | None
    due_at: datetime | None


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(
        task_id=r.task_id,
        spec=ScheduleSpec(
            kind=r.kind,
            cron=r.cron,
            timezone=r.timezone,
            every_seconds=r.every_seconds,
            start_at=r.start_at,
            end_at=r.end_at,
            jitter_seconds=r.jitter_seconds,
            anchor_at=r.anchor_at,
        ),
        paused=r.paused,
        next_fire_at=r.next_fire_at,
        due_at=r.due_at,
    )


def planned_slot(
    task_id: int, spec: ScheduleSpec, after: datetime
) -> tuple[datetime | None, datetime | None]:
    """The next fire time strictly after ``after`` and the moment it is due (with jitter)."""
    fire_at = next_fire_after(spec, after)
    if fire_at is None:
        return None, None
    return fire_at, fire_at + jitter_offset(task_id, fire_at, spec.jitter_seconds)


def save(conn: Connection, task_id: int, spec: ScheduleSpec, *, now: datetime) -> None:
    """Set (or replace) the task's schedule; the next fire time counts from ``now``.

    A replaced schedule keeps its ``paused`` state; slots already handled stay recorded,
    and their ``(task_id, fire_at)`` key still stops a second run for the same fire time.
    """
    fire_at, due_at = planned_slot(task_id, spec, now)
    conn.execute(
        sa.text(
            """
            INSERT INTO scan_task_schedules
                   (task_id, kind, cron, timezone, every_seconds, start_at, end_at,
                    jitter_seconds, anchor_at, next_fire_at, due_at)
            VALUES (:task_id, :kind, :cron, :timezone, :every_seconds, :start_at, :end_at,
                    :jitter, :anchor_at, :fire_at, :due_at)
            ON CONFLICT (task_id) DO UPDATE
               SET kind = EXCLUDED.kind, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
                   every_seconds = EXCLUDED.every_seconds, start_at = EXCLUDED.start_at,
                   end_at = EXCLUDED.end_at, jitter_seconds = EXCLUDED.jitter_seconds,
                   anchor_at = EXCLUDED.anchor_at, next_fire_at = EXCLUDED.next_fire_at,
                   due_at = EXCLUDED.due_at, updated_at = now()
            """
        ),
        {
            "task_id": task_id,
            "kind": spec.kind,
            "cron": spec.cron,
            "timezone": spec.timezone,
            "every_seconds": spec.every_seconds,
            "start_at": spec.start_at,
            "end_at": spec.end_at,
            "jitter": spec.jitter_seconds,
            "anchor_at": spec.anchor_at,
            "fire_at": fire_at,
            "due_at": due_at,
        },
    )


def remove(conn: Connection, task_id: int) -> bool:
    return bool(
        conn.execute(
            sa.text("DELETE FROM scan_task_schedules WHERE task_id = :task_id RETURNING 1"),
            {"task_id": task_id},
        ).scalar()
    )


def lock(conn: Connection, task_id: int) -> ScheduleRow | None:
    row = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM scan_task_schedules s WHERE s.task_id = :task_id FOR UPDATE"  # noqa: S608 - constant columns; values are bound
        ),
        {"task_id": task_id},
    ).one_or_none()
    return _row(row) if row is not None else None


def set_paused(conn: Connection, schedule: ScheduleRow, paused: bool, *, now: datetime) -> None:
    """Pause, or resume with the next fire time after ``now`` (paused slots are not caught up)."""
    if paused:
        fire_at, due_at = schedule.next_fire_at, schedule.due_at
    else:
        fire_at, due_at = planned_slot(schedule.task_id, schedule.spec, now)
    conn.execute(
        sa.text(
            """
            UPDATE scan_task_schedules
               SET paused = :paused, next_fire_at = :fire_at, due_at = :due_at,
                   updated_at = now()
             WHERE task_id = :task_id
            """
        ),
        {"task_id": schedule.task_id, "paused": paused, "fire_at": fire_at, "due_at": due_at},
    )


def lock_due(conn: Connection, now: datetime, limit: int) -> list[ScheduleRow]:
    """Due, unpaused schedules of tasks not deleted, locked; rows another ticker holds are
    skipped, not waited for."""
    rows = conn.execute(
        sa.text(
            f"""
            SELECT {_COLUMNS} FROM scan_task_schedules s
              JOIN scan_tasks t ON t.id = s.task_id AND t.deleted_at IS NULL
             WHERE NOT s.paused AND s.due_at IS NOT NULL AND s.due_at <= :now
             ORDER BY s.due_at
             LIMIT :limit
             FOR UPDATE OF s SKIP LOCKED
            """  # noqa: S608 - constant columns; values are bound
        ),
        {"now": now, "limit": limit},
    ).all()
    return [_row(r) for r in rows]


def record_slot(
    conn: Connection,
    task_id: int,
    fire_at: datetime,
    *,
    outcome: str,
    reason: str | None,
    run_id: int | None,
    caught_up: int,
) -> bool:
    """Insert the slot; False when this fire time was handled already (nothing inserted)."""
    return bool(
        conn.execute(
            sa.text(
                """
                INSERT INTO scan_schedule_slots
                       (task_id, fire_at, outcome, reason, run_id, caught_up)
                VALUES (:task_id, :fire_at, :outcome, :reason, :run_id, :caught_up)
                ON CONFLICT (task_id, fire_at) DO NOTHING
                RETURNING 1
                """
            ),
            {
                "task_id": task_id,
                "fire_at": fire_at,
                "outcome": outcome,
                "reason": reason,
                "run_id": run_id,
                "caught_up": caught_up,
            },
        ).scalar()
    )


def slot_handled(conn: Connection, task_id: int, fire_at: datetime) -> bool:
    return bool(
        conn.execute(
            sa.text(
                "SELECT 1 FROM scan_schedule_slots WHERE task_id = :task_id AND fire_at = :fire_at"
            ),
            {"task_id": task_id, "fire_at": fire_at},
        ).scalar()
    )


def advance(
    conn: Connection, task_id: int, fire_at: datetime | None, due_at: datetime | None
) -> None:
    conn.execute(
        sa.text(
            """
            UPDATE scan_task_schedules
               SET next_fire_at = :fire_at, due_at = :due_at, updated_at = now()
             WHERE task_id = :task_id
            """
        ),
        {"task_id": task_id, "fire_at": fire_at, "due_at": due_at},
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def _brief(schedule: ScheduleRow) -> dict[str, Any]:
    view = schedule.spec.as_dict()
    view["paused"] = schedule.paused
    view["next_run_at"] = None if schedule.paused else _iso(schedule.due_at)
    return view


def schedule_briefs(conn: Connection, task_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each of ``task_ids``' schedule (when it has one) without its slots, in one
    statement: what a list of tasks shows."""
    rows = conn.execute(
        sa.text(f"SELECT {_COLUMNS} FROM scan_task_schedules s WHERE s.task_id = ANY(:ids)"),  # noqa: S608 - constant columns; values are bound
        {"ids": task_ids},
    ).all()
    return {r.task_id: _brief(_row(r)) for r in rows}


def schedule_view(conn: Connection, task_id: int, *, upcoming: int = 0) -> dict[str, Any] | None:
    """The schedule as the API shows it, with its latest slots (started or skipped)."""
    row = conn.execute(
        sa.text(f"SELECT {_COLUMNS} FROM scan_task_schedules s WHERE s.task_id = :task_id"),  # noqa: S608 - constant columns; values are bound
        {"task_id": task_id},
    ).one_or_none()
    if row is None:
        return None
    schedule = _row(row)
    view = _brief(schedule)
    if upcoming:
        start = schedule.next_fire_at
        if schedule.paused:
            # What resuming now would give (``set_paused``): the stored time is the one the
            # pause froze, already past once the pause outlasts it.
            times = fire_times_after(schedule.spec, datetime.now(UTC), upcoming)
        else:
            times = [start] if start is not None else []
            if start is not None and upcoming > 1:
                times += fire_times_after(schedule.spec, start, upcoming - 1)
        view["next_fire_times"] = [_iso(t) for t in times]
    slots = conn.execute(
        sa.text(
            """
            SELECT s.fire_at, s.outcome, s.reason, s.run_id, r.number AS run_number,
                   s.caught_up, s.handled_at
              FROM scan_schedule_slots s LEFT JOIN task_runs r ON r.id = s.run_id
             WHERE s.task_id = :task_id
             ORDER BY s.fire_at DESC LIMIT :limit
            """
        ),
        {"task_id": task_id, "limit": RECENT_SLOTS},
    ).all()
    view["recent_slots"] = [
        {
            "fire_at": _iso(s.fire_at),
            "outcome": s.outcome,
            "reason": s.reason,
            "run_id": s.run_id,
            # What the task's runs are listed by (the id is not the number).
            "run_number": s.run_number,
            "caught_up": s.caught_up,
            "handled_at": _iso(s.handled_at),
        }
        for s in slots
    ]
    return view
