"""The upload protocol on the Elasticsearch store (the protocol simulator, a real HTTP server).

Finals refresh and count exactly the indices of the execution's months
(ING-8/9), an empty execution sends no count, and store failures leave the
receipt pending for the scanner's retry (ING-1/3). A real cluster is used when
``NETMAP_TEST_ES_URL`` is set for the search tests; these tests need the
simulator's fault injection and request log, so they always use it.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from app import close_app, create_app
from app.db import transaction
from tests.support.api import Api
from tests.support.es_cluster import Fault
from tests.support.es_simulator import EsSimulator
from tests.support.scanner_protocol import claim, make_task, observation
from tests.support.settings import make_settings
from tests.support.sql import scalar
from tests.support.stores import install


@pytest.fixture(scope="module")
def simulator():
    with EsSimulator() as sim:
        yield sim


def _es_sections(simulator) -> dict[str, dict]:
    return {
        "elasticsearch": {
            "url": simulator.url,
            "index_prefix": f"up-{uuid.uuid4().hex[:8]}",
            "request_timeout_seconds": 5.0,
            "bulk_retry_backoff_ms": 10,
            "bulk_retry_budget": 2,
        },
        "ingest": {"observed_at_max_age_days": 400},
    }


def _es_app(simulator, database_url, tmp_path, **sections):
    return make_settings(database_url, tmp_path, **_es_sections(simulator), **sections)


@pytest.fixture
def es_api(simulator, database_url, tmp_path, engine):
    settings = _es_app(simulator, database_url, tmp_path)
    app = create_app(settings, engine=engine, modules="off")
    yield Api(app), settings.elasticsearch.index_prefix
    simulator.clear_faults()
    close_app(app)


def test_final_refreshes_and_counts_exactly_the_execution_months(simulator, es_api):
    api, prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="22,80,443")
    upload = claim(scanner)
    now = datetime.now(UTC)
    earlier = now - timedelta(days=40)
    assert (
        upload.batch(0, [observation("192.0.2.1", 22, observed_at=earlier.isoformat())]).status_code
        == 200
    )
    assert (
        upload.batch(1, [observation("192.0.2.1", 80), observation("192.0.2.2", 80)]).status_code
        == 200
    )
    before = len(simulator.requests)
    final = upload.final(2, [observation("192.0.2.2", 80)])
    assert final.status_code == 200, final.get_json()
    requests = simulator.requests[before:]
    months = {f"{prefix}-facts-{earlier:%Y.%m}", f"{prefix}-facts-{now:%Y.%m}"}
    refreshes = [r for r in requests if r.endpoint == "_refresh"]
    assert len(refreshes) == 1
    refreshed = set(refreshes[0].target.split("?")[0].strip("/").split("/")[0].split(","))
    assert refreshed == months | {f"{prefix}-execution-endpoints"}
    counted = [r for r in requests if r.endpoint == "_search" and f"{prefix}-facts-" in r.target]
    assert len(counted) == 1
    assert set(counted[0].target.strip("/").split("/")[0].split(",")) == months
    row = _execution_counts()
    assert row == ("succeeded", 4, 3, 2)
    results = user.get(f"/api/tasks/{upload.execution['task_id']}/results").get_json()
    assert results["total_endpoints"] == 3 and results["total_ips"] == 2


def _execution_counts():
    with transaction() as conn:
        return tuple(
            conn.execute(
                sa.text(
                    "SELECT status, observation_count, endpoint_count, ip_count "
                    "FROM scan_executions ORDER BY id DESC LIMIT 1"
                )
            ).one()
        )


def test_an_empty_execution_sends_no_count(simulator, es_api):
    api, prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    before = len(simulator.requests)
    assert upload.final(0, []).status_code == 200
    requests = simulator.requests[before:]
    assert not [r for r in requests if f"{prefix}-facts-" in r.target and r.endpoint == "_search"]
    assert _execution_counts() == ("succeeded", 0, 0, 0)


def test_refresh_failure_keeps_the_final_pending_until_the_retry(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    simulator.inject(Fault("status", endpoint="_refresh", status=500, times=10))
    failed = upload.final(1, [observation("192.0.2.2")])
    assert failed.status_code == 503
    assert scalar("SELECT status FROM scan_executions") == "running"
    assert scalar("SELECT count(*) FROM scan_upload_receipts WHERE status = 'pending'") == 1
    simulator.clear_faults()
    before = len(simulator.requests_to("_refresh"))
    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 1
    assert len(simulator.requests_to("_refresh")) == before + 1
    assert _execution_counts() == ("succeeded", 2, 2, 2)


def test_failed_bulk_items_leave_the_receipt_pending(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    simulator.inject(
        Fault(
            "item_status",
            endpoint="_bulk",
            every_nth_item=1,
            status=503,
            error_type="unavailable_shards_exception",
            times=1,
        )
    )
    failed = upload.batch(0, [observation("192.0.2.1"), observation("192.0.2.2")])
    assert failed.status_code == 503
    assert failed.get_json()["error"]["code"] == "store_unavailable"
    assert failed.headers["Retry-After"] == "5"
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == 2
    assert upload.final(1, []).status_code == 200
    assert _execution_counts() == ("succeeded", 2, 2, 2)


def test_an_item_mapping_error_is_a_422_naming_the_item_and_blocks_the_final(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    simulator.inject(
        Fault(
            "item_status",
            endpoint="_bulk",
            every_nth_item=2,
            status=400,
            error_type="mapper_parsing_exception",
            times=1,
        )
    )
    refused = upload.batch(0, [observation("192.0.2.1"), observation("192.0.2.2")])
    assert refused.status_code == 422, refused.get_json()
    error = refused.get_json()["error"]
    assert error["code"] == "store_refused" and "Retry-After" not in refused.headers
    (item,) = error["details"]["items"]
    assert (item["list"], item["index"], item["error"]) == (
        "observations",
        1,
        "mapper_parsing_exception",
    )
    # The refused batch is never confirmed, so no final of the execution counts it.
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    final = upload.final(0, [], upload_id="upload-2")
    assert final.status_code == 409 and final.get_json()["error"]["code"] == "batch_gap"
    assert scalar("SELECT status FROM scan_executions") == "running"


def test_a_bulk_request_refused_with_400_is_a_422(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    simulator.inject(Fault("status", endpoint="_bulk", status=400, times=1))
    refused = upload.batch(0, [observation("192.0.2.1")])
    assert refused.status_code == 422
    assert refused.get_json()["error"]["code"] == "store_refused"


def test_a_bulk_request_answered_503_stays_retryable(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    simulator.inject(Fault("status", endpoint="_bulk", status=503, times=20))
    failed = upload.batch(0, [observation("192.0.2.1")])
    assert failed.status_code == 503 and failed.headers["Retry-After"]
    simulator.clear_faults()
    assert upload.post(upload.sent[-1]).get_json()["saved"] == 1


def test_throttled_bulk_requests_are_retried_within_the_budget(simulator, es_api):
    api, _prefix = es_api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    simulator.inject(Fault("status", endpoint="_bulk", status=429, times=1))
    response = upload.batch(0, [observation("192.0.2.1")])
    assert response.status_code == 200 and response.get_json()["saved"] == 1


def test_no_connection_is_held_while_elasticsearch_is_slow(simulator, small_pool_app):
    small = small_pool_app(**_es_sections(simulator))
    app, engine, api = small.app, small.engine, small.api
    user, scanner = api.user(), api.scanner()
    make_task(user, ports="80,443")
    upload = claim(scanner)
    # Create the indices first so the slow request is the bulk write itself.
    assert upload.batch(0, [observation("192.0.2.1")]).status_code == 200
    store = install(app)
    entered = threading.Event()
    store.before["write_facts"] = lambda *_a, **_k: entered.set()
    simulator.inject(Fault("delay", endpoint="_bulk", seconds=3.0, times=1))
    result = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("r", upload.batch(1, [observation("192.0.2.2")]))
    )
    worker.start()
    try:
        assert entered.wait(20)
        time.sleep(0.3)  # let the (3 s slow) bulk request get under way
        # While Elasticsearch is slow, the single pooled connection is free.
        assert engine.pool.checkedout() == 0
        assert user.get("/api/tasks").status_code == 200
    finally:
        worker.join(30)
    assert result["r"].status_code == 200
