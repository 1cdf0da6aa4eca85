"""``[search] facts_retention_months``: whole months of facts dropped by partition, the
exact counters kept right (docs/architecture.md "Fact retention")."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime

import sqlalchemy as sa

from app import db
from app.search.postgres_retention import fact_partitions, months_to_keep_from
from app.search.postgres_store import PostgresStore
from jobs.base import JobContext
from jobs.facts_retention import job
from tests.support.search_documents import fact

MONTHS = {
    datetime(2026, 8, 15, tzinfo=UTC): 3,
    datetime(2026, 9, 2, tzinfo=UTC): 5,
    datetime(2026, 11, 30, tzinfo=UTC): 7,
}


def _write(store, execution_id: int) -> None:
    docs, position = [], 0
    for observed_at, count in MONTHS.items():
        for _ in range(count):
            docs.append(fact(execution_id, position, observed_at=observed_at))
            position += 1
    store.ensure_partitions({d.observed_at.strftime("%Y.%m") for d in docs})
    assert store.write_facts(docs).ok


def _counted() -> dict[date, int]:
    with db.transaction() as conn:
        rows = conn.execute(
            sa.text("SELECT month, sum(facts) AS n FROM search_execution_fact_counts GROUP BY 1")
        ).all()
    return {row.month: int(row.n) for row in rows}


def _stored() -> dict[date, int]:
    with db.transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT date_trunc('month', observed_at AT TIME ZONE 'UTC')::date AS month, "
                "count(*) AS n FROM search_facts GROUP BY 1"
            )
        ).all()
    return {row.month: int(row.n) for row in rows}


def test_months_before_the_retention_go_whole_with_their_counters(postgres_store) -> None:
    _write(postgres_store, 41)
    _write(postgres_store, 42)
    assert (
        _counted()
        == _stored()
        == {
            date(2026, 8, 1): 6,
            date(2026, 9, 1): 10,
            date(2026, 11, 1): 14,
        }
    )
    dropped = postgres_store.drop_fact_months_before(date(2026, 10, 1))
    assert dropped == ["search_facts_y2026m08", "search_facts_y2026m09"]
    assert _counted() == _stored() == {date(2026, 11, 1): 14}
    with db.transaction() as conn:
        assert [month for _, month in fact_partitions(conn)] == [date(2026, 11, 1)]
    assert postgres_store.drop_fact_months_before(date(2026, 10, 1)) == []


def test_a_late_fact_for_a_dropped_month_finds_its_partition_again(settings, engine) -> None:
    # Another process dropped the month this store still has in its cache.
    keeping = settings.replace(search={"facts_retention_months": 2})
    writer, dropper = PostgresStore(keeping), PostgresStore(keeping)
    for store in (writer, dropper):
        store.ensure_schema()
    _write(writer, 7)
    dropper.drop_fact_months_before(date(2026, 10, 1))
    late = fact(7, 100, observed_at=datetime(2026, 8, 20, tzinfo=UTC))
    writer.ensure_partitions(["2026.08"])
    assert writer.write_facts([late]).ok
    assert _counted()[date(2026, 8, 1)] == _stored()[date(2026, 8, 1)] == 1


def test_the_runner_job_keeps_the_configured_months(settings, engine) -> None:
    store = PostgresStore(settings)
    store.ensure_schema()
    _write(store, 9)
    now = datetime.now(UTC)
    kept_from = months_to_keep_from(now, 2)
    assert kept_from == date(now.year - (now.month < 2), (now.month - 2) % 12 + 1, 1)
    ctx = JobContext(
        settings=settings, worker_id=1, stopping=threading.Event(), cancelled=threading.Event()
    )
    job(settings).function(ctx, None)  # 0: kept forever
    assert len(_stored()) == 3
    job(settings.replace(search={"facts_retention_months": 2})).function(ctx, None)
    assert all(month >= kept_from for month in _stored())
    assert _counted() == _stored()
