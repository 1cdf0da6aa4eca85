"""Personal API tokens (docs/security.md, "API tokens"): made from a session, shown once,
stored as SHA-256, accepted as ``Authorization: Bearer`` on the API's user routes without
a CSRF header, refused once revoked, expired or when the user is disabled, and never
accepted by the console, the scanner protocol or the routes that act on the session."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from app.db import transaction
from tests.integration.web.test_audit_pages import audit_rows


def _bearer(api, token: str):
    client = api.app.test_client()  # no cookie at all
    headers = {"Authorization": f"Bearer {token}"}

    class Calls:
        def get(self, path):
            return client.get(path, headers=headers)

        def post(self, path, json=None):
            return client.post(path, json=json, headers=headers)

        def delete(self, path):
            return client.delete(path, headers=headers)

    return Calls()


def _make(user, name="ci", **extra):
    made = user.post("/api/auth/tokens", json={"name": name, **extra})
    assert made.status_code == 201, made.get_json()
    assert made.headers["Cache-Control"] == "no-store"
    body = made.get_json()
    return body["token"], body["secret"]


def test_a_token_calls_the_api_as_its_user_without_a_csrf_header(api):
    alice = api.user()
    token, secret = _make(alice, "nightly export", expires_in_days=30)
    assert secret.startswith("nmu_") and token["hint"] == secret[-4:]
    assert token["expires_at"] and token["last_used_at"] is None
    with transaction() as conn:
        stored = conn.execute(
            sa.text("SELECT token_sha256 FROM user_api_tokens WHERE id = :i"), {"i": token["id"]}
        ).scalar_one()
    assert bytes(stored) == hashlib.sha256(secret.encode()).digest()  # the secret is not kept

    caller = _bearer(api, secret)
    me = caller.get("/api/auth/me").get_json()
    assert me["user"]["id"] == alice.id and me["csrf_token"] is None
    created = caller.post(
        "/api/tasks", json={"name": "by token", "targets": ["192.0.2.1"], "ports": "22"}
    )
    assert created.status_code == 201, created.get_json()
    task_id = created.get_json()["task"]["id"]
    assert alice.get(f"/api/tasks/{task_id}").status_code == 200  # alice's own task
    listed = alice.get("/api/auth/tokens").get_json()["items"]
    assert [t["name"] for t in listed] == ["nightly export"]
    assert listed[0]["last_used_at"] is not None and "secret" not in listed[0]
    assert secret not in alice.get("/api/auth/tokens").text
    # Another user's data stays theirs; an admin route stays an admin's.
    bob = api.user()
    bob_task = bob.post(
        "/api/tasks", json={"name": "bob", "targets": ["192.0.2.2"], "ports": "22"}
    ).get_json()["task"]["id"]
    assert caller.get(f"/api/tasks/{bob_task}").status_code == 404
    assert (
        caller.post(
            "/api/users", json={"username": "mallory", "password": "long enough password"}
        ).status_code
        == 403
    )


def test_a_revoked_expired_foreign_or_disabled_token_is_refused(api):
    alice, bob, admin = api.user(), api.user(), api.admin()
    token, secret = _make(alice)
    other, other_secret = _make(alice, "second")
    caller = _bearer(api, secret)
    assert caller.get("/api/auth/me").status_code == 200

    # Bob cannot see or revoke alice's token.
    assert bob.delete(f"/api/auth/tokens/{token['id']}").status_code == 404
    assert caller.get("/api/auth/me").status_code == 200
    # A token may revoke one of its user's tokens (itself included).
    assert caller.delete(f"/api/auth/tokens/{other['id']}").status_code == 204
    refused = _bearer(api, other_secret).get("/api/auth/me")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="netmap"'
    assert refused.get_json()["error"]["code"] == "unauthorized"

    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE user_api_tokens SET expires_at = now() - interval '1 second' WHERE id = :i"
            ),
            {"i": token["id"]},
        )
    assert caller.get("/api/auth/me").status_code == 401
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE user_api_tokens SET expires_at = NULL WHERE id = :i"),
            {"i": token["id"]},
        )
    assert caller.get("/api/auth/me").status_code == 200
    disabled = admin.post(f"/api/users/{alice.id}/disable")
    assert disabled.status_code == 200, disabled.get_json()
    assert caller.get("/api/auth/me").status_code == 401
    assert admin.post(f"/api/users/{alice.id}/enable").status_code == 200
    assert caller.get("/api/auth/me").status_code == 200
    for wrong in ("nmu_not-a-token", secret + "x", "nms_" + secret[4:], ""):
        assert _bearer(api, wrong).get("/api/tasks").status_code == 401, wrong
    # A bearer header with no token, beside a signed-in session's cookie: a 401 naming the
    # realm, like any token that is not a live one (it fell back to the cookie).
    fresh = api.user()
    assert fresh.get("/api/auth/me").status_code == 200
    for header in ("Bearer", "Bearer   ", "bearer"):
        empty = fresh.client.get("/api/auth/me", headers={"Authorization": header})
        assert empty.status_code == 401, header
        assert empty.headers["WWW-Authenticate"] == 'Bearer realm="netmap"'


def test_a_token_cannot_mint_tokens_act_on_the_session_scan_or_open_the_console(api):
    alice = api.user()
    _token, secret = _make(alice)
    caller = _bearer(api, secret)
    for path, body in (
        ("/api/auth/tokens", {"name": "more"}),
        ("/api/auth/password", {"current_password": "x", "new_password": "y"}),
        ("/api/auth/logout", None),
    ):
        response = caller.post(path, json=body)
        assert response.status_code == 403, path
        assert response.get_json()["error"]["code"] == "session_required"
    assert [t["name"] for t in alice.get("/api/auth/tokens").get_json()["items"]] == ["ci"]
    assert caller.post("/api/scanner/claim").status_code == 401  # not a scanner token
    console = caller.get("/console/tasks")
    assert console.status_code == 302 and "/console/sign-in" in console.headers["Location"]


def test_refused_token_requests_say_why_and_write_nothing(api):
    alice = api.user()
    _make(alice, "taken")
    refusals = [
        ({"name": ""}, 400, "name"),
        ({"name": "x" * 101}, 400, "name"),
        ({"name": "line\nbreak"}, 400, "name"),
        ({"name": "ok", "expires_in_days": 0}, 400, "expires_in_days"),
        ({"name": "ok", "expires_in_days": "30"}, 400, "expires_in_days"),
        ({"name": "ok", "expires_in_days": True}, 400, "expires_in_days"),
        ({"name": "ok", "scope": "all"}, 400, "scope"),
        ({"name": "ok", "access": "admin"}, 400, "access"),
        ({"name": "ok", "access": None}, 400, "access"),
        ({"name": "taken"}, 409, "name"),
    ]
    for body, status, field in refusals:
        response = alice.post("/api/auth/tokens", json=body)
        assert response.status_code == status, (body, response.get_json())
        assert response.get_json()["error"]["details"]["field"] == field, body
    assert len(alice.get("/api/auth/tokens").get_json()["items"]) == 1
    assert alice.delete("/api/auth/tokens/987654").status_code == 404


def test_making_and_revoking_a_token_is_audited(api):
    alice = api.user()
    token, _ = _make(alice, "audited")
    assert alice.delete(f"/api/auth/tokens/{token['id']}").status_code == 204
    rows = [a for a in audit_rows(api, "api_token") if a["target_id"] == str(token["id"])]
    assert [(a["action"], a["actor"]["id"], a["details"]["name"]) for a in rows] == [
        ("api_token.create", alice.id, "audited"),
        ("api_token.revoke", alice.id, "audited"),
    ]


def test_an_admins_token_reads_metrics_and_a_users_token_does_not(api):
    _token, admin_secret = _make(api.admin())
    _token, user_secret = _make(api.user())
    assert _bearer(api, admin_secret).get("/metrics").status_code == 200
    refused = _bearer(api, user_secret).get("/metrics")
    assert refused.status_code == 403 and refused.get_json()["error"]["code"] == "forbidden"


def test_the_console_makes_shows_once_lists_and_revokes_tokens(api):
    import re

    from tests.integration.web.test_console_pages import _csrf, _user_client

    client, created = _user_client(api)
    page = client.get("/console/tokens")
    assert page.status_code == 200 and "No API tokens." in page.text
    made = client.post(
        "/console/tokens",
        data={
            "name": "backup job",
            "expires": "30",
            "access": "read",
            "csrf_token": _csrf(page.text),
        },
    )
    assert made.status_code == 201 and made.headers["Cache-Control"] == "no-store"
    secret = re.search(r'id="token-value">([^<]+)<', made.text)[1]
    assert secret.startswith("nmu_")
    me = _bearer(api, secret).get("/api/auth/me").get_json()
    assert me["user"]["username"] == created["username"]

    listing = client.get("/console/tokens")
    assert secret not in listing.text  # shown once, on the answer that made it
    row = re.search(
        r'<tr data-token-id="(\d+)"><td>backup job</td><td><code>…(\w{4})</code></td>'
        r"<td>read only</td>",
        listing.text,
    )
    assert row and row[2] == secret[-4:]
    taken = client.post(
        "/console/tokens",
        data={"name": "backup job", "expires": "", "csrf_token": _csrf(listing.text)},
    )
    assert taken.status_code == 409 and 'id="token-error"' in taken.text
    assert 'value="backup job"' in taken.text and 'id="token-value"' not in taken.text
    odd = client.post(
        "/console/tokens",
        data={"name": "odd", "expires": "soon", "csrf_token": _csrf(listing.text)},
    )
    assert odd.status_code == 400 and "expires_in_days must be" in odd.text

    other, _ = _user_client(api)
    foreign = other.post(
        f"/console/tokens/{row[1]}/revoke",
        data={"csrf_token": _csrf(other.get("/console/tokens").text)},
    )
    assert foreign.status_code == 404
    revoked = client.post(
        f"/console/tokens/{row[1]}/revoke", data={"csrf_token": _csrf(listing.text)}
    )
    assert revoked.status_code == 303 and revoked.headers["Location"] == "/console/tokens"
    assert _bearer(api, secret).get("/api/auth/me").status_code == 401
    assert "No API tokens." in client.get("/console/tokens").text


def test_a_read_only_token_reads_and_changes_nothing(api):
    alice = api.user()
    token, secret = _make(alice, "siem", access="read")
    assert token["access"] == "read"
    reader = _bearer(api, secret)
    assert reader.get("/api/tasks").status_code == 200
    assert reader.get("/api/assets").status_code == 200
    for path, body in (
        ("/api/tasks", {"name": "no", "targets": ["192.0.2.1"], "ports": "22"}),
        ("/api/exports", {"format": "csv", "query": ""}),
    ):
        refused = reader.post(path, json=body)
        assert refused.status_code == 403, path
        assert refused.get_json()["error"]["code"] == "read_only_token"
    assert reader.delete(f"/api/auth/tokens/{token['id']}").status_code == 403
    assert alice.get("/api/tasks").get_json()["items"] == []  # nothing was made
    writer_token, writer = _make(alice, "writer")
    assert writer_token["access"] == "write"
    assert _bearer(api, writer).delete(f"/api/auth/tokens/{token['id']}").status_code == 204


def test_a_token_secret_never_reaches_the_logs(settings, engine, capsys):
    """Making, using, refusing and revoking a token logs its id, never its secret."""
    import logging

    from app import create_app
    from app.observability import configure_logging
    from tests.support.api import Api

    configure_logging()
    logging.getLogger("netmap.http").setLevel(logging.INFO)
    api = Api(create_app(settings, engine=engine, modules="off"))
    capsys.readouterr()
    alice = api.user()
    token, secret = _make(alice, "quiet")
    caller = _bearer(api, secret)
    assert caller.get("/api/auth/me").status_code == 200
    assert _bearer(api, secret[:-1] + "x").get("/api/auth/me").status_code == 401
    assert caller.post("/api/auth/tokens", json={"name": "x"}).status_code == 403
    assert caller.delete(f"/api/auth/tokens/{token['id']}").status_code == 204
    logged = capsys.readouterr().err
    assert "ApiTokenCreated" in logged and "ApiTokenRevoked" in logged
    assert secret not in logged and secret[4:20] not in logged
