"""Upload slots (``app.http.upload_gate``): a worker runs ``[server] upload_concurrency``
uploads at once; another waits for a slot, holding no database connection, for at most
``[server] upload_wait_seconds``, and then runs without one."""

from __future__ import annotations

import re
import threading

from app.http import context
from tests.support.scanner_protocol import claim, make_task, observation, upload_body
from tests.support.stores import install


def _upload_in_thread(upload, batch_index: int, address: str) -> tuple[threading.Thread, dict]:
    result: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("r", upload.batch(batch_index, [observation(address)]))
    )
    thread.start()
    return thread, result


def _admissions(api, outcome: str) -> float:
    """Waits counted so far (the metrics registry is the process's, shared by every app)."""
    text = api.admin().get("/metrics").get_data(as_text=True)
    found = re.search(
        rf'^netmap_upload_admission_wait_seconds_count\{{outcome="{outcome}"\}} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else 0.0


def test_a_second_upload_waits_for_the_slot_without_a_connection(small_pool_app):
    # One pooled connection; one upload slot (the default), waited for up to 30 s here.
    small = small_pool_app(server={"upload_wait_seconds": 30})
    app, engine, api = small.app, small.engine, small.api
    assert app.extensions[context.UPLOAD_GATE].slots == 1
    user = api.user()
    first_scanner, second_scanner = api.scanner(), api.scanner()
    make_task(user, ports="80,443")
    make_task(user, ports="80,443")
    first, second = claim(first_scanner), claim(second_scanner)
    store = install(app)
    slots_before = _admissions(api, "slot")
    entered, release = threading.Event(), threading.Event()
    writes: list[int] = []

    def hold_the_first(*_args, **_kwargs):
        writes.append(1)
        if len(writes) == 1:
            entered.set()
            assert release.wait(20)

    store.before["write_facts"] = hold_the_first
    first_thread, first_result = _upload_in_thread(first, 0, "192.0.2.1")
    second_thread, second_result = None, {}
    try:
        assert entered.wait(20)
        second_thread, second_result = _upload_in_thread(second, 0, "192.0.2.2")
        second_thread.join(0.5)
        # The second upload waits for the slot: it has not reached the store and holds no
        # connection, so the one-connection pool still serves a read meanwhile.
        assert second_thread.is_alive()
        assert len(writes) == 1
        assert engine.pool.checkedout() == 0
        assert user.get("/api/tasks").status_code == 200
    finally:
        release.set()
        first_thread.join(30)
        if second_thread is not None:
            second_thread.join(30)
    for result in (first_result, second_result):
        assert result["r"].status_code == 200, result["r"].get_json()
        assert result["r"].get_json()["saved"] == 1
    assert len(writes) == 2
    assert _admissions(api, "slot") - slots_before == 2


def test_an_upload_runs_without_a_slot_after_the_wait(small_pool_app):
    small = small_pool_app(server={"upload_wait_seconds": 0.2})
    app, api = small.app, small.api
    user, scanner = api.user(), api.scanner()
    task_id = make_task(user, ports="80,443")["id"]
    upload = claim(scanner)
    body = upload_body(upload.token, 0, [observation("192.0.2.1")])
    gate = app.extensions[context.UPLOAD_GATE]
    no_slots_before = _admissions(api, "no_slot")
    with gate.slot() as held:  # a stuck upload holds the worker's only slot
        assert held
        response = scanner.post(f"/api/scanner/executions/{upload.id}/uploads", json=body)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["saved"] == 1
    assert _admissions(api, "no_slot") - no_slots_before == 1
    assert user.get(f"/api/tasks/{task_id}/results").get_json()["total_endpoints"] == 1


def test_more_slots_run_uploads_side_by_side(small_pool_app):
    small = small_pool_app(server={"upload_concurrency": 2, "upload_wait_seconds": 30})
    app, api = small.app, small.api
    user = api.user()
    scanners = [api.scanner(), api.scanner()]
    for _ in scanners:
        make_task(user, ports="80,443")
    uploads = [claim(scanner) for scanner in scanners]
    store = install(app)
    slots_before = _admissions(api, "slot")
    both_inside = threading.Barrier(2, timeout=20)
    # Only reachable if both uploads hold a slot at once (a third would have to wait 30 s).
    store.before["write_facts"] = lambda *_a, **_k: both_inside.wait()
    started = [_upload_in_thread(upload, 0, f"192.0.2.{n + 1}") for n, upload in enumerate(uploads)]
    for thread, _result in started:
        thread.join(30)
    for _thread, result in started:
        assert result["r"].status_code == 200, result["r"].get_json()
    assert _admissions(api, "slot") - slots_before == 2
