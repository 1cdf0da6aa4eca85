"""An imported file's run has a change set like a scan's (docs/changes.md, "Imports").

An import-only task (``"scan": false``) gets each import as a run; the analysis compares
the file's endpoints with the owner's known ones: new, changed and reappeared. It never
concludes absence (a file says what was found, not everywhere that was looked), so an
endpoint the next file lacks is not gone. Alert rules hear of it like a scan's changes,
and a later scan of an imported endpoint knows it.
"""

from __future__ import annotations

import json
import time

from tests.integration.analysis.test_analysis_api import _run_workers
from tests.support.scanner_protocol import claim, observation


def _masscan(*ports: tuple[int, str | None]) -> bytes:
    now = str(int(time.time()))
    rows = []
    for port, banner in ports:
        service = {"service": {"name": "http", "banner": banner}} if banner else {}
        rows.append(
            {
                "ip": "192.0.2.7",
                "timestamp": now,
                "ports": [{"port": port, "proto": "tcp", "status": "open", **service}],
            }
        )
    return ("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n").encode()


def _import(user, task_id: int, data: bytes) -> int:
    answer = user.post(
        f"/api/tasks/{task_id}/imports?format=masscan-json",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        json=None,
    )
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()["import"]["execution_id"]


def _changes(user, task_id: int) -> tuple[dict, list[tuple[str, int]]]:
    body = user.get(f"/api/tasks/{task_id}/changes").get_json()
    return body["counts"], sorted((c["kind"], c["port"]) for c in body["items"])


def test_each_import_is_compared_with_what_was_known_and_never_marks_absence(api, settings):
    user = api.user()
    task = user.post(
        "/api/tasks",
        json={"name": "imports", "targets": ["192.0.2.0/28"], "ports": "1-65535", "scan": False},
    ).get_json()["task"]
    hook = user.post("/api/alerts/channels", json={"kind": "email", "recipients": ["a@b.example"]})
    rule = user.post(
        "/api/alerts/rules",
        json={
            "name": "news",
            "on": ["new", "changed"],
            "channels": [hook.get_json()["channel"]["id"]],
        },
    )
    assert rule.status_code == 201, rule.get_json()

    _import(user, task["id"], _masscan((80, None), (8080, "Apache")))
    _run_workers(settings)
    counts, items = _changes(user, task["id"])
    assert (counts["new"], counts["gone"]) == (2, 0)
    assert items == [("new", 80), ("new", 8080)]

    # The second file: 8080 again with another banner, 443 new, 80 not in the file.
    _import(user, task["id"], _masscan((8080, "nginx"), (443, None)))
    _run_workers(settings)
    counts, items = _changes(user, task["id"])
    assert items == [("changed", 8080), ("new", 443)]
    (changed,) = [
        c
        for c in user.get(f"/api/tasks/{task['id']}/changes").get_json()["items"]
        if c["kind"] == "changed"
    ]
    # What differs, named as alert rules' ``fields`` and alert payloads name it.
    assert changed["changed_fields"] == ["banner"]
    assert changed["old"]["service"] == changed["new"]["service"] == "http"
    assert counts["gone"] == 0  # 80 is not gone: the file did not say it looked there
    open_ports = {a["port"] for a in user.get("/api/assets?status=open").get_json()["items"]}
    assert open_ports == {80, 443, 8080}
    # The rule heard of both change sets: a message for each new or changed endpoint.
    messages = user.get("/api/alerts/deliveries").get_json()["items"]
    assert sorted(m["event_type"] for m in messages) == [
        "netmap.change.changed",
        *["netmap.change.new"] * 3,
    ]

    # A scan of the same task's scope later knows the imported endpoints.
    scanned = user.post(
        "/api/tasks", json={"name": "scan", "targets": ["192.0.2.7"], "ports": "80,443"}
    ).get_json()["task"]
    assert claim(api.scanner()).final(0, [observation("192.0.2.7", 80)]).status_code == 200
    _run_workers(settings)
    counts, items = _changes(user, scanned["id"])
    assert ("new", 80) not in items
    assert items == [("gone", 443)]
