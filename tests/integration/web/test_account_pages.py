"""One's own account in the console (docs/security.md, "Passwords and sessions"): change
one's password (the API's checks; every other session ends, this browser goes on) and
reach one's API tokens. A wrong current password counts against the sign-in throttle, in
the console and on ``POST /api/auth/password``."""

from __future__ import annotations

import re

from app import create_app
from tests.integration.web.test_audit_pages import audit_rows
from tests.integration.web.test_console_pages import _csrf, _sign_in, _user_client
from tests.support.api import DEFAULT_PASSWORD, Api
from tests.support.settings import make_settings

NEW_PASSWORD = "a fresh passphrase 42"


def _change(client, current: str, new: str, repeat: str | None = None):
    page = client.get("/console/account")
    form = {
        "current_password": current,
        "new_password": new,
        "repeat_password": new if repeat is None else repeat,
        "csrf_token": _csrf(page.text),
    }
    return client.post("/console/account/password", data=form)


def test_the_account_page_changes_the_password_and_ends_the_other_sessions(api):
    client, created = _user_client(api)
    page = client.get("/console/account")
    assert page.status_code == 200
    assert re.search(r'id="account-username">([^<]+)<', page.text)[1] == created["username"]
    assert 'href="/console/tokens"' in page.text and 'id="account-link"' in page.text
    elsewhere = api.login(created["username"])  # another session of the same user
    assert elsewhere.get("/api/auth/me").status_code == 200

    changed = _change(client, DEFAULT_PASSWORD, NEW_PASSWORD)
    assert (
        changed.status_code == 303 and changed.headers["Location"] == "/console/account?changed=1"
    )
    done = client.get(changed.headers["Location"])
    assert done.status_code == 200 and 'id="password-changed"' in done.text  # still signed in
    assert elsewhere.get("/api/auth/me").status_code == 401  # the other session ended
    assert api.login(created["username"], NEW_PASSWORD).get("/api/auth/me").status_code == 200
    refused = api.app.test_client().post(
        "/api/auth/login", json={"username": created["username"], "password": DEFAULT_PASSWORD}
    )
    assert refused.status_code == 401
    (changed_row,) = [
        a for a in audit_rows(api, "user.password_change") if a["target_id"] == str(created["id"])
    ]
    assert changed_row["details"]["via"] == "console"


def test_a_refused_change_says_why_at_its_field_and_changes_nothing(api):
    client, created = _user_client(api)
    wrong = _change(client, "not my password", NEW_PASSWORD)
    assert wrong.status_code == 400
    assert re.search(r'id="current-password-error">([^<]+)<', wrong.text)[1] == (
        "The current password is wrong."
    )
    differ = _change(client, DEFAULT_PASSWORD, NEW_PASSWORD, repeat=NEW_PASSWORD + "!")
    assert differ.status_code == 400 and 'id="repeat-password-error"' in differ.text
    weak = _change(client, DEFAULT_PASSWORD, "short")
    assert weak.status_code == 400
    assert "10 to 1024 characters" in re.search(r'id="new-password-error">([^<]+)<', weak.text)[1]
    assert 'aria-invalid="true" aria-describedby="new-password-error"' in weak.text
    # The password is unchanged and this browser still signed in.
    assert api.login(created["username"]).get("/api/auth/me").status_code == 200
    assert client.get("/console/account").status_code == 200


def _throttled_api(tmp_path, database_url, engine) -> Api:
    """An app whose sign-in budget per username is 4 attempts an hour."""
    settings = make_settings(
        database_url,
        tmp_path,
        security={"login_rate_limit": "100 per minute", "login_username_rate_limit": "4/hour"},
    )
    return Api(create_app(settings, engine=engine, modules="off"))


