"""Search-store errors on any route: a refusal is a 422, an outage a 503; both are logged.

A store refusal (the request's content, e.g. an Elasticsearch 400) on a query route used
to surface as a 500. Driven through the app's real error handlers by a real request.
"""

from __future__ import annotations

import json

import pytest

from app.search.port import StoreRefused, StoreUnavailable


@pytest.fixture
def failing_app(app):
    def refused():
        raise StoreRefused("mapper_parsing_exception: secret-looking document content")

    def unavailable():
        raise StoreUnavailable("timed out")

    app.add_url_rule("/test-only/refused", "test_refused", refused)
    app.add_url_rule("/test-only/unavailable", "test_unavailable", unavailable)
    return app


def test_a_store_refusal_is_a_422_and_an_error_event(failing_app, caplog):
    with caplog.at_level("ERROR", logger="netmap.http"):
        response = failing_app.test_client().get(
            "/test-only/refused", headers={"X-Request-ID": "req-refused-1"}
        )
    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "store_refused"
    events = [r for r in caplog.records if getattr(r, "netmap_event", "") == "SearchStoreRefused"]
    assert len(events) == 1
    fields = events[0].netmap_fields
    assert fields["request_id"] == "req-refused-1" and fields["error"] == "StoreRefused"
    # The store's message can quote document content: it is never logged.
    assert "secret-looking" not in json.dumps(fields)


def test_a_store_outage_is_a_503_with_retry_after_and_an_error_event(failing_app, caplog):
    with caplog.at_level("ERROR", logger="netmap.http"):
        response = failing_app.test_client().get(
            "/test-only/unavailable", headers={"X-Request-ID": "req-down-1"}
        )
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    events = [
        r for r in caplog.records if getattr(r, "netmap_event", "") == "SearchStoreUnavailable"
    ]
    assert [e.netmap_fields["request_id"] for e in events] == ["req-down-1"]
