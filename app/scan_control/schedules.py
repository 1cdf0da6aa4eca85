"""Task schedules: the services behind the API and the scheduler's tick (docs/schedules.md).

The services own their transactions (routes stay thin). The tick is what the runner's
``task-schedules`` periodic job calls; it is also called directly by tests and by
``netmap bench schedule`` with a clock of their own.

**Each fire time produces exactly one run.** In one transaction the tick locks due
schedules (``FOR UPDATE SKIP LOCKED``), inserts the slot row ``(task_id, fire_at)`` —
whose primary key refuses a second row for the same fire time — starts the run (or
records the slot as skipped) and moves the schedule to its next fire time. A ticker
killed mid-way commits none of it and the next ticker does the whole slot again; two
tickers never hold the same schedule row, and even if they did, the second slot insert
would wait for the first and then insert nothing.

**Skip.** A run of the task still active at a fire time: the slot is recorded as
``skipped`` with reason ``run_active`` and the schedule moves on.

**Catch-up.** After downtime, every fire time already passed becomes one slot: the
latest one, which starts one run and records in ``caught_up`` how many earlier fire
times it stands for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.db import transaction
from app.errors import ApiError, NotFound, ValidationError
from app.identity.users import User
from app.json_input import has_control_characters
from app.observability import emit
from app.scan_control import schedule_store, service
from app.scan_control.creation import (
    SCOPE_FIELDS,
    change_scope,
    unknown_fields_error,
    validate_scope_change,
    validate_task_request,
)
from app.scan_control.query import get_task
from app.scan_control.runs import queue_run
from app.scan_control.schedule_rules import latest_due, parse_schedule
from app.scan_control.schedule_store import ScheduleRow, planned_slot
from app.scan_control.visibility import task_visible

# Starts a run of the task in the caller's transaction and returns its id; refuses with a
# domain error (409 ``run_active`` when a run of the task is still active).
RunStarter = Callable[[Connection, int], int]

PATCH_FIELDS = frozenset({"name", "schedule", *SCOPE_FIELDS})
DEFAULT_TICK_BATCH = 200


def _utcnow() -> datetime:
    return datetime.now(UTC)


# -- services behind the API ---------------------------------------------------------------


def _import_only() -> ValidationError:
    return ValidationError(
        "schedule: an import-only task (scan false) has no scan to schedule",
        code="invalid_schedule",
        details={"field": "schedule", "reason": "the task only imports results"},
    )


def create_task_for_user(user: User, body: dict[str, Any], limits: ScanSettings) -> dict:
    """``POST /api/tasks``: create a task (and its schedule, when the body has one)."""
    body = dict(body)
    has_schedule = "schedule" in body
    schedule_value = body.pop("schedule", None)
    task_request = validate_task_request(body, limits)
    now = _utcnow()
    spec = parse_schedule(schedule_value, limits, now=now) if has_schedule else None
    if spec is not None and not task_request.scan:
        raise _import_only()
    return service.create_task_for(user, task_request, limits=limits, schedule=spec, now=now)


def update_task(user: User, task_id: int, body: dict[str, Any], limits: ScanSettings) -> dict:
    """``PATCH /api/tasks/<id>``: rename; set or replace the schedule, or remove it (null);
    change what the next runs scan (targets, ports, transports, profile)."""
    unknown = sorted(set(body) - PATCH_FIELDS)
    if unknown:
        raise unknown_fields_error(unknown)
    name = body.get("name")
    if "name" in body and (not isinstance(name, str) or not name.strip() or len(name) > 200):
        raise ValidationError(
            "name: must be 1-200 characters",
            code="invalid_name",
            details={"field": "name", "value": name},
        )
    if "name" in body and has_control_characters(name):
        raise ValidationError(
            "name: must not hold control characters",
            code="invalid_name",
            details={"field": "name"},
        )
    now = _utcnow()
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        # Parsed once the task is known to be the caller's: another user's task is a 404
        # whatever the body says (parsing is CPU only, no I/O inside the transaction).
        spec = parse_schedule(body["schedule"], limits, now=now) if "schedule" in body else None
        scope = validate_scope_change(body, limits)
        # The task row, locked once for every change below (a run being queued reads it).
        task_row = conn.execute(
            sa.text("SELECT owner_id, scan FROM scan_tasks WHERE id = :id FOR UPDATE"),
            {"id": task_id},
        ).one()
        if spec is not None and not task_row.scan:
            raise _import_only()
        if "name" in body:
            conn.execute(
                sa.text("UPDATE scan_tasks SET name = :name, updated_at = now() WHERE id = :id"),
                {"name": name.strip(), "id": task_id},
            )
        change_scope(conn, task_id, task_row.owner_id, scope, limits)
        if "schedule" in body:
            if spec is None:
                schedule_store.remove(conn, task_id)
            else:
                schedule_store.save(conn, task_id, spec, now=now)
        task = get_task(conn, user, task_id)
    assert task is not None
    emit("TaskUpdated", task_id=task_id, user_id=user.id, fields=sorted(body))
    return task


def set_paused(user: User, task_id: int, paused: bool) -> dict[str, Any]:
    """Pause or resume the task's schedule; returns the schedule as the API shows it."""
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        schedule = schedule_store.lock(conn, task_id)
        if schedule is None:
            raise NotFound("the task has no schedule", code="schedule_not_found")
        if schedule.paused != paused:
            schedule_store.set_paused(conn, schedule, paused, now=_utcnow())
        view = schedule_store.schedule_view(conn, task_id)
    assert view is not None
    emit("TaskSchedulePaused" if paused else "TaskScheduleResumed", task_id=task_id)
    return view


