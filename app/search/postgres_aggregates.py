"""Report aggregates of one execution from ``search_execution_endpoints`` (PostgreSQL store).

One statement per list, in the store's short transaction; ties in code-point order
(``COLLATE "C"``) and hours truncated in UTC, as ``app.search.aggregates`` defines them.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.aggregates import UNKNOWN_SERVICE, ExecutionAggregates, hour_text

_SERVICES = sa.text(
    """
    SELECT name, n FROM (
        SELECT coalesce(service, :unknown) AS name, count(*) AS n
          FROM search_execution_endpoints WHERE execution_id = :e GROUP BY 1
    ) s ORDER BY n DESC, name COLLATE "C" LIMIT :top
    """
)
_PRODUCTS = sa.text(
    """
    SELECT name, n FROM (
        SELECT product AS name, count(*) AS n
          FROM search_execution_endpoints WHERE execution_id = :e AND product IS NOT NULL
         GROUP BY 1
    ) p ORDER BY n DESC, name COLLATE "C" LIMIT :top
    """
)
_PORTS = sa.text(
    """
    SELECT port, transport, n FROM (
        SELECT port, transport, count(*) AS n
          FROM search_execution_endpoints WHERE execution_id = :e GROUP BY 1, 2
    ) t ORDER BY n DESC, port, transport COLLATE "C" LIMIT :top
    """
)
_HOURS = sa.text(
    """
    SELECT date_trunc('hour', first_seen, 'UTC') AS hour, count(*) AS n
      FROM search_execution_endpoints WHERE execution_id = :e
     GROUP BY 1 ORDER BY 1
    """
)


def execution_aggregates(conn: Connection, execution_id: int, *, top: int) -> ExecutionAggregates:
    params = {"e": execution_id, "top": top, "unknown": UNKNOWN_SERVICE}
    return ExecutionAggregates(
        services=[{"name": r.name, "count": r.n} for r in conn.execute(_SERVICES, params)],
        products=[{"name": r.name, "count": r.n} for r in conn.execute(_PRODUCTS, params)],
        ports=[
            {"port": r.port, "transport": r.transport, "count": r.n}
            for r in conn.execute(_PORTS, params)
        ],
        first_seen_hours=[
            {"hour": hour_text(r.hour), "count": r.n} for r in conn.execute(_HOURS, params)
        ],
    )
