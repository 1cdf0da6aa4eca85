"""The search-store contract (STO-2): the same behaviour from every adapter.

Each test runs once per adapter (``store`` is parametrised in conftest). The
reference for every merge is ``app.search.documents.merge_all``: whatever the
order and batching of writes, the stored document must equal the join of all
versions written.
"""

from __future__ import annotations

import ipaddress
import itertools
import random
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cursors import encode_cursor
from app.errors import ValidationError
from app.search.documents import merge_all
from app.search.port import AssetQuery, BatchKey, OperationTooLarge, StorageScope
from app.search.query_language import parse_query
from tests.support.search_documents import (
    BASE_TIME,
    at,
    current_asset,
    execution_endpoint,
    fact,
)

pytestmark = pytest.mark.contract

NOVEMBER = StorageScope(months=("2026.11",))
_owners = itertools.count(10_000)


def all_execution_endpoints(store, execution_id: int, page: int = 3):
    found, after = [], None
    while True:
        batch = store.read_execution_endpoints(execution_id, after_id=after, limit=page)
        found.extend(batch)
        if len(batch) < page:
            return found
        after = batch[-1].id


def all_assets(store, **query):
    items, cursor = [], None
    while True:
        page = store.search_assets(AssetQuery(cursor=cursor, **query))
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return items


def by_id(documents):
    return {d.id: d for d in documents}


# -- writes, reads and replays ------------------------------------------------


def test_execution_endpoints_round_trip_and_keyset_order(store):
    docs = [
        execution_endpoint(
            7,
            ip,
            port,
            task_id=3,
            owner_id=2,
            service="http",
            product="nginx",
            version="1.22",
            banner="HTTP/1.1 200 OK\r\nServer: nginx",
            hostname="www.example.com",
            tags=("edge", "http"),
            details={"http": {"title": "Welcome"}, "tls": None},
        )
        for ip in ("192.0.2.1", "192.0.2.2", "2001:db8::1")
        for port in (80, 443)
    ]
    result = store.write_execution_endpoints(docs)
    assert result.ok and len(result.items) == 6
    assert [i.id for i in result.items] == [d.id for d in docs]
    store.refresh(NOVEMBER)

    stored = all_execution_endpoints(store, 7, page=4)
    assert [d.id for d in stored] == sorted(d.id for d in docs)
    assert by_id(stored) == by_id(docs)
    assert store.read_execution_endpoints(8, after_id=None, limit=10) == []


def test_replaying_writes_changes_nothing(store):
    docs = [execution_endpoint(5, f"198.51.100.{n}", 22, service="ssh") for n in range(1, 6)]
    assets = [current_asset("user", d.ip, 22, owner_id=4, execution_id=5) for d in docs]
    first = store.write_execution_endpoints(docs)
    again = store.write_execution_endpoints(docs)
    store.publish_current(assets, max_operations=2, max_bytes=1 << 20)
    replay = store.publish_current(assets, max_operations=3, max_bytes=1 << 20)
    store.refresh(NOVEMBER)
    store.refresh_current()
    assert first.ok and again.ok and replay.ok
    assert len(replay.items) == 5
    assert by_id(all_execution_endpoints(store, 5)) == by_id(docs)
    assert by_id(all_assets(store, scope="user", owner_id=4)) == by_id(assets)


def test_duplicate_ids_in_one_batch_merge_and_report_every_item(store):
    early = execution_endpoint(9, "192.0.2.9", 80, seen=at(0), service="http")
    late = execution_endpoint(9, "192.0.2.9", 80, seen=at(10), service="https")
    result = store.write_execution_endpoints([late, early, late])
    store.refresh(NOVEMBER)
    assert result.ok and len(result.items) == 3
    (stored,) = all_execution_endpoints(store, 9)
    assert stored == merge_all([late, early])[0]
    assert stored.first_seen == at(0) and stored.last_seen == at(10)
    assert stored.service == "https"


def test_provenance_across_executions(store):
    owner = next(_owners)
    seen_by_3 = current_asset(
        "user", "203.0.113.5", 443, owner_id=owner, execution_id=3, seen=at(30), product="old"
    )
    seen_by_1 = current_asset(
        "user", "203.0.113.5", 443, owner_id=owner, execution_id=1, seen=at(5), product="older"
    )
    seen_by_2 = current_asset(
        "user", "203.0.113.5", 443, owner_id=owner, execution_id=2, seen=at(60), product="new"
    )
    for doc in (seen_by_3, seen_by_1, seen_by_2):
        assert store.publish_current([doc], max_operations=10, max_bytes=1 << 20).ok
    store.refresh_current()
    (stored,) = all_assets(store, scope="user", owner_id=owner)
    assert (stored.first_seen, stored.first_execution_id) == (at(5), 1)
    assert (stored.last_seen, stored.last_execution_id) == (at(60), 2)
    assert stored.product == "new"


