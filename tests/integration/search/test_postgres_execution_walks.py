"""Every walk of one execution in id order reads its page, whatever the statistics say.

The projection's pages, the generic page read, the analysis's sightings and the export's
text and bounds all read one execution in id order, a page after a cursor. A run newer
than the last ANALYZE (every running one) is estimated at one row; with two indexes
leading with the execution, reading it through the other one and sorting looks as
cheap, and that read and sorted the whole run for every page (docs/scaling.md, "One
index per walk"). Since migration 2100 the primary key ``(execution_id, id)`` is the only
index leading with the execution, so there is one way to walk it. These tests plan and
run each walk in the stale state (``tests.support.plans``) and check that no scan of the
table reads more than its page.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app import db
from app.search.export_text import _BOUNDS, _chunk_sql
from app.search.postgres_pages import GLOBAL_PREFIX, USER_PREFIX, page_statement
from app.search.postgres_queries import EXECUTION_PAGE
from app.search.postgres_schema import EXECUTION_SIGHTINGS_PAGE_SQL, EXECUTION_TABLE
from tests.support.plans import NEW_EXECUTIONS, explain, nodes, stale_statistics

EXECUTION = 22
LIMIT = 500
PRIMARY_KEY = f"{EXECUTION_TABLE}_pkey"


def _ids(execution_id: int) -> list[str]:
    with db.transaction() as conn:
        rows = conn.execute(
            sa.text(f"SELECT id FROM {EXECUTION_TABLE} WHERE execution_id = :e ORDER BY id"),
            {"e": execution_id},
        )
        return [str(row.id).replace("-", "") for row in rows]


# Each walk: its SQL and its parameters for a page of LIMIT after ``after`` (None: the first).
WALKS = {
    "projection page": (
        page_statement(),
        lambda after: {
            "execution_id": EXECUTION, "after": after, "limit": LIMIT, "parts": 2, "part": 1,
            "max_bytes": 10**8, "global_prefix": GLOBAL_PREFIX, "user_prefix": USER_PREFIX,
        },
    ),
    "generic page": (
        EXECUTION_PAGE,
        lambda after: {"execution_id": EXECUTION, "after": after, "limit": LIMIT},
    ),
    "analysis sightings": (
        EXECUTION_SIGHTINGS_PAGE_SQL,
        lambda after: {"execution_id": EXECUTION, "after_id": after, "limit": LIMIT},
    ),
    "export text": (
        _chunk_sql(csv=True, jsonl=True),
        lambda after: {"execution_id": EXECUTION, "after": after, "upto": None, "limit": LIMIT},
    ),
    "export bounds": (
        _BOUNDS.text,
        lambda after: {"execution_id": EXECUTION, "after": after, "rows": LIMIT, "chunk_rows": 100},
    ),
}  # fmt: skip


def test_one_index_leads_with_the_execution(postgres_store):
    with db.transaction() as conn:
        leading = conn.execute(
            sa.text(
                """
                SELECT i.indexrelid::regclass::text AS name,
                       array_agg(a.attname ORDER BY k.n) AS columns
                  FROM pg_index i
                  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = CAST(:table AS regclass)
                 GROUP BY 1
                HAVING (array_agg(a.attname ORDER BY k.n))[1] = 'execution_id'
                """
            ),
            {"table": EXECUTION_TABLE},
        ).all()
    assert [(row.name, list(row.columns)) for row in leading] == [
        (PRIMARY_KEY, ["execution_id", "id"])
    ]


@pytest.mark.parametrize("walk", sorted(WALKS))
def test_a_walk_of_a_new_run_reads_only_its_page(postgres_store, walk):
    stale_statistics(postgres_store)
    sql, params = WALKS[walk]
    ids = _ids(EXECUTION)
    assert len(ids) == NEW_EXECUTIONS[EXECUTION]
    for after in (None, ids[1000]):
        plan = explain(sql, params(after), analyze=True)
        scans = [n for n in nodes(plan) if n.get("Relation Name") == EXECUTION_TABLE]
        assert scans, plan
        for scan in scans:
            assert scan.get("Index Name") == PRIMARY_KEY, scan
            read = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan.get(
                "Actual Loops", 1
            )
            assert read <= LIMIT + 1, (walk, after, scan)
