"""Report pages of the console: lists, a report with its mail link, run now (WEB-9).

Definitions are created through the API, reports queued through the console's
run-now form; owner scoping, escaping of the definition name and the CSRF
check on the POST are asserted on real sessions.
"""

from __future__ import annotations

import re

from tests.integration.web.test_console_pages import XSS, _csrf, _user_client


def _definition(user, name: str) -> dict:
    task = user.post("/api/tasks", json={"name": "r", "targets": ["192.0.2.1"], "ports": "80"})
    body = {
        "name": name,
        "task_id": task.get_json()["task"]["id"],
        "period": "on_demand",
        "recipients": ["alice@example.com"],
    }
    response = user.post("/api/reports/definitions", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()["definition"]


def test_reports_list_run_now_detail_scoping_and_csrf(api) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    definition = _definition(alice, XSS)
    page = client.get("/console/reports")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "&lt;script&gt;alert" in page.text
    run_path = f"/console/reports/definitions/{definition['id']}/run"
    assert f'action="{run_path}"' in page.text

    # Without the CSRF token nothing is queued.
    refused = client.post(run_path, data={})
    assert refused.status_code == 403
    assert alice.get("/api/reports").get_json()["items"] == []

    ran = client.post(run_path, data={"csrf_token": _csrf(page.text)})
    assert ran.status_code == 303
    report_url = ran.headers["Location"]
    report_id = int(report_url.rsplit("/", 1)[1])
    assert [r["id"] for r in alice.get("/api/reports").get_json()["items"]] == [report_id]
    detail = client.get(report_url)
    assert detail.status_code == 200
    assert re.search(r'id="report-status"[^>]*>queued<', detail.text)
    assert "<script>alert" not in detail.text and "&lt;script&gt;alert" in detail.text
    assert 'id="no-mail"' in detail.text  # not rendered yet: no archived mail to link
    listed = client.get("/console/reports")
    assert f'href="/console/reports/{report_id}"' in listed.text

    # Another user neither sees nor runs Alice's definition or report.
    bob, _ = _user_client(api)
    assert bob.get(report_url).status_code == 404
    bob_page = bob.get("/console/reports")
    assert "&lt;script&gt;alert" not in bob_page.text
    assert bob.post(run_path, data={"csrf_token": _csrf(bob_page.text)}).status_code == 404
    assert len(alice.get("/api/reports").get_json()["items"]) == 1
