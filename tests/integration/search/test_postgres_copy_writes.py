"""New facts and execution endpoints are loaded with COPY; a shard holding a stored row
takes the statements that compare (facts) or merge (endpoints) row by row.

COPY costs PostgreSQL about half of what ``json_to_recordset`` costs for a new row
(issue 21), but it cannot skip a stored row. These tests hold the two paths to one
result: which path a shard took, that a shard with one stored row falls back whole
inside the same transaction, that the counters stay exact either way, that the COPY
text keeps every value as given, and that COPY's failures are mapped like any other
statement's (a refusal is 422-worthy ``StoreRefused``, a timeout a logged 503).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from app import db
from app.search import postgres_writes
from app.search.port import StorageScope, StoreRefused, StoreUnavailable
from tests.support.search_documents import execution_endpoint, fact
from tests.support.sql import rows

ALL = StorageScope(months=("2026.10", "2026.11", "2026.12"))


@pytest.fixture
def paths(monkeypatch):
    """Counts the COPYs tried and the shards the merge statements wrote."""
    taken = {"copy": 0, "fact_merge": 0, "endpoint_merge": 0}

    def counting(name, function):
        def counted(*args):
            taken[name] += 1
            return function(*args)

        return counted

    monkeypatch.setattr(db, "copy_in", counting("copy", db.copy_in))
    facts = postgres_writes.PostgresWrites._merge_fact_shard
    monkeypatch.setattr(
        postgres_writes.PostgresWrites, "_merge_fact_shard", counting("fact_merge", facts)
    )
    monkeypatch.setattr(
        postgres_writes, "_merge_shard", counting("endpoint_merge", postgres_writes._merge_shard)
    )
    return taken


def _stored(execution_id: int) -> list:
    return rows(
        "SELECT replace(id::text, '-', '') AS id, observed_at, kind, upload_id, stream, "
        "batch_index, position, scanner_id, body FROM search_facts "
        "WHERE execution_id = :e ORDER BY position",
        e=execution_id,
    )


def test_a_new_shard_is_copied_and_counted(postgres_store, paths):
    months = (
        datetime(2026, 10, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC),
    )
    facts = [
        fact(41, p, observed_at=months[p % 3], kind=("observation", "dns_record")[p % 2])
        for p in range(30)
    ]
    result = postgres_store.write_facts(facts)
    assert [i.status for i in result.items] == [201] * 30
    assert (paths["copy"], paths["fact_merge"]) == (1, 0)
    rows = _stored(41)
    assert [(r.id, r.observed_at, r.kind) for r in rows] == [
        (f.id, f.observed_at, f.kind) for f in facts
    ]
    counts = postgres_store.count(ALL, 41)
    assert (counts.observations, counts.dns_records) == (15, 15)
    # Each month's counter holds exactly that month's facts.
    for month, expected in (("2026.10", 10), ("2026.11", 10), ("2026.12", 10)):
        scoped = postgres_store.count(StorageScope(months=(month,)), 41)
        assert scoped.observations + scoped.dns_records == expected


def test_a_shard_with_one_stored_fact_takes_the_merge_statements(postgres_store, paths):
    first = [fact(42, p) for p in range(10)]
    assert postgres_store.write_facts(first).ok
    changed = fact(42, 3, body={"ip": "192.0.2.1", "port": 80, "transport": "tcp", "state": "x"})
    second = [*first[:3], changed, *first[4:], *(fact(42, p) for p in range(10, 20))]
    result = postgres_store.write_facts(second)
    assert [i.status for i in result.items] == [200] * 10 + [201] * 10
    # The COPY was tried, refused by the stored ids, and undone: the merge wrote the shard.
    assert (paths["copy"], paths["fact_merge"]) == (2, 1)
    rows = _stored(42)
    assert len(rows) == 20
    assert rows[3].body["state"] == "x"
    assert postgres_store.count(ALL, 42).observations == 20
    # A replay of everything changes nothing and counts nothing.
    assert [i.status for i in postgres_store.write_facts(second).items] == [200] * 20
    assert postgres_store.count(ALL, 42).observations == 20


def test_copy_text_keeps_every_value_as_given(postgres_store):
    body = {
        "banner": 'tab\there\nnew line\r\\back\\slash "quoted" \\N \\t é 日本 🙂',
        "nested": {"list": ["\\", "\t", ""], "n": 2**62, "none": None, "yes": True},
        "when": datetime(2026, 11, 30, 6, 0, 0, 123456, tzinfo=UTC),
    }
    odd = fact(43, 0, upload_id="up\\load\tid", stream="str\neam", body=body)
    no_scanner = fact(43, 1)
    object.__setattr__(no_scanner, "scanner_id", None)
    assert postgres_store.write_facts([odd, no_scanner]).ok
    first, second = _stored(43)
    assert (first.upload_id, first.stream) == ("up\\load\tid", "str\neam")
    assert first.body == {**body, "when": "2026-11-30T06:00:00.123456Z"}
    assert (first.scanner_id, second.scanner_id) == (1, None)


def test_a_fact_postgresql_refuses_is_a_refusal_not_an_outage(postgres_store):
    bad = fact(44, 0)
    object.__setattr__(bad, "id", "not-a-uuid")
    with pytest.raises(StoreRefused, match="22P02"):
        postgres_store.write_facts([bad])
    assert _stored(44) == []


def test_a_copy_past_the_statement_timeout_is_a_logged_outage(postgres_store, engine, caplog):
    caplog.set_level(logging.INFO)
    facts = [fact(45, p) for p in range(3)]
    # A partition locked by another transaction: the COPY waits into its timeout.
    postgres_store.ensure_partitions([facts[0].month])
    partition = postgres_writes.partition_name(facts[0].month)
    writes = postgres_store._writes
    with engine.connect() as locker, locker.begin():
        locker.execute(sa.text(f"LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE"))
        original = writes._write_fact_shard

        def impatient(docs, data, conn):
            conn.execute(sa.text("SET LOCAL statement_timeout = '50ms'"))
            return original(docs, data, conn)

        writes._write_fact_shard = impatient
        try:
            with pytest.raises(StoreUnavailable):
                postgres_store.write_facts(facts)
        finally:
            del writes._write_fact_shard
    timeouts = [r for r in caplog.records if getattr(r, "netmap_event", "") == "SearchStoreTimeout"]
    assert [r.netmap_fields["sqlstate"] for r in timeouts] == ["57014"]
    assert postgres_store.write_facts(facts).ok  # and the same write goes through afterwards
    assert postgres_store.count(ALL, 45).observations == 3


def _endpoint_counts(execution_id: int) -> tuple[int, int]:
    [row] = rows(
        "SELECT endpoints, ips FROM search_execution_endpoint_counts WHERE execution_id = :e",
        e=execution_id,
    )
    return row.endpoints, row.ips


def test_new_execution_endpoints_are_copied_and_counted(postgres_store, settings, paths):
    store = type(postgres_store)(settings.replace(elasticsearch={"bulk_batch_size": 4}))
    try:
        # Shards of 4: two addresses span shards, and an IPv6 address is among them.
        docs = [
            execution_endpoint(46, ip, port)
            for ip in ("192.0.2.1", "192.0.2.2", "2001:db8::1")
            for port in (22, 80, 443)
        ]
        result = store.write_execution_endpoints(docs)
        assert [i.status for i in result.items] == [201] * 9
        assert result.requests == 3
        assert (paths["copy"], paths["endpoint_merge"]) == (3, 0)
        assert _endpoint_counts(46) == (9, 3)
        # A second batch: one shard all new (copied), one holding a stored endpoint (merged).
        more = [
            execution_endpoint(46, "192.0.2.3", 22),
            execution_endpoint(46, "192.0.2.3", 80),
            execution_endpoint(46, "192.0.2.4", 22),
            execution_endpoint(46, "192.0.2.1", 8080),
            execution_endpoint(46, "192.0.2.5", 22),
            execution_endpoint(46, "192.0.2.2", 22, banner="newer", seen=docs[0].last_seen),
        ]
        result = store.write_execution_endpoints(more)
        assert sorted(i.status for i in result.items) == [200] + [201] * 5
        assert (paths["copy"], paths["endpoint_merge"]) == (5, 1)
        assert _endpoint_counts(46) == (14, 6)
        [stored] = rows(
            "SELECT count(*), count(DISTINCT ip) FROM search_execution_endpoints "
            "WHERE execution_id = 46"
        )
        assert tuple(stored) == (14, 6)
    finally:
        store.close()


def test_endpoint_copy_text_keeps_every_value_as_given(postgres_store):
    odd = execution_endpoint(
        47,
        "192.0.2.9",
        8443,
        "udp",
        service=None,
        product="tab\there",
        version="\\N",
        banner='new\nline\r "quoted" \\back é 🙂',
        hostname="h\\x",
        tags=('a"b', "c\\d", "e,f", "{g}", "NULL", " "),
        details={"nested": {"list": ["\t", "\\", None], "n": 2**62}, "flag": True},
        owner_id=None,
    )
    assert postgres_store.write_execution_endpoints([odd]).ok
    [row] = rows(
        "SELECT host(ip) AS ip, port, transport, first_seen, last_seen, observation_key, "
        "state, service, product, version, banner, hostname, tags, details, owner_id "
        "FROM search_execution_endpoints WHERE execution_id = 47"
    )
    assert row.ip == "192.0.2.9" and (row.port, row.transport) == (8443, "udp")
    assert (row.first_seen, row.last_seen) == (odd.first_seen, odd.last_seen)
    assert row.observation_key == odd.observation_key
    assert (row.state, row.service, row.product, row.version) == (
        "open",
        None,
        "tab\there",
        "\\N",
    )
    assert (row.banner, row.hostname) == (odd.banner, odd.hostname)
    assert tuple(row.tags) == odd.tags
    assert row.details == odd.details
    assert row.owner_id is None


def test_an_endpoint_with_a_nul_is_refused_alone(postgres_store):
    bad = execution_endpoint(48, "192.0.2.1", 80, banner="nul\x00here")
    good = execution_endpoint(48, "192.0.2.1", 81)
    result = postgres_store.write_execution_endpoints([bad, good])
    assert [(i.status, i.error_type) for i in result.items] == [
        (400, "invalid_document"),
        (201, None),
    ]
    assert _endpoint_counts(48) == (1, 1)
