"""A large batch writes its facts beside its endpoint documents (service.OVERLAP_MIN_ITEMS).

The two store writes run at the same time on two pooled connections; whatever
either of them does, the upload answers only once both have finished, reports the
facts' failure first, and leaves a pending receipt that the retry completes.
"""

from __future__ import annotations

import threading

from app.result_ingest.service import OVERLAP_MIN_ITEMS
from app.search.port import BulkItemResult, BulkResult, StoreUnavailable
from tests.support.scanner_protocol import claim, make_task, observation
from tests.support.sql import scalar
from tests.support.stores import install

WAIT = 20
REFUSED = OVERLAP_MIN_ITEMS * 3 // 4  # the position of the fact the store refuses


def _large(start: int = 0) -> list[dict]:
    return [
        observation(f"10.20.0.{i & 255}", 1 + (i >> 8))  # 256 addresses, then the next port
        for i in range(start, start + OVERLAP_MIN_ITEMS)
    ]


def _scene(api):
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("10.20.0.0/24",), ports="1-8")
    return claim(scanner), install(api.app)


def _final_counts(upload, index: int) -> dict:
    final = upload.final(index, [])
    assert final.status_code == 200, final.get_json()
    execution_id = upload.execution["id"]
    return {
        "observations": scalar(
            "SELECT observation_count FROM scan_executions WHERE id = :e", e=execution_id
        ),
        "endpoints": scalar(
            "SELECT endpoint_count FROM scan_executions WHERE id = :e", e=execution_id
        ),
    }


def test_the_facts_are_written_while_the_endpoints_are(api):
    upload, store = _scene(api)
    endpoints_started, facts_started = threading.Event(), threading.Event()
    threads: dict[str, str] = {}

    def facts_wait_for_endpoints(*_a, **_k):
        threads["facts"] = threading.current_thread().name
        facts_started.set()
        # Written one after the other, this would time out and fail the batch.
        assert endpoints_started.wait(WAIT)

    def endpoints_wait_for_facts(*_a, **_k):
        threads["endpoints"] = threading.current_thread().name
        endpoints_started.set()
        assert facts_started.wait(WAIT)

    store.before["write_facts"] = facts_wait_for_endpoints
    store.before["write_execution_endpoints"] = endpoints_wait_for_facts
    response = upload.batch(0, _large())
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["saved"] == OVERLAP_MIN_ITEMS
    assert threads["facts"] != threads["endpoints"]
    store.before.clear()
    counts = _final_counts(upload, 1)
    assert counts == {"observations": OVERLAP_MIN_ITEMS, "endpoints": OVERLAP_MIN_ITEMS}


def test_a_small_batch_writes_in_the_request_thread(api):
    upload, store = _scene(api)
    threads: list[str] = []
    store.before["write_facts"] = lambda *_a, **_k: threads.append(threading.current_thread().name)
    assert upload.batch(0, _large()[: OVERLAP_MIN_ITEMS - 1]).status_code == 200
    assert threads == [threading.current_thread().name]


def test_a_failed_fact_write_is_a_503_and_the_retry_counts_the_batch_once(api):
    upload, store = _scene(api)

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_facts"] = unavailable
    failed = upload.batch(0, _large())
    assert failed.status_code == 503, failed.get_json()
    assert failed.get_json()["error"]["code"] == "store_unavailable"
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    del store.before["write_facts"]
    retried = upload.post(upload.sent[-1])
    assert retried.status_code == 200 and retried.get_json()["saved"] == OVERLAP_MIN_ITEMS
    counts = _final_counts(upload, 1)
    assert counts == {"observations": OVERLAP_MIN_ITEMS, "endpoints": OVERLAP_MIN_ITEMS}


def test_a_failed_endpoint_write_waits_for_the_fact_write_before_answering(api):
    upload, store = _scene(api)
    facts_done = threading.Event()

    def slow_facts(*_a, **_k):
        threading.Event().wait(0.5)  # still writing when the endpoint write fails

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_facts"] = slow_facts
    store.after["write_facts"] = lambda *_a, **_k: facts_done.set()
    store.before["write_execution_endpoints"] = unavailable
    failed = upload.batch(0, _large())
    # No write of this batch is still running once the scanner has its answer.
    assert facts_done.is_set()
    assert failed.status_code == 503
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
    store.before.clear()
    store.after.clear()
    assert upload.post(upload.sent[-1]).status_code == 200
    counts = _final_counts(upload, 1)
    assert counts == {"observations": OVERLAP_MIN_ITEMS, "endpoints": OVERLAP_MIN_ITEMS}


def test_when_both_writes_fail_the_refused_fact_is_the_answer(api):
    upload, store = _scene(api)
    real_write = store.inner.write_facts

    def refuse_one(facts):
        result = real_write(facts)
        items = list(result.items)
        items[REFUSED] = BulkItemResult(
            items[REFUSED].id, items[REFUSED].index, 400, "mapper_parsing_exception"
        )
        return BulkResult(items=tuple(items))

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.inner.write_facts = refuse_one
    store.before["write_execution_endpoints"] = unavailable
    response = upload.batch(0, _large())
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "store_refused"
    assert [(i["list"], i["index"]) for i in error["details"]["items"]] == [
        ("observations", REFUSED)
    ]
    assert scalar("SELECT status FROM scan_upload_receipts") == "pending"
