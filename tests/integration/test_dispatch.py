"""Claims, leases, recovery and task aggregation on real PostgreSQL (SCN-3, SCN-4)."""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.scan_control.dispatch import (
    aggregate_task_status,
    claim_next_execution,
    derive_task_status,
    recover_expired_leases,
)


def _create_task(user, targets, name="t"):
    response = user.post("/api/tasks", json={"name": name, "targets": targets, "ports": "80"})
    assert response.status_code == 201, response.get_json()
    return response.get_json()["task"]


def _expire_lease(execution_id: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET lease_expires_at = now() - interval '1 second' "
                "WHERE id = :id"
            ),
            {"id": execution_id},
        )


def _execution(execution_id: int):
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT * FROM scan_executions WHERE id = :id"), {"id": execution_id}
        ).one()


def _task_status(task_id: int) -> str:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT status FROM scan_tasks WHERE id = :id"), {"id": task_id}
        ).scalar()


def test_concurrent_claims_never_share_an_execution(api, engine):
    user = api.user()
    settings = api.app.extensions["netmap.settings"]
    from app.scan_control.creation import create_task, validate_task_request

    # One-address executions so there are many to race for.
    small = settings.scan.__class__(execution_max_addresses=1)
    request = validate_task_request(
        {"name": "race", "targets": ["192.0.2.0/26"], "ports": "80"}, settings.scan
    )
    with transaction() as conn:
        create_task(conn, owner_id=user.id, request=request, limits=small)
    scanners = [api.scanner() for _ in range(8)]
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(scanners))
    errors: list[BaseException] = []

    def worker(scanner_id: int) -> None:
        try:
            barrier.wait()
            while True:
                # Each thread takes its own pooled connection: real concurrent transactions.
                with transaction() as conn:
                    execution = claim_next_execution(conn, scanner_id=scanner_id, lease_seconds=60)
                if execution is None:
                    return
                with lock:
                    claimed.append(execution.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s.id,)) for s in scanners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with transaction() as conn:
        total = conn.execute(sa.text("SELECT count(*) FROM scan_executions")).scalar()
        running = conn.execute(
            sa.text(
                "SELECT count(DISTINCT claim_token) FROM scan_executions WHERE status = 'running'"
            )
        ).scalar()
    assert len(claimed) == total == len(set(claimed)) == running


def test_claim_returns_the_contract_and_204_when_empty(api):
    user, scanner = api.user(), api.scanner()
    task = _create_task(user, ["192.0.2.1"])
    response = scanner.claim()
    assert response.status_code == 200
    execution = response.get_json()["execution"]
    assert set(execution) >= {
        "id",
        "task_id",
        "kind",
        "claim_token",
        "lease_expires_at",
        "targets",
        "ports",
        "transports",
    }
    assert execution["task_id"] == task["id"]
    assert execution["kind"] == "ports"
    assert execution["targets"] == ["192.0.2.1"]
    assert _task_status(task["id"]) == "running"
    assert scanner.claim().status_code == 204


def test_claim_can_ask_for_kinds(api):
    user, scanner = api.user(), api.scanner()
    _create_task(user, ["192.0.2.1", "example.com"])
    dns = scanner.claim(kinds=["dns"]).get_json()["execution"]
    assert dns["kind"] == "dns" and dns["targets"] == ["example.com"]
    assert scanner.claim(kinds=["dns"]).status_code == 204
    assert scanner.claim(kinds=["smtp"]).status_code == 400


def test_lease_renewal_and_lost_lease(api):
    user, scanner = api.user(), api.scanner()
    _create_task(user, ["192.0.2.1"])
    execution = scanner.claim().get_json()["execution"]
    path = f"/api/scanner/executions/{execution['id']}/lease"
    renewed = scanner.post(path, json={"claim_token": execution["claim_token"]})
    assert renewed.status_code == 200
    assert renewed.get_json()["lease_expires_at"] >= execution["lease_expires_at"]
    wrong = scanner.post(path, json={"claim_token": "00000000-0000-0000-0000-000000000000"})
    assert wrong.status_code == 409 and wrong.get_json()["error"]["code"] == "lease_lost"
    garbage = scanner.post(path, json={"claim_token": "not-a-uuid"})
    assert garbage.status_code == 400
    _expire_lease(execution["id"])
    expired = scanner.post(path, json={"claim_token": execution["claim_token"]})
    assert expired.status_code == 409 and expired.get_json()["error"]["code"] == "lease_lost"


def test_expired_lease_is_requeued_and_the_old_token_rejected(api):
    user, first, second = api.user(), api.scanner(), api.scanner()
    task = _create_task(user, ["192.0.2.1"])
    old = first.claim().get_json()["execution"]
    _expire_lease(old["id"])
    with transaction() as conn:
        result = recover_expired_leases(conn, retry_backoff_seconds=0)
    assert (result.requeued, result.failed) == (1, 0)
    row = _execution(old["id"])
    assert row.status == "queued" and row.claim_token is None and row.scanner_id is None
    assert "lease expired" in row.last_error
    assert _task_status(task["id"]) == "queued"
    new = second.claim().get_json()["execution"]
    assert new["id"] == old["id"] and new["claim_token"] != old["claim_token"]
    assert new["attempt"] == 2
    # The first scanner no longer sees the execution at all.
    stale = first.post(
        f"/api/scanner/executions/{old['id']}/lease", json={"claim_token": old["claim_token"]}
    )
    assert stale.status_code == 404
    # The new owner's token works.
    ok = second.post(
        f"/api/scanner/executions/{new['id']}/lease", json={"claim_token": new["claim_token"]}
    )
    assert ok.status_code == 200