def test_a_scan_that_read_no_certificate_keeps_the_one_an_earlier_scan_read(store):
    """A ``quick`` scan (no ssl-cert, no http-title) after a ``standard`` one: the current
    asset keeps its certificate and page (and what the search reads from them), with the
    time they were read; the rest of details is the newest scan's. A later certificate
    replaces it."""
    owner = next(_owners)
    tls = {"sha256": "ab" * 32, "issuer": "CN=Old CA", "not_after": "2027-01-01T00:00:00Z"}
    standard = current_asset(
        "user",
        "192.0.2.88",
        443,
        owner_id=owner,
        execution_id=1,
        seen=at(0),
        details={"tls": tls, "http": {"title": "Shop"}, "extrainfo": "deep"},
    )
    quick = current_asset(
        "user",
        "192.0.2.88",
        443,
        owner_id=owner,
        execution_id=2,
        seen=at(10),
        details={"extrainfo": "quick"},
    )
    for doc in (standard, quick):
        assert store.publish_current([doc], max_operations=10, max_bytes=1 << 20).ok
    store.refresh_current()
    (stored,) = all_assets(store, scope="user", owner_id=owner)
    assert stored == merge_all([standard, quick])[0]
    assert stored.details == {"tls": tls, "http": {"title": "Shop"}, "extrainfo": "quick"}
    assert stored.observed == {"tls": at(0), "http": at(0)}
    found = store.search_assets(
        AssetQuery(scope="user", owner_id=owner, where=parse_query('cert.issuer:"Old CA"').node)
    )
    assert [d.ip for d in found.items] == ["192.0.2.88"]

    renewed = {**tls, "sha256": "cd" * 32, "issuer": "CN=New CA"}
    again = current_asset(
        "user",
        "192.0.2.88",
        443,
        owner_id=owner,
        execution_id=3,
        seen=at(20),
        details={"tls": renewed},
    )
    assert store.publish_current([again], max_operations=10, max_bytes=1 << 20).ok
    store.refresh_current()
    (stored,) = all_assets(store, scope="user", owner_id=owner)
    assert stored.details["tls"] == renewed and stored.details["http"] == {"title": "Shop"}
    assert stored.observed == {"http": at(0)}
    old = AssetQuery(scope="user", owner_id=owner, where=parse_query('cert.issuer:"Old CA"').node)
    assert store.search_assets(old).items == []


def test_equal_last_seen_is_decided_by_execution_then_observation_key(store):
    owner = next(_owners)
    common = {"owner_id": owner, "seen": at(0)}
    a = current_asset("user", "192.0.2.77", 25, execution_id=4, service="smtp", **common)
    b = current_asset("user", "192.0.2.77", 25, execution_id=4, service="submission", **common)
    c = current_asset("user", "192.0.2.77", 25, execution_id=3, service="lmtp", **common)
    expected = merge_all([a, b, c])[0]
    store.publish_current([c, b], max_operations=10, max_bytes=1 << 20)
    store.publish_current([a], max_operations=10, max_bytes=1 << 20)
    store.refresh_current()
    (stored,) = all_assets(store, scope="user", owner_id=owner)
    assert stored == expected
    assert stored.first_execution_id == 3 and stored.last_execution_id == 4


version_strategy = st.fixed_dictionaries(
    {
        "endpoint": st.integers(0, 2),
        "first": st.integers(0, 3),
        "duration": st.integers(0, 3),
        "first_execution": st.integers(1, 3),
        "last_execution": st.integers(1, 3),
        "service": st.sampled_from([None, "http", "https", "ssh"]),
        "banner": st.sampled_from([None, "a", "b"]),
        "scope": st.sampled_from(["user", "global"]),
        # The probed documents of details, ties of time between different ones included.
        "tls": st.sampled_from([None, {"sha256": "aa", "issuer": "CN=A"}, {"sha256": "bb"}]),
        "http": st.sampled_from([None, {"title": "One"}, {"title": "Two", "server": "x"}]),
        "extra": st.sampled_from([None, "conf"]),
    }
)


