"""Failure paths of the upload protocol: slow store, failed store, failed confirm, pool timeout."""

from __future__ import annotations

import json
import logging
import threading

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import create_app
from app.db import transaction
from app.search.ids import fact_id
from app.search.port import StoreUnavailable
from tests.support.api import Api
from tests.support.scanner_protocol import claim, make_task, now_iso, observation, upload_body
from tests.support.settings import make_settings
from tests.support.sql import rows, scalar
from tests.support.stores import install


def test_no_connection_is_held_during_store_io(small_pool_app):
    small = small_pool_app()
    app, engine, api = small.app, small.engine, small.api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    store = install(app)
    entered, release = threading.Event(), threading.Event()

    def slow_store(*_args, **_kwargs):
        entered.set()
        assert release.wait(20)

    store.before["write_facts"] = slow_store
    result: dict[str, object] = {}
    uploader = threading.Thread(
        target=lambda: result.setdefault("r", upload.batch(0, [observation("192.0.2.1")]))
    )
    uploader.start()
    try:
        assert entered.wait(20)
        # While the upload is inside the store, the only pooled connection is free.
        assert engine.pool.checkedout() == 0
        other = user.get("/api/tasks")
        assert other.status_code == 200
    finally:
        release.set()
        uploader.join(30)
    assert result["r"].status_code == 200 and result["r"].get_json()["saved"] == 1


def test_store_failure_leaves_a_pending_receipt_that_the_retry_completes(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    store = install(api.app)

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_execution_endpoints"] = unavailable
    failed = upload.batch(0, [observation("192.0.2.1")])
    assert failed.status_code == 503
    assert failed.get_json()["error"]["code"] == "store_unavailable"
    assert failed.headers["Retry-After"] == "5"
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    del store.before["write_execution_endpoints"]
    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 1
    assert scalar("SELECT status FROM scan_upload_receipts") == "confirmed"
    assert scalar("SELECT confirmed_count FROM scan_upload_stream") == 1


def _fail_the_next_confirm() -> None:
    """Make confirming a receipt fail (a database error) until ``fail_next_confirm`` is
    disarmed: the batch's store writes are done and its receipt stays pending."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                CREATE TABLE fail_next_confirm (armed boolean);
                INSERT INTO fail_next_confirm VALUES (true);
                CREATE FUNCTION fail_confirm() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF (SELECT armed FROM fail_next_confirm) THEN
                    RAISE EXCEPTION 'injected confirm failure'
                          USING ERRCODE = 'serialization_failure';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER fail_confirm BEFORE UPDATE OF status ON scan_upload_receipts
                  FOR EACH ROW EXECUTE FUNCTION fail_confirm();
                """
            )
        )


