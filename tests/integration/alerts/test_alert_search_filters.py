"""Alert rules filtered by a search (docs/alerts.md, "Search filters"): a saved search or a
query of the rule's own, checked when the rule is written, tested against the changed
endpoints' current assets by the search store's own translation of the language.

Scans go through the scanner protocol, the projection and analysis workers run as the
runner runs them, and the messages are read from the deliveries outbox.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.integration.alerts.test_alerts_api import _hook
from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.support.scanner_protocol import observation


def _search(user, query: str, name: str = "s") -> dict:
    made = user.post("/api/searches", json={"name": name, "query": query})
    assert made.status_code == 201, made.get_json()
    return made.get_json()["search"]


def _rule(user, channel: dict, on: list[str], **filters):
    return user.post(
        "/api/alerts/rules",
        json={"name": "r", "on": on, "channels": [channel["id"]], "filter": filters},
    )


def _messages(rule_id: int) -> list[tuple[str, str, int]]:
    """(event type, ip, port) of a rule's single-change messages."""
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT event_type, payload FROM alert_deliveries WHERE rule_id = :r "
                "ORDER BY payload #>> '{change,ip}', (payload #>> '{change,port}')::int"
            ),
            {"r": rule_id},
        ).all()
    return [(r.event_type, r.payload["change"]["ip"], r.payload["change"]["port"]) for r in rows]


def test_search_filters_are_checked_and_scoped_to_the_owner(api, receiver) -> None:
    alice, bob = api.user(), api.user()
    channel = _hook(alice, receiver)
    search = _search(alice, "port:22")

    made = _rule(alice, channel, ["new"], search=search["id"], ports=[22])
    assert made.status_code == 201, made.get_json()
    rule = made.get_json()["rule"]
    assert rule["filter"]["search"] == search["id"] and rule["filter"]["query"] is None
    own = _rule(alice, channel, ["new"], query='banner:"OpenSSH"').get_json()["rule"]
    assert own["filter"] == {**own["filter"], "search": None, "query": 'banner:"OpenSSH"'}

    # Another user's saved search is not found (its existence is nobody else's business).
    bob_channel = _hook(bob, receiver)
    foreign = _rule(bob, bob_channel, ["new"], search=search["id"])
    assert foreign.status_code == 404
    assert foreign.get_json()["error"]["code"] == "search_not_found"
    assert foreign.get_json()["error"]["details"]["field"] == "filter.search"
    unknown = _rule(alice, channel, ["new"], search=987654)
    assert unknown.status_code == 404 and unknown.get_json()["error"]["details"] == {
        "field": "filter.search"
    }

    for filters, field, code in (
        ({"search": search["id"], "query": "port:22"}, "filter.search", "validation_failed"),
        ({"search": "1"}, "filter.search", "validation_failed"),
        ({"search": True}, "filter.search", "validation_failed"),
        ({"query": "port:abc"}, "filter.query", "invalid_query"),
        ({"query": "   "}, "filter.query", "invalid_query"),
        ({"query": 5}, "filter.query", "invalid_query"),
    ):
        bad = _rule(alice, channel, ["new"], **filters)
        assert bad.status_code == 400, (filters, bad.get_json())
        error = bad.get_json()["error"]
        assert (error["code"], error["details"]["field"]) == (code, field), error
    column = _rule(alice, channel, ["new"], query="port:abc").get_json()["error"]
    assert column["details"]["column"] == 6 and "filter.query" in column["message"]

    # PATCH checks the same way; a rule keeps its search until the filter is replaced.
    patched = alice.patch(
        f"/api/alerts/rules/{own['id']}", json={"filter": {"search": search["id"]}}
    )
    assert (
        patched.status_code == 200
        and patched.get_json()["rule"]["filter"]["search"] == search["id"]
    )
    assert patched.get_json()["rule"]["filter"]["query"] is None
    stolen = bob.patch(f"/api/alerts/rules/{own['id']}", json={"name": "x"})
    assert stolen.status_code == 404

    # A used search cannot be deleted: 409 in_use, and it stays.
    refused = alice.delete(f"/api/searches/{search['id']}")
    assert refused.status_code == 409, refused.get_json()
    assert refused.get_json()["error"]["code"] == "in_use"
    assert "alert rule" in refused.get_json()["error"]["message"]
    assert alice.get(f"/api/searches/{search['id']}").status_code == 200
    for rule_id in (rule["id"], own["id"]):
        assert alice.delete(f"/api/alerts/rules/{rule_id}").status_code == 204
    assert alice.delete(f"/api/searches/{search['id']}").status_code == 204