def _details(version: dict) -> dict:
    found = {name: version[name] for name in ("tls", "http") if version[name] is not None}
    if version["extra"]:
        found["extrainfo"] = version["extra"]  # the rest of details: the newest's
    return found


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    versions=st.lists(version_strategy, min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 5),
)
def test_merges_in_any_order_and_batching_converge_to_the_join(store, versions, seed, batch):
    owner = next(_owners)
    # A fresh owner (and, for global documents, fresh addresses) isolates each example.
    net = owner % 250
    docs = [
        current_asset(
            v["scope"],
            f"10.{net}.{owner // 250 % 250}.{v['endpoint'] + 1}",
            8000 + v["endpoint"],
            owner_id=owner,
            first_seen=at(v["first"]),
            last_seen=at(v["first"] + v["duration"]),
            first_execution_id=v["first_execution"],
            last_execution_id=v["last_execution"],
            service=v["service"],
            banner=v["banner"],
            details=_details(v),
        )
        for v in versions
    ]
    shuffled = list(docs)
    random.Random(seed).shuffle(shuffled)
    for start in range(0, len(shuffled), batch):
        result = store.publish_current(
            shuffled[start : start + batch], max_operations=2, max_bytes=1 << 20
        )
        assert result.ok
    store.refresh_current()
    expected = by_id(merge_all(docs))
    cidr = f"10.{net}.{owner // 250 % 250}.0/24"
    stored = all_assets(store, scope="user", owner_id=owner, cidr=cidr)
    stored += all_assets(store, scope="global", cidr=cidr)
    assert by_id(stored) == expected


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sightings=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5)), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_execution_endpoint_merges_in_any_order_converge(store, sightings, seed):
    execution = next(_owners)
    docs = [
        execution_endpoint(execution, "192.0.2.50", 80 + port, seen=at(minute), banner=f"b{minute}")
        for port, minute in sightings
    ]
    shuffled = list(docs)
    random.Random(seed).shuffle(shuffled)
    for doc in shuffled:
        assert store.write_execution_endpoints([doc]).ok
    store.refresh(NOVEMBER)
    assert by_id(all_execution_endpoints(store, execution)) == by_id(merge_all(docs))


# -- counts ---------------------------------------------------------------------


def test_counts_cover_only_the_scope_months(store):
    october = BASE_TIME - timedelta(days=40)
    facts = [fact(21, n) for n in range(5)]
    facts += [fact(21, 100 + n, observed_at=october) for n in range(3)]
    facts += [fact(21, 200 + n, kind="dns_record", body={"name": "a.example"}) for n in range(2)]
    facts += [fact(22, n) for n in range(4)]  # another execution
    assert store.write_facts(facts).ok
    endpoints = [
        execution_endpoint(21, ip, port) for ip in ("192.0.2.1", "192.0.2.2") for port in (1, 2)
    ]
    endpoints.append(execution_endpoint(21, "2001:db8::5", 1))
    store.write_execution_endpoints(endpoints)
    both = StorageScope(months=("2026.10", "2026.11"))
    store.refresh(both)

    counts = store.count(both, 21)
    assert (counts.observations, counts.dns_records) == (8, 2)
    assert (counts.endpoints, counts.ips) == (5, 3)
    assert store.count(NOVEMBER, 21).observations == 5
    assert store.count(StorageScope(legacy_full_history=True), 21).observations == 8
    empty = store.count(StorageScope(), 21)
    assert (empty.observations, empty.endpoints, empty.ips) == (0, 0, 0)
    assert store.count(both, 99).observations == 0


def test_rewriting_facts_does_not_duplicate_them(store):
    facts = [fact(31, n) for n in range(7)]
    first = store.write_facts(facts)
    again = store.write_facts(list(reversed(facts)))
    store.refresh(NOVEMBER)
    assert first.ok and again.ok
    assert {i.id for i in again.items} == {f.id for f in facts}
    assert store.count(NOVEMBER, 31).observations == 7


# -- removing the batches of a dead attempt (ING-18) --------------------------------


def _body(ip: str, port: int) -> dict:
    return {"ip": ip, "port": port, "transport": "tcp", "state": "open"}


