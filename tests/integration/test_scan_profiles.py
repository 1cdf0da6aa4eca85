"""Scan profiles over HTTP: a task chooses one, each execution records it and the
scanner receives it with the claim (issue 37)."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.support.scanner_protocol import claim


def _task(user, **extra):
    body = {"name": "p", "targets": ["192.0.2.0/30"], "ports": "80,443", **extra}
    return user.post("/api/tasks", json=body)


def test_the_profile_goes_from_the_task_to_the_execution_and_the_scanner(api):
    user, scanner = api.user(), api.scanner()
    default = _task(user).get_json()["task"]
    assert default["profile"] == "standard"
    upload = claim(scanner)
    assert upload.execution["profile"] == "standard"

    deep = _task(user, profile="deep").get_json()["task"]
    assert deep["profile"] == "deep"
    assert user.get(f"/api/tasks/{deep['id']}").get_json()["task"]["profile"] == "deep"
    assert claim(scanner).execution["profile"] == "deep"
    with transaction() as conn:
        recorded = (
            conn.execute(
                sa.text("SELECT DISTINCT profile FROM scan_executions WHERE task_id = :id"),
                {"id": deep["id"]},
            )
            .scalars()
            .all()
        )
    assert recorded == ["deep"]


def test_an_unknown_profile_is_a_400_and_creates_nothing(api):
    user = api.user()
    for profile in ("turbo", 3, None, ""):
        response = _task(user, profile=profile)
        assert response.status_code == 400, profile
        assert "profile" in str(response.get_json()["error"]), response.get_json()
    assert user.get("/api/tasks").get_json()["items"] == []
