"""New facts are loaded with COPY; a shard holding a stored fact takes the merge statements.

COPY costs PostgreSQL about half of what ``json_to_recordset`` costs for a new fact
(issue 21), but it cannot skip a stored row. These tests hold the two paths to one
result: which path a shard took, that a shard with one stored fact falls back whole
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
from tests.support.search_documents import fact

ALL = StorageScope(months=("2026.10", "2026.11", "2026.12"))


@pytest.fixture
def paths(monkeypatch):
    """Counts the shards each path wrote."""
    taken = {"copy": 0, "merge": 0}
    copy_in, merge = db.copy_in, postgres_writes.PostgresWrites._merge_fact_shard

    def counted_copy(*args, **kwargs):
        taken["copy"] += 1
        return copy_in(*args, **kwargs)

    def counted_merge(self, *args, **kwargs):
        taken["merge"] += 1
        return merge(self, *args, **kwargs)

    monkeypatch.setattr(db, "copy_in", counted_copy)
    monkeypatch.setattr(postgres_writes.PostgresWrites, "_merge_fact_shard", counted_merge)
    return taken


def _stored(execution_id: int) -> list:
    with db.transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT replace(id::text, '-', '') AS id, observed_at, kind, upload_id, stream, "
                "batch_index, position, scanner_id, body FROM search_facts "
                "WHERE execution_id = :e ORDER BY position"
            ),
            {"e": execution_id},
        ).all()


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
    assert paths == {"copy": 1, "merge": 0}
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
    assert paths == {"copy": 2, "merge": 1}
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