def test_facts_are_found_by_batch_and_by_endpoint(store):
    october = BASE_TIME - timedelta(days=40)
    kept = [fact(41, n, batch_index=0, body=_body("192.0.2.1", 80)) for n in range(2)]
    dead = [fact(41, 0, batch_index=1, body=_body("192.0.2.1", 80))]
    dead += [fact(41, 1, batch_index=1, body=_body("192.0.2.9", 22), observed_at=october)]
    dead += [fact(41, 2, batch_index=1, kind="dns_record", body={"name": "a.example"})]
    other_upload = [fact(41, 0, upload_id="u-2", batch_index=1, body=_body("192.0.2.1", 80))]
    other_execution = [fact(42, 0, batch_index=1, body=_body("192.0.2.1", 80))]
    assert store.write_facts(kept + dead + other_upload + other_execution).ok
    both = StorageScope(months=("2026.10", "2026.11"))
    store.refresh(both)

    found = store.batch_facts(both, 41, [BatchKey("u-1", "main", 1)])
    assert sorted(f.id for f in found) == sorted(f.id for f in dead)
    by_fact = {f.id: f for f in found}
    for written in dead:  # read back as written
        assert by_fact[written.id].body == written.body
        assert by_fact[written.id].observed_at == written.observed_at
        assert (by_fact[written.id].kind, by_fact[written.id].position) == (
            written.kind,
            written.position,
        )
    assert store.batch_facts(both, 41, []) == []

    seen = store.endpoint_facts(both, 41, {("192.0.2.1", 80, "tcp")})
    assert sorted(f.id for f in seen) == sorted(f.id for f in kept + dead[:1] + other_upload)
    assert store.endpoint_facts(both, 41, {("192.0.2.1", 81, "tcp")}) == []


def test_deleting_facts_and_endpoints_keeps_the_counts_exact(store):
    facts = [fact(43, n, body=_body("192.0.2.1", 80)) for n in range(4)]
    assert store.write_facts(facts).ok
    endpoints = [
        execution_endpoint(43, "192.0.2.1", 80),
        execution_endpoint(43, "192.0.2.1", 81),  # keeps 192.0.2.1 in the address set
        execution_endpoint(43, "192.0.2.2", 80),  # its address's only endpoint
        execution_endpoint(44, "192.0.2.2", 80),  # another execution's
    ]
    assert store.write_execution_endpoints(endpoints).ok
    store.refresh(NOVEMBER)
    before = store.count(NOVEMBER, 43)
    assert (before.observations, before.endpoints, before.ips) == (4, 3, 2)

    gone = [endpoints[0].id, endpoints[2].id]
    assert store.delete_facts(facts[:3]).ok
    assert store.delete_execution_endpoints(43, gone).ok
    store.refresh(NOVEMBER)
    after = store.count(NOVEMBER, 43)
    assert (after.observations, after.endpoints, after.ips) == (1, 1, 1)
    assert [d.id for d in all_execution_endpoints(store, 43)] == [endpoints[1].id]
    assert len(all_execution_endpoints(store, 44)) == 1
    assert [f.id for f in store.batch_facts(NOVEMBER, 43, [BatchKey("u-1", "main", 0)])] == [
        facts[3].id
    ]

    # Deleting what is gone already succeeds and changes nothing (a repeated removal).
    assert store.delete_facts(facts[:3]).ok
    assert store.delete_execution_endpoints(43, gone).ok
    # An endpoint written again after its removal counts again, once.
    assert store.write_execution_endpoints([endpoints[2]]).ok
    store.refresh(NOVEMBER)
    again = store.count(NOVEMBER, 43)
    assert (again.observations, again.endpoints, again.ips) == (1, 2, 2)


def test_final_request_plan_counts_nothing_for_an_empty_execution(store):
    assert store.final_request_plan(StorageScope()).count_requests == 0
    assert store.final_request_plan(NOVEMBER).count_requests >= 1


# -- execution results paged by endpoint, grouped by IP ------------------------------


def all_results(store, task_id: int, limit: int):
    pages, cursor = [], None
    while True:
        page = store.execution_results(task_id, cursor=cursor, limit=limit)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages


def result_order(doc):
    """The results order: address as IPv6 (IPv4 mapped), port, transport, execution."""
    address = ipaddress.ip_address(doc.ip)
    if address.version == 4:
        address = ipaddress.IPv6Address(f"::ffff:{address}")
    return (int(address), doc.port, doc.transport, doc.execution_id)


def test_execution_results_page_by_endpoint_with_totals_on_the_first_page(store):
    ips = ["192.0.2.10", "192.0.2.2", "10.0.0.1", "2001:db8::1", "192.0.2.100"]
    docs = [
        execution_endpoint(execution, ip, port, task_id=40)
        for execution, ip in zip((41, 42, 41, 42, 41), ips, strict=True)
        for port in (443, 22)
    ]
    docs.append(execution_endpoint(43, "192.0.2.2", 22, task_id=40))  # second execution, same IP
    docs.append(execution_endpoint(50, "192.0.2.3", 22, task_id=49))  # another task
    store.write_execution_endpoints(docs)
    store.refresh(NOVEMBER)

    pages = all_results(store, 40, limit=2)
    assert [len(p.items) for p in pages] == [2, 2, 2, 2, 2, 1]
    assert pages[0].total_endpoints == 11
    assert all(p.total_endpoints is None for p in pages[1:])
    assert all(p.total_ips == 5 for p in pages)
    items = [(d.ip, d.port, d.transport, d.execution_id) for p in pages for d in p.items]
    # Address order (IPv4 before IPv6), then port, transport, execution; the three
    # endpoints of 192.0.2.2 are adjacent and continue across a page boundary.
    assert items == [
        ("10.0.0.1", 22, "tcp", 41),
        ("10.0.0.1", 443, "tcp", 41),
        ("192.0.2.2", 22, "tcp", 42),
        ("192.0.2.2", 22, "tcp", 43),
        ("192.0.2.2", 443, "tcp", 42),
        ("192.0.2.10", 22, "tcp", 41),
        ("192.0.2.10", 443, "tcp", 41),
        ("192.0.2.100", 22, "tcp", 41),
        ("192.0.2.100", 443, "tcp", 41),
        ("2001:db8::1", 22, "tcp", 42),
        ("2001:db8::1", 443, "tcp", 42),
    ]
    assert all(d.task_id == 40 for p in pages for d in p.items)


