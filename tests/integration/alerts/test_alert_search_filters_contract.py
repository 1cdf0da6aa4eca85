"""The same search-filtered rules hear of the same changes on both search stores.

On PostgreSQL a rule's search is tested inside the analysis's statement
(``AssetConditionsInDatabase``); on Elasticsearch after the analysis commits, by asking
the store about the changed assets (``AssetMatches``). The search-language contract
suite proves the two translations find the same assets; this one proves the two ways
of applying them to a run's changes agree, ``status:`` of a change included. Each store
gets its own user and scans, one after the other, in the same database.
"""

from __future__ import annotations

from tests.integration.alerts.test_alert_search_filters import _messages, _rule, _search
from tests.integration.alerts.test_alert_search_filters_es import _run_workers as _run_es
from tests.integration.alerts.test_alerts_api import _hook
from tests.integration.analysis.test_analysis_api import _run_workers as _run_postgres
from tests.integration.analysis.test_analysis_api import _scan
from tests.support.scanner_protocol import observation

# (changes the rule is on, its query): every kind of clause a change can be tested by.
QUERIES = [
    (["new", "gone"], "port:22"),
    (["new", "gone"], "-port:22"),
    (["new"], "service:http"),
    (["new", "gone"], "net:192.0.2.0/31"),
    (["new"], 'banner:"OpenSSH_9"'),
    (["new", "gone"], "status:gone"),
    (["new", "gone"], "status:open port:80"),
    (["new", "gone"], "port:80 OR -service:ssh"),
    (["new"], "OpenSSH"),
    (["new", "gone"], "product:nginx"),
    (["new", "reappeared"], "ip:192.0.2.3"),
]

FIRST = [
    observation(ip, 22, service={"name": "ssh", "banner": f"SSH-2.0-OpenSSH_9.{i}"})
    for i, ip in enumerate(("192.0.2.1", "192.0.2.2"))
] + [
    observation("192.0.2.3", 22, service={"name": "ssh", "banner": "SSH-2.0-dropbear"}),
    observation("192.0.2.1", 80, service={"name": "http", "product": "nginx"}),
    observation("192.0.2.4", 80, service={"name": "http", "product": "Apache httpd"}),
]
# 192.0.2.3:22 and 192.0.2.1:80 stop answering; then they are back, with one new port.
SECOND = [o for o in FIRST if (o["ip"], o["port"]) not in {("192.0.2.3", 22), ("192.0.2.1", 80)}]
THIRD = [*FIRST, observation("192.0.2.5", 22, service={"name": "ssh"})]


def _heard(api, receiver, run_workers) -> dict[str, list[tuple[str, str, int]]]:
    """Each query's messages after the three scans, on the store ``run_workers`` drives."""
    user, scanner = api.user(), api.scanner()
    channel = _hook(user, receiver)
    rules = {
        query: _rule(user, channel, on, query=query).get_json()["rule"]["id"]
        for on, query in QUERIES
    }
    saved = _search(user, "port:22 -status:gone", name="ssh")
    rules["saved search"] = _rule(user, channel, ["new"], search=saved["id"]).get_json()["rule"][
        "id"
    ]
    for observations in (FIRST, SECOND, THIRD):
        _scan(user, scanner, observations)
        run_workers()
    return {query: _messages(rule_id) for query, rule_id in rules.items()}


def test_search_filtered_rules_hear_the_same_changes_on_both_stores(
    api, settings, es, receiver
) -> None:
    es_settings, es_api = es
    on_postgres = _heard(api, receiver, lambda: _run_postgres(settings))
    on_elasticsearch = _heard(es_api, receiver, lambda: _run_es(es_settings))
    assert on_elasticsearch == on_postgres
    # Not vacuous: the queries select differently, and every kind of change is heard.
    assert len({tuple(v) for v in on_postgres.values()}) >= 8
    kinds = {kind for messages in on_postgres.values() for kind, _, _ in messages}
    assert kinds == {"netmap.change.new", "netmap.change.gone", "netmap.change.reappeared"}
    assert on_postgres["status:gone"] == [
        ("netmap.change.gone", "192.0.2.1", 80),
        ("netmap.change.gone", "192.0.2.3", 22),
    ]
