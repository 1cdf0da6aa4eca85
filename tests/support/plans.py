"""Query plans in the state every new run is in: newer than the table's statistics.

Every task_id and execution_id of ``search_execution_endpoints`` sits in the planner's
most-common-values list, so a task or execution newer than the last ANALYZE (every
running one) is estimated at one row, and a plan chosen for one row can read the whole
run for each page. ``stale_statistics`` makes exactly that state: statistics gathered
while NEW_TASK did not exist, then thousands of its rows written, with autovacuum off
for the tables so nothing refreshes them meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from app import db
from app.search.port import StorageScope
from tests.support.search_documents import execution_endpoint

NOVEMBER = StorageScope(months=("2026.11",))
OLD_TASK, NEW_TASK = 1, 2
# NEW_TASK's executions and their endpoints: 1,500 addresses x 2 ports, 1,000 x 3.
NEW_EXECUTIONS = {21: 3000, 22: 3000}


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a JSON plan, the plan first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def explain(sql: str, params: dict[str, Any], *, analyze: bool = False) -> dict[str, Any]:
    """The JSON plan of ``sql``; with ``analyze`` it runs, in a transaction rolled back."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    with db.get_engine().connect() as conn:
        answer = conn.execute(sa.text(f"EXPLAIN ({options}) {sql}"), params).scalar_one()
        conn.rollback()
    document = answer if isinstance(answer, list) else json.loads(answer)
    return document[0]["Plan"]


def _write(store, task_id: int, execution_id: int, addresses: int, ports: int) -> None:
    docs = [
        execution_endpoint(
            execution_id, f"10.{task_id}.{a // 250}.{a % 250}", port, task_id=task_id
        )
        for a in range(addresses)
        for port in range(1, ports + 1)
    ]
    for start in range(0, len(docs), 2000):
        assert store.write_execution_endpoints(docs[start : start + 2000]).ok


def stale_statistics(store) -> None:
    """Statistics that know OLD_TASK only, then 6,000 rows of NEW_TASK they never saw."""
    with db.transaction() as conn:
        for table in ("search_execution_endpoints", "search_execution_endpoint_counts"):
            conn.execute(sa.text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
    _write(store, OLD_TASK, 11, addresses=40, ports=5)
    with db.transaction() as conn:
        conn.execute(sa.text("ANALYZE search_execution_endpoints"))
        conn.execute(sa.text("ANALYZE search_execution_endpoint_counts"))
    _write(store, NEW_TASK, 21, addresses=1500, ports=2)
    _write(store, NEW_TASK, 22, addresses=1000, ports=3)
    store.refresh(NOVEMBER)
    with db.transaction() as conn:
        estimate = conn.execute(
            sa.text("SELECT reltuples FROM pg_class WHERE relname = 'search_execution_endpoints'")
        ).scalar_one()
    assert estimate < 1000  # the statistics still describe the table before NEW_TASK