def test_an_address_with_more_ports_than_the_limit_spans_pages_without_loss(store):
    # One address with 7 endpoints (two transports, two executions) among smaller ones:
    # every page holds at most ``limit`` endpoints and together they hold each once.
    docs = [execution_endpoint(61, "198.51.100.7", p, task_id=60) for p in (1, 80, 443, 8080)]
    docs += [execution_endpoint(61, "198.51.100.7", 53, "udp", task_id=60)]
    docs += [execution_endpoint(62, "198.51.100.7", p, task_id=60) for p in (80, 443)]
    docs += [execution_endpoint(61, ip, 22, task_id=60) for ip in ("198.51.100.1", "::1")]
    store.write_execution_endpoints(docs)
    store.refresh(NOVEMBER)
    expected = sorted(docs, key=result_order)
    for limit in (1, 2, 3, 6, 9, 10):
        pages = all_results(store, 60, limit=limit)
        assert all(len(p.items) <= limit for p in pages)
        assert all(p.total_ips == 3 for p in pages) and pages[0].total_endpoints == 9
        assert [d.id for p in pages for d in p.items] == [d.id for d in expected], limit
        assert pages[-1].next_cursor is None and all(len(p.items) == limit for p in pages[:-1])


_results_tasks = itertools.count(70_000)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    endpoints=st.sets(
        st.tuples(
            st.sampled_from(["10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3", "2001:db8::9"]),
            st.integers(1, 6),
            st.sampled_from(["tcp", "udp"]),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=25,
    ),
    limit=st.integers(1, 7),
)
def test_results_pages_cover_any_task_exactly_once_in_order(store, endpoints, limit):
    task_id = next(_results_tasks)
    docs = [
        execution_endpoint(task_id * 10 + execution, ip, port, transport, task_id=task_id)
        for ip, port, transport, execution in endpoints
    ]
    store.write_execution_endpoints(docs)
    store.refresh(NOVEMBER)
    pages = all_results(store, task_id, limit=limit)
    items = [d for p in pages for d in p.items]
    addresses = {d.ip for d in docs}
    assert len({d.id for d in docs}) == len(items) == pages[0].total_endpoints
    assert {d.id for d in items} == {d.id for d in docs}
    assert all(len(p.items) <= limit for p in pages) and pages[0].total_ips == len(addresses)
    assert [result_order(d) for d in items] == sorted(result_order(d) for d in docs)


def test_execution_results_of_an_unknown_task_are_empty(store):
    page = store.execution_results(12345, cursor=None, limit=10)
    assert (page.items, page.next_cursor, page.total_endpoints, page.total_ips) == ([], None, 0, 0)


def test_execution_results_reject_foreign_cursors(store):
    with pytest.raises(ValidationError):
        store.execution_results(1, cursor="not-a-cursor", limit=10)


def test_execution_results_refuse_cursors_of_the_earlier_format(store):
    # Pages of whole addresses carried {"after": ip, "ips": n} signed as kind "results";
    # read as a position they would mean something else, so they are invalid_cursor.
    store.write_execution_endpoints([execution_endpoint(81, "192.0.2.1", 22, task_id=80)])
    store.refresh(NOVEMBER)
    for old in (
        encode_cursor("results", {"after": "192.0.2.1", "ips": 1}),
        encode_cursor("results.endpoints", {"after": "192.0.2.1", "ips": 1}),
    ):
        with pytest.raises(ValidationError) as refused:
            store.execution_results(80, cursor=old, limit=10)
        assert refused.value.code == "invalid_cursor"


# -- asset search -----------------------------------------------------------------