def test_store_success_then_confirm_failure_is_completed_by_the_retry(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    _fail_the_next_confirm()
    failed = upload.batch(0, [observation("192.0.2.1")])
    assert failed.status_code == 500  # a database error keeps its own class, not a 503
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    with transaction() as conn:
        conn.execute(sa.text("UPDATE fail_next_confirm SET armed = false"))
    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 1
    assert scalar("SELECT status FROM scan_upload_receipts") == "confirmed"
    assert upload.final(1, []).status_code == 200
    assert scalar("SELECT observation_count FROM scan_executions") == 1


def test_final_store_failure_keeps_the_final_reserved_until_the_retry(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    store = install(api.app)

    def count_fails(*_a, **_k):
        raise StoreUnavailable("count failed")

    store.before["count"] = count_fails
    failed = upload.final(1, [observation("192.0.2.2")])
    assert failed.status_code == 503
    assert scalar("SELECT status FROM scan_executions") == "running"
    assert scalar("SELECT count(*) FROM scan_projection_outbox") == 0
    late = upload.batch(2, [observation("192.0.2.3")])
    assert late.status_code == 409 and late.get_json()["error"]["code"] == "final_already_reserved"
    del store.before["count"]
    retried = upload.post(upload.sent[-2])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 1
    assert scalar("SELECT status FROM scan_executions") == "succeeded"
    assert scalar("SELECT observation_count FROM scan_executions") == 2
    assert store.names().count("refresh") == 2  # the retry redid refresh and count


def test_final_scope_covers_every_month_and_an_empty_execution_sends_no_count(
    tmp_path, database_url, engine
):
    from datetime import UTC, datetime, timedelta

    settings = make_settings(database_url, tmp_path, ingest={"observed_at_max_age_days": 400})
    api = Api(create_app(settings, engine=engine, modules="off"))
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("192.0.2.0/28",), ports="80,443")
    make_task(user, targets=("198.51.100.0/28",), ports="80,443")
    store = install(api.app)
    upload = claim(scanner)
    now = datetime.now(UTC)
    earlier = now - timedelta(days=40)
    older = now - timedelta(days=80)
    assert (
        upload.batch(0, [observation("192.0.2.1", observed_at=older.isoformat())]).status_code
        == 200
    )
    assert (
        upload.batch(1, [observation("192.0.2.3", observed_at=earlier.isoformat())]).status_code
        == 200
    )
    assert upload.final(2, [observation("192.0.2.2", observed_at=now_iso(-5))]).status_code == 200
    scope = next(args[0] for name, args, _ in store.calls if name == "count")
    refreshed = next(args[0] for name, args, _ in store.calls if name == "refresh")
    expected = {f"{older:%Y.%m}", f"{earlier:%Y.%m}", f"{now:%Y.%m}"}
    assert set(scope.months) == set(refreshed.months) == expected
    assert scalar("SELECT observation_count FROM scan_executions WHERE status = 'succeeded'") == 3
    empty = claim(scanner)
    store.calls.clear()
    assert empty.final(0, []).status_code == 200
    assert "count" not in store.names()
    assert "refresh" in store.names()


def test_pool_timeout_on_upload_is_503_with_retry_after_2(small_pool_app):
    small = small_pool_app(pool_timeout_seconds=0.2)
    app, engine, api = small.app, small.engine, small.api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    body = upload_body(upload.token, 0, [observation("192.0.2.1")])
    # Take the only pooled connection inside the upload, once the store writes are done,
    # so the upload's own confirm transaction is the one that waits for the pool.
    held = []
    store = install(app)
    store.after["write_execution_endpoints"] = lambda *_a, **_k: held.append(engine.connect())
    try:
        response = scanner.post(f"/api/scanner/executions/{upload.id}/uploads", json=body)
    finally:
        for connection in held:
            connection.close()
    assert len(held) == 1
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"
    assert response.get_json()["error"]["code"] == "database_busy"
    store.after.clear()
    assert upload.post(body).status_code == 200  # the retry confirms the pending receipt


def test_upload_events_carry_the_span_and_no_secrets(api, caplog):
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    with caplog.at_level(logging.INFO, logger="netmap.events"):
        assert (
            upload.batch(
                0, [observation("192.0.2.1", service={"banner": "SSH-2.0-secretbanner"})]
            ).status_code
            == 200
        )
        assert upload.final(1, []).status_code == 200
        assert upload.batch(0, [observation("192.0.2.9")]).status_code == 409
    events = [
        (r.netmap_event, r.netmap_fields) for r in caplog.records if hasattr(r, "netmap_event")
    ]
    stages = [f for name, f in events if name == "ScanWriteStageCompleted"]
    names = {f["stage"] for f in stages}
    assert {
        "validation",
        "auth",
        "upload_identity",
        "final_continuity",
        "receipt_reserve",
        "enrichment",
        "tags",
        "store_facts",
        "store_execution_endpoints",
        "receipt_confirm",
        "refresh",
        "final_commit",
        "execution_stats",
        "task_aggregation",
        "target_freshness",
    } <= names
    ok = next(f for f in stages if f["stage"] == "store_facts")
    for key in (
        "request_id",
        "scanner_id",
        "task_id",
        "upload_id",
        "batch_index",
        "is_final",
        "protocol_version",
        "observation_count",
        "duration_us",
        "success",
    ):
        assert key in ok, key
    assert any(f["stage"] == "receipt_reserve" and f["success"] is False for f in stages)
    # OBS-2: the last batch (same identity, other content) failed in the
    # upload-identity stage, inside the reservation, after auth had succeeded; the final
    # passed final continuity.
    last = [f for f in stages if f.get("request_id") == stages[-1].get("request_id")]
    assert [(f["stage"], f["success"]) for f in last][-3:] == [
        ("auth", True),
        ("upload_identity", False),
        ("receipt_reserve", False),
    ], last
    final = [f for f in stages if f.get("is_final")]
    assert ("final_continuity", True) in [(f["stage"], f["success"]) for f in final]
    assert any(name == "ScanWriteConnectionAcquired" and "wait_ms" in f for name, f in events)
    assert any(name == "ScanWriteConnectionReleased" and "hold_ms" in f for name, f in events)
    assert any(name == "ScanFinalRequestPlan" for name, _ in events)
    text = json.dumps([f for _, f in events], default=str)
    assert upload.token not in text and scanner.token not in text
    assert "secretbanner" not in text
    assert upload.sent[0]["checksum"] not in text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
fuzz_bodies = st.fixed_dictionaries(
    {},
    optional={
        "protocol_version": st.sampled_from([1, 2, "1", None]),
        "claim_token": st.sampled_from(["00000000-0000-0000-0000-000000000000", "x", None]),
        "upload_id": st.sampled_from(["u", "", "x" * 200, "bad id", 5]),
        "stream": st.sampled_from(["main", "dns", "other", None]),
        "batch_index": st.sampled_from([0, -1, 1, 10**9, "0", True]),
        "is_final": st.sampled_from([True, False, "yes", None]),
        "checksum": st.sampled_from(["0" * 64, "zz", None]),
        "observations": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "observed_at": st.sampled_from(
                        [now_iso(-5), "yesterday", "2026-11-30T06:00:00", 5]
                    ),
                    "ip": st.sampled_from(["192.0.2.1", "::1", "999.1.1.1", "", None]),
                    "port": st.sampled_from([0, 1, 65535, 65536, "80", None]),
                    "transport": st.sampled_from(["tcp", "udp", "sctp"]),
                    "state": st.sampled_from(["open", "weird"]),
                    "service": json_values,
                    "tags": json_values,
                    "extra": json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "dns_records": json_values,
        "kind": st.sampled_from(["ports", "dns", "x"]),
    },
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=fuzz_bodies)
def test_fuzzed_bodies_never_cause_a_500_or_a_partial_write(api, body):
    if not hasattr(api, "_fuzz"):
        user, scanner = api.user(), api.scanner()
        make_task(user, ports="80,443")
        api._fuzz = claim(scanner)
    upload = api._fuzz
    if body.get("claim_token") == "x":
        body["claim_token"] = upload.token
    response = upload.post(body)
    assert response.status_code in (400, 404, 409, 413), (response.status_code, response.get_json())
    assert response.get_json()["error"]["code"]
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0
    assert scalar("SELECT count(*) FROM scan_upload_stream") == 0


def test_legacy_receipts_without_storage_references_use_the_full_history_scope(api, caplog):
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    # A receipt written before storage references existed (or migrated history).
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, "
                "checksum, observation_count, status, storage_references) "
                "VALUES (:e, 'older-upload', 'main', 0, 'c', 3, 'confirmed', NULL)"
            ),
            {"e": upload.id},
        )
    store = install(api.app)
    with caplog.at_level(logging.WARNING, logger="netmap.events"):
        assert upload.final(1, []).status_code == 200
    scope = next(args[0] for name, args, _ in store.calls if name == "count")
    assert scope.legacy_full_history
    assert any(
        getattr(r, "netmap_event", None) == "ScanSummaryLegacyIndexScope" for r in caplog.records
    )
    assert scalar("SELECT observation_count FROM scan_executions") == 1


