"""Console forms at their edges: NUL characters, kept input, caching, sign-in targets.

Each case was a defect found by trying the console as a user would: a NUL typed into a
form field was a 500 (the database driver refused it after the form's own checks); the
Users and Scanners forms dropped what was typed when they refused it; console pages
could be cached by the browser although they carry CSRF tokens and signed download
links; a sign-in target with a dot segment was kept.
"""

from __future__ import annotations

import pytest

from tests.integration.web.test_console_pages import (
    _csrf,
    _post_form,
    _sign_in_next_answer,
    _user_client,
)


def _count(api, path: str) -> int:
    return len(api.admin().get(path).get_json()["items"])


def test_a_nul_in_a_form_field_is_a_400_page_naming_the_field_and_writes_nothing(api):
    client, created = _user_client(api)
    alice = api.login(created["username"])
    forms = [
        ("/console/tasks/new", {"name": "n\x00x", "targets": "192.0.2.1", "ports": "80"}, "name"),
        (
            "/console/alerts/channels",
            {"name": "w", "kind": "webhook", "url": "https://example.com/\x00"},
            "url",
        ),
        (
            "/console/alerts/channels",
            {"name": "n\x00", "kind": "email", "recipients": "a@example.com"},
            "name",
        ),
    ]
    for path, data, field in forms:
        refused = _post_form(client, path, data, from_page="/console/tasks/new")
        assert refused.status_code == 400, (path, refused.text[:300])
        assert refused.mimetype == "text/html"  # the console's page, not the API's JSON
        assert f"form field &#39;{field}&#39; contains NUL" in refused.text
    assert alice.get("/api/tasks").get_json()["items"] == []
    assert alice.get("/api/alerts/channels").get_json()["items"] == []

    # The sign-in form, before anyone is signed in.
    anonymous = api.app.test_client()
    page = anonymous.get("/console/sign-in")
    refused = anonymous.post(
        "/console/sign-in",
        data={"username": "ad\x00min", "password": "x", "csrf_token": _csrf(page.text)},
    )
    assert refused.status_code == 400 and "contains NUL" in refused.text


def test_the_users_and_scanners_forms_keep_what_was_typed(api):
    admin_client, _created = _user_client(api, admin=True)
    refused = _post_form(
        admin_client, "/console/users", {"username": "dave", "password": "short", "is_admin": "on"}
    )
    assert refused.status_code == 400
    assert 'value="dave"' in refused.text and 'name="is_admin" checked' in refused.text
    assert 'value="short"' not in refused.text  # never the password

    refused = _post_form(admin_client, "/console/scanners", {"name": "bad/name"})
    assert refused.status_code == 400
    # A refused Apprise URL holds tokens: it is not written into the page, and the page
    # says why the field is empty (it was cleared without a word).
    apprise = _post_form(
        admin_client,
        "/console/alerts/channels",
        {"name": "chat", "kind": "apprise", "url": "bogus://abc"},
        from_page="/console/alerts",
    )
    assert apprise.status_code == 400 and "bogus://abc" not in apprise.text
    assert 'id="channel-url-cleared"' in apprise.text
    assert 'value="bad/name"' in refused.text
    assert _count(api, "/api/scanners") == 0


def test_console_pages_are_not_cached_and_their_static_files_are(api):
    client, _created = _user_client(api)
    for path in ("/console/", "/console/exports", "/console/account", "/console/assets"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["Cache-Control"] == "no-store", path
    assert api.app.test_client().get("/console/sign-in").headers["Cache-Control"] == "no-store"
    icon = client.get("/console/static/favicon.svg")
    assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
    assert "max-age=300" in icon.headers["Cache-Control"]
    assert 'rel="icon" href="/console/static/favicon.svg"' in client.get("/console/").text


@pytest.mark.parametrize(
    "target",
    [
        "/console/..//evil.example",
        "/console/%2e%2e/%2e%2e/api/auth/me",
        "/console/./tasks",
        "/console/tasks//x",
    ],
)
def test_a_sign_in_target_with_a_dot_or_empty_segment_is_not_kept(api, target):
    answer = _sign_in_next_answer(api, target)
    assert answer.status_code == 303
    assert answer.headers["Location"].endswith("/console/")


def test_a_range_without_an_upper_bound_says_so(api):
    admin_client, _created = _user_client(api, admin=True)
    answer = admin_client.get("/console/users?after=-1")
    assert answer.status_code == 400 and "after must be at least 0" in answer.text
    user = api.user()
    task = user.post("/api/tasks", json={"name": "t", "targets": ["192.0.2.1"], "ports": "80"})
    task_id = task.get_json()["task"]["id"]
    refused = user.get(f"/api/tasks/{task_id}/changes?run=0")
    assert refused.status_code == 400
    assert refused.get_json()["error"]["message"] == "run must be at least 1"


def test_run_now_while_a_run_is_active_shows_the_task_page_with_the_reason(api):
    client, created = _user_client(api)
    user = api.login(created["username"])
    task = user.post("/api/tasks", json={"name": "t", "targets": ["192.0.2.1"], "ports": "80"})
    task_id = task.get_json()["task"]["id"]  # run 1 is queued: active
    refused = _post_form(
        client, f"/console/tasks/{task_id}/runs", {}, from_page=f"/console/tasks/{task_id}"
    )
    assert refused.status_code == 409
    assert 'id="run-now-error"' in refused.text and 'id="run-now-form"' in refused.text
    assert len(user.get(f"/api/tasks/{task_id}/runs").get_json()["items"]) == 1


def test_a_page_shown_again_by_a_forms_post_links_to_its_next_page(api, monkeypatch):
    """The task page shown again by a refused schedule (a POST route) links to the next
    page of the task's executions with a cursor the task page (a GET route) accepts: a
    cursor is signed for the list it pages, not for the route that drew the link."""
    import re

    from app.web import task_pages

    monkeypatch.setattr(task_pages, "PAGE_SIZE", 1)
    client, created = _user_client(api)
    user = api.login(created["username"])
    task = user.post(
        "/api/tasks", json={"name": "t", "targets": ["192.0.2.0/23"], "ports": "80"}
    ).get_json()["task"]
    assert task["execution_count"] > 1  # more addresses than one execution takes
    refused = _post_form(
        client,
        f"/console/tasks/{task['id']}/schedule",
        {"kind": "every", "every_seconds": "hourly"},
        from_page=f"/console/tasks/{task['id']}",
    )
    assert refused.status_code == 400
    next_url = re.search(r'href="([^"]*cursor=[^"]+)"', refused.text)[1].replace("&amp;", "&")
    assert client.get(next_url).status_code == 200