def test_a_rule_search_selects_the_changes_whose_assets_it_finds(api, settings, receiver) -> None:
    alice, scanner = api.user(), api.scanner()
    channel = _hook(alice, receiver)
    # The banner text is not part of a change set: the asset's own banner is what is read.
    ssh = _rule(alice, channel, ["new"], query='banner:"OpenSSH_9" -port:80').get_json()["rule"]
    web = _search(alice, "port:80 service:http", name="web")
    gone_web = _rule(alice, channel, ["gone"], search=web["id"]).get_json()["rule"]
    only_gone = _rule(alice, channel, ["new", "gone"], query="status:gone").get_json()["rule"]
    nothing = _rule(alice, channel, ["new"], query="cert.issuer:nobody").get_json()["rule"]

    first = [
        observation(ip, 22, service={"name": "ssh", "banner": f"SSH-2.0-OpenSSH_9.{i}"})
        for i, ip in enumerate(("192.0.2.1", "192.0.2.2"))
    ] + [
        observation("192.0.2.3", 22, service={"name": "ssh", "banner": "SSH-2.0-dropbear"}),
        observation("192.0.2.1", 80, service={"name": "http", "banner": "OpenSSH_9 lookalike"}),
        observation("192.0.2.2", 80, service={"name": "http"}),
    ]
    _scan(alice, scanner, first)
    _run_workers(settings)
    assert _messages(ssh["id"]) == [
        ("netmap.change.new", "192.0.2.1", 22),
        ("netmap.change.new", "192.0.2.2", 22),
    ]
    assert _messages(gone_web["id"]) == [] and _messages(only_gone["id"]) == []
    assert _messages(nothing["id"]) == []

    # The web servers stop answering. The rule on the saved search hears of both; the
    # ``status:`` of a change is the asset's status once the change is published.
    _scan(alice, scanner, [o for o in first if o["port"] == 22])
    _run_workers(settings)
    assert _messages(gone_web["id"]) == [
        ("netmap.change.gone", "192.0.2.1", 80),
        ("netmap.change.gone", "192.0.2.2", 80),
    ]
    assert _messages(only_gone["id"]) == _messages(gone_web["id"])
    assert len(_messages(ssh["id"])) == 2  # nothing new

    # The saved search is read when a change set is evaluated: narrowed, it finds one.
    narrowed = alice.patch(f"/api/searches/{web['id']}", json={"query": "ip:192.0.2.2"})
    assert narrowed.status_code == 200
    _scan(alice, scanner, first)  # the web servers are back ...
    _run_workers(settings)
    _scan(alice, scanner, [o for o in first if o["port"] == 22])  # ... and gone again
    _run_workers(settings)
    assert _messages(gone_web["id"])[2:] == [("netmap.change.gone", "192.0.2.2", 80)]


class _StoreWithoutSearches:
    """A search store that can test no asset against a search: neither inside the
    analysis's statement nor after it (no optional ability at all)."""

    name = "minimal"
    capabilities: frozenset = frozenset()

    def close(self) -> None:
        pass


def test_a_store_that_cannot_test_searches_refuses_and_skips_search_rules(
    app, api, receiver, caplog
) -> None:
    """A store with neither ability would leave a search-filtered rule deaf: such a rule is
    refused when written (create and update), and one found anyway (the store was
    switched) matches nothing and says so in an event."""
    import logging

    from app.alerts.evaluate import search_matches
    from app.http import context

    # A search rule written while the PostgreSQL store served.
    bob, scanner = api.user(), api.scanner()
    searched = _rule(bob, _hook(bob, receiver), ["new"], query="port:22")
    assert searched.status_code == 201, searched.get_json()

    minimal = _StoreWithoutSearches()
    served = app.extensions[context.STORE]
    app.extensions[context.STORE] = minimal
    try:
        alice = api.user()
        channel = _hook(alice, receiver)
        search = _search(alice, "port:22")
        for filters, field in (
            ({"search": search["id"]}, "filter.search"),
            ({"query": "port:22"}, "filter.query"),
        ):
            refused = _rule(alice, channel, ["new"], **filters)
            assert refused.status_code == 400, refused.get_json()
            error = refused.get_json()["error"]
            assert (error["code"], error["details"]["field"]) == ("unsupported_filter", field)
        plain = _rule(alice, channel, ["new"], ports=[22])
        assert plain.status_code == 201, plain.get_json()
        rule_id = plain.get_json()["rule"]["id"]
        patched = alice.patch(f"/api/alerts/rules/{rule_id}", json={"filter": {"query": "x"}})
        assert patched.status_code == 400
        assert patched.get_json()["error"]["code"] == "unsupported_filter"
    finally:
        app.extensions[context.STORE] = served

    _scan(bob, scanner, [observation("192.0.2.9", 22)])
    with transaction() as conn:
        execution_id = conn.execute(sa.text("SELECT max(id) FROM scan_executions")).scalar_one()
    with caplog.at_level(logging.INFO, logger="netmap.events"):
        with transaction() as conn:
            found = search_matches(
                conn, minimal, owner_id=bob.id, execution_id=execution_id, changes=1
            )
    assert found == []
    skipped = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "AlertRuleSearchSkipped"
    ]
    assert skipped == [{"rule_id": searched.get_json()["rule"]["id"], "reason": "store"}], skipped


def test_the_elasticsearch_store_accepts_search_filters(es_target, engine, settings, receiver):
    """Elasticsearch tests a rule's search after the analysis commits
    (test_alert_search_filters_es.py): such rules are accepted there."""
    import uuid

    from app import close_app, create_app
    from tests.support.api import Api

    prefix = f"nmt-{uuid.uuid4().hex[:10]}"
    es_settings = settings.replace(elasticsearch={"url": es_target.url, "index_prefix": prefix})
    es_app = create_app(es_settings, engine=engine, modules="off")
    try:
        alice = Api(es_app).user()
        channel = _hook(alice, receiver)
        search = _search(alice, "port:22")
        made = _rule(alice, channel, ["gone"], search=search["id"])
        assert made.status_code == 201, made.get_json()
        own = _rule(alice, channel, ["new"], query="port:22")
        assert own.status_code == 201, own.get_json()
        patched = alice.patch(
            f"/api/alerts/rules/{own.get_json()['rule']['id']}",
            json={"filter": {"query": "service:ssh"}},
        )
        assert patched.status_code == 200, patched.get_json()
    finally:
        close_app(es_app)
