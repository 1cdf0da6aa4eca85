"""A task's scope changed by ``PATCH /api/tasks/<id>``: targets, ports, transports, profile.

The next run scans the new scope; the run already started keeps its own, and an endpoint
left outside the new scope is not concluded gone (absence is judged inside each
execution's scope). Real uploads over the scanner protocol, the real projection and
analysis workers.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.integration.web.test_change_pages import _run_workers
from tests.support.scanner_protocol import claim, observation

TASK = {"name": "watch", "targets": ["192.0.2.0/30"], "ports": "22,80"}


def _executions(task_id: int) -> list[tuple[int, list[str], str, list[str], str]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT r.number, e.targets, e.ports, e.transports, e.profile "
                "FROM scan_executions e JOIN task_runs r ON r.id = e.run_id "
                "WHERE e.task_id = :t ORDER BY r.number, e.id"
            ),
            {"t": task_id},
        ).all()
    return [(r.number, list(r.targets), r.ports, list(r.transports), r.profile) for r in rows]


def test_the_next_run_scans_the_changed_scope_and_the_active_run_keeps_its_own(api):
    user = api.user()
    task = user.post("/api/tasks", json=TASK).get_json()["task"]
    changed = user.patch(
        f"/api/tasks/{task['id']}",
        json={
            "targets": ["198.51.100.0/31", "192.0.2.9"],
            "ports": "443,80,8000-8001",
            "transports": ["udp", "tcp"],
            "profile": "quick",
        },
    )
    assert changed.status_code == 200, changed.get_json()
    shown = changed.get_json()["task"]
    assert shown["targets"] == ["198.51.100.0/31", "192.0.2.9"]
    assert (shown["ports"], shown["transports"], shown["profile"]) == (
        "80,443,8000-8001",
        ["tcp", "udp"],
        "quick",
    )
    # Run 1 was queued before the change: it scans what it was started with.
    assert _executions(task["id"]) == [(1, ["192.0.2.0/30"], "22,80", ["tcp"], "standard")]
    scanner = api.scanner()
    assert claim(scanner).final(0, [observation("192.0.2.1", 22)]).status_code == 200
    assert user.post(f"/api/tasks/{task['id']}/runs").status_code == 201
    assert _executions(task["id"])[1:] == [
        (2, ["192.0.2.9", "198.51.100.0/31"], "80,443,8000-8001", ["tcp", "udp"], "quick")
    ]
    assert claim(scanner).execution["profile"] == "quick"


def test_an_endpoint_left_outside_a_narrowed_scope_is_not_gone(api, settings):
    user, scanner = api.user(), api.scanner()
    task = user.post("/api/tasks", json=TASK).get_json()["task"]
    found = [observation("192.0.2.1", 22), observation("192.0.2.1", 80)]
    assert claim(scanner).final(0, found).status_code == 200
    _run_workers(settings)
    # Port 22 is no longer watched; port 80 still is, and has closed.
    assert user.patch(f"/api/tasks/{task['id']}", json={"ports": "80"}).status_code == 200
    run = user.post(f"/api/tasks/{task['id']}/runs").get_json()["run"]
    assert claim(scanner).final(0, []).status_code == 200
    _run_workers(settings)
    changes = user.get(f"/api/tasks/{task['id']}/changes?run={run['id']}").get_json()
    assert [(c["kind"], c["port"]) for c in changes["items"]] == [("gone", 80)]


def test_a_refused_scope_is_a_400_naming_each_item_and_changes_nothing(api):
    user, other = api.user(), api.user()
    task = user.post("/api/tasks", json=TASK).get_json()["task"]
    refused = user.patch(
        f"/api/tasks/{task['id']}",
        json={"name": "renamed", "targets": ["192.0.2.1", "not a host!"], "ports": "99999"},
    )
    assert refused.status_code == 400
    error = refused.get_json()["error"]
    assert error["code"] == "invalid_targets"
    assert {(i["field"], i["index"]) for i in error["details"]["items"]} == {
        ("targets", 1),
        ("ports", 0),
    }
    for body in (
        {"profile": "stealth"},
        {"profile": None},
        {"transports": ["sctp"]},
        {"transports": None},
        {"targets": []},
        {"ports": None},
    ):
        assert user.patch(f"/api/tasks/{task['id']}", json=body).status_code == 400, body
    # Another user's task is a 404 whatever the body says.
    assert other.patch(f"/api/tasks/{task['id']}", json={"ports": "99999"}).status_code == 404
    assert other.patch(f"/api/tasks/{task['id']}", json={"ports": "443"}).status_code == 404
    now = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert (now["name"], now["targets"], now["ports"], now["profile"]) == (
        "watch",
        ["192.0.2.0/30"],
        "22,80",
        "standard",
    )
