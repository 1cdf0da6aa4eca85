"""A results page that times out in the store is a 503 and a logged ``SearchStoreTimeout``.

The store's own tests time out a statement directly; here the whole route does: while a
migration-like lock holds the endpoint counters, ``GET /api/tasks/<id>/results`` waits
for its lock timeout, answers 503 ``store_unavailable``, and the error event names the
store method and carries the request id the client was given, so the 503 can be found
in the logs.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from tests.support.scanner_protocol import claim, observation
from tests.support.settings import make_settings


@pytest.fixture
def settings(database_url, tmp_path):
    # A short lock timeout, so the blocked read gives up within the test.
    return make_settings(database_url, tmp_path, database={"lock_timeout_ms": 300})


def test_a_results_timeout_is_a_503_and_an_error_event_with_the_request_id(api, engine, caplog):
    user, scanner = api.user(), api.scanner()
    created = user.post(
        "/api/tasks", json={"name": "t", "targets": ["192.0.2.0/30"], "ports": "22"}
    )
    task = created.get_json()["task"]
    assert claim(scanner).final(0, [observation("192.0.2.1", 22)]).status_code == 200
    assert user.get(f"/api/tasks/{task['id']}/results").status_code == 200

    caplog.set_level(logging.INFO)
    with engine.connect() as blocker:
        blocker.execute(
            sa.text("LOCK TABLE search_execution_endpoint_counts IN ACCESS EXCLUSIVE MODE")
        )
        answer = user.get(f"/api/tasks/{task['id']}/results")
        blocker.rollback()
    assert answer.status_code == 503, answer.get_data()[:300]
    assert answer.get_json()["error"]["code"] == "store_unavailable"
    events = [
        (r.levelno, r.netmap_fields)
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "SearchStoreTimeout"
    ]
    [(level, fields)] = events
    assert level == logging.ERROR
    assert fields["statement"] == "execution_results"
    assert fields["sqlstate"] == "55P03"
    assert fields["request_id"] == answer.headers["X-Request-ID"]
    # Once the lock is gone the same page is served again.
    assert user.get(f"/api/tasks/{task['id']}/results").status_code == 200
