"""Hardened uploads (issue 11 §1): text the stores refuse, permanent refusals, all-or-nothing
batches, concurrent finals, strict protocol version and results outside the scope."""

from __future__ import annotations

import json
import threading

import sqlalchemy as sa

from app import create_app, db
from app.db import transaction
from tests.support.api import Api
from tests.support.scanner_protocol import (
    checksum,
    claim,
    dns_record,
    make_task,
    observation,
    upload_body,
)
from tests.support.settings import make_settings
from tests.support.sql import rows, scalar
from tests.support.stores import install


def _post_raw(upload, text: str):
    """Post a body exactly as written (NaN literals and \\ud800 escapes included)."""
    return upload.scanner.client.post(
        f"/api/scanner/executions/{upload.id}/uploads",
        data=text.encode("utf-8"),
        headers={
            "Authorization": f"Bearer {upload.scanner.token}",
            "Content-Type": "application/json",
        },
    )


def _nothing_written():
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0
    assert scalar("SELECT count(*) FROM search_facts") == 0


def _items(response) -> list[dict]:
    return response.get_json()["error"]["details"]["items"]


# --- text the stores cannot hold ------------------------------------------------------------


def test_nul_in_free_text_is_escaped_and_stored(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    item = observation(
        "192.0.2.1",
        service={"name": "ssh", "product": "Open\x00SSH", "version": "9\x00", "banner": "a\x00b"},
        hostname="h\x00st.example",
        tls={"subject\x00": ["cn\x00"]},
    )
    response = upload.final(0, [item])
    assert response.status_code == 200, response.get_json()
    (body,) = rows("SELECT body FROM search_facts")
    fact = body[0]
    assert fact["banner"] == "a\\x00b"
    assert fact["product"] == "Open\\x00SSH" and fact["version"] == "9\\x00"
    assert fact["hostname"] == "h\\x00st.example"
    assert fact["tls"] == {"subject\\x00": ["cn\\x00"]}
    assert scalar("SELECT status FROM scan_executions") == "succeeded"


def test_nul_in_a_tag_or_dns_name_is_a_400_naming_the_item(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    tagged = upload.batch(0, [observation("192.0.2.1"), observation("192.0.2.2", tags=["a\x00"])])
    assert tagged.status_code == 400
    assert {(i["index"], i["field"]) for i in _items(tagged)} == {(1, "tags")}
    _nothing_written()


def test_nan_and_infinity_in_details_are_a_400(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        text = json.dumps(upload_body(upload.token, 0, [observation("192.0.2.1")]))
        text = text.replace('"state": "open"', f'"state": "open", "http": {{"x": {literal}}}')
        response = _post_raw(upload, text)
        assert response.status_code == 400, (literal, response.get_data())
        assert response.get_json()["error"]["code"] == "invalid_json"
    _nothing_written()


def test_a_lone_surrogate_is_a_400_naming_the_field(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    text = json.dumps(upload_body(upload.token, 0, [observation("192.0.2.1")]))
    text = text.replace('"state": "open"', '"state": "open", "service": {"banner": "x\\ud800"}')
    response = _post_raw(upload, text)
    assert response.status_code == 400
    (item,) = _items(response)
    assert item["index"] == 0 and item["field"] == "service.banner"
    _nothing_written()


def test_protocol_version_must_be_the_integer_one(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    for value in (True, 1.0, "1", 2):
        response = upload.post(upload_body(upload.token, 0, [], protocol_version=value))
        assert response.status_code == 400, value
        assert _items(response)[0]["field"] == "protocol_version"
    _nothing_written()


def test_observed_at_at_the_edges_of_the_calendar_is_a_400(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    for moment in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00"):
        response = upload.batch(0, [observation("192.0.2.1", observed_at=moment)])
        assert response.status_code == 400, moment
        assert _items(response)[0]["field"] == "observed_at"
    _nothing_written()


def test_json_nested_thousands_of_levels_is_a_400(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    for depth in (40, 5000, 100_000):
        response = _post_raw(upload, "[" * depth + "]" * depth)
        assert response.status_code == 400, depth
        assert response.get_json()["error"]["code"] in ("invalid_json", "invalid_upload")
    nested = json.dumps(upload_body(upload.token, 0, [observation("192.0.2.1")]))
    deep = '{"a":' * 50 + "1" + "}" * 50
    response = _post_raw(
        upload, nested.replace('"state": "open"', f'"state": "open", "tls": {deep}')
    )
    assert response.status_code == 400
    _nothing_written()


# --- permanent store refusals ---------------------------------------------------------------


def test_a_postgres_data_error_is_a_422_naming_the_item_and_never_a_503(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                CREATE FUNCTION refuse_fact() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.body->>'banner' = 'refuse-me' THEN
                    RAISE EXCEPTION 'refused' USING ERRCODE = 'invalid_text_representation';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_fact BEFORE INSERT ON search_facts
                  FOR EACH ROW EXECUTE FUNCTION refuse_fact();
                """
            )
        )
    refused = upload.batch(0, [observation("192.0.2.1", service={"banner": "refuse-me"})])
    assert refused.status_code == 422, refused.get_json()
    assert refused.get_json()["error"]["code"] == "store_refused"
    assert "Retry-After" not in refused.headers
    # All or nothing: the batch is not confirmed, so no final can count it.
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    final = upload.final(1, [])
    assert final.status_code == 409 and final.get_json()["error"]["code"] == "batch_gap"
    other = upload.final(0, [], upload_id="upload-2")
    assert other.status_code == 409 and other.get_json()["error"]["code"] == "batch_gap"
    assert scalar("SELECT status FROM scan_executions") == "running"


def test_an_item_the_store_refuses_is_a_422_naming_its_index(api):
    from app.search.port import BulkItemResult, BulkResult

    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    store = install(api.app)
    real_write = store.inner.write_facts

    def refuse_second(facts):
        result = real_write(facts)
        items = list(result.items)
        items[1] = BulkItemResult(items[1].id, items[1].index, 400, "mapper_parsing_exception")
        return BulkResult(items=tuple(items))

    store.inner.write_facts = refuse_second
    response = upload.batch(0, [observation("192.0.2.1"), observation("192.0.2.2")])
    assert response.status_code == 422
    (item,) = _items(response)
    assert (item["list"], item["index"], item["error"]) == (
        "observations",
        1,
        "mapper_parsing_exception",
    )


# --- a batch is all or nothing --------------------------------------------------------------


def test_a_final_waits_for_pending_batches_of_every_upload_id(api):
    from app.search.port import StoreUnavailable

    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    store = install(api.app)

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_execution_endpoints"] = unavailable
    first = upload.batch(0, [observation("192.0.2.1"), observation("192.0.2.2")])
    assert first.status_code == 503 and first.headers["Retry-After"] == "5"
    del store.before["write_execution_endpoints"]
    # Another upload id's final while batch 0 of upload-1 is pending: refused.
    other = upload.final(0, [observation("192.0.2.3")], upload_id="upload-2")
    assert other.status_code == 409 and other.get_json()["error"]["code"] == "batch_gap"
    assert scalar("SELECT status FROM scan_executions") == "running"
    # The retry of the pending batch completes it; now the other final is accepted and
    # counts exactly the confirmed facts.
    assert upload.post(upload.sent[0]).get_json()["saved"] == 2
    retried = upload.post(upload.sent[1])
    assert retried.status_code == 200, retried.get_json()
    assert scalar("SELECT observation_count FROM scan_executions") == 3


def test_no_batch_of_any_upload_id_after_a_final_is_reserved(api):
    from app.search.port import StoreUnavailable

    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    store = install(api.app)

    def count_fails(*_a, **_k):
        raise StoreUnavailable("count failed")

    store.before["count"] = count_fails
    assert upload.final(0, [observation("192.0.2.1")]).status_code == 503
    late = upload.batch(0, [observation("192.0.2.2")], upload_id="upload-2")
    assert late.status_code == 409
    assert late.get_json()["error"]["code"] == "final_already_reserved"
    # Whatever the other upload sends: a final of its own, or a DNS sidecar batch.
    sidecar = [dns_record("host.example", "192.0.2.1")]
    for refused in (
        upload.final(0, [observation("192.0.2.3")], upload_id="upload-3"),
        upload.batch(0, [], dns_records=sidecar, stream="dns", upload_id="upload-2"),
    ):
        assert refused.status_code == 409
        assert refused.get_json()["error"]["code"] == "final_already_reserved"
        assert refused.get_json()["error"]["details"]["upload_id"] == "upload-1"
    del store.before["count"]
    assert upload.post(upload.sent[0]).status_code == 200
    assert scalar("SELECT observation_count FROM scan_executions") == 1


def test_twenty_concurrent_copies_of_the_final_never_get_lease_lost(tmp_path, database_url):
    settings = make_settings(database_url, tmp_path, database={"pool_size": 10, "max_overflow": 15})
    engine = db.create_engine(database_url, settings.database)
    try:
        app = create_app(settings, engine=engine, modules="off")
        api = Api(app)
        user, scanner = api.user(), api.scanner()
        make_task(user)
        upload = claim(scanner)
        body = upload_body(upload.token, 0, [observation("192.0.2.1")], is_final=True)
        copies = 20
        store = install(app)
        # Every copy reaches the store before any commits, so most commit after the winner.
        gate = threading.Barrier(copies, timeout=30)
        store.before["write_facts"] = lambda *_a, **_k: gate.wait()
        answers: list[tuple[int, dict]] = []

        def send():
            response = scanner.post(f"/api/scanner/executions/{upload.id}/uploads", json=body)
            answers.append((response.status_code, response.get_json()))

        threads = [threading.Thread(target=send) for _ in range(copies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(answers) == copies
        statuses = [status for status, _ in answers]
        assert 409 not in statuses, answers
        assert set(statuses) <= {200, 503}
        saved = sorted(a["saved"] for s, a in answers if s == 200)
        assert saved.count(1) == 1 and set(saved) <= {0, 1}
        assert scalar("SELECT status FROM scan_executions") == "succeeded"
        assert scalar("SELECT observation_count FROM scan_executions") == 1
    finally:
        db.set_engine(None)
        engine.dispose()


# --- results outside the execution's scope ---------------------------------------------------


def test_observations_outside_the_targets_or_ports_are_a_400_naming_them(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("192.0.2.0/28",), ports="22,443")
    upload = claim(scanner)
    response = upload.batch(
        0,
        [
            observation("192.0.2.1", 443),
            observation("198.51.100.1", 443),
            observation("192.0.2.2", 80),
            observation("192.0.2.3", 22, transport="udp"),
            # Verdicts are remembered per address and port: repeats are named again.
            observation("198.51.100.1", 22),
            observation("192.0.2.1", 80),
            observation("192.0.2.1", 22),
        ],
    )
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "out_of_scope"
    assert {(i["index"], i["field"]) for i in _items(response)} == {
        (1, "ip"),
        (2, "port"),
        (3, "transport"),
        (4, "ip"),
        (5, "port"),
    }
    _nothing_written()


def test_dns_answers_for_names_not_asked_are_a_400(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"})
    upload = claim(scanner)
    response = upload.final(
        0,
        [],
        dns_records=[
            dns_record("example.com", "192.0.2.10"),
            dns_record("metadata.attacker.example", "169.254.169.254"),
        ],
    )
    assert response.status_code == 400
    assert [(i["index"], i["field"]) for i in _items(response)] == [(1, "name")]
    _nothing_written()


def test_cname_chains_and_names_under_the_target_are_in_scope(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"})
    upload = claim(scanner)
    first = upload.batch(
        0, [], dns_records=[dns_record("www.example.com", "cdn.example.net", type="CNAME")]
    )
    assert first.status_code == 200, first.get_json()
    # The alias confirmed in batch 0 may be resolved in batch 1.
    final = upload.final(1, [], dns_records=[dns_record("cdn.example.net", "192.0.2.20")])
    assert final.status_code == 200, final.get_json()


def test_scoped_or_wrong_family_addresses_in_dns_answers_are_a_400(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"})
    upload = claim(scanner)
    response = upload.final(
        0,
        [],
        dns_records=[
            dns_record("example.com", "fe80::1%eth0", type="AAAA"),
            dns_record("example.com", "2001:db8::1", type="A"),
        ],
    )
    assert response.status_code == 400
    assert [i["index"] for i in _items(response)] == [0, 1]


def test_child_tasks_follow_the_special_use_policy(api):
    user, scanner = api.user(), api.scanner()
    parent = user.post(
        "/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"}
    ).get_json()["task"]
    upload = claim(scanner)
    records = [
        dns_record("example.com", "169.254.169.254"),
        dns_record("example.com", "224.0.0.1"),
        dns_record("example.com", "fe80::1", type="AAAA"),
        dns_record("example.com", "127.0.0.1"),
        dns_record("example.com", "10.0.0.5"),
        dns_record("example.com", "192.0.2.10"),
    ]
    assert upload.final(0, [], dns_records=records).status_code == 200
    (child_id,) = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]["child_task_ids"]
    child = user.get(f"/api/tasks/{child_id}").get_json()["task"]
    assert child["targets"] == ["10.0.0.5", "127.0.0.1", "192.0.2.10"]


def test_a_dns_task_resolving_only_to_refused_addresses_has_no_child(api):
    user, scanner = api.user(), api.scanner()
    parent = user.post(
        "/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"}
    ).get_json()["task"]
    upload = claim(scanner)
    assert (
        upload.final(0, [], dns_records=[dns_record("example.com", "169.254.169.254")]).status_code
        == 200
    )
    detail = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]
    assert detail["child_task_ids"] == [] and detail["status"] == "succeeded"


def test_task_targets_follow_the_special_use_policy(api):
    user = api.user()
    refused = user.post(
        "/api/tasks",
        json={"name": "x", "targets": ["169.254.169.254", "ff02::1", "0.0.0.0"], "ports": "80"},
    )
    assert refused.status_code == 400
    assert [i["index"] for i in refused.get_json()["error"]["details"]["items"]] == [0, 1, 2]
    allowed = user.post(
        "/api/tasks", json={"name": "x", "targets": ["127.0.0.1", "10.0.0.0/24"], "ports": "80"}
    )
    assert allowed.status_code == 201


def test_the_checksum_is_over_the_body_as_received(api):
    """Escaping happens after the checksum check: a scanner hashes what it sent."""
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    items = [observation("192.0.2.1", service={"banner": "\x00\x01"})]
    body = upload_body(upload.token, 0, items)
    assert body["checksum"] == checksum(items, [])
    assert upload.post(body).status_code == 200


def test_a_previous_attempts_pending_batches_do_not_block_the_next_attempt(api):
    from app.scan_control.dispatch import recover_expired_leases
    from app.search.port import StoreUnavailable

    user, scanner = api.user(), api.scanner()
    make_task(user)
    first = claim(scanner)
    store = install(api.app)

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_facts"] = unavailable
    assert first.batch(0, [observation("192.0.2.1")]).status_code == 503
    assert first.final(0, [observation("192.0.2.1")], upload_id="first-final").status_code == 409
    del store.before["write_facts"]
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET lease_expires_at = now() - interval '1s'"))
        assert recover_expired_leases(conn, retry_backoff_seconds=0).requeued == 1
    second = claim(scanner)
    assert second.id == first.id and second.token != first.token
    final = second.final(0, [observation("192.0.2.2")], upload_id="attempt-2")
    assert final.status_code == 200, final.get_json()
    assert scalar("SELECT status FROM scan_executions") == "succeeded"
