"""``SearchStore.asset_aggregates`` on both stores (a report scoped by a search): the same
assets, the same search, the same exact figures.

Each case runs once per adapter (``store`` is parametrised in conftest) against assets
written through the store's own ``publish_current``; the expected figures are written
out, so both adapters are held to the same answer.
"""

from __future__ import annotations

import itertools

import pytest

from app.search.aggregates import UNKNOWN_SERVICE
from app.search.port import AssetQuery, AssetStatusUpdate
from app.search.query_language import parse_query
from tests.integration.search.test_search_language_contract import LE, NOW
from tests.support.search_documents import at, current_asset

pytestmark = pytest.mark.contract

_owners = itertools.count(70_000)


@pytest.fixture
def owner(store) -> int:
    owner = next(_owners)
    other = owner + 100_000
    docs = (
        [
            current_asset(
                "user",
                f"10.0.0.{i}",
                22,
                owner_id=owner,
                service="ssh",
                product="OpenSSH",
                banner="SSH-2.0-OpenSSH_9.6",
                seen=at(-120 - i),
            )
            for i in range(1, 5)
        ]
        + [
            current_asset(
                "user",
                f"10.0.0.{i}",
                443,
                owner_id=owner,
                service="https",
                product="nginx" if i % 2 else "Apache httpd",
                details={"tls": LE} if i <= 2 else {},
                seen=at(-30),
            )
            for i in range(1, 5)
        ]
        + [
            current_asset("user", "10.0.0.9", 8080, owner_id=owner, seen=at(-5)),
            current_asset("user", "10.0.0.9", 53, "udp", owner_id=owner, service="domain"),
            # Another owner's asset with the same address is never counted.
            current_asset("user", "10.0.0.1", 22, owner_id=other, service="ssh", product="OpenSSH"),
        ]
    )
    assert store.publish_current(docs, max_operations=4, max_bytes=1 << 20).ok
    gone = AssetStatusUpdate(
        scope="user",
        owner_id=owner,
        ip="10.0.0.4",
        port=22,
        transport="tcp",
        status="gone",
        gone_since=at(0),
        gone_execution_id=2,
    )
    assert store.apply_asset_status([gone]).ok
    store.refresh_current()
    return owner


def _aggregates(store, owner: int, text: str, status: str = "open") -> dict:
    parsed = parse_query(text, now=NOW)
    found = store.asset_aggregates(
        AssetQuery(scope="user", owner_id=owner, where=parsed.node, status=status), top=3
    )
    return {"endpoints": found.endpoints, "ips": found.ips, **found.lists.as_json()}


def test_every_open_asset_of_the_owner(store, owner) -> None:
    found = _aggregates(store, owner, "")
    assert (found["endpoints"], found["ips"]) == (9, 5)
    assert found["services"] == [
        {"name": "https", "count": 4},
        {"name": "ssh", "count": 3},
        {"name": "domain", "count": 1},
    ]  # top 3: the unknown 8080 is cut off
    assert found["products"] == [
        {"name": "OpenSSH", "count": 3},
        {"name": "Apache httpd", "count": 2},
        {"name": "nginx", "count": 2},
    ]
    assert found["ports"] == [
        {"port": 443, "transport": "tcp", "count": 4},
        {"port": 22, "transport": "tcp", "count": 3},
        {"port": 53, "transport": "udp", "count": 1},
    ]
    assert sum(h["count"] for h in found["first_seen_hours"]) == 9
    assert [h["hour"] for h in found["first_seen_hours"]] == sorted(
        h["hour"] for h in found["first_seen_hours"]
    )


@pytest.mark.parametrize(
    ("query", "status", "endpoints", "ips", "services"),
    [
        ("port:22", "open", 3, 3, [{"name": "ssh", "count": 3}]),
        ("port:22", "all", 4, 4, [{"name": "ssh", "count": 4}]),
        ("status:gone", "all", 1, 1, [{"name": "ssh", "count": 1}]),
        ('cert.issuer:"Let\'s Encrypt"', "open", 2, 2, [{"name": "https", "count": 2}]),
        (
            "OpenSSH_9 OR product:nginx",
            "open",
            5,
            3,
            [
                {"name": "ssh", "count": 3},
                {"name": "https", "count": 2},
            ],
        ),
        ("net:10.0.0.9/32 -port:53", "open", 1, 1, [{"name": UNKNOWN_SERVICE, "count": 1}]),
        ("cert.subject:nothing-has-this", "open", 0, 0, []),
    ],
)
def test_the_assets_a_search_finds(store, owner, query, status, endpoints, ips, services) -> None:
    found = _aggregates(store, owner, query, status)
    assert (found["endpoints"], found["ips"], found["services"]) == (endpoints, ips, services)
    assert sum(p["count"] for p in found["ports"]) == endpoints
    assert sum(h["count"] for h in found["first_seen_hours"]) == endpoints
