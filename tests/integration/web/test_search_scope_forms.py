"""The console's alert-rule and report-definition forms offer the user's saved searches
(and a query box); a choice is checked by the API's own validation, a refused one shown
at its field with nothing written."""

from __future__ import annotations

import html
import re

import sqlalchemy as sa

from app.db import transaction
from app.saved_searches import service as saved
from tests.integration.web.test_console_pages import XSS, _post_form, _user_client


def _saved(owner_id: int, name: str, query: str) -> int:
    return saved.create_search(owner_id, {"name": name, "query": query}).id


def _report_form(client, data: dict):
    return _post_form(client, "/console/reports/definitions", data, from_page="/console/reports")


def _count(table: str) -> int:
    with transaction() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()


def test_the_rule_form_offers_ones_saved_searches_and_makes_a_filtered_rule(api) -> None:
    client, alice = _user_client(api)
    bob = api.create_user()
    mine = _saved(alice["id"], XSS, "port:22")
    theirs = _saved(bob["id"], "bob's", "port:23")
    login = api.login(alice["username"])
    channel = login.post(
        "/api/alerts/channels", json={"kind": "webhook", "url": "https://h.example/x"}
    )
    channel_id = channel.get_json()["channel"]["id"]

    page = client.get("/console/alerts")
    assert f'<option value="{mine}">' in page.text and XSS not in page.text
    assert "&lt;script&gt;" in page.text and "bob&#39;s" not in page.text

    made = _post_form(
        client,
        "/console/alerts/rules",
        {"name": "ssh", "on": ["new", "gone"], "channels": [str(channel_id)], "search": str(mine)},
        from_page="/console/alerts",
    )
    assert made.status_code == 303, made.text
    (rule,) = login.get("/api/alerts/rules").get_json()["items"]
    assert rule["filter"]["search"] == mine and rule["on"] == ["new", "gone"]
    assert f"saved search #{mine}" in client.get("/console/alerts").text

    # Another user's search (posted by hand) and a query that does not parse are refused
    # at their fields, the input kept, nothing written.
    for data, shown in (
        ({"search": str(theirs)}, f"saved search {theirs} not found"),
        ({"query": "port:abc"}, "column 6"),
        # Both: the typed query was dropped and the rule made on the saved search alone.
        ({"search": str(mine), "query": "port:80"}, "not both"),
    ):
        body = {"name": "bad", "on": ["new"], "channels": [str(channel_id)], **data}
        refused = _post_form(client, "/console/alerts/rules", body, from_page="/console/alerts")
        assert refused.status_code == 400, refused.text
        field = "search" if "search" in data else "query"
        # The message inside the field's own error (the page lists other rules too).
        error = re.search(rf'id="rule-{field}-error">([^<]*)<', refused.text)
        assert error is not None and shown in html.unescape(error.group(1)), refused.text
        assert 'value="bad"' in refused.text
    assert _count("alert_rules") == 1


def test_the_report_form_offers_ones_saved_searches_as_a_scope(api) -> None:
    client, alice = _user_client(api)
    mine = _saved(alice["id"], "web", "port:443")
    page = client.get("/console/reports")
    assert f'<option value="{mine}">web — port:443</option>' in page.text
    base = {"name": "scoped", "period": "daily", "recipients": "a@example.com"}

    made = _report_form(client, {**base, "search": str(mine)})
    assert made.status_code == 303, made.text
    listed = client.get("/console/reports").text
    assert f"assets of saved search #{mine}" in listed

    by_query = _report_form(client, {**base, "query": "tag:dmz"})
    assert by_query.status_code == 303, by_query.text
    assert "assets matching <code>tag:dmz</code>" in client.get("/console/reports").text

    refused = _report_form(client, {**base, "name": "x", "query": "port:"})
    assert refused.status_code == 400 and 'id="def-query-error"' in refused.text
    both = _report_form(
        client,
        {**base, "name": "y", "task_id": "1", "search": str(mine)},
    )
    assert both.status_code == 400 and 'id="task_id-error"' in both.text
    # A saved search and a query: refused at the field (the query was silently dropped).
    search_and_query = _report_form(
        client, {**base, "name": "z", "search": str(mine), "query": "port:22"}
    )
    assert search_and_query.status_code == 400, search_and_query.text
    assert "not both" in search_and_query.text and 'value="port:22"' in search_and_query.text
    assert _count("report_definitions") == 2