@pytest.fixture
def asset_fixture(store):
    owner, other = next(_owners), next(_owners)
    docs = [
        current_asset(
            "user",
            "192.0.2.10",
            80,
            owner_id=owner,
            service="http",
            product="nginx",
            banner="Server: nginx/1.22",
            seen=at(0),
        ),
        current_asset(
            "user",
            "192.0.2.10",
            443,
            owner_id=owner,
            service="HTTPS",
            product="nginx",
            hostname="www.example.com",
            first_seen=at(-60 * 24 * 3),
            last_seen=at(60),
        ),
        current_asset(
            "user",
            "192.0.2.200",
            22,
            owner_id=owner,
            service="ssh",
            product="OpenSSH",
            banner="SSH-2.0-OpenSSH_9.6",
            seen=at(120),
        ),
        current_asset("user", "192.0.2.10", 53, "udp", owner_id=owner, service="domain"),
        current_asset("user", "198.51.100.7", 3306, owner_id=owner, service="mysql", seen=at(5)),
        current_asset(
            "user", "2001:db8::10", 80, owner_id=owner, service="http", product="Apache httpd"
        ),
        current_asset("user", "192.0.2.10", 80, owner_id=other, service="http", product="nginx"),
        current_asset("global", "192.0.2.10", 80, service="http", product="nginx"),
    ]
    assert store.publish_current(docs, max_operations=3, max_bytes=1 << 20).ok
    store.refresh_current()
    return owner, other, docs


def _ports(items):
    return sorted((d.ip, d.port) for d in items)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, 6),
        ({"ip": "192.0.2.10"}, [("192.0.2.10", 53), ("192.0.2.10", 80), ("192.0.2.10", 443)]),
        ({"cidr": "192.0.2.128/25"}, [("192.0.2.200", 22)]),
        ({"cidr": "2001:db8::/32"}, [("2001:db8::10", 80)]),
        ({"port": 80}, [("192.0.2.10", 80), ("2001:db8::10", 80)]),
        ({"transport": "udp"}, [("192.0.2.10", 53)]),
        ({"service": "https"}, [("192.0.2.10", 443)]),
        ({"service": "HTTP"}, [("192.0.2.10", 80), ("2001:db8::10", 80)]),
        ({"product": "openssh"}, [("192.0.2.200", 22)]),
        ({"text": "nginx/1.2"}, [("192.0.2.10", 80)]),
        ({"text": "OPENSSH_9"}, [("192.0.2.200", 22)]),
        ({"text": "example.com"}, [("192.0.2.10", 443)]),
        ({"text": "apache"}, [("2001:db8::10", 80)]),
        ({"text": "100%"}, []),
        ({"first_seen_to": at(-60)}, [("192.0.2.10", 443)]),
        ({"last_seen_from": at(60)}, [("192.0.2.10", 443), ("192.0.2.200", 22)]),
        (
            {"last_seen_from": at(1), "last_seen_to": at(120)},
            [("192.0.2.10", 443), ("198.51.100.7", 3306)],
        ),
        ({"cidr": "192.0.2.0/24", "port": 80, "service": "http"}, [("192.0.2.10", 80)]),
    ],
)
def test_asset_search_filters(store, asset_fixture, query, expected):
    owner, _other, _docs = asset_fixture
    items = all_assets(store, scope="user", owner_id=owner, **query)
    if isinstance(expected, int):
        assert len(items) == expected
    else:
        assert _ports(items) == expected


