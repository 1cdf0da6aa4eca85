"""The search language on both stores (STO-2): the same query, the same assets.

Each table case runs once per adapter (``store`` is parametrised in conftest) and
must find exactly the expected endpoints; the property test writes one set of
assets to both adapters and checks that any generated query finds the same set in
both.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.search.port import AssetQuery
from app.search.query_language import parse_query
from tests.support.search_documents import at, current_asset

pytestmark = pytest.mark.contract

NOW = datetime(2026, 12, 1, tzinfo=UTC)
_owners = itertools.count(50_000)

LE = {
    "subject_cn": "www.example.com",
    "issuer": "CN=R3,O=Let's Encrypt,C=US",
    "sans": ["www.example.com", "Example.com"],
    "not_before": "2026-11-01T00:00:00Z",
    "not_after": "2026-12-20T00:00:00Z",
    "sha256": "AB:" * 31 + "CD",
    "key_type": "RSA",
    "key_bits": 2048,
    "self_signed": False,
}
SELF = {
    "subject_cn": "localhost",
    "issuer": "CN=localhost",
    "sans": ["localhost"],
    "not_after": "2028-01-01T00:00:00",
    "sha256": "00" * 32,
    "key_type": "ec",
    "key_bits": 256,
    "self_signed": True,
}


def _assets(owner: int):
    return [
        current_asset(
            "user",
            "10.0.0.5",
            443,
            owner_id=owner,
            service="https",
            product="nginx",
            version="1.22.1",
            hostname="www.example.com",
            tags=("dmz", "tls"),
            details={"tls": LE, "http": {"title": "Login page", "server": "nginx/1.22.1"}},
            first_seen=at(-60 * 24 * 40),
            last_seen=at(0),
        ),
        current_asset(
            "user",
            "10.0.0.5",
            22,
            owner_id=owner,
            service="ssh",
            product="OpenSSH",
            banner="SSH-2.0-OpenSSH_9.6",
            seen=at(-60),
        ),
        current_asset(
            "user",
            "10.1.2.3",
            8443,
            owner_id=owner,
            service="https",
            product="Jetty",
            details={"tls": SELF, "http": {"title": "Dashboard"}},
            tags=("tls",),
            seen=at(-5),
        ),
        current_asset(
            "user",
            "192.0.2.7",
            80,
            owner_id=owner,
            service="http",
            product="nginx",
            details={"http": {"title": 42, "server": ["bad"]}, "tls": "not a document"},
            seen=at(-10),
        ),
        current_asset("user", "192.0.2.7", 53, "udp", owner_id=owner, service="domain"),
        # A server header over the length a search reads: absent for every field.
        current_asset(
            "user",
            "2001:db8::1",
            443,
            owner_id=owner,
            tags=("dmz",),
            details={"http": {"server": "x" * 1025 + " Quokka"}},
        ),
    ]


@pytest.fixture
def language_assets(store):
    owner = next(_owners)
    docs = _assets(owner)
    assert store.publish_current(docs, max_operations=4, max_bytes=1 << 20).ok
    store.refresh_current()
    return owner


def search(store, owner: int, text: str, status: str = "all") -> list[tuple[str, int]]:
    parsed = parse_query(text, now=NOW)
    items, cursor = [], None
    while True:
        page = store.search_assets(
            AssetQuery(
                scope="user",
                owner_id=owner,
                where=parsed.node,
                status=status,
                cursor=cursor,
                limit=4,
            )
        )
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return sorted((d.ip, d.port) for d in items)


HTTPS = [("10.0.0.5", 443), ("10.1.2.3", 8443)]
ALL = sorted(
    [
        ("10.0.0.5", 443),
        ("10.0.0.5", 22),
        ("10.1.2.3", 8443),
        ("192.0.2.7", 80),
        ("192.0.2.7", 53),
        ("2001:db8::1", 443),
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ALL),
        ("port:443", [("10.0.0.5", 443), ("2001:db8::1", 443)]),
        ("port:>=8000", [("10.1.2.3", 8443)]),
        ("port:<53", [("10.0.0.5", 22)]),
        ("port:<=53", [("10.0.0.5", 22), ("192.0.2.7", 53)]),
        ("-port:443", sorted(set(ALL) - {("10.0.0.5", 443), ("2001:db8::1", 443)})),
        ("service:HTTPS", HTTPS),
        ('product:"nginx"', [("10.0.0.5", 443), ("192.0.2.7", 80)]),
        ("-product:nginx", sorted(set(ALL) - {("10.0.0.5", 443), ("192.0.2.7", 80)})),
        ("version:1.22.1", [("10.0.0.5", 443)]),
        ("net:10.0.0.0/8", [("10.0.0.5", 22), ("10.0.0.5", 443), ("10.1.2.3", 8443)]),
        ("ip:10.0.0.5", [("10.0.0.5", 22), ("10.0.0.5", 443)]),
        ("ip:2001:db8::/32", [("2001:db8::1", 443)]),
        ("transport:udp", [("192.0.2.7", 53)]),
        ("tag:dmz", [("10.0.0.5", 443), ("2001:db8::1", 443)]),
        ("tag:DMZ", []),
        ("hostname:WWW.example.com", [("10.0.0.5", 443)]),
        ("banner:openssh_9", [("10.0.0.5", 22)]),
        ("first_seen:<2026-11-01", [("10.0.0.5", 443)]),
        ("first_seen:2026-10-21", [("10.0.0.5", 443)]),
        ("last_seen:>2026-11-29", ALL),
        (
            "last_seen:>=2026-11-30T05:56:00Z",
            [("10.0.0.5", 443), ("192.0.2.7", 53), ("2001:db8::1", 443)],
        ),
        ("last_seen:<1d", []),
        ("cert.expires:<30d", [("10.0.0.5", 443)]),
        ("cert.expires:>30d", [("10.1.2.3", 8443)]),
        ("cert.expires:2026-12-20", [("10.0.0.5", 443)]),
        ("-cert.expires:<30d", sorted(set(ALL) - {("10.0.0.5", 443)})),
        ('cert.issuer:"Let\'s Encrypt"', [("10.0.0.5", 443)]),
        ("cert.subject:localhost", [("10.1.2.3", 8443)]),
        ("cert.san:example.com", [("10.0.0.5", 443)]),
        ("cert.fingerprint:" + "ab" * 31 + "cd", [("10.0.0.5", 443)]),
        ("cert.fingerprint:" + "AB:" * 31 + "CD", [("10.0.0.5", 443)]),
        ("cert.self_signed:true", [("10.1.2.3", 8443)]),
        ("cert.self_signed:false", [("10.0.0.5", 443)]),
        ("cert.key_type:rsa", [("10.0.0.5", 443)]),
        ("cert.key_bits:>=2048", [("10.0.0.5", 443)]),
        ("cert.key_bits:<1024", [("10.1.2.3", 8443)]),
        ('title:"login"', [("10.0.0.5", 443)]),
        ("title:42", []),
        ("server:nginx", [("10.0.0.5", 443)]),
        ("server:NGINX/1.22", [("10.0.0.5", 443)]),
        ("-server:nginx", sorted(set(ALL) - {("10.0.0.5", 443)})),
        ("server:quokka", []),
        ("-server:quokka", ALL),
        ("title:dash", [("10.1.2.3", 8443)]),
        ('-title:"login"', sorted(set(ALL) - {("10.0.0.5", 443)})),
        ("-title:42", ALL),
        ('title:"page login"', []),
        ("title:page server:nginx", [("10.0.0.5", 443)]),
        ("title:dashboard OR server:nginx", [("10.0.0.5", 443), ("10.1.2.3", 8443)]),
        ("nginx", [("10.0.0.5", 443), ("192.0.2.7", 80)]),
        ('"SSH-2.0"', [("10.0.0.5", 22)]),
        (
            "-nginx -openssh",
            sorted(set(ALL) - {("10.0.0.5", 443), ("192.0.2.7", 80), ("10.0.0.5", 22)}),
        ),
        ("(port:22 OR port:8443) -service:ssh", [("10.1.2.3", 8443)]),
        (
            "port:22 OR port:53 OR tag:dmz",
            [("10.0.0.5", 22), ("10.0.0.5", 443), ("192.0.2.7", 53), ("2001:db8::1", 443)],
        ),
        (
            "NOT (service:https OR service:http)",
            [("10.0.0.5", 22), ("192.0.2.7", 53), ("2001:db8::1", 443)],
        ),
        ("status:open", ALL),
        ("status:gone", []),
        ("state:open port:53", [("192.0.2.7", 53)]),
        (
            'port:443 service:https product:"nginx" net:10.0.0.0/8 -port:22 status:open tag:dmz '
            'first_seen:>2026-10-01 cert.expires:<30d cert.issuer:"Let\'s Encrypt" title:"login"',
            [("10.0.0.5", 443)],
        ),
    ],
)
def test_the_language_finds_the_same_assets_on_every_store(store, language_assets, text, expected):
    assert search(store, language_assets, text) == sorted(expected)


def test_the_language_ands_with_the_status_filter(store, language_assets):
    assert search(store, language_assets, "port:443", status="gone") == []
    assert search(store, language_assets, "port:443", status="open") == [
        ("10.0.0.5", 443),
        ("2001:db8::1", 443),
    ]


# -- property: both adapters agree on any query --------------------------------------

_VALUES = {
    "port": ["22", "443", ">1000", "<=80", ">=0"],
    "service": ["https", "SSH", "nope"],
    "product": ["nginx", "openssh", '"Jetty"'],
    "net": ["10.0.0.0/8", "192.0.2.0/24", "::/0"],
    "ip": ["10.0.0.5", "2001:db8::1"],
    "tag": ["dmz", "tls"],
    "transport": ["tcp", "udp"],
    "title": ["login", "DASH", '"page"'],
    "server": ["nginx", "QUOKKA", '"1.22"'],
    "cert.expires": ["<30d", ">1y", "<2027-01-01", "2026-12-20"],
    "cert.issuer": ['"Let\'s"', "localhost"],
    "cert.san": ["localhost", "EXAMPLE.com"],
    "cert.self_signed": ["true", "false"],
    "cert.key_bits": [">=2048", "<300"],
    "first_seen": [">2026-11-01", "<10d", ">100d"],
    "last_seen": [">=2026-11-30", "<2026-11-30T05:55:00Z"],
    "status": ["open", "gone"],
}
_clauses = st.one_of(
    st.sampled_from(sorted(_VALUES)).flatmap(
        lambda f: st.sampled_from(_VALUES[f]).map(lambda v, f=f: f"{f}:{v}")
    ),
    st.sampled_from(["nginx", "ssh", '"2.0-Open"', "example", "zzz"]),
)
_terms = st.builds(lambda neg, c: ("-" if neg else "") + c, st.booleans(), _clauses)
_groups = st.lists(_terms, min_size=1, max_size=3).map(" ".join)
_queries = st.lists(_groups, min_size=1, max_size=3).map(
    lambda groups: " OR ".join(f"({g})" for g in groups)
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=_queries)
def test_both_stores_answer_any_query_alike(postgres_store, elasticsearch_store, text):
    owner = _both_owner(postgres_store, elasticsearch_store)
    assert search(postgres_store, owner, text) == search(elasticsearch_store, owner, text)


_written: dict[tuple[int, int], int] = {}


def _both_owner(pg, es) -> int:
    """One owner's assets written once to both stores (hypothesis reuses the fixtures)."""
    key = (id(pg), id(es))
    if key not in _written:
        owner = next(_owners)
        for store in (pg, es):
            assert store.publish_current(_assets(owner), max_operations=10, max_bytes=1 << 20).ok
            store.refresh_current()
        _written[key] = owner
    return _written[key]


