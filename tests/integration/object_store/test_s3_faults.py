"""The S3 store under faults, the bounded deleter's cap, and redacted events (EXP-4..6, OPS-5).

The fault proxy sits between the client and moto's S3 server: it fails, drops
or holds chosen requests and counts concurrent object DELETEs.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.object_store import open_object_store
from app.object_store.deleter import (
    delete_objects,
    pending_delete_failures,
    retry_failed_deletes,
)
from app.object_store.port import ObjectStoreUnavailable
from app.observability import render_metrics
from tests.support.s3 import (
    TEST_ACCESS_KEY,
    TEST_SECRET,
    TEST_SESSION_TOKEN,
    s3_overrides,
    store_settings,
)
from tests.support.s3_fault_proxy import Rule
from tests.support.waiting import wait_until


@pytest.fixture
def s3(fault_proxy, tmp_path, database_url):
    def make(**extra):
        settings = store_settings(tmp_path, s3_overrides(fault_proxy.url, **extra), database_url)
        store = open_object_store(settings)
        store.ensure_bucket()
        return store

    return make


def _events(caplog, name="ObjectStoreOperation"):
    return [r.netmap_fields for r in caplog.records if getattr(r, "netmap_event", None) == name]


@pytest.mark.parametrize("fault", ["SlowDown", "ServiceUnavailable", "InternalError", "drop"])
def test_throttling_5xx_and_dropped_requests_are_retried(s3, fault_proxy, caplog, fault):
    caplog.set_level(logging.INFO, logger="netmap.events")
    store = s3()
    if fault == "drop":
        fault_proxy.add(Rule("drop", method="PUT", times=2))
    else:
        fault_proxy.add(Rule("fail", method="PUT", error_code=fault, times=2))
    store.put("t/retried", b"payload", "text/plain")
    with store.open("t/retried") as handle:
        assert handle.read() == b"payload"
    put = [e for e in _events(caplog) if e["operation"] == "put"][-1]
    assert put["retries"] == 2 and put["success"] is True and put["bytes"] == 7


def test_retries_are_bounded_and_then_the_store_is_unavailable(s3, fault_proxy, caplog):
    caplog.set_level(logging.INFO, logger="netmap.events")
    store = s3(max_retries=2)
    fault_proxy.add(Rule("fail", method="PUT", error_code="SlowDown"))
    with pytest.raises(ObjectStoreUnavailable):
        store.put("t/never", b"x", "text/plain")
    failed = _events(caplog)[-1]
    assert (failed["operation"], failed["success"], failed["retries"]) == ("put", False, 2)
    puts = [p for method, p in fault_proxy.stats.requests if method == "PUT" and "t/never" in p]
    assert len(puts) == 3


def test_at_most_three_deletes_in_flight_and_all_settle_in_input_order(s3, fault_proxy):
    store = s3()
    keys = [f"compensation/obj-{i:02d}" for i in range(12)]
    for key in keys:
        store.put(key, b"x", "text/plain")
    fault_proxy.delete_gate = threading.Semaphore(0)
    outcome: dict = {}
    worker = threading.Thread(
        target=lambda: outcome.update(
            results=delete_objects(store, keys, concurrency=3, origin="test")
        )
    )
    worker.start()
    stats = fault_proxy.stats
    # The proxy holds every DELETE: exactly three arrive, and no fourth while they are held.
    wait_until(lambda: stats.deletes_in_flight == 3, timeout=30)
    time.sleep(0.3)
    assert stats.deletes_in_flight == 3 and stats.deletes_started == 3
    released = 0
    while released < len(keys):
        fault_proxy.delete_gate.release()
        released += 1
        wait_until(
            lambda done=released: (
                stats.deletes_finished == done
                and stats.deletes_in_flight == min(3, len(keys) - done)
            ),
            timeout=30,
        )
    worker.join(30)
    assert stats.max_deletes_in_flight == 3
    assert stats.deletes_finished == len(keys)
    assert [(r.key, r.status) for r in outcome["results"]] == [(k, "deleted") for k in keys]
    assert not any(store.exists(k) for k in keys)


def test_failed_deletes_do_not_stop_the_others_and_are_retried_later(s3, fault_proxy, engine):
    store = s3(max_retries=1)
    keys = [f"compensation/k{i}" for i in range(8)]
    for key in keys:
        store.put(key, b"x", "text/plain")
    fault_proxy.add(Rule("fail", method="DELETE", path_contains="/k2", error_code="InternalError"))
    fault_proxy.add(Rule("fail", method="DELETE", path_contains="/k5", error_code="SlowDown"))
    results = delete_objects(store, [*keys, "compensation/absent"], concurrency=3, origin="test")
    assert [r.status for r in results] == [
        "deleted",
        "deleted",
        "failed",
        "deleted",
        "deleted",
        "failed",
        "deleted",
        "deleted",
        "missing",
    ]
    assert "kept failing" in results[2].error and "SlowDown" in results[5].error
    recorded = pending_delete_failures()
    assert [(row["key"], row["origin"], row["attempts"]) for row in recorded] == [
        ("compensation/k2", "test", 1),
        ("compensation/k5", "test", 1),
    ]
    assert store.exists("compensation/k2") and store.exists("compensation/k5")

    # Still failing: the retry keeps the record and backs off.
    summary = retry_failed_deletes(
        store, concurrency=3, base_backoff_seconds=0.001, max_backoff_seconds=0.001
    )
    assert (summary.attempted, summary.failed) == (2, 2)
    assert [row["attempts"] for row in pending_delete_failures()] == [2, 2]

    fault_proxy.clear()
    wait_until(
        lambda: (
            retry_failed_deletes(
                store, concurrency=3, base_backoff_seconds=0.001, max_backoff_seconds=0.001
            ).deleted
            == 2
        ),
        timeout=10,
    )
    assert pending_delete_failures() == []
    assert not store.exists("compensation/k2") and not store.exists("compensation/k5")
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM object_delete_failures")).scalar() == 0


def test_events_never_carry_credentials_or_url_signatures(s3, fault_proxy, capsys):
    import json

    from app.observability import configure_logging

    store = s3()
    configure_logging("DEBUG")  # as with NETMAP_LOG_LEVEL=DEBUG: every record is printed
    try:
        capsys.readouterr()
        fault_proxy.add(Rule("fail", method="PUT", error_code="SlowDown", times=1))
        store.put("exports/7/private-name.csv", b"rows", "text/csv")
        url = store.url_for("exports/7/private-name.csv", 300, filename="private-name.csv")
        store.exists("exports/7/private-name.csv")
        with store.open("exports/7/private-name.csv") as handle:
            handle.read()
        store.delete("exports/7/private-name.csv")
        fault_proxy.add(Rule("fail", method="HEAD", error_code="InternalError"))
        with pytest.raises(ObjectStoreUnavailable):
            store.delete("exports/7/private-name.csv")
        text = capsys.readouterr().err
    finally:
        configure_logging("INFO")
    signature = url.split("X-Amz-Signature=")[1].split("&")[0]
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    operations = [e for e in events if e["event"] == "ObjectStoreOperation"]
    assert [e["operation"] for e in operations] == [
        "put",
        "url_for",
        "exists",
        "open",
        "delete",
        "delete",
    ]
    assert operations[0]["retries"] == 1 and operations[-1]["success"] is False
    for event in operations:
        assert event["key_prefix"] == "exports"
        assert set(event) >= {"duration_ms", "retries", "in_flight", "success", "bytes"}
    for secret in (TEST_ACCESS_KEY, TEST_SECRET, TEST_SESSION_TOKEN, signature, "private-name"):
        assert secret not in text
    assert "X-Amz" not in text and "Signature=" not in text


def test_operations_are_counted_and_timed_on_metrics(s3):
    store = s3()
    store.put("metrics/a", b"abc", "text/plain")
    store.delete("metrics/a")
    text = render_metrics().decode()
    assert (
        'netmap_object_store_operation_seconds_bucket{backend="s3",le="0.005",operation="put"}'
        in (text)
        or 'netmap_object_store_operation_seconds_count{backend="s3",operation="put"}' in text
    )
    assert 'netmap_object_store_operations_total{backend="s3",operation="delete",outcome="ok"}' in (
        text
    )
    assert 'netmap_object_store_in_flight{backend="s3",operation="delete"} 0.0' in text