def test_attempts_are_capped_then_the_execution_fails(api):
    user, scanner = api.user(), api.scanner()
    task = _create_task(user, ["192.0.2.1"])
    for attempt in range(1, 4):
        claimed = scanner.claim().get_json()["execution"]
        assert claimed["attempt"] == attempt
        _expire_lease(claimed["id"])
        with transaction() as conn:
            recover_expired_leases(conn, retry_backoff_seconds=0)
    row = _execution(claimed["id"])
    assert row.status == "failed" and row.attempts == 3
    assert "attempt 3 of 3" in row.last_error
    assert _task_status(task["id"]) == "failed"
    assert scanner.claim().status_code == 204


def test_requeue_backoff_delays_the_next_claim(api):
    user, scanner = api.user(), api.scanner()
    _create_task(user, ["192.0.2.1"])
    claimed = scanner.claim().get_json()["execution"]
    _expire_lease(claimed["id"])
    with transaction() as conn:
        recover_expired_leases(conn, retry_backoff_seconds=3600)
    assert scanner.claim().status_code == 204


def test_fail_is_idempotent_and_needs_the_token(api, caplog):
    caplog.set_level(logging.INFO)
    user, scanner, other = api.user(), api.scanner(), api.scanner()
    task = _create_task(user, ["192.0.2.1"])
    claimed = scanner.claim().get_json()["execution"]
    path = f"/api/scanner/executions/{claimed['id']}/fail"
    assert other.post(path, json={"claim_token": claimed["claim_token"]}).status_code == 404
    wrong = scanner.post(path, json={"claim_token": "00000000-0000-0000-0000-000000000000"})
    assert wrong.status_code == 409
    first = scanner.post(path, json={"claim_token": claimed["claim_token"], "reason": "boom"})
    again = scanner.post(path, json={"claim_token": claimed["claim_token"], "reason": "boom"})
    assert first.status_code == again.status_code == 200
    row = _execution(claimed["id"])
    assert row.status == "failed" and row.last_error == "boom"
    assert _task_status(task["id"]) == "failed"
    # Failed at once, not requeued; the repeat told nothing new.
    assert scanner.claim().status_code == 204
    events = [
        r for r in caplog.records if getattr(r, "netmap_event", "") == "ExecutionFailedByScanner"
    ]
    assert len(events) == 1


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], "queued"),
        (["queued", "queued"], "queued"),
        (["queued", "running"], "running"),
        (["queued", "succeeded"], "running"),
        (["succeeded", "succeeded"], "succeeded"),
        (["failed", "failed"], "failed"),
        (["succeeded", "failed"], "partially_failed"),
        (["partially_failed", "succeeded"], "partially_failed"),
        (["running", "failed"], "running"),
    ],
)
def test_derive_task_status(statuses, expected):
    assert derive_task_status(statuses) == expected


def test_aggregation_follows_execution_changes_in_the_same_transaction(api):
    user, scanner = api.user(), api.scanner()
    task = _create_task(user, ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"])
    one = scanner.claim().get_json()["execution"]
    two = scanner.claim().get_json()["execution"]
    assert _task_status(task["id"]) == "running"
    scanner.post(
        f"/api/scanner/executions/{one['id']}/fail", json={"claim_token": one["claim_token"]}
    )
    assert _task_status(task["id"]) == "running"
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET status = 'succeeded', finished_at = now() "
                "WHERE id = :id"
            ),
            {"id": two["id"]},
        )
        assert aggregate_task_status(conn, task["id"]) == "running"  # third still queued
    three = scanner.claim().get_json()["execution"]
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET status = 'succeeded', finished_at = now() "
                "WHERE id = :id"
            ),
            {"id": three["id"]},
        )
        aggregate_task_status(conn, task["id"])
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["status"] == "partially_failed"
    assert detail["finished_at"] is not None
    assert detail["counts"]["executions"] == {
        "queued": 0,
        "running": 0,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 0,
    }


def test_child_tasks_count_towards_the_parent(api):
    from app.scan_control.creation import create_task, validate_task_request

    user, scanner = api.user(), api.scanner()
    parent = _create_task(user, ["example.com"])
    dns = scanner.claim().get_json()["execution"]
    settings = api.app.extensions["netmap.settings"]
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scan_executions SET status = 'succeeded' WHERE id = :id"),
            {"id": dns["id"]},
        )
        request = validate_task_request(
            {"name": "resolved", "targets": ["192.0.2.10"], "ports": "80"}, settings.scan
        )
        child_id = create_task(
            conn,
            owner_id=user.id,
            request=request,
            limits=settings.scan,
            parent_task_id=parent["id"],
            parent_execution_id=dns["id"],
        )
        aggregate_task_status(conn, child_id)
        aggregate_task_status(conn, parent["id"])
    detail = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]
    assert detail["status"] == "running"  # waiting for the child
    assert detail["child_task_ids"] == [child_id]
    child_execution = scanner.claim().get_json()["execution"]
    assert child_execution["task_id"] == child_id
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scan_executions SET status = 'succeeded' WHERE id = :id"),
            {"id": child_execution["id"]},
        )
        aggregate_task_status(conn, child_id)
    assert _task_status(child_id) == "succeeded"
    assert _task_status(parent["id"]) == "succeeded"
    child = user.get(f"/api/tasks/{child_id}").get_json()["task"]
    assert child["parent_task_id"] == parent["id"]
