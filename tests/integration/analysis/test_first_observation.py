"""A probed field seen for the first time is no change (docs/changes.md): a task moved
from the ``quick`` profile (no service detection) to ``standard`` reported every port
``changed`` from nothing to its service, and alert rules on ``product`` or ``version``
fired for each."""

from __future__ import annotations

from tests.integration.analysis.test_analysis_api import _run_workers
from tests.support.scanner_protocol import claim, observation

HTTP = {"name": "http", "product": "SimpleHTTPServer", "version": "0.6"}


def _run(user, scanner, task_id: int, observations, *, first: bool = False) -> int:
    if not first:
        assert user.post(f"/api/tasks/{task_id}/runs").status_code == 201
    upload = claim(scanner)
    assert upload.final(0, observations).status_code == 200
    return user.get(f"/api/tasks/{task_id}").get_json()["task"]["latest_run"]["id"]


def _changes(user, task_id: int, query: str = "") -> list[tuple[str, str, list | None]]:
    page = user.get(f"/api/tasks/{task_id}/changes{query}").get_json()
    return [(c["kind"], f"{c['ip']}:{c['port']}", c.get("changed_fields")) for c in page["items"]]


def test_a_field_seen_for_the_first_time_is_no_change(api, settings) -> None:
    user, scanner = api.user(), api.scanner()
    task = user.post(
        "/api/tasks", json={"name": "quick first", "targets": ["192.0.2.0/30"], "ports": "80"}
    ).get_json()["task"]
    first = _run(user, scanner, task["id"], [observation("192.0.2.1", 80)], first=True)
    _run_workers(settings)
    assert _changes(user, task["id"]) == [("new", "192.0.2.1:80", None)]

    # Service detection now: the service, product and version are seen for the first time.
    detected = _run(user, scanner, task["id"], [observation("192.0.2.1", 80, service=HTTP)])
    _run_workers(settings)
    assert _changes(user, task["id"]) == []
    # Comparing the two runs says the same.
    assert _changes(user, task["id"], f"?from_run={first}&to_run={detected}") == []
    (asset,) = user.get("/api/assets").get_json()["items"]
    assert (asset["service"], asset["product"]) == ("http", "SimpleHTTPServer")

    # A value that differs from an observed one is a change, naming only what differs.
    ssh = {"name": "ssh", "product": "SimpleHTTPServer", "version": "0.6"}
    _run(user, scanner, task["id"], [observation("192.0.2.1", 80, service=ssh)])
    _run_workers(settings)
    assert _changes(user, task["id"]) == [("changed", "192.0.2.1:80", ["service"])]


def test_a_service_named_from_the_port_never_replaces_one_a_scanner_named(api, settings) -> None:
    """Port 80 named ``ssh`` by service detection, then scanned without it: the port's usual
    ``http`` was filled in as if the scanner had said so, replaced ``ssh`` in the asset and
    was reported as a change."""
    user, scanner = api.user(), api.scanner()
    task = user.post(
        "/api/tasks", json={"name": "named", "targets": ["192.0.2.0/30"], "ports": "80,8081"}
    ).get_json()["task"]
    named = {"name": "ssh", "product": "OpenSSH"}
    _run(user, scanner, task["id"], [observation("192.0.2.1", 80, service=named)], first=True)
    _run_workers(settings)
    _run(user, scanner, task["id"], [observation("192.0.2.1", 80)])  # no service detection
    _run_workers(settings)
    assert _changes(user, task["id"]) == []
    (asset,) = user.get("/api/assets").get_json()["items"]
    assert (asset["service"], asset["product"]) == ("ssh", "OpenSSH")
    assert user.get("/api/assets?q=service:http").get_json()["items"] == []

    # Known only by its port, an endpoint still shows (and is found by) the usual name;
    # its observed map has no time for a value nobody observed.
    _run(user, scanner, task["id"], [observation("192.0.2.2", 80)])
    _run_workers(settings)
    (guessed,) = user.get("/api/assets?q=service:http").get_json()["items"]
    assert guessed["ip"] == "192.0.2.2" and "service" not in guessed["observed"]
