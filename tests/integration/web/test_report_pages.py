"""Report pages of the console: lists, a report with its mail link, run now (WEB-9).

Definitions are created through the API, reports queued through the console's
run-now form; owner scoping, escaping of the definition name and the CSRF
check on the POST are asserted on real sessions.
"""

from __future__ import annotations

import re

from markupsafe import escape

from tests.integration.web.test_console_pages import XSS, _csrf, _post_form, _user_client


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
    # The task number field suggests one's own tasks.
    task_choice = f'<option value="{definition["task_id"]}">#{definition["task_id"]} r</option>'
    assert 'list="task-choices"' in page.text and task_choice in page.text

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
    assert task_choice not in bob_page.text
    assert bob.post(run_path, data={"csrf_token": _csrf(bob_page.text)}).status_code == 404
    assert len(alice.get("/api/reports").get_json()["items"]) == 1


def test_ready_report_links_its_archived_mail_and_the_link_shows_it(api, settings) -> None:
    from tests.integration.reports.test_reports import Renderer, _run, _scanned_task
    from tests.integration.reports.test_reports import _definition as _report_definition

    client, created = _user_client(api)
    alice = api.login(created["username"])
    _, task = _scanned_task(api, alice)
    definition = _report_definition(alice, task, name=XSS)
    page = client.get("/console/reports")
    ran = client.post(
        f"/console/reports/definitions/{definition['id']}/run",
        data={"csrf_token": _csrf(page.text)},
    )
    assert ran.status_code == 303
    report_url = ran.headers["Location"]
    report_id = int(report_url.rsplit("/", 1)[1])
    assert _run(settings, Renderer(settings)).result == "ready"

    detail = client.get(report_url)
    assert detail.status_code == 200
    assert re.search(r'id="report-status"[^>]*>ready<', detail.text)
    assert 'id="no-mail"' not in detail.text
    subject = alice.get(f"/api/reports/{report_id}").get_json()["report"]["subject"]
    assert subject
    assert f'id="report-subject">{escape(subject)}<' in detail.text
    link = re.search(r'<a href="([^"]+)" id="mail-link">', detail.text)
    assert link, detail.text
    assert link.group(1) == f"/api/reports/{report_id}/mail.html"

    # The link, followed with the console's own session, shows the archived mail
    # with its images inlined and under the mail's strict policy (no script runs).
    mail = client.get(link.group(1))
    assert mail.status_code == 200
    assert mail.mimetype == "text/html"
    assert mail.data.count(b"data:image/png;base64,") == 2
    assert b"cid:" not in mail.data
    assert "script-src" not in mail.headers["Content-Security-Policy"]
    assert mail.headers["Content-Security-Policy"].startswith("default-src 'none'")
    # It is this report's mail: the definition's name (escaped) and its 8 endpoints.
    assert "<script>alert" not in mail.text and "&lt;script&gt;alert" in mail.text
    assert re.search(r">Endpoints</td>\s*<td[^>]*>8</td>", mail.text), mail.text

    # Another user gets neither the page nor the mail.
    bob, _ = _user_client(api)
    assert bob.get(report_url).status_code == 404
    assert bob.get(link.group(1)).status_code == 404


def _definition_count(user) -> int:
    return len(user.get("/api/reports/definitions").get_json()["items"])


def test_definitions_are_created_and_deleted_in_the_console(api) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    task = alice.post("/api/tasks", json={"name": "r", "targets": ["192.0.2.1"], "ports": "80"})
    task_id = task.get_json()["task"]["id"]
    good = {
        "name": XSS,
        "task_id": str(task_id),
        "period": "weekly",
        "recipients": "alice@example.com\n\nbob@example.com\n",
        "template": "default",
        "timezone": "Europe/Berlin",
    }

    # Each bad field is a 400 naming that field next to its input, the input is kept
    # (escaped), and nothing is written.
    for field, value in [
        ("recipients", "alice@example.com\nnot-an-address"),
        ("timezone", "Mars/Olympus"),
        ("template", "no-such-template"),
        ("task_id", "12x"),
        ("period", "hourly"),
        ("name", "   "),
    ]:
        refused = _post_form(client, "/console/reports/definitions", {**good, field: value},
                             from_page="/console/reports")  # fmt: skip
        assert refused.status_code == 400, (field, refused.text[:300])
        assert f'id="{field}-error"' in refused.text, field
        assert 'aria-invalid="true"' in refused.text
        assert "<script>alert" not in refused.text
        if field != "name":  # the kept name is shown as text
            assert "&lt;script&gt;alert" in refused.text
        assert _definition_count(alice) == 0, field

    # Another user's task is not found, and says so at the task field.
    bob, created_bob = _user_client(api)
    refused = _post_form(bob, "/console/reports/definitions", good, from_page="/console/reports")
    assert refused.status_code == 400 and 'id="task_id-error"' in refused.text
    assert _definition_count(api.login(created_bob["username"])) == 0

    # Without the CSRF token nothing is written.
    assert client.post("/console/reports/definitions", data=good).status_code == 403
    assert _definition_count(alice) == 0

    made = _post_form(client, "/console/reports/definitions", good, from_page="/console/reports")
    assert made.status_code == 303 and made.headers["Location"].endswith("/console/reports")
    [definition] = alice.get("/api/reports/definitions").get_json()["items"]
    assert definition["name"] == XSS and definition["task_id"] == task_id
    assert definition["period"] == "weekly" and definition["timezone"] == "Europe/Berlin"
    assert definition["recipients"] == ["alice@example.com", "bob@example.com"]

    # An empty task number is a definition over all of one's assets.
    everything = _post_form(client, "/console/reports/definitions",
                            {**good, "name": "all", "task_id": ""},
                            from_page="/console/reports")  # fmt: skip
    assert everything.status_code == 303
    scopes = {
        d["name"]: d["task_id"] for d in alice.get("/api/reports/definitions").get_json()["items"]
    }
    assert scopes == {XSS: task_id, "all": None}

    # Delete: only one's own, and only with the token.
    delete_path = f"/console/reports/definitions/{definition['id']}/delete"
    page = client.get("/console/reports")
    assert f'action="{delete_path}"' in page.text
    assert (
        bob.post(
            delete_path, data={"csrf_token": _csrf(bob.get("/console/reports").text)}
        ).status_code
        == 404
    )
    assert client.post(delete_path, data={}).status_code == 403
    assert _definition_count(alice) == 2
    deleted = client.post(delete_path, data={"csrf_token": _csrf(page.text)})
    assert deleted.status_code == 303
    assert [d["name"] for d in alice.get("/api/reports/definitions").get_json()["items"]] == ["all"]