def test_asset_search_is_scoped_and_pages_with_a_keyset(store, asset_fixture):
    owner, other, docs = asset_fixture
    assert _ports(all_assets(store, scope="user", owner_id=other)) == [("192.0.2.10", 80)]
    global_items = all_assets(store, scope="global", ip="192.0.2.10")
    assert [(d.scope, d.owner_id, d.product) for d in global_items] == [("global", None, "nginx")]

    pages, cursor = [], None
    while True:
        page = store.search_assets(AssetQuery(scope="user", owner_id=owner, limit=4, cursor=cursor))
        pages.append(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [len(p) for p in pages] == [4, 2]
    ordered = [(d.ip, d.port, d.transport) for p in pages for d in p]
    assert ordered == [
        ("192.0.2.10", 53, "udp"),
        ("192.0.2.10", 80, "tcp"),
        ("192.0.2.10", 443, "tcp"),
        ("192.0.2.200", 22, "tcp"),
        ("198.51.100.7", 3306, "tcp"),
        ("2001:db8::10", 80, "tcp"),
    ]
    expected = by_id(d for d in docs if d.scope == "user" and d.owner_id == owner)
    assert by_id(d for p in pages for d in p) == expected


def test_asset_search_rejects_bad_filters(store):
    with pytest.raises(ValidationError):
        store.search_assets(AssetQuery(scope="user", owner_id=1, cidr="300.0.0.0/8"))
    with pytest.raises(ValidationError):
        store.search_assets(AssetQuery(scope="user", owner_id=1, ip="nope"))
    with pytest.raises(ValidationError):
        store.search_assets(AssetQuery(scope="user", owner_id=1, cursor="garbage"))


# -- failures -------------------------------------------------------------------------


def test_invalid_documents_fail_alone_and_are_reported(store):
    good = execution_endpoint(61, "192.0.2.61", 80)
    bad_port = execution_endpoint(61, "192.0.2.62", 80)
    bad_port = type(bad_port)(**{**_fields(bad_port), "port": 70000})
    result = store.write_execution_endpoints([good, bad_port])
    store.refresh(NOVEMBER)
    assert not result.ok
    (failed,) = result.failed
    assert failed.id == bad_port.id and 400 <= failed.status < 500
    assert failed.error_type and not failed.retryable
    assert [d.id for d in all_execution_endpoints(store, 61)] == [good.id]
    with pytest.raises(Exception, match="1 of 2 bulk items failed"):
        result.raise_for_failures()


def test_an_operation_over_the_byte_limit_fails_before_anything_is_sent(store):
    owner = next(_owners)
    small = current_asset("user", "192.0.2.1", 80, owner_id=owner)
    huge = current_asset("user", "192.0.2.2", 80, owner_id=owner, banner="x" * 70_000)
    with pytest.raises(OperationTooLarge) as caught:
        store.publish_current([small, huge], max_operations=10, max_bytes=65_536)
    assert caught.value.document_id == huge.id and caught.value.limit == 65_536
    store.refresh_current()
    assert all_assets(store, scope="user", owner_id=owner) == []


def test_publish_shards_by_operations_and_bytes(store):
    owner = next(_owners)
    docs = [
        current_asset("user", f"192.0.2.{n}", 80, owner_id=owner, banner="b" * 2000)
        for n in range(1, 41)
    ]
    by_count = store.publish_current(docs, max_operations=7, max_bytes=1 << 20)
    by_bytes = store.publish_current(docs, max_operations=1000, max_bytes=65_536)
    assert by_count.ok and by_bytes.ok
    assert by_count.requests == 6
    assert by_bytes.requests >= 2
    assert by_bytes.request_bytes >= 40 * 2000


def _fields(doc):
    return {name: getattr(doc, name) for name in doc.__slots__}


# -- sorted asset lists (WEB-12) --------------------------------------------------------

SORTS = [
    (sort, order) for sort in ("ip", "port", "last_seen", "service") for order in ("asc", "desc")
]


def _ip_key(ip: str):
    address = ipaddress.ip_address(ip)
    if address.version == 4:
        address = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + address.packed)
    return address.packed


def expected_order(docs, sort: str, order: str):
    """The documented order (app.search.asset_sort), computed independently."""

    def key(d):
        tail = (_ip_key(d.ip), d.port, d.transport)
        if sort == "ip":
            return tail
        if sort == "port":
            return (d.port, _ip_key(d.ip), d.transport)
        if sort == "last_seen":
            return (d.last_seen, *tail)
        # by code point, a missing service as ""
        return ((d.service or "").encode("utf-8"), *tail)

    return [d.id for d in sorted(docs, key=key, reverse=order == "desc")]


@pytest.fixture
def tied_assets(store):
    """Assets with many ties: 3 ports, 2 last_seen instants, services with case,
    missing and empty values, IPv4 and IPv6, tcp and udp on one port."""
    owner = next(_owners)
    services = ("http", "HTTP", None, "", "ssh", "Zeta", "éclair")
    docs = []
    for n in range(21):
        ip = f"192.0.2.{n % 7 + 1}" if n % 3 else f"2001:db8::{n % 5 + 1:x}"
        port = (22, 80, 443)[n % 3]
        transport = "udp" if n % 4 == 0 else "tcp"
        docs.append(
            current_asset(
                "user",
                ip,
                port,
                transport,
                owner_id=owner,
                service=services[n % len(services)],
                seen=at(5 if n % 2 else 10),
            )
        )
    docs = list(by_id(docs).values())  # (ip, port, transport) repeats collapse to one asset
    global_docs = [
        current_asset("global", d.ip, d.port, d.transport, service=d.service, seen=d.last_seen)
        for d in docs
    ]
    assert store.publish_current(docs + global_docs, max_operations=50, max_bytes=1 << 20).ok
    store.refresh_current()
    return owner, docs, global_docs


