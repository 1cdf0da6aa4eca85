"""Task schedules through the API and the scheduler's tick with a frozen clock (issue 33).

The tick is the real one (``app.scan_control.schedules.tick``) on the real database and the
real run start (``runs.queue_run``); only the clock is injected. A run is finished between
slots by cancelling it through the runs service, as a user would.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.scan_control import schedule_store
from app.scan_control.runs import cancel_run
from app.scan_control.schedule_rules import parse_schedule
from app.scan_control.schedules import scheduled_run_starter, tick
from app.search.postgres_store import PostgresStore
from jobs import task_purge
from jobs.base import JobContext

BERLIN = ZoneInfo("Europe/Berlin")
TASK = {"name": "nightly", "targets": ["192.0.2.0/30"], "ports": "22,443"}


def create(user, schedule, **extra):
    response = user.post("/api/tasks", json={**TASK, **extra, "schedule": schedule})
    assert response.status_code == 201, response.get_json()
    return response.get_json()["task"]


def finish_active_run(task_id: int) -> None:
    with transaction() as conn:
        run_id = conn.execute(
            sa.text(
                "SELECT id FROM task_runs WHERE task_id = :t AND status IN ('queued', 'running')"
            ),
            {"t": task_id},
        ).scalar()
    if run_id is not None:
        cancel_run(None, task_id, run_id)


def set_schedule(task_id: int, value: dict, settings, now: datetime) -> None:
    spec = parse_schedule(value, settings.scan, now=now)
    with transaction() as conn:
        schedule_store.save(conn, task_id, spec, now=now)


def slots(task_id: int) -> list:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT fire_at, outcome, reason, run_id, caught_up FROM scan_schedule_slots "
                "WHERE task_id = :t ORDER BY fire_at"
            ),
            {"t": task_id},
        ).all()


def scheduled_runs(task_id: int) -> list:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT id, number, status FROM task_runs "
                "WHERE task_id = :t AND trigger = 'schedule' ORDER BY number"
            ),
            {"t": task_id},
        ).all()


# -- the API -------------------------------------------------------------------------------


def test_schedule_is_set_shown_replaced_paused_resumed_and_removed(api):
    user = api.user()
    task = create(user, {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "jitter_seconds": 60})
    schedule = task["schedule"]
    assert schedule["cron"] == "0 3 * * *" and schedule["timezone"] == "Europe/Berlin"
    assert schedule["paused"] is False and schedule["recent_slots"] == []
    next_run = datetime.fromisoformat(schedule["next_run_at"])
    local = next_run.astimezone(BERLIN)
    assert local.hour == 3 and local.minute in (0, 1)  # 03:00 plus up to 60 s of jitter
    assert next_run > datetime.now(UTC)

    shown = user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"]
    assert shown == schedule

    patched = user.patch(f"/api/tasks/{task['id']}", json={"schedule": {"every_seconds": 3600}})
    assert patched.status_code == 200, patched.get_json()
    schedule = patched.get_json()["task"]["schedule"]
    assert schedule["every_seconds"] == 3600 and schedule["cron"] is None
    assert (
        3590
        <= (datetime.fromisoformat(schedule["next_run_at"]) - datetime.now(UTC)).total_seconds()
        <= 3600
    )

    paused = user.post(f"/api/tasks/{task['id']}/schedule/pause")
    assert paused.status_code == 200
    assert paused.get_json()["schedule"]["paused"] is True
    assert paused.get_json()["schedule"]["next_run_at"] is None
    resumed = user.post(f"/api/tasks/{task['id']}/schedule/resume").get_json()["schedule"]
    assert resumed["paused"] is False and resumed["next_run_at"] is not None

    removed = user.patch(f"/api/tasks/{task['id']}", json={"schedule": None})
    assert removed.get_json()["task"]["schedule"] is None
    missing = user.post(f"/api/tasks/{task['id']}/schedule/pause")
    assert missing.status_code == 404
    assert missing.get_json()["error"]["code"] == "schedule_not_found"
    renamed = user.patch(f"/api/tasks/{task['id']}", json={"name": "weekly"})
    assert renamed.get_json()["task"]["name"] == "weekly"


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"cron": "0 25 * * *", "timezone": "Europe/Berlin"}, "schedule.cron"),
        ({"cron": "*/1 * * * *"}, "schedule.cron"),
        ({"cron": "0 3 * * *", "timezone": "Europe/Atlantis"}, "schedule.timezone"),
        ({"every_seconds": 60}, "schedule.every_seconds"),
        ({"every_seconds": 3600, "start_at": "tomorrow"}, "schedule.start_at"),
        ({"every_seconds": 3600, "jitter_seconds": "5"}, "schedule.jitter_seconds"),
        ({"every_seconds": 3600, "hourly": True}, "schedule.hourly"),
        ([], "schedule"),
    ],
)
def test_bad_schedules_are_400_naming_the_field_and_write_nothing(api, schedule, field):
    user = api.user()
    response = user.post("/api/tasks", json={**TASK, "schedule": schedule})
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_schedule" and error["details"]["field"] == field
    assert user.get("/api/tasks").get_json()["items"] == []
    task = create(user, None)
    assert task["schedule"] is None
    response = user.patch(f"/api/tasks/{task['id']}", json={"schedule": schedule})
    assert response.status_code == 400
    assert response.get_json()["error"]["details"]["field"] == field
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"] is None


def test_patch_refuses_unknown_fields_and_other_users_tasks(api):
    user, other = api.user(), api.user()
    task = create(user, {"every_seconds": 3600})
    response = user.patch(f"/api/tasks/{task['id']}", json={"owner_id": 7})
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "unknown_field"
    assert response.get_json()["error"]["details"] == {"field": "owner_id", "fields": ["owner_id"]}
    for call in (
        lambda c: c.patch(f"/api/tasks/{task['id']}", json={"schedule": None}),
        lambda c: c.post(f"/api/tasks/{task['id']}/schedule/pause"),
    ):
        assert call(other).status_code == 404
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"]["paused"] is False


# -- the tick ------------------------------------------------------------------------------


def test_each_fire_time_starts_one_run_and_an_active_run_skips_the_slot(api, settings):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    task = create(user, None)
    set_schedule(task["id"], {"every_seconds": 600}, settings, start)
    fire = start + timedelta(minutes=10)
    # Run 1 (from the task's creation) is still queued at the first fire time: skipped.
    assert tick(limits=settings.scan, clock=lambda: fire - timedelta(seconds=1)).slots == []
    result = tick(limits=settings.scan, clock=lambda: fire)
    assert [(s.outcome, s.reason) for s in result.slots] == [("skipped", "run_active")]
    shown = user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"]
    assert shown["recent_slots"][0]["outcome"] == "skipped"
    assert shown["recent_slots"][0]["reason"] == "run_active"
    assert shown["next_run_at"] == (fire + timedelta(minutes=10)).isoformat()

    finish_active_run(task["id"])
    second = fire + timedelta(minutes=10)
    result = tick(limits=settings.scan, clock=lambda: second + timedelta(seconds=3))
    assert [s.outcome for s in result.slots] == ["started"]
    # The same moment again, and a second ticker: nothing more.
    assert tick(limits=settings.scan, clock=lambda: second + timedelta(seconds=3)).slots == []
    runs = scheduled_runs(task["id"])
    assert len(runs) == 1 and runs[0].status == "queued" and runs[0].number == 2
    assert [(s.outcome, s.run_id) for s in slots(task["id"])] == [
        ("skipped", None),
        ("started", runs[0].id),
    ]
    with transaction() as conn:
        queued = conn.execute(
            sa.text("SELECT count(*) FROM scan_executions WHERE run_id = :r AND status = 'queued'"),
            {"r": runs[0].id},
        ).scalar()
    assert queued == 1  # 192.0.2.0/30 is one execution: claimable now


def test_a_tick_that_dies_mid_way_leaves_nothing_and_the_next_one_starts_exactly_one_run(
    api, settings
):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    task = create(user, None)
    finish_active_run(task["id"])
    set_schedule(task["id"], {"every_seconds": 600}, settings, start)
    fire = start + timedelta(minutes=10)
    real = scheduled_run_starter(settings.scan)

    def dies_after_starting(conn, task_id):
        real(conn, task_id)  # the run and its executions are written …
        raise RuntimeError("killed")  # … and the process dies before the commit

    with pytest.raises(RuntimeError):
        tick(limits=settings.scan, clock=lambda: fire, starter=dies_after_starting)
    assert slots(task["id"]) == [] and scheduled_runs(task["id"]) == []
    result = tick(limits=settings.scan, clock=lambda: fire + timedelta(seconds=5))
    assert [(s.outcome, s.fire_at) for s in result.slots] == [("started", fire)]
    assert len(scheduled_runs(task["id"])) == 1


def test_concurrent_tickers_start_each_slot_once(api, settings):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    ids = []
    for _ in range(30):
        task = create(user, None)
        finish_active_run(task["id"])
        set_schedule(task["id"], {"every_seconds": 600}, settings, start)
        ids.append(task["id"])
    fire = start + timedelta(minutes=10)
    results = []
    barrier = threading.Barrier(4)

    def ticker():
        barrier.wait()
        results.append(tick(limits=settings.scan, clock=lambda: fire, batch=4))

    threads = [threading.Thread(target=ticker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    started = [s for r in results for s in r.slots]
    assert sorted(s.task_id for s in started) == sorted(ids)
    assert all(s.outcome == "started" for s in started)
    for task_id in ids:
        assert len(scheduled_runs(task_id)) == 1
        assert len(slots(task_id)) == 1


def test_downtime_produces_one_catch_up_run(api, settings):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    task = create(user, None)
    finish_active_run(task["id"])
    set_schedule(task["id"], {"every_seconds": 600}, settings, start)
    # Down from 10:00 until 10:55: fire times 10:10 … 10:50 passed (five of them).
    back = start + timedelta(minutes=55)
    result = tick(limits=settings.scan, clock=lambda: back)
    assert [(s.outcome, s.fire_at, s.caught_up) for s in result.slots] == [
        ("started", start + timedelta(minutes=50), 4)
    ]
    assert len(scheduled_runs(task["id"])) == 1
    shown = user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"]
    assert shown["recent_slots"][0]["caught_up"] == 4
    # The run it started, by the number the task's runs are listed by (run 1 was the
    # task's own first run), and on the console a link to it.
    (run,) = scheduled_runs(task["id"])
    assert shown["recent_slots"][0]["run_id"] == run.id
    assert shown["recent_slots"][0]["run_number"] == run.number == 2
    assert shown["next_run_at"] == (start + timedelta(minutes=60)).isoformat()


def test_paused_schedule_starts_nothing_and_resumes_from_now(api, settings):
    user = api.user()
    task = create(user, {"every_seconds": 300})
    finish_active_run(task["id"])
    user.post(f"/api/tasks/{task['id']}/schedule/pause")
    later = datetime.now(UTC) + timedelta(hours=2)
    assert tick(limits=settings.scan, clock=lambda: later).slots == []
    resumed = user.post(f"/api/tasks/{task['id']}/schedule/resume").get_json()["schedule"]
    assert datetime.fromisoformat(resumed["next_run_at"]) <= datetime.now(UTC) + timedelta(
        seconds=300
    )
    assert scheduled_runs(task["id"]) == []


@pytest.mark.parametrize(
    ("created", "days"),
    [
        (
            datetime(2026, 3, 26, 12, tzinfo=BERLIN),
            ["2026-03-27", "2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"],
        ),
        (
            datetime(2026, 10, 22, 12, tzinfo=BERLIN),
            ["2026-10-23", "2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"],
        ),
    ],
    ids=["march", "october"],
)
@pytest.mark.parametrize("expression", ["30 2 * * *", "0 3 * * *"])
def test_dst_changes_in_berlin_neither_skip_nor_double_a_day(
    api, settings, created, days, expression
):
    """A shifted clock walks every ten minutes through five days around the change."""
    user = api.user()
    task = create(user, None)
    finish_active_run(task["id"])
    set_schedule(task["id"], {"cron": expression, "timezone": "Europe/Berlin"}, settings, created)
    clock = created
    end = created + timedelta(days=5, hours=12)
    while clock < end:
        for slot in tick(limits=settings.scan, clock=lambda c=clock: c).slots:
            assert slot.outcome == "started" and slot.caught_up == 0
            finish_active_run(task["id"])
        clock += timedelta(minutes=10)
    fired = [s.fire_at.astimezone(BERLIN) for s in slots(task["id"])]
    assert [f.date().isoformat() for f in fired] == days
    assert len(scheduled_runs(task["id"])) == 5
    wanted = (2, 30) if expression == "30 2 * * *" else (3, 0)
    for moment in fired:
        # Only 2026-03-29 has no 02:30: that day's run fires at 03:00 (the gap's end).
        if moment.date().isoformat() == "2026-03-29" and wanted == (2, 30):
            assert (moment.hour, moment.minute) == (3, 0)
        else:
            assert (moment.hour, moment.minute) == wanted


def test_a_deleted_task_fires_no_more_and_its_purge_removes_schedule_and_slots(api, settings):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    task = create(user, None)
    finish_active_run(task["id"])
    set_schedule(task["id"], {"every_seconds": 600}, settings, start)
    first = start + timedelta(minutes=10)
    assert [s.outcome for s in tick(limits=settings.scan, clock=lambda: first).slots] == ["started"]
    assert user.delete(f"/api/tasks/{task['id']}").status_code == 202
    later = start + timedelta(hours=3)
    assert tick(limits=settings.scan, clock=lambda: later).slots == []

    job = task_purge.TaskPurgeJob(settings)
    context = JobContext(
        settings=settings,
        worker_id=0,
        stopping=threading.Event(),
        cancelled=threading.Event(),
    )
    while (work := job.claim(context)) is not None:
        job.run(context, work)
    with transaction() as conn:
        left = conn.execute(
            sa.text(
                "SELECT (SELECT count(*) FROM scan_task_schedules WHERE task_id = :t) "
                "+ (SELECT count(*) FROM scan_schedule_slots WHERE task_id = :t)"
            ),
            {"t": task["id"]},
        ).scalar()
    assert left == 0


def test_purged_old_runs_leave_their_slots_recorded_without_a_run(api, settings):
    user = api.user()
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    task = create(user, None)
    finish_active_run(task["id"])
    set_schedule(task["id"], {"every_seconds": 600}, settings, start)
    for n in range(1, 4):
        moment = start + timedelta(minutes=10 * n)
        assert [s.outcome for s in tick(limits=settings.scan, clock=lambda m=moment: m).slots] == [
            "started"
        ]
        finish_active_run(task["id"])
    newest = scheduled_runs(task["id"])[-1].id
    keep_one = settings.replace(scan={"keep_runs": 1})
    runs, _ = task_purge.purge_old_runs(keep_one, PostgresStore(settings))
    assert runs == 3  # run 1 (from the task's creation) and two scheduled runs
    assert [(s.outcome, s.run_id) for s in slots(task["id"])] == [
        ("started", None),
        ("started", None),
        ("started", newest),
    ]
    # The fire times stay taken: replaying them starts nothing.
    replay = start + timedelta(minutes=10)
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_task_schedules SET next_fire_at = :f, due_at = :f WHERE task_id = :t"
            ),
            {"f": replay, "t": task["id"]},
        )
    result = tick(limits=settings.scan, clock=lambda: replay)
    assert [s.outcome for s in result.slots] == ["handled_before"]
    assert len(scheduled_runs(task["id"])) == 1
