"""Fan-out caps (issue: unbounded fan-out): a run-now cooldown per report definition, a
configurable recipient cap and a per-user cap on queued exports; the caps that a retry
can pass answer 429 with Retry-After, concurrent requests included."""

from __future__ import annotations

import threading

import pytest

from app import close_app, create_app
from tests.support.api import Api
from tests.support.scanner_protocol import claim, make_task, observation
from tests.support.settings import make_settings
from tests.support.sql import scalar


@pytest.fixture
def capped(database_url, tmp_path, engine):
    settings = make_settings(
        database_url,
        tmp_path,
        reports={"run_now_cooldown_seconds": 600.0, "max_recipients": 3},
        exports={"max_queued_per_user": 2},
    )
    application = create_app(settings, engine=engine)
    try:
        yield Api(application)
    finally:
        close_app(application)


def _scanned_task(api):
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/29",), ports="22")
    upload = claim(api.scanner())
    assert upload.final(0, [observation("192.0.2.1", 22)]).status_code == 200
    return user, task


def _definition(user, task, recipients):
    return user.post(
        "/api/reports/definitions",
        json={"name": "r", "task_id": task["id"], "period": "on_demand", "recipients": recipients},
    )


def test_run_now_has_a_cooldown_per_definition(capped):
    user, task = _scanned_task(capped)
    first = _definition(user, task, ["a@example.com"]).get_json()["definition"]
    second = _definition(user, task, ["b@example.com"]).get_json()["definition"]
    statuses: list[int] = []
    answers: list = []

    def run():
        response = user.post(f"/api/reports/definitions/{first['id']}/run")
        statuses.append(response.status_code)
        answers.append(response)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [202] + [429] * 5
    refused = next(a for a in answers if a.status_code == 429)
    assert 1 <= int(refused.headers["Retry-After"]) <= 600
    assert refused.get_json()["error"]["code"] == "run_now_cooldown"
    # Another definition has its own cooldown.
    assert user.post(f"/api/reports/definitions/{second['id']}/run").status_code == 202
    assert scalar("SELECT count(*) FROM reports") == 2


def test_the_recipient_cap_is_configurable(capped):
    user, task = _scanned_task(capped)
    refused = _definition(user, task, [f"u{i}@example.com" for i in range(4)])
    assert refused.status_code == 400
    assert "at most 3 recipients" in refused.get_json()["error"]["message"]
    assert _definition(user, task, [f"u{i}@example.com" for i in range(3)]).status_code == 201


def test_queued_exports_are_capped_per_user(capped):
    user, task = _scanned_task(capped)
    other = capped.user()
    statuses: list[int] = []
    answers: list = []

    def request():
        response = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"})
        statuses.append(response.status_code)
        answers.append(response)

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [202, 202] + [429] * 6 or sorted(statuses) == [201, 201] + [429] * 6
    refused = next(a for a in answers if a.status_code == 429)
    assert int(refused.headers["Retry-After"]) > 0
    assert refused.get_json()["error"]["code"] == "too_many_exports"
    assert scalar("SELECT count(*) FROM exports") == 2
    # The cap is per user: another user's task export is not refused by it.
    other_task = make_task(other, targets=("192.0.2.0/29",), ports="22")
    answer = other.post(f"/api/tasks/{other_task['id']}/exports", json={"format": "csv"})
    assert answer.status_code != 429