# -- facets -----------------------------------------------------------------------------


def test_facets_count_the_same_on_every_store(store, language_assets):
    query = AssetQuery(scope="user", owner_id=language_assets, status="all")
    facets = store.asset_facets(query, size=10, sample=1000)
    assert (facets.sampled, facets.capped) == (6, False)
    assert facets.facets["service"] == [("https", 2), ("domain", 1), ("http", 1), ("ssh", 1)]
    assert facets.facets["product"] == [("nginx", 2), ("Jetty", 1), ("OpenSSH", 1)]
    assert facets.facets["port"] == [(443, 2), (22, 1), (53, 1), (80, 1), (8443, 1)]
    assert facets.facets["cert.issuer"] == [("CN=R3,O=Let's Encrypt,C=US", 1), ("CN=localhost", 1)]

    narrowed = AssetQuery(
        scope="user",
        owner_id=language_assets,
        status="all",
        where=parse_query("net:10.0.0.0/8", now=NOW).node,
    )
    few = store.asset_facets(narrowed, size=1, sample=1000)
    assert few.sampled == 3 and few.facets["service"] == [("https", 2)]
    assert few.facets["port"] == [(22, 1)]


def test_facets_count_at_most_the_sample(store, language_assets):
    query = AssetQuery(scope="user", owner_id=language_assets, status="all")
    facets = store.asset_facets(query, size=10, sample=4)
    assert (facets.sampled, facets.capped) == (4, True)
    assert sum(count for _value, count in facets.facets["port"]) == 4
    empty = store.asset_facets(
        AssetQuery(scope="user", owner_id=language_assets, where=parse_query("port:1").node),
        size=10,
        sample=4,
    )
    assert (empty.sampled, empty.capped) == (0, False)
    assert empty.facets == {"service": [], "product": [], "port": [], "cert.issuer": []}
