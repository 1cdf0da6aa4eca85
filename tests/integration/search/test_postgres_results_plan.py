"""Plans of a task's results page that do not depend on fresh statistics (ING-10).

A task newer than the last ANALYZE (every running task) is estimated at one row. A plan
chosen for one row (a nested loop re-running a subquery per row) took seconds at a few
thousand. These tests plan the page and totals queries in exactly that state
(``tests.support.plans.stale_statistics``).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from app import db
from app.search.postgres_queries import (
    RESULT_TOTALS,
    RESULTS_AFTER,
    RESULTS_OF_EXECUTIONS,
    RESULTS_PAGE,
    RESULTS_PAGE_PLANNING,
)
from app.search.results_cursor import decode_results_cursor
from tests.support.plans import NEW_TASK, explain, nodes, stale_statistics

PAGE_INDEX = "ix_search_execution_endpoints_task_order"


def _assert_index_range(plan: dict[str, Any], limit: int) -> dict[str, Any]:
    """A Limit over one ordered scan of the page index: no sort, join or subplan."""
    assert plan["Node Type"] == "Limit", plan
    types = [node["Node Type"] for node in nodes(plan)]
    assert not {"Sort", "Incremental Sort", "Nested Loop", "Hash Join", "Merge Join"} & set(
        types
    ), types
    assert not any(node.get("Subplan Name") for node in nodes(plan)), plan
    (scan,) = plan["Plans"]
    assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), plan
    assert scan["Index Name"] == PAGE_INDEX, plan
    assert scan["Scan Direction"] == "Forward", plan
    if "Actual Rows" in scan:
        # The scan stops after the page (and the one row telling that more exist).
        assert scan["Actual Rows"] <= limit + 1, scan
    return scan


def test_results_pages_are_an_index_range_withstale_statistics(postgres_store):
    stale_statistics(postgres_store)
    limit = 500
    first = {"task_id": NEW_TASK, "limit": limit + 1}
    for analyze in (False, True):
        _assert_index_range(explain(RESULTS_PAGE.format(after=""), first, analyze=analyze), limit)

    page = postgres_store.execution_results(NEW_TASK, cursor=None, limit=limit)
    assert (page.total_endpoints, page.total_ips, len(page.items)) == (6000, 1500, limit)
    position = decode_results_cursor(page.next_cursor)
    assert position is not None
    after = {
        **first,
        "c_ip": f"::ffff:{position.ip}",
        "c_port": position.port,
        "c_transport": position.transport,
        "c_execution": position.execution_id,
    }
    for analyze in (False, True):
        scan = _assert_index_range(
            explain(RESULTS_PAGE.format(after=RESULTS_AFTER), after, analyze=analyze), limit
        )
        # The keyset position is where the scan starts, not a filter on every row.
        assert "ROW(" in scan["Index Cond"], scan


def test_a_runs_page_is_an_index_range_withstale_statistics(postgres_store):
    # The API always names the run's executions. An execution newer than the statistics
    # is estimated at one row, which the (execution_id, id) index also serves; once the
    # page index is a level deeper than that one (as at millions of rows, where the
    # bench saw it: 22 ms to read and sort a 10,000-endpoint run for each page, growing
    # with the run), reading the execution through it and sorting looks cheaper. The
    # index is rebuilt sparse here to be that level deeper with a few thousand rows.
    stale_statistics(postgres_store)
    with db.transaction() as conn:
        conn.execute(sa.text(f"ALTER INDEX {PAGE_INDEX} SET (fillfactor = 10)"))
        conn.execute(sa.text(f"REINDEX INDEX {PAGE_INDEX}"))
    limit = 50
    params = {"task_id": NEW_TASK, "limit": limit + 1, "execution_ids": [22]}
    sql = RESULTS_PAGE.format(after=RESULTS_OF_EXECUTIONS)

    def plan(*, planned: bool) -> dict[str, Any]:
        with db.transaction() as conn:
            if planned:
                conn.execute(sa.text(RESULTS_PAGE_PLANNING))
            answer = conn.execute(sa.text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params)
            document = answer.scalar_one()
        return (document if isinstance(document, list) else json.loads(document))[0]["Plan"]

    # The hazard is real here: left to its estimate, the planner sorts the execution.
    assert "Sort" in {node["Node Type"] for node in nodes(plan(planned=False))}
    _assert_index_range(plan(planned=True), limit)

    page = postgres_store.execution_results(NEW_TASK, cursor=None, limit=limit, execution_ids=[22])
    assert (page.total_endpoints, len(page.items)) == (3000, limit)
    assert {item.execution_id for item in page.items} == {22}
    pages = [page]
    while pages[-1].next_cursor is not None:
        pages.append(
            postgres_store.execution_results(
                NEW_TASK, cursor=pages[-1].next_cursor, limit=500, execution_ids=[22]
            )
        )
    seen = [(item.ip, item.port) for p in pages for item in p.items]
    assert len(seen) == len(set(seen)) == 3000


def test_results_totals_never_read_the_tasks_rows(postgres_store):
    stale_statistics(postgres_store)
    plan = explain(RESULT_TOTALS, {"task_id": NEW_TASK, "execution_ids": None}, analyze=True)
    relations = {node.get("Relation Name") for node in nodes(plan)} - {None}
    assert "search_execution_endpoints" not in relations, relations
    assert "search_execution_endpoint_counts" in relations, relations
    with db.transaction() as conn:
        exact = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT ip) FROM search_execution_endpoints "
                "WHERE task_id = :t"
            ),
            {"t": NEW_TASK},
        ).one()
    page = postgres_store.execution_results(NEW_TASK, cursor=None, limit=1)
    assert (page.total_endpoints, page.total_ips) == tuple(exact) == (6000, 1500)
