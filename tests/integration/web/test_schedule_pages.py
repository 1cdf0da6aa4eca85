"""The task page's schedule: the next five fire times, Pause and Resume (issue 33)."""

from __future__ import annotations

import re

from tests.integration.web.test_console_pages import _csrf, _user_client


def _task(client, schedule):
    page = client.get("/console/tasks")
    created = client.post(
        "/api/tasks",
        json={"name": "nightly", "targets": ["192.0.2.1"], "ports": "80", "schedule": schedule},
        headers={"X-CSRF-Token": _csrf(page.text)},
    )
    assert created.status_code == 201, created.get_json()
    return created.get_json()["task"]["id"]


def test_task_page_lists_next_fire_times_and_pauses_and_resumes(api):
    client, _ = _user_client(api)
    task_id = _task(client, {"cron": "0 3 * * *", "timezone": "Europe/Berlin"})
    page = client.get(f"/console/tasks/{task_id}")
    assert page.status_code == 200
    assert "cron <code>0 3 * * *</code> (Europe/Berlin)" in page.text
    upcoming = re.search(r'<ol id="schedule-next">(.*?)</ol>', page.text).group(1)
    assert upcoming.count("<li>") == 5
    assert '<dd id="schedule-state">active</dd>' in page.text

    paused = client.post(
        f"/console/tasks/{task_id}/schedule/pause", data={"csrf_token": _csrf(page.text)}
    )
    assert paused.status_code == 303
    assert paused.headers["Location"].endswith(f"/console/tasks/{task_id}#schedule")
    page = client.get(f"/console/tasks/{task_id}")
    assert '<dd id="schedule-state">paused</dd>' in page.text
    assert 'id="schedule-resume-form"' in page.text
    assert client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"]["paused"] is True
    resumed = client.post(
        f"/console/tasks/{task_id}/schedule/resume", data={"csrf_token": _csrf(page.text)}
    )
    assert resumed.status_code == 303
    assert client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"]["paused"] is False


def test_task_without_schedule_says_so_and_pause_is_refused(api):
    client, _ = _user_client(api)
    task_id = _task(client, None)
    page = client.get(f"/console/tasks/{task_id}")
    assert 'id="schedule-none"' in page.text
    refused = client.post(
        f"/console/tasks/{task_id}/schedule/pause", data={"csrf_token": _csrf(page.text)}
    )
    assert refused.status_code == 404 and refused.mimetype == "text/html"
    other, _ = _user_client(api)
    assert other.get(f"/console/tasks/{task_id}").status_code == 404


def test_schedule_form_sets_replaces_and_removes_the_schedule(api):
    client, _ = _user_client(api)
    task_id = _task(client, None)
    page = client.get(f"/console/tasks/{task_id}")
    token = _csrf(page.text)
    saved = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={
            "csrf_token": token,
            "kind": "cron",
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
            "jitter_seconds": "",
        },
    )
    assert saved.status_code == 303
    schedule = client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"]
    assert (schedule["cron"], schedule["timezone"]) == ("30 2 * * *", "Europe/Berlin")
    page = client.get(f"/console/tasks/{task_id}")
    assert 'value="30 2 * * *"' in page.text
    every = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={"csrf_token": token, "kind": "every", "every_seconds": "3600"},
    )
    assert every.status_code == 303
    schedule = client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"]
    assert schedule["every_seconds"] == 3600 and schedule["cron"] is None
    bad = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={"csrf_token": token, "kind": "every", "every_seconds": "60"},
    )
    assert bad.status_code == 400 and "schedule.every_seconds" in bad.text
    not_a_number = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={"csrf_token": token, "kind": "every", "every_seconds": "hourly"},
    )
    assert not_a_number.status_code == 400
    removed = client.post(
        f"/console/tasks/{task_id}/schedule", data={"csrf_token": token, "remove": "1"}
    )
    assert removed.status_code == 303
    assert client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"] is None


def test_a_refused_schedule_shows_the_task_page_with_the_message_and_the_form_as_typed(api):
    client, _ = _user_client(api)
    task_id = _task(client, {"cron": "0 3 * * *", "timezone": "UTC"})
    token = _csrf(client.get(f"/console/tasks/{task_id}").text)
    refused = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={
            "csrf_token": token,
            "kind": "cron",
            "cron": "0 3 * * 8",
            "timezone": "Europe/Berlin",
            "jitter_seconds": "30",
        },
    )
    assert refused.status_code == 400
    text = refused.text
    # The task page itself, not an error page: the message above the form as typed.
    assert 'id="schedule-error"' in text and "schedule.cron" in text
    assert 'id="schedule-form"' in text and "Run now" in text
    assert 'value="0 3 * * 8"' in text and 'value="Europe/Berlin"' in text
    assert 'value="30"' in text
    # Nothing changed.
    schedule = client.get(f"/api/tasks/{task_id}").get_json()["task"]["schedule"]
    assert (schedule["cron"], schedule["timezone"]) == ("0 3 * * *", "UTC")
    # The "every" choice is kept too.
    refused = client.post(
        f"/console/tasks/{task_id}/schedule",
        data={"csrf_token": token, "kind": "every", "every_seconds": "hourly"},
    )
    assert refused.status_code == 400
    assert re.search(r'value="every" checked', refused.text)
    assert 'value="hourly"' in refused.text


def test_a_paused_schedule_lists_the_times_a_resume_now_would_give(api, engine):
    # The list was frozen at the pause: its first time passed and stayed "next".
    from datetime import UTC, datetime

    import sqlalchemy as sa

    client, _ = _user_client(api)
    task_id = _task(client, {"cron": "0 3 * * *", "timezone": "UTC"})
    page = client.get(f"/console/tasks/{task_id}")
    paused = client.post(
        f"/console/tasks/{task_id}/schedule/pause", data={"csrf_token": _csrf(page.text)}
    )
    assert paused.status_code == 303
    with engine.begin() as conn:  # the pause has outlasted the time it froze
        conn.execute(
            sa.text(
                "UPDATE scan_task_schedules SET next_fire_at = now() - interval '2 days' "
                "WHERE task_id = :task"
            ),
            {"task": task_id},
        )
    page = client.get(f"/console/tasks/{task_id}")
    upcoming = re.search(r'<ol id="schedule-next">(.*?)</ol>', page.text, re.S).group(1)
    shown = re.findall(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})Z", upcoming)
    assert len(shown) == 5
    first = datetime.fromisoformat(f"{shown[0][0]}T{shown[0][1]}+00:00")
    assert first > datetime.now(UTC) and shown[0][1] == "03:00:00"
