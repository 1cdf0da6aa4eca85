"""Removing a deleted task's data from the PostgreSQL store, in bounded batches (issue 33).

``purge_task_assets_batch`` walks the task's execution endpoints by id and removes the
current-asset documents (the owner's and the global view's) of those endpoints that no
other task has evidence for: no execution endpoint of a task outside ``excluded`` (the
deleted tasks) for the same endpoint (the same owner's, for the owner's view). Assets
another task also saw stay. ``purge_execution_data_batch`` then deletes the executions'
own rows: execution endpoints, facts and the per-execution counters.

The execution endpoints' primary key is ``(execution_id, id)`` (migration 2100), so the
walk reads each of the tasks' executions from its key (at most ``limit`` rows after the
cursor each) and keeps the first ``limit`` of them by id. The tasks' executions are
those with a counter row: every write of an execution endpoint keeps its execution's
counters in the same transaction (ING-2), so an execution with rows has one. The
cursor is the last id's first 64 bits (``app.search.ids.cursor_key``), as in the
Elasticsearch store's sweep.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.ids import cursor_after_id, cursor_key
from app.search.port import AssetPurgeBatch
from app.search.postgres_schema import id_after_cursor

_ASSETS_BATCH = sa.text(
    f"""
    WITH b AS (
        SELECT x.id, x.owner_id, x.ip, x.ip_order, x.port, x.transport
          FROM search_execution_endpoint_counts c
         CROSS JOIN LATERAL (
               SELECT e.id, e.owner_id, e.ip, e.ip_order, e.port, e.transport
                 FROM search_execution_endpoints e
                WHERE e.execution_id = c.execution_id
                  AND {id_after_cursor("e.id")}
                ORDER BY e.id LIMIT :limit
         ) AS x
         WHERE c.task_id = ANY(:tasks)
         ORDER BY x.id LIMIT :limit
    ),
    u AS (
        SELECT DISTINCT owner_id, ip, ip_order, port, transport FROM b WHERE owner_id IS NOT NULL
    ),
    unseen AS (
        SELECT u.* FROM u
         WHERE NOT EXISTS (
               SELECT 1 FROM search_execution_endpoints o
                WHERE o.ip_order = u.ip_order AND o.port = u.port AND o.transport = u.transport
                  AND o.owner_id = u.owner_id AND o.task_id <> ALL(:excluded))
    ),
    user_removed AS (
        DELETE FROM search_assets_user a USING unseen u
         WHERE a.owner_id = u.owner_id AND a.ip_order = u.ip_order AND a.port = u.port
           AND a.transport = u.transport
        RETURNING 1
    ),
    g AS (SELECT DISTINCT ip_order, port, transport FROM b),
    global_removed AS (
        DELETE FROM search_assets_global a USING g
         WHERE a.ip_order = g.ip_order AND a.port = g.port AND a.transport = g.transport
           AND NOT EXISTS (
               SELECT 1 FROM search_execution_endpoints o
                WHERE o.ip_order = g.ip_order AND o.port = g.port AND o.transport = g.transport
                  AND o.task_id <> ALL(:excluded))
        RETURNING 1
    )
    SELECT (SELECT replace(max(id::text COLLATE "C"), '-', '') FROM b) AS last_id,
           (SELECT count(*) FROM b) AS endpoints,
           (SELECT count(*) FROM user_removed) AS user_assets,
           (SELECT count(*) FROM global_removed) AS global_assets,
           (SELECT coalesce(json_agg(json_build_array(owner_id, host(ip), port, transport)),
                            '[]'::json) FROM unseen) AS unseen
    """  # noqa: S608 - the cursor condition is a constant fragment; values are bound
)


def purge_task_assets_batch(
    conn: Connection,
    task_ids: Sequence[int],
    *,
    excluded_task_ids: Sequence[int],
    after_key: int | None,
    limit: int,
) -> AssetPurgeBatch:
    row = conn.execute(
        _ASSETS_BATCH,
        {
            "tasks": list(task_ids),
            "excluded": list(excluded_task_ids),
            "after": cursor_after_id(after_key) if after_key is not None else None,
            "limit": limit,
        },
    ).one()
    return AssetPurgeBatch(
        last_key=cursor_key(row.last_id) if row.last_id is not None else None,
        endpoints=int(row.endpoints),
        user_assets=int(row.user_assets),
        global_assets=int(row.global_assets),
        unseen=tuple(
            (int(owner), str(ip), int(port), str(transport))
            for owner, ip, port, transport in row.unseen
        ),
    )


# Each statement removes at most :limit rows of the executions' store data.
_EXECUTION_DATA = (
    (
        "execution_endpoints",
        "DELETE FROM search_execution_endpoints WHERE (execution_id, id) IN (SELECT "
        "execution_id, id FROM search_execution_endpoints WHERE execution_id = ANY(:ids) "
        "LIMIT :limit)",
    ),
    (
        "facts",
        "DELETE FROM search_facts WHERE (id, observed_at) IN (SELECT id, observed_at FROM "
        "search_facts WHERE execution_id = ANY(:ids) LIMIT :limit)",
    ),
    (
        "execution_ips",
        "DELETE FROM search_execution_ips WHERE (execution_id, ip) IN (SELECT execution_id, ip "
        "FROM search_execution_ips WHERE execution_id = ANY(:ids) LIMIT :limit)",
    ),
    (
        "execution_counts",
        "DELETE FROM search_execution_fact_counts WHERE execution_id = ANY(:ids)",
    ),
    (
        "execution_counts",
        "DELETE FROM search_execution_endpoint_counts WHERE execution_id = ANY(:ids)",
    ),
)


def purge_execution_data_batch(
    conn: Connection, execution_ids: Sequence[int], *, limit: int
) -> dict[str, int]:
    """Up to ``limit`` rows per kind of the executions' store data; an empty dict: none left."""
    removed: dict[str, int] = {}
    params = {"ids": list(execution_ids), "limit": limit}
    for name, statement in _EXECUTION_DATA:
        count = conn.execute(sa.text(statement), params).rowcount
        if count:
            removed[name] = removed.get(name, 0) + count
    return removed