def test_guessing_the_current_password_is_throttled_like_signing_in(tmp_path, database_url, engine):
    api = _throttled_api(tmp_path, database_url, engine)
    created = api.create_user()
    client = _sign_in(api, created["username"], DEFAULT_PASSWORD)  # attempt 1
    statuses = [_change(client, f"guess {i}", NEW_PASSWORD).status_code for i in range(3)]
    assert statuses == [400, 400, 400]  # attempts 2-4
    limited = _change(client, DEFAULT_PASSWORD, NEW_PASSWORD)
    assert limited.status_code == 429 and "Too many attempts" in limited.text
    # As the API and the sign-in form say it (IDN-3): when to come back.
    assert int(limited.headers["Retry-After"]) > 0


def test_the_apis_password_change_spends_the_same_budget(tmp_path, database_url, engine):
    api = _throttled_api(tmp_path, database_url, engine)
    created = api.create_user()
    session = api.login(created["username"])  # attempt 1
    body = {"current_password": "a guess", "new_password": NEW_PASSWORD}
    statuses = [session.post("/api/auth/password", json=body).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    assert session.get("/api/auth/me").status_code == 200  # refusals end nothing


def test_one_signs_out_everywhere_else_from_the_account_page_and_the_api(api):
    client, created = _user_client(api)
    laptop, phone = api.login(created["username"]), api.login(created["username"])
    someone = api.user()  # another user's session is never touched
    page = client.get("/console/account").text
    assert len(re.findall(r"<tr(?: id=\"this-session\")?><td>", page)) == 3
    assert 'id="this-session"' in page and 'id="end-others-form"' in page

    listed = laptop.get("/api/auth/sessions").get_json()
    assert listed["total"] == 3 and [s["current"] for s in listed["items"]] == [True, False, False]
    ended = client.post("/console/account/sessions/end-others", data={"csrf_token": _csrf(page)})
    assert ended.status_code == 303 and ended.headers["Location"] == "/console/account?ended=2"
    after = client.get(ended.headers["Location"]).text
    assert "2 other sessions signed out." in after and 'id="end-others-form"' not in after
    assert laptop.get("/api/auth/me").status_code == 401
    assert phone.get("/api/auth/me").status_code == 401
    assert someone.get("/api/auth/me").status_code == 200

    # The API's own: this session stays, the other one ends; audited both times.
    again = api.login(created["username"])
    answer = again.post("/api/auth/sessions/end-others")
    assert answer.status_code == 200 and answer.get_json() == {"ended": 1}
    assert client.get("/console/account").status_code == 302  # the console's session ended
    assert again.get("/api/auth/me").status_code == 200
    audited = [
        (a["details"]["via"], a["details"]["ended"])
        for a in audit_rows(api, "user.sessions_end_others")
        if a["target_id"] == str(created["id"])
    ]
    assert audited == [("console", 2), ("api", 1)]


def test_sessions_are_a_sessions_business_not_a_tokens(api):
    user = api.user()
    secret = user.post("/api/auth/tokens", json={"name": "t"}).get_json()["secret"]
    bearer = api.app.test_client()
    headers = {"Authorization": f"Bearer {secret}"}
    for method, path in (("GET", "/api/auth/sessions"), ("POST", "/api/auth/sessions/end-others")):
        response = bearer.open(path, method=method, headers=headers)
        assert response.status_code == 403, path
        assert response.get_json()["error"]["code"] == "session_required"
    assert user.get("/api/auth/me").status_code == 200


def test_a_long_session_list_shows_this_browser_and_the_newest(api):
    from datetime import timedelta

    from app.identity import service as identity

    client, created = _user_client(api)  # the oldest session: shown first all the same
    for _ in range(51):  # as 51 sign-ins make them (past the sign-in throttle of a test)
        identity.start_session(created["id"], timedelta(hours=1))
    page = client.get("/console/account").text
    rows = re.findall(r"<tr(?: id=\"this-session\")?><td>", page)
    assert len(rows) == 50 and rows[0] == '<tr id="this-session"><td>'
    assert "This browser and the newest 49 of 52 sessions are shown." in page
