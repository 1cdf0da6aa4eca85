"""`netmap tasks schedule` as a real process against the test database (issue 33)."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from tests.integration.test_cli import run_cli


def _task(user) -> dict:
    return user.post(
        "/api/tasks", json={"name": "cli", "targets": ["192.0.2.1"], "ports": "80"}
    ).get_json()["task"]


def test_tasks_schedule_sets_pauses_resumes_and_removes(database_url, api):
    user = api.user()
    task = _task(user)
    task_id = str(task["id"])

    result = run_cli(
        database_url,
        "tasks",
        "schedule",
        task_id,
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Europe/Berlin",
    )
    assert result.returncode == 0, result.stderr
    schedule = json.loads(result.stdout)
    assert schedule["cron"] == "0 3 * * *" and schedule["paused"] is False
    next_run = datetime.fromisoformat(schedule["next_run_at"]).astimezone(ZoneInfo("Europe/Berlin"))
    assert (next_run.hour, next_run.minute) == (3, 0)
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"] == schedule

    paused = json.loads(run_cli(database_url, "tasks", "schedule", task_id, "--pause").stdout)
    assert paused["paused"] is True and paused["next_run_at"] is None
    resumed = json.loads(run_cli(database_url, "tasks", "schedule", task_id, "--resume").stdout)
    assert resumed["paused"] is False

    every = run_cli(database_url, "tasks", "schedule", task_id, "--every", "3600")
    assert json.loads(every.stdout)["every_seconds"] == 3600
    removed = run_cli(database_url, "tasks", "schedule", task_id, "--remove")
    assert removed.returncode == 0 and json.loads(removed.stdout) is None
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"] is None


def test_tasks_schedule_reports_bad_input_and_unknown_tasks(database_url, api):
    user = api.user()
    task = _task(user)
    bad = run_cli(database_url, "tasks", "schedule", str(task["id"]), "--every", "10")
    assert bad.returncode != 0
    assert "invalid_schedule" in bad.stderr and "schedule.every_seconds" in bad.stderr
    zone = run_cli(
        database_url,
        "tasks",
        "schedule",
        str(task["id"]),
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Nowhere/Special",
    )
    assert zone.returncode != 0 and "schedule.timezone" in zone.stderr
    missing = run_cli(database_url, "tasks", "schedule", "999999", "--pause")
    assert missing.returncode != 0 and "task_not_found" in missing.stderr
    both = run_cli(database_url, "tasks", "schedule", str(task["id"]), "--every", "600", "--pause")
    assert both.returncode != 0 and "give the schedule" in both.stderr
    # Contradicting switches: they used to be taken as the last one given.
    flip = run_cli(database_url, "tasks", "schedule", str(task["id"]), "--pause", "--resume")
    assert flip.returncode == 2 and "give the schedule" in flip.stderr
    assert user.get(f"/api/tasks/{task['id']}").get_json()["task"]["schedule"] is None


def test_tasks_update_changes_the_scope_and_reports_bad_input(database_url, api):
    user = api.user()
    task = _task(user)
    task_id = str(task["id"])
    updated = run_cli(
        database_url,
        "tasks",
        "update",
        task_id,
        "--target",
        "192.0.2.0/30",
        "--target",
        "198.51.100.9",
        "--ports",
        "80,443",
        "--profile",
        "quick",
    )
    assert updated.returncode == 0, updated.stderr
    shown = json.loads(updated.stdout)["task"]
    assert (shown["name"], shown["targets"], shown["ports"], shown["profile"]) == (
        "cli",
        ["192.0.2.0/30", "198.51.100.9"],
        "80,443",
        "quick",
    )
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["ports"] == "80,443"
    bad = run_cli(database_url, "tasks", "update", task_id, "--ports", "99999")
    assert bad.returncode != 0 and "invalid_ports" in bad.stderr
    nothing = run_cli(database_url, "tasks", "update", task_id)
    assert nothing.returncode == 2 and "give what to change" in nothing.stderr
    empty = run_cli(database_url, "tasks", "update", task_id, "--name", "")
    assert empty.returncode == 1 and "name" in empty.stderr  # the name's rule, not "give what"
    assert "give what to change" not in empty.stderr
    unknown = run_cli(database_url, "tasks", "update", "999999", "--name", "x")
    assert unknown.returncode != 0 and "task_not_found" in unknown.stderr
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["ports"] == "80,443"
