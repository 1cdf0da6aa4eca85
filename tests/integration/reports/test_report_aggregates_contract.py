"""Report aggregates through the search-store port, the same on both adapters (REP-1).

The observations are uploaded once through the scanner protocol (PostgreSQL store);
the execution's endpoint documents are then written to an Elasticsearch store (the
simulator, or a real cluster with NETMAP_TEST_ES_URL) exactly as the PostgreSQL store
holds them. Report capture runs on each store and must give the same statistics, and
``prepare_aggregates`` must store the same rows: on Elasticsearch these were empty
when capture read the PostgreSQL store's private table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.reports import records
from app.reports.capture import AGGREGATE_TOP, capture, prepare_aggregates
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.port import AssetQuery, StorageScope
from app.search.postgres_store import PostgresStore
from tests.integration.analysis.test_analysis_api import _run_workers
from tests.support.es_target import EsTarget, drop_prefix, es_settings_for
from tests.support.scanner_protocol import claim, make_task, now_iso, observation

AGGREGATED = ("top_services", "top_products", "top_ports", "new_endpoints")


@pytest.fixture
def stores(
    settings, engine, es_target: EsTarget
) -> Iterator[tuple[PostgresStore, ElasticsearchStore]]:
    postgres = PostgresStore(settings)
    es_settings = es_settings_for(es_target.url)
    elasticsearch = ElasticsearchStore(es_settings)
    elasticsearch.ensure_schema()
    yield postgres, elasticsearch
    elasticsearch.close()
    postgres.close()
    drop_prefix(es_target.url, es_settings)


def _observations() -> list[dict]:
    two_hours_ago, just_now = now_iso(-7200), now_iso(-60)
    items = []
    for i in range(1, 7):  # ssh on six addresses, OpenSSH on four of them
        extra = {"product": "OpenSSH"} if i <= 4 else {}
        items.append(
            observation(
                f"192.0.2.{i}", 22, observed_at=two_hours_ago, service={"name": "ssh", **extra}
            )
        )
    for i in range(1, 5):  # https on four, two products tied at two each
        product = "nginx" if i % 2 else "Apache httpd"
        items.append(
            observation(
                f"192.0.2.{i}",
                443,
                observed_at=just_now,
                service={"name": "https", "product": product},
            )
        )
    for i in range(1, 3):  # no service at all: counted as "unknown"
        items.append(observation(f"192.0.2.{i}", 40001, observed_at=just_now))
    for ip in ("192.0.2.9", "192.0.2.10"):
        items.append(observation(ip, 53, observed_at=just_now, service={"name": "domain"}))
    return items


def _copy_execution_endpoints(postgres, elasticsearch, execution_id: int) -> int:
    copied, after = 0, None
    while page := postgres.read_execution_endpoints(execution_id, after_id=after, limit=100):
        result = elasticsearch.write_execution_endpoints(page)
        assert not result.failed, result
        copied += len(page)
        after = page[-1].id
    elasticsearch.refresh(StorageScope(legacy_full_history=True))  # searchable now
    return copied


def _stored_aggregates() -> dict:
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                "SELECT services, products, ports, first_seen_hours "
                "FROM report_execution_aggregates"
            )
        ).one()
        conn.execute(sa.text("DELETE FROM report_execution_aggregates"))
    return dict(row._mapping)


def test_report_capture_gives_the_same_aggregates_on_postgresql_and_elasticsearch(api, stores):
    postgres, elasticsearch = stores
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="22,53,443,40001")
    response = claim(api.scanner()).final(0, _observations())
    assert response.status_code == 200, response.get_json()
    with transaction() as conn:
        execution_id = conn.execute(sa.text("SELECT max(id) FROM scan_executions")).scalar_one()
    assert _copy_execution_endpoints(postgres, elasticsearch, execution_id) == 14

    definition = user.post(
        "/api/reports/definitions",
        json={
            "name": "contract",
            "task_id": task["id"],
            "period": "on_demand",
            "recipients": ["a@example.com"],
        },
    ).get_json()["definition"]
    user.post(f"/api/reports/definitions/{definition['id']}/run")
    work = records.claim_next_job(lease_seconds=60)

    captured = {}
    for store in (postgres, elasticsearch):
        statistics = capture(work, store=store, wait_seconds=0).statistics
        captured[store.name] = {key: statistics[key] for key in AGGREGATED}
    assert captured["elasticsearch"] == captured["postgres"]
    expected_services = [
        {"name": "ssh", "count": 6},
        {"name": "https", "count": 4},
        {"name": "domain", "count": 2},
        {"name": "unknown", "count": 2},
    ]
    assert captured["postgres"]["top_services"] == expected_services
    assert captured["postgres"]["top_products"] == [
        {"name": "OpenSSH", "count": 4},
        {"name": "Apache httpd", "count": 2},
        {"name": "nginx", "count": 2},
    ]
    assert captured["postgres"]["top_ports"][:3] == [
        {"port": 22, "transport": "tcp", "count": 6},
        {"port": 443, "transport": "tcp", "count": 4},
        {"port": 40001, "transport": "tcp", "count": 2},
    ]
    assert captured["postgres"]["new_endpoints"] == 14

    stored = {}
    for store in (postgres, elasticsearch):
        assert prepare_aggregates(work.report_id, store) == 1
        stored[store.name] = _stored_aggregates()
    assert stored["elasticsearch"] == stored["postgres"]
    assert len(stored["postgres"]["first_seen_hours"]) >= 2  # two hours apart
    assert sum(h["count"] for h in stored["postgres"]["first_seen_hours"]) == 14
    assert stored["postgres"]["services"] == expected_services
    direct = elasticsearch.execution_aggregates(execution_id, top=AGGREGATE_TOP)
    assert direct.as_json() == stored["postgres"]


def test_aggregates_of_an_execution_without_endpoints_are_empty_on_both(stores):
    for store in stores:
        found = store.execution_aggregates(987654, top=AGGREGATE_TOP)
        assert found.as_json() == {
            "services": [],
            "products": [],
            "ports": [],
            "first_seen_hours": [],
        }


def _copy_current_assets(postgres, elasticsearch, owner_id: int) -> int:
    page = postgres.search_assets(
        AssetQuery(scope="user", owner_id=owner_id, status="all", limit=500)
    )
    assert page.next_cursor is None
    assert elasticsearch.publish_current(page.items, max_operations=50, max_bytes=1 << 22).ok
    elasticsearch.refresh_current()
    return len(page.items)


def test_a_report_scoped_by_a_search_counts_what_the_search_finds_on_both_stores(
    api, settings, stores
):
    postgres, elasticsearch = stores
    user = api.user()
    make_task(user, targets=("192.0.2.0/28",), ports="22,53,443,40001")
    assert claim(api.scanner()).final(0, _observations()).status_code == 200
    _run_workers(settings)  # the projection makes them current assets
    assert _copy_current_assets(postgres, elasticsearch, user.id) == 14

    saved = user.post(
        "/api/searches", json={"name": "OpenSSH", "query": "port:22 product:OpenSSH"}
    ).get_json()["search"]
    expected = {
        saved["id"]: {
            "endpoints": 4,
            "ips": 4,
            "top_services": [{"name": "ssh", "count": 4}],
            "top_ports": [{"port": 22, "transport": "tcp", "count": 4}],
            "new_endpoints": 4,
        },
        "service:https OR port:40001": {
            "endpoints": 6,
            "ips": 4,
            "top_services": [{"name": "https", "count": 4}, {"name": "unknown", "count": 2}],
            "top_ports": [
                {"port": 443, "transport": "tcp", "count": 4},
                {"port": 40001, "transport": "tcp", "count": 2},
            ],
            "new_endpoints": 6,
        },
    }
    for scope, figures in expected.items():
        key = "search" if isinstance(scope, int) else "query"
        made = user.post(
            "/api/reports/definitions",
            json={
                "name": f"scoped {key}",
                "scope": {key: scope},
                "period": "on_demand",
                "recipients": ["a@example.com"],
            },
        )
        assert made.status_code == 201, made.get_json()
        definition = made.get_json()["definition"]
        assert definition["scope"] == {key: scope} and definition["task_id"] is None
        assert user.post(f"/api/reports/definitions/{definition['id']}/run").status_code == 202
        work = records.claim_next_job(lease_seconds=60)
        captured = {}
        for store in (postgres, elasticsearch):
            snapshot = capture(work, store=store, wait_seconds=0)
            captured[store.name] = {k: snapshot.statistics[k] for k in (*figures, "search")}
            label = snapshot.scope_label
        assert captured["elasticsearch"] == captured["postgres"]
        found = captured["postgres"]
        assert {k: found[k] for k in figures} == figures
        query = saved["query"] if key == "search" else scope
        assert found["search"]["query"] == query
        assert label == ("Search OpenSSH" if key == "search" else f"Search {scope}")

    # The report definition holds the saved search: it cannot be deleted meanwhile.
    refused = user.delete(f"/api/searches/{saved['id']}")
    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "in_use"
    assert "report definition" in refused.get_json()["error"]["message"]


def test_report_scopes_are_checked_and_a_search_must_be_the_owners(api):
    alice, bob = api.user(), api.user()
    saved = alice.post("/api/searches", json={"name": "s", "query": "port:22"}).get_json()
    saved_id = saved["search"]["id"]
    body = {"name": "r", "period": "on_demand", "recipients": ["a@example.com"]}
    for scope, status, code, field in (
        ({"search": saved_id}, 404, "search_not_found", "scope.search"),  # bob's request
        ({"search": saved_id, "query": "port:22"}, 400, "validation_failed", "scope.search"),
        ({"query": "port:"}, 400, "invalid_query", "scope.query"),
        ({"query": ""}, 400, "invalid_query", "scope.query"),
        ({}, 400, "validation_failed", "scope"),
        ({"task": 1}, 400, "unknown_field", None),
        ("some", 400, "validation_failed", "scope"),
    ):
        answer = bob.post("/api/reports/definitions", json={**body, "scope": scope})
        assert answer.status_code == status, (scope, answer.get_json())
        error = answer.get_json()["error"]
        assert error["code"] == code, (scope, error)
        if field is not None:
            assert error["details"]["field"] == field, (scope, error)
    mine = alice.post("/api/reports/definitions", json={**body, "scope": {"search": saved_id}})
    assert mine.status_code == 201, mine.get_json()
    definition = mine.get_json()["definition"]
    # A PATCH back to "all" releases the search, which may then be deleted.
    patched = alice.patch(f"/api/reports/definitions/{definition['id']}", json={"scope": "all"})
    assert patched.status_code == 200, patched.get_json()
    assert patched.get_json()["definition"]["scope"] == "all"
    assert alice.delete(f"/api/searches/{saved_id}").status_code == 204


def test_an_all_tasks_report_counts_an_endpoint_two_tasks_saw_once_on_both_stores(
    api, settings, stores
):
    """An "all" report summed each task's counts: an endpoint two tasks saw was two (1026
    endpoints where the Assets page listed 1025). It counts the owner's current assets."""
    postgres, elasticsearch = stores
    user = api.user()
    for ports in ("22,53,443,40001", "22"):  # the second task sees the port-22 endpoints again
        make_task(user, targets=("192.0.2.0/28",), ports=ports)
        observations = [o for o in _observations() if ports == "22,53,443,40001" or o["port"] == 22]
        assert claim(api.scanner()).final(0, observations).status_code == 200
        _run_workers(settings)
    assert _copy_current_assets(postgres, elasticsearch, user.id) == 14
    made = user.post(
        "/api/reports/definitions",
        json={"name": "all", "scope": "all", "period": "on_demand", "recipients": ["a@b.c"]},
    ).get_json()["definition"]
    assert user.post(f"/api/reports/definitions/{made['id']}/run").status_code == 202
    work = records.claim_next_job(lease_seconds=60)
    for store in (postgres, elasticsearch):
        snapshot = capture(work, store=store, wait_seconds=0)
        figures = snapshot.statistics
        assert (figures["endpoints"], figures["new_endpoints"]) == (14, 14), store.name
        assert figures["tasks"] == 2 and "search" not in figures
        assert snapshot.scope_label == "All tasks (2)"
