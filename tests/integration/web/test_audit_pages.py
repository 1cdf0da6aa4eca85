"""The audit trail for admins: ``GET /api/audit`` and the console's audit log page, newest
first, narrowed by action (one, or a family) and by actor, in keyset pages."""

from __future__ import annotations

import re

from tests.integration.web.test_console_pages import _user_client


def audit_rows(api, action: str) -> list[dict]:
    """The audit trail's rows of one action (or family), oldest first, as an admin reads
    them through ``GET /api/audit``."""
    items = api.admin().get(f"/api/audit?action={action}&limit=500").get_json()["items"]
    return items[::-1]


def _trail(api):
    """An admin who made a user, disabled and enabled them, and made a token."""
    admin = api.admin()
    made = admin.post("/api/users", json={"username": "audited1", "password": "long enough pw 1"})
    assert made.status_code == 201, made.get_json()
    user_id = made.get_json()["id"]
    assert admin.post(f"/api/users/{user_id}/disable").status_code == 200
    # Asked again, it changes nothing: audited once.
    assert admin.post(f"/api/users/{user_id}/disable").status_code == 200
    assert admin.post(f"/api/users/{user_id}/enable").status_code == 200
    assert admin.post("/api/auth/tokens", json={"name": "audit"}).status_code == 201
    return admin, user_id


def test_the_api_lists_the_trail_newest_first_narrowed_and_paged(api):
    admin, user_id = _trail(api)
    everything = admin.get("/api/audit").get_json()["items"]
    assert [a["action"] for a in everything[:4]] == [
        "api_token.create",
        "user.enable",
        "user.disable",
        "user.create",
    ]
    assert everything[1]["actor"] == {"id": admin.id, "username": admin.user["username"]}
    assert everything[1]["target_type"] == "user" and everything[1]["target_id"] == str(user_id)

    family = admin.get("/api/audit?action=user").get_json()["items"]
    assert {a["action"] for a in family} >= {"user.enable", "user.disable", "user.create"}
    assert all(a["action"].startswith("user.") for a in family)
    one = admin.get("/api/audit?action=user.disable").get_json()["items"]
    assert [a["action"] for a in one] == ["user.disable"]
    # "_" and "%" are characters of a name, not patterns.
    assert admin.get("/api/audit?action=user_").get_json()["items"] == []
    assert admin.get("/api/audit?action=%25").get_json()["items"] == []
    mine = admin.get(f"/api/audit?actor={admin.user['username']}").get_json()["items"]
    assert len(mine) == 4

    seen, cursor = [], None
    while True:
        page = admin.get("/api/audit?limit=1" + (f"&cursor={cursor}" if cursor else "")).get_json()
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [a["id"] for a in everything]

    unknown = admin.get("/api/audit?actor=nobody-here")
    assert unknown.status_code == 400
    assert unknown.get_json()["error"]["details"] == {"parameter": "actor"}
    assert api.user().get("/api/audit").status_code == 403


def test_the_console_shows_the_trail_to_admins(api):
    _trail(api)
    client, _ = _user_client(api, admin=True)
    users_page = client.get("/console/users").text
    assert 'id="audit-link"' in users_page
    page = client.get("/console/admin/audit?action=user")
    assert page.status_code == 200
    actions = re.findall(r"<td><code>([a-z_.]+)</code></td>", page.text)
    assert actions[:3] == ["user.enable", "user.disable", "user.create"]
    assert "username: audited1" in page.text
    refused = client.get("/console/admin/audit?actor=nobody-here")
    assert refused.status_code == 400 and 'id="audit-error"' in refused.text
    user_client, _ = _user_client(api)
    assert user_client.get("/console/admin/audit").status_code == 403
