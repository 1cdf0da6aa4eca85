"""The scanner upload protocol end to end on real PostgreSQL and the PostgreSQL store (ING)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from app.db import transaction
from tests.support.scanner_protocol import (
    claim,
    dns_record,
    make_task,
    now_iso,
    observation,
    upload_body,
)
from tests.support.sql import rows, scalar


def test_batches_then_final_complete_the_execution(api):
    user, scanner = api.user(), api.scanner()
    task = make_task(user)
    upload = claim(scanner)
    first = upload.batch(0, [observation("192.0.2.1", 443), observation("192.0.2.1", 22)])
    assert first.status_code == 200, first.get_json()
    assert first.get_json() == {"success": True, "saved": 2}
    second = upload.batch(1, [observation("192.0.2.2", 443), observation("192.0.2.1", 443)])
    assert second.get_json() == {"success": True, "saved": 2}
    final = upload.final(2, [observation("192.0.2.3", 22)])
    assert final.status_code == 200, final.get_json()
    assert final.get_json() == {"success": True, "saved": 1}

    execution = rows(
        "SELECT status, observation_count, endpoint_count, ip_count FROM scan_executions "
        "WHERE id = :id",
        id=upload.id,
    )[0]
    assert tuple(execution) == ("succeeded", 5, 4, 3)
    assert scalar("SELECT status FROM scan_tasks WHERE id = :id", id=task["id"]) == "succeeded"
    assert (
        scalar("SELECT count(*) FROM scan_projection_outbox WHERE execution_id = :id", id=upload.id)
        == 1
    )
    assert (
        scalar("SELECT count(*) FROM scan_analysis_queue WHERE execution_id = :id", id=upload.id)
        == 1
    )
    receipts = rows(
        "SELECT batch_index, status, is_final, observation_count FROM scan_upload_receipts "
        "ORDER BY batch_index"
    )
    assert [tuple(r) for r in receipts] == [
        (0, "confirmed", False, 2),
        (1, "confirmed", False, 2),
        (2, "confirmed", True, 1),
    ]
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["projection_status"] == "pending"
    executions = user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
    assert executions[0]["projection_status"] == "pending"
    assert executions[0]["observation_count"] == 5 and executions[0]["endpoint_count"] == 4


def test_confirmed_retry_saves_nothing_and_keeps_projection_progress(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    batch = [observation("192.0.2.1", 443)]
    assert upload.batch(0, batch).get_json()["saved"] == 1
    assert upload.batch(0, batch).get_json() == {"success": True, "saved": 0}
    assert upload.final(1, []).get_json()["saved"] == 0
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scan_projection_outbox SET processed_at = now(), attempts = 3")
        )
    # Repeating the final (and an earlier batch) after success: saved=0, nothing reset.
    repeat = upload.post(upload.sent[-1])
    assert repeat.status_code == 200 and repeat.get_json() == {"success": True, "saved": 0}
    assert upload.post(upload.sent[0]).get_json() == {"success": True, "saved": 0}
    outbox = rows("SELECT processed_at IS NOT NULL AS done, attempts FROM scan_projection_outbox")[
        0
    ]
    assert outbox.done and outbox.attempts == 3


def test_same_identity_with_other_content_is_409(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    conflict = upload.batch(0, [observation("192.0.2.2")])
    assert conflict.status_code == 409
    assert conflict.get_json()["error"]["code"] == "checksum_mismatch"


def test_same_identity_with_other_content_from_a_stale_claim_is_lease_lost(api):
    """Someone who does not hold the claim is told to stop (``lease_lost``), not to start
    a new upload id as ``checksum_mismatch`` would tell them; with the same content, an
    exact replay of a confirmed batch is still ``saved: 0``."""
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    sent = [observation("192.0.2.1")]
    assert upload.batch(0, sent).status_code == 200
    stranger = str(uuid.uuid4())
    for body in (
        upload_body(stranger, 0, [observation("192.0.2.2")]),  # another content
        upload_body(stranger, 1, [observation("192.0.2.2")]),  # a new index
    ):
        refused = upload.post(body)
        assert refused.status_code == 409
        assert refused.get_json()["error"]["code"] == "lease_lost"
    # The holder still gets the identity's own answer.
    conflict = upload.batch(0, [observation("192.0.2.2")])
    assert conflict.get_json()["error"]["code"] == "checksum_mismatch"
    assert upload.batch(0, sent).get_json() == {"success": True, "saved": 0}


def test_a_new_batch_after_the_completed_final_is_lease_lost(api):
    """docs/scanner-protocol.md, "After the final": once the final completed the
    execution, its claim has ended."""
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    assert upload.final(1, []).status_code == 200
    for late in (
        upload.batch(2, [observation("192.0.2.2")]),
        upload.batch(0, [observation("192.0.2.2")], upload_id="another"),
    ):
        assert late.status_code == 409
        assert late.get_json()["error"]["code"] == "lease_lost"
    assert upload.final(1, []).get_json() == {"success": True, "saved": 0}


def test_final_needs_contiguous_confirmed_batches(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    assert upload.batch(2, [observation("192.0.2.2")]).status_code == 200
    gap = upload.final(3, [])
    assert gap.status_code == 409
    error = gap.get_json()["error"]
    assert error["code"] == "batch_gap" and error["details"]["batches"] == 2
    assert error["message"] == "final batch 3 needs batches 0..2: 1 of them are missing"
    assert upload.batch(1, [observation("192.0.2.3")]).status_code == 200
    # A final below a batch already sent names that batch, not the ones present.
    assert upload.batch(5, [observation("192.0.2.4")]).status_code == 200
    past = upload.final(4, [])
    assert past.status_code == 409
    assert past.get_json()["error"]["message"].startswith(
        "final batch 4 would end the upload, but batch 5 of it was sent already"
    )
    assert upload.batch(3, [observation("192.0.2.5")]).status_code == 200
    assert upload.batch(4, [observation("192.0.2.6")]).status_code == 200
    assert upload.final(6, []).status_code == 200


def test_final_at_index_zero_on_an_empty_upload(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    response = upload.final(0, [])
    assert response.status_code == 200 and response.get_json()["saved"] == 0
    assert tuple(
        rows("SELECT status, observation_count, endpoint_count FROM scan_executions")[0]
    ) == ("succeeded", 0, 0)


def test_lease_and_ownership_are_checked(api):
    user, scanner, other = api.user(), api.scanner(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    body = upload_body("00000000-0000-0000-0000-000000000000", 0, [observation("192.0.2.1")])
    wrong = scanner.post(f"/api/scanner/executions/{upload.id}/uploads", json=body)
    assert wrong.status_code == 409 and wrong.get_json()["error"]["code"] == "lease_lost"
    stolen = other.post(
        f"/api/scanner/executions/{upload.id}/uploads",
        json=upload_body(upload.token, 0, [observation("192.0.2.1")]),
    )
    assert stolen.status_code == 404
    missing = scanner.post(
        "/api/scanner/executions/999999/uploads",
        json=upload_body(upload.token, 0, [observation("192.0.2.1")]),
    )
    assert missing.status_code == 404
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET lease_expires_at = now() - interval '1s'"))
    expired = upload.batch(0, [observation("192.0.2.1")])
    assert expired.status_code == 409 and expired.get_json()["error"]["code"] == "lease_lost"
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0


def test_validation_errors_name_the_item_and_write_nothing(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    cases = {
        "bad ip": (
            upload_body(upload.token, 0, [observation("192.0.2.1"), observation("300.0.0.1")]),
            (1, "ip"),
        ),
        "bad port": (upload_body(upload.token, 0, [observation("192.0.2.1", 70000)]), (0, "port")),
        "unknown field": (
            upload_body(upload.token, 0, [observation("192.0.2.1", colour="red")]),
            (0, "colour"),
        ),
        "old timestamp": (
            upload_body(
                upload.token, 0, [observation("192.0.2.1", observed_at="2001-01-01T00:00:00Z")]
            ),
            (0, "observed_at"),
        ),
        "future timestamp": (
            upload_body(upload.token, 0, [observation("192.0.2.1", observed_at=now_iso(3600))]),
            (0, "observed_at"),
        ),
        "naive timestamp": (
            upload_body(
                upload.token, 0, [observation("192.0.2.1", observed_at="2026-11-30T06:00:00")]
            ),
            (0, "observed_at"),
        ),
        "bad tag": (
            upload_body(upload.token, 0, [observation("192.0.2.1", tags=["Bad Tag"])]),
            (0, "tags"),
        ),
    }
    for name, (body, (index, field)) in cases.items():
        response = upload.post(body)
        assert response.status_code == 400, name
        items = response.get_json()["error"]["details"]["items"]
        assert any(i.get("index") == index and field in (i.get("field") or "") for i in items), (
            name,
            items,
        )
    bad_checksum = upload_body(upload.token, 0, [observation("192.0.2.1")])
    bad_checksum["checksum"] = "0" * 64
    response = upload.post(bad_checksum)
    assert (
        response.status_code == 400 and response.get_json()["error"]["code"] == "checksum_invalid"
    )
    unknown_top = upload_body(upload.token, 0, [], extra_field=1)
    assert upload.post(unknown_top).status_code == 400
    assert upload.post({"protocol_version": 2}).status_code == 400
    not_json = scanner.client.post(
        f"/api/scanner/executions/{upload.id}/uploads",
        data=b"{nope",
        headers={"Authorization": f"Bearer {scanner.token}", "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0
    assert scalar("SELECT count(*) FROM scan_upload_stream") == 0


def test_batch_size_limits(tmp_path, database_url, engine):
    from app import create_app
    from tests.support.api import Api
    from tests.support.settings import make_settings

    settings = make_settings(
        database_url, tmp_path, ingest={"max_observations_per_batch": 3, "max_body_bytes": 4096}
    )
    api = Api(create_app(settings, engine=engine, modules="off"))
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    too_many = upload.batch(0, [observation(f"192.0.2.{i}") for i in range(4)])
    assert too_many.status_code == 400
    assert "at most 3" in too_many.get_json()["error"]["details"]["items"][0]["message"]
    too_big = upload.batch(0, [observation("192.0.2.1", service={"banner": "x" * 5000})])
    assert too_big.status_code == 413
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0


def test_stream_rules_for_kinds(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("192.0.2.1", "example.com"))
    ports = claim(scanner, kinds=["ports"])
    dns_on_main = ports.batch(0, [], dns_records=[dns_record("example.com", "192.0.2.9")])
    assert dns_on_main.status_code == 400
    dns = claim(scanner, kinds=["dns"])
    observations_on_dns = dns.batch(0, [observation("192.0.2.1")])
    assert observations_on_dns.status_code == 400
    sidecar_on_dns = dns.batch(
        0, [], dns_records=[dns_record("example.com", "192.0.2.9")], stream="dns"
    )
    assert sidecar_on_dns.status_code == 400
    wrong_kind = dns.batch(
        0, [], dns_records=[dns_record("example.com", "192.0.2.9")], kind="ports"
    )
    assert wrong_kind.status_code == 400
