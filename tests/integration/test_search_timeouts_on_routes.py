"""A search a person waits for is stopped at ``[search] interactive_timeout_seconds``.

Asset searches and facets from the API and the console get the limit; past it the API
answers 503 ``search_timeout`` (no ``Retry-After``: the same search is likely to stop
again, so the message asks for a narrower one), and the Assets page shows that
message above the search it kept.

The search is held past the limit by a lock another session takes on the asset view:
the statement timeout counts that wait as it counts a slow plan's work.
"""

from __future__ import annotations

import html
import logging
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from tests.integration.web.test_console_pages import _user_client
from tests.support.settings import make_settings


@pytest.fixture
def settings(database_url, tmp_path):
    return make_settings(database_url, tmp_path, search={"interactive_timeout_seconds": 0.3})


@contextmanager
def _asset_view_locked(engine):
    with engine.connect() as blocker:
        blocker.execute(sa.text("LOCK TABLE search_assets_user IN ACCESS EXCLUSIVE MODE"))
        try:
            yield
        finally:
            blocker.rollback()


def _timed_out(answer) -> dict:
    assert answer.status_code == 503, answer.get_data()[:300]
    assert "Retry-After" not in answer.headers
    error = answer.get_json()["error"]
    assert error["code"] == "search_timeout"
    assert error["details"] == {"limit_seconds": 0.3}
    return error


def test_an_api_search_past_the_limit_is_a_503_search_timeout(api, engine, caplog):
    user = api.user()
    caplog.set_level(logging.INFO)
    with _asset_view_locked(engine):
        searched = user.get("/api/assets?q=port:443")
        faceted = user.get("/api/assets/facets")
    error = _timed_out(searched)
    assert error["message"] == (
        "the search was stopped after 0.3 s; narrow it (a port, network, service or time "
        "condition) and try again"
    )
    _timed_out(faceted)
    stopped = [
        (r.levelno, r.netmap_fields)
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "SearchTimedOut"
    ]
    assert [(level, f["statement"], f["request_id"]) for level, f in stopped] == [
        (logging.WARNING, "search_assets", searched.headers["X-Request-ID"]),
        (logging.WARNING, "asset_facets", faceted.headers["X-Request-ID"]),
    ]
    # Once the view is free the same requests answer.
    assert user.get("/api/assets?q=port:443").status_code == 200
    assert user.get("/api/assets/facets").status_code == 200


def test_a_bearer_token_search_is_limited_too(api, engine):
    user = api.user()
    token = user.post("/api/auth/tokens", json={"name": "reader", "access": "read"})
    assert token.status_code == 201, token.get_data()[:300]
    client = api.app.test_client()
    headers = {"Authorization": f"Bearer {token.get_json()['secret']}"}
    with _asset_view_locked(engine):
        _timed_out(client.get("/api/assets", headers=headers))


def test_the_assets_page_shows_the_message_and_keeps_the_search(api, engine):
    client, _created = _user_client(api)
    with _asset_view_locked(engine):
        page = client.get("/console/assets?q=nginx+port%3A443")
    assert page.status_code == 503
    text = html.unescape(page.text)
    assert "the search was stopped after 0.3 s; narrow it" in text
    assert 'value="nginx port:443"' in text
    assert client.get("/console/assets?q=nginx+port%3A443").status_code == 200