def test_a_batch_pending_across_the_fact_id_upgrade_is_redone_under_its_own_ids(api):
    """A batch reserved before migration 2000 wrote digest-only fact ids (scheme 1); its
    retry after the upgrade must overwrite those facts, not add execution-led copies."""
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    _fail_the_next_confirm()
    items = [observation("192.0.2.1", 80), observation("192.0.2.1", 443)]
    assert upload.batch(0, items).status_code == 500
    # The state an older release left: its receipt (scheme 1) and its facts' ids.
    with transaction() as conn:
        facts = conn.execute(
            sa.text(
                "SELECT id::text AS id, execution_id, upload_id, stream, batch_index, position "
                "FROM search_facts ORDER BY position"
            )
        ).all()
        assert [f.id.replace("-", "")[:12] for f in facts] == [f"{facts[0].execution_id:012x}"] * 2
        old_ids = [
            fact_id(f.execution_id, f.upload_id, f.stream, f.batch_index, f.position, scheme=1)
            for f in facts
        ]
        for fact, old in zip(facts, old_ids, strict=True):
            conn.execute(
                sa.text(
                    "UPDATE search_facts SET id = CAST(:old AS uuid) WHERE id = CAST(:id AS uuid)"
                ),
                {"old": old, "id": fact.id},
            )
        conn.execute(sa.text("UPDATE scan_upload_receipts SET fact_ids = 1"))
        conn.execute(sa.text("UPDATE fail_next_confirm SET armed = false"))

    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 2
    stored = [
        r.id.replace("-", "") for r in rows("SELECT id::text FROM search_facts ORDER BY position")
    ]
    assert stored == old_ids  # the same two facts, not two more
    assert upload.final(1, []).status_code == 200
    assert scalar("SELECT observation_count FROM scan_executions") == 2