def task_schedule(user: User, task_id: int, *, upcoming: int = 5) -> dict[str, Any] | None:
    """The schedule with its next ``upcoming`` fire times (the console's task page)."""
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        return schedule_store.schedule_view(conn, task_id, upcoming=upcoming)


# -- the scheduler's tick ------------------------------------------------------------------


@dataclass(frozen=True)
class SlotOutcome:
    task_id: int
    fire_at: datetime
    outcome: str  # "started" | "skipped" | "handled_before"
    reason: str | None
    run_id: int | None
    caught_up: int


@dataclass
class TickResult:
    slots: list[SlotOutcome] = field(default_factory=list)
    # time.time() when each batch committed, parallel to the slots it handled
    committed_at: list[float] = field(default_factory=list)
    batches: int = 0

    @property
    def started(self) -> list[SlotOutcome]:
        return [s for s in self.slots if s.outcome == "started"]

    @property
    def skipped(self) -> list[SlotOutcome]:
        return [s for s in self.slots if s.outcome == "skipped"]


def scheduled_run_starter(limits: ScanSettings) -> RunStarter:
    """The scheduler's one call into runs: queue a ``schedule`` run in the tick's transaction."""

    def start(conn: Connection, task_id: int) -> int:
        return queue_run(conn, task_id, trigger="schedule", limits=limits).id

    return start


def _handle(
    conn: Connection, schedule: ScheduleRow, now: datetime, starter: RunStarter
) -> SlotOutcome:
    assert schedule.next_fire_at is not None
    fire_at, caught_up = latest_due(schedule.spec, schedule.next_fire_at, now)
    task_id = schedule.task_id
    # The slot row first: its key (task_id, fire_at) is what makes a second run impossible.
    if not schedule_store.record_slot(
        conn, task_id, fire_at, outcome="started", reason=None, run_id=None, caught_up=caught_up
    ):
        outcome = SlotOutcome(task_id, fire_at, "handled_before", None, None, caught_up)
    else:
        try:
            with conn.begin_nested():
                run_id = starter(conn, task_id)
        except ApiError as exc:  # a domain refusal (run_active …) skips this slot only
            conn.execute(
                sa.text(
                    "UPDATE scan_schedule_slots SET outcome = 'skipped', reason = :reason "
                    "WHERE task_id = :task_id AND fire_at = :fire_at"
                ),
                {"reason": exc.code, "task_id": task_id, "fire_at": fire_at},
            )
            outcome = SlotOutcome(task_id, fire_at, "skipped", exc.code, None, caught_up)
        else:
            conn.execute(
                sa.text(
                    "UPDATE scan_schedule_slots SET run_id = :run_id "
                    "WHERE task_id = :task_id AND fire_at = :fire_at"
                ),
                {"run_id": run_id, "task_id": task_id, "fire_at": fire_at},
            )
            outcome = SlotOutcome(task_id, fire_at, "started", None, run_id, caught_up)
    next_fire, next_due = planned_slot(task_id, schedule.spec, fire_at)
    schedule_store.advance(conn, task_id, next_fire, next_due)
    return outcome


def tick(
    *,
    limits: ScanSettings,
    clock: Callable[[], datetime] = _utcnow,
    batch: int = DEFAULT_TICK_BATCH,
    starter: RunStarter | None = None,
    check: Callable[[], None] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> TickResult:
    """Handle every schedule due at ``clock()``, ``batch`` schedules per short transaction.

    ``check`` is called between batches (the periodic job's lease check raises there when
    the lease is lost); ``stopping`` ends the tick early (runner shutdown).
    """
    starter = starter or scheduled_run_starter(limits)
    result = TickResult()
    while True:
        if check is not None:
            check()
        now = clock()
        with transaction() as conn:
            rows = schedule_store.lock_due(conn, now, batch)
            handled = [_handle(conn, row, now, starter) for row in rows]
        committed = time.time()
        result.batches += 1
        result.slots.extend(handled)
        result.committed_at.extend([committed] * len(handled))
        for slot in handled:
            emit(
                "TaskScheduleSlot",
                task_id=slot.task_id,
                fire_at=slot.fire_at.isoformat(),
                outcome=slot.outcome,
                reason=slot.reason,
                run_id=slot.run_id,
                caught_up=slot.caught_up,
            )
        if len(rows) < batch or (stopping is not None and stopping()):
            return result