@pytest.mark.parametrize(("sort", "order"), SORTS)
@pytest.mark.parametrize("limit", [1, 2, 5, 50])
def test_sorted_asset_pages_have_no_loss_or_duplicates(store, tied_assets, sort, order, limit):
    owner, docs, global_docs = tied_assets
    for scope, owner_id, expected_docs in (
        ("user", owner, docs),
        ("global", None, global_docs),
    ):
        items = all_assets(
            store, scope=scope, owner_id=owner_id, sort=sort, order=order, limit=limit
        )
        assert [d.id for d in items] == expected_order(expected_docs, sort, order)


def test_last_seen_sorts_newest_first_by_default(store, tied_assets):
    owner, docs, _global = tied_assets
    items = all_assets(store, scope="user", owner_id=owner, sort="last_seen", limit=3)
    assert [d.id for d in items] == expected_order(docs, "last_seen", "desc")
    assert items[0].last_seen > items[-1].last_seen


@pytest.mark.parametrize(("sort", "order"), SORTS)
def test_every_filter_works_with_every_sort(store, asset_fixture, sort, order):
    owner, _other, docs = asset_fixture
    for query, expected in (
        ({"port": 80}, [("192.0.2.10", 80), ("2001:db8::10", 80)]),
        ({"service": "HTTP"}, [("192.0.2.10", 80), ("2001:db8::10", 80)]),
        (
            {"cidr": "192.0.2.0/24"},
            [("192.0.2.10", 53), ("192.0.2.10", 80), ("192.0.2.10", 443), ("192.0.2.200", 22)],
        ),
        ({"text": "nginx"}, [("192.0.2.10", 80), ("192.0.2.10", 443)]),
        ({"last_seen_from": at(60)}, [("192.0.2.10", 443), ("192.0.2.200", 22)]),
        ({"status": "all", "transport": "udp"}, [("192.0.2.10", 53)]),
    ):
        items = all_assets(
            store, scope="user", owner_id=owner, sort=sort, order=order, limit=1, **query
        )
        assert _ports(items) == expected, query
        mine = [d for d in docs if d.scope == "user" and d.owner_id == owner]
        wanted = {d.id for d in items}
        assert [d.id for d in items] == [
            i for i in expected_order(mine, sort, order) if i in wanted
        ]


def test_a_cursor_is_valid_for_its_own_sort_and_order_only(store, tied_assets):
    owner, _docs, _global = tied_assets
    cursors = {}
    for sort, order in SORTS:
        page = store.search_assets(
            AssetQuery(scope="user", owner_id=owner, sort=sort, order=order, limit=2)
        )
        assert page.next_cursor
        cursors[(sort, order)] = page.next_cursor
    for issued, cursor in cursors.items():
        for sort, order in SORTS:
            query = AssetQuery(
                scope="user", owner_id=owner, sort=sort, order=order, limit=2, cursor=cursor
            )
            if (sort, order) == issued:
                assert store.search_assets(query).items
                continue
            with pytest.raises(ValidationError) as refused:
                store.search_assets(query)
            assert refused.value.code == "invalid_cursor"


@pytest.mark.parametrize(
    ("fields", "parameter"), [({"sort": "banner"}, "sort"), ({"order": "up"}, "order")]
)
def test_unknown_sort_or_order_is_refused(store, fields, parameter):
    with pytest.raises(ValidationError) as refused:
        store.search_assets(AssetQuery(scope="user", owner_id=1, **fields))
    assert refused.value.code == "invalid_parameter"
    assert refused.value.details == {"parameter": parameter}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(1, 6),  # address
            st.sampled_from([22, 80, 443]),  # port
            st.sampled_from(["tcp", "udp"]),
            st.integers(0, 2),  # last_seen minute: many ties
            st.sampled_from([None, "", "a", "B", "b", "ssh"]),
        ),
        min_size=1,
        max_size=25,
    ),
    sort=st.sampled_from(["ip", "port", "last_seen", "service"]),
    order=st.sampled_from(["asc", "desc"]),
    limit=st.integers(1, 4),
)
def test_sorted_pages_cover_any_set_exactly_once(store, rows, sort, order, limit):
    owner = next(_owners)
    docs = by_id(
        current_asset(
            "user",
            f"10.9.0.{a}" if a % 2 else f"2001:db8:9::{a}",
            port,
            transport,
            owner_id=owner,
            service=service,
            seen=at(minute),
        )
        for a, port, transport, minute, service in rows
    )
    assert store.publish_current(list(docs.values()), max_operations=50, max_bytes=1 << 20).ok
    store.refresh_current()
    items = all_assets(store, scope="user", owner_id=owner, sort=sort, order=order, limit=limit)
    assert [d.id for d in items] == expected_order(list(docs.values()), sort, order)
