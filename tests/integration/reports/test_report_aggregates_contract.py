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
from app.search.port import StorageScope
from app.search.postgres_store import PostgresStore
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
