"""Task creation, plans and queries through the HTTP API (SCN-1, SCN-2, SCN-5, SCN-6)."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction


def test_create_task_stores_plan_executions_and_search_targets(api):
    user = api.user()
    response = user.post(
        "/api/tasks",
        json={
            "name": "edge",
            "targets": ["192.0.2.0/23", "2001:DB8::1", "Example.COM", "192.0.2.5"],
            "ports": "443,22,8000-8010",
            "transports": ["tcp", "udp"],
        },
    )
    assert response.status_code == 201, response.get_json()
    task = response.get_json()["task"]
    assert task["status"] == "queued"
    assert task["targets"] == ["192.0.2.0/23", "2001:db8::1", "192.0.2.5", "example.com"]
    assert task["ports"] == "22,443,8000-8010"
    assert task["transports"] == ["tcp", "udp"]
    # 512 IPv4 addresses (the /23 covers .5) + 1 IPv6 → 2 full chunks + 1; plus one DNS execution.
    assert task["execution_count"] == 4
    assert task["counts"]["executions"] == {
        "queued": 4,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
    }
    assert task["projection_status"] == "not_started"
    assert task["parent_task_id"] is None and task["child_task_ids"] == []
    executions = user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
    assert [e["kind"] for e in executions] == ["ports", "ports", "ports", "dns"]
    assert executions[-1]["targets"] == ["example.com"]
    assert executions[-1]["projection_status"] == "not_applicable"
    assert executions[0]["targets"] == ["192.0.2.0/24"]
    with transaction() as conn:
        plan = conn.execute(
            sa.text("SELECT scan_plan FROM scan_tasks WHERE id = :id"), {"id": task["id"]}
        ).scalar()
        targets = conn.execute(
            sa.text(
                "SELECT kind, key, host(target_ip) AS ip, masklen(target_ip) AS bits "
                "FROM search_targets WHERE owner_id = :o ORDER BY kind, key"
            ),
            {"o": user.id},
        ).all()
    assert plan["executions"] == 4 and plan["dns_executions"] == 1 and plan["addresses"] == 513
    assert [(t.kind, t.key, t.ip, t.bits) for t in targets] == [
        ("cidr", "192.0.2.0/23", "192.0.2.0", 23),
        ("domain", "example.com", None, None),
        ("ip", "192.0.2.5", "192.0.2.5", 32),
        ("ip", "2001:db8::1", "2001:db8::1", 128),
    ]


def test_invalid_targets_name_every_bad_item_and_write_nothing(api):
    user = api.user()
    response = user.post(
        "/api/tasks",
        json={
            "name": "bad",
            "targets": ["192.0.2.1", "10.0.0.1/8", "bad..name", "1.2.3.256"],
            "ports": "80",
        },
    )
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_targets"
    assert [(i["index"], i["value"]) for i in error["details"]["items"]] == [
        (1, "10.0.0.1/8"),
        (2, "bad..name"),
        (3, "1.2.3.256"),
    ]
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM scan_tasks")).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM search_targets")).scalar() == 0


def test_bad_json_and_bad_types_are_clear_400s(api):
    user = api.user()
    not_json = user.client.post(
        "/api/tasks",
        data="{",
        headers={"X-CSRF-Token": user.csrf, "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400
    assert not_json.get_json()["error"]["code"] == "invalid_json"
    wrong_type = user.post("/api/tasks", json=["not", "an", "object"])
    assert wrong_type.status_code == 400
    missing = user.post("/api/tasks", json={"name": "x"})
    assert missing.status_code == 400
    assert {i["field"] for i in missing.get_json()["error"]["details"]["items"]} == {
        "targets",
        "ports",
    }
    # null is no list of transports: refused, not taken as the default (tcp).
    body = {"name": "n", "targets": ["192.0.2.1"], "ports": "80", "transports": None}
    null = user.post("/api/tasks", json=body)
    assert null.status_code == 400, null.get_json()
    assert [i["field"] for i in null.get_json()["error"]["details"]["items"]] == ["transports"]
    # An unknown field is named as on every other route.
    unknown = user.post("/api/tasks", json={**body, "transports": ["tcp"], "owner": 1, "colour": 2})
    assert unknown.status_code == 400
    assert unknown.get_json()["error"]["code"] == "unknown_field"
    assert unknown.get_json()["error"]["details"] == {
        "field": "colour",
        "fields": ["colour", "owner"],
    }
    assert user.get("/api/tasks").get_json()["items"] == []


def test_task_list_pages_by_keyset_and_filters(api):
    user = api.user()
    ids = []
    for i in range(7):
        created = user.post(
            "/api/tasks", json={"name": f"task {i}", "targets": [f"192.0.2.{i}"], "ports": "80"}
        )
        ids.append(created.get_json()["task"]["id"])
    seen = []
    cursor = None
    while True:
        query = "/api/tasks?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = user.get(query).get_json()
        seen.extend(t["id"] for t in page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == sorted(ids, reverse=True)
    assert [t["id"] for t in user.get("/api/tasks?q=task 3").get_json()["items"]] == [ids[3]]
    assert len(user.get("/api/tasks?status=queued").get_json()["items"]) == 7
    assert user.get("/api/tasks?status=running").get_json()["items"] == []
    assert user.get("/api/tasks?status=bogus").status_code == 400
    assert user.get("/api/tasks?cursor=%%%").status_code == 400
    assert user.get("/api/tasks?limit=0").status_code == 400
    assert user.get("/api/tasks?limit=501").status_code == 400


def test_name_filter_treats_wildcards_literally(api):
    user = api.user()
    for name in ("100% done", "100 done"):
        user.post("/api/tasks", json={"name": name, "targets": ["192.0.2.1"], "ports": "80"})
    names = [t["name"] for t in user.get("/api/tasks?q=100%25").get_json()["items"]]
    assert names == ["100% done"]


def test_executions_list_pages(api):
    user = api.user()
    task = user.post(
        "/api/tasks",
        json={
            "name": "big",
            "targets": ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"],
            "ports": "80",
        },
    ).get_json()["task"]
    first = user.get(f"/api/tasks/{task['id']}/executions?limit=2").get_json()
    second = user.get(
        f"/api/tasks/{task['id']}/executions?limit=2&cursor={first['next_cursor']}"
    ).get_json()
    assert len(first["items"]) == 2 and len(second["items"]) == 1 and second["next_cursor"] is None
    assert [e["targets"] for e in first["items"] + second["items"]] == [
        ["192.0.2.0/24"],
        ["198.51.100.0/24"],
        ["203.0.113.0/24"],
    ]


def test_unknown_task_is_404_json(api):
    user = api.user()
    response = user.get("/api/tasks/999999")
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "task_not_found"
