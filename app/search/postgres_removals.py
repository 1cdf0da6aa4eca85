"""Reading and deleting the facts of batches that were never confirmed (PostgreSQL store).

``app.result_ingest.abandoned`` removes what a dead attempt wrote (ING-18): it reads
the batch's facts, rebuilds the execution endpoints they touched from the facts that
remain, and deletes the batch's facts. Deletes keep the exact per-execution counters
of ``postgres_schema`` in the same statement as the rows (a deleted fact leaves its
month's count, a deleted endpoint the endpoint count, and an address with no endpoint
left the execution's address set), so the final still reads a few counter rows.

Every table is one of the search store's own; a statement runs in the adapter's
short transaction (``run``), like the writes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import sqlalchemy as sa

from app.search.documents import FactDocument
from app.search.port import BatchKey, BulkItemResult, BulkResult
from app.search.postgres_schema import (
    ENDPOINT_COUNTS_TABLE,
    EXECUTION_IPS_TABLE,
    EXECUTION_TABLE,
    FACT_COUNTS_TABLE,
    FACTS_TABLE,
    MONTH_OF_OBSERVED_AT,
)

Run = Callable[..., Any]

_FACT_FIELDS = (
    "replace(f.id::text, '-', '') AS id, f.kind, f.execution_id, f.task_id, f.owner_id, "
    "f.scanner_id, f.upload_id, f.stream, f.batch_index, f.position, f.observed_at, f.body"
)

_BATCH_FACTS = f"""
    SELECT {_FACT_FIELDS}
      FROM {FACTS_TABLE} AS f
      JOIN unnest(CAST(:uploads AS text[]), CAST(:streams AS text[]), CAST(:indexes AS int[]))
           AS b(upload_id, stream, batch_index)
        ON f.upload_id = b.upload_id AND f.stream = b.stream AND f.batch_index = b.batch_index
     WHERE f.execution_id = :execution_id
     ORDER BY f.upload_id, f.stream, f.batch_index, f.position
"""  # noqa: S608 - table and column names are module constants; values are bound

# Observation bodies carry the normalised ip/port/transport the endpoint id was built from.
_ENDPOINT_FACTS = f"""
    SELECT {_FACT_FIELDS}
      FROM {FACTS_TABLE} AS f
      JOIN unnest(CAST(:ips AS text[]), CAST(:ports AS int[]), CAST(:transports AS text[]))
           AS e(ip, port, transport)
        ON f.body ->> 'ip' = e.ip AND (f.body ->> 'port')::int = e.port
       AND f.body ->> 'transport' = e.transport
     WHERE f.execution_id = :execution_id AND f.kind = 'observation'
     ORDER BY f.upload_id, f.stream, f.batch_index, f.position
"""  # noqa: S608 - table and column names are module constants; values are bound

_DELETE_FACTS = f"""
    WITH gone AS (
        DELETE FROM {FACTS_TABLE} AS f
         USING unnest(CAST(:ids AS uuid[]), CAST(:at AS timestamptz[])) AS d(id, observed_at)
         WHERE f.id = d.id AND f.observed_at = d.observed_at
        RETURNING replace(f.id::text, '-', '') AS id, f.execution_id,
                  {MONTH_OF_OBSERVED_AT.replace("observed_at", "f.observed_at")} AS month, f.kind
    ), counted AS (
        UPDATE {FACT_COUNTS_TABLE} AS c SET facts = c.facts - g.n
          FROM (SELECT execution_id, month, kind, count(*) AS n FROM gone GROUP BY 1, 2, 3) g
         WHERE c.execution_id = g.execution_id AND c.month = g.month AND c.kind = g.kind
    )
    SELECT id FROM gone
"""  # noqa: S608 - table and column names are module constants; values are bound

_DELETE_ENDPOINTS = f"""
    WITH gone AS (
        DELETE FROM {EXECUTION_TABLE} AS t
         USING unnest(CAST(:ids AS uuid[])) AS d(id)
         WHERE t.execution_id = :execution_id AND t.id = d.id
        RETURNING replace(t.id::text, '-', '') AS id, t.execution_id, t.ip
    ), lonely AS (
        -- An address leaves the execution's set when none of its endpoints is left.
        DELETE FROM {EXECUTION_IPS_TABLE} AS i
         USING (SELECT DISTINCT execution_id, ip FROM gone) g
         WHERE i.execution_id = g.execution_id AND i.ip = g.ip
           AND NOT EXISTS (
               SELECT 1 FROM {EXECUTION_TABLE} AS t
                WHERE t.execution_id = g.execution_id AND t.ip = g.ip
                  AND t.id <> ALL(CAST(:ids AS uuid[])))
        RETURNING i.execution_id
    ), counted AS (
        UPDATE {ENDPOINT_COUNTS_TABLE} AS c
           SET endpoints = c.endpoints - e.n,
               ips = c.ips - coalesce((SELECT count(*) FROM lonely l
                                        WHERE l.execution_id = e.execution_id), 0)
          FROM (SELECT execution_id, count(*) AS n FROM gone GROUP BY 1) e
         WHERE c.execution_id = e.execution_id
    )
    SELECT id FROM gone
"""  # noqa: S608 - table and column names are module constants; values are bound


def _fact(row: Any) -> FactDocument:
    # _FACT_FIELDS names exactly the document's fields.
    return FactDocument(**row._mapping)


class PostgresRemovals:
    """The removal half of ``PostgresStore`` (``run`` is its ``_run``)."""

    def __init__(self, run: Run):
        self._run = run

    def batch_facts(self, execution_id: int, batches: Sequence[BatchKey]) -> list[FactDocument]:
        if not batches:
            return []
        params = {
            "execution_id": execution_id,
            "uploads": [b.upload_id for b in batches],
            "streams": [b.stream for b in batches],
            "indexes": [b.batch_index for b in batches],
        }
        rows = self._run(lambda conn: conn.execute(sa.text(_BATCH_FACTS), params).all())
        return [_fact(r) for r in rows]

    def endpoint_facts(
        self, execution_id: int, endpoints: Collection[tuple[str, int, str]]
    ) -> list[FactDocument]:
        if not endpoints:
            return []
        ordered = sorted(endpoints)
        params = {
            "execution_id": execution_id,
            "ips": [e[0] for e in ordered],
            "ports": [e[1] for e in ordered],
            "transports": [e[2] for e in ordered],
        }
        rows = self._run(lambda conn: conn.execute(sa.text(_ENDPOINT_FACTS), params).all())
        return [_fact(r) for r in rows]

    def delete_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        if not facts:
            return BulkResult()
        ordered = sorted(facts, key=lambda f: (f.id, f.observed_at))  # lock order
        params = {"ids": [f.id for f in ordered], "at": [f.observed_at for f in ordered]}
        self._run(lambda conn: conn.execute(sa.text(_DELETE_FACTS), params).all())
        # A fact another remover deleted first is gone all the same: a success.
        items = tuple(BulkItemResult(f.id, FACTS_TABLE, 200) for f in facts)
        return BulkResult(items=items, requests=1, attempts=1)

    def delete_execution_endpoints(self, execution_id: int, ids: Sequence[str]) -> BulkResult:
        if not ids:
            return BulkResult()
        params = {"execution_id": execution_id, "ids": sorted(set(ids))}  # in key order
        self._run(lambda conn: conn.execute(sa.text(_DELETE_ENDPOINTS), params).all())
        items = tuple(BulkItemResult(i, EXECUTION_TABLE, 200) for i in ids)
        return BulkResult(items=items, requests=1, attempts=1)
