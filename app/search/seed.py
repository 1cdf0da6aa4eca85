"""Set-based synthetic current assets for benchmarks on scratch databases (PostgreSQL store).

Publishing a million current assets through ``SearchStore.publish_current``
builds two million Python documents first; a page benchmark only needs the rows
to exist, exactly as the projection would have left them. ``seed_current_assets``
writes them with ``generate_series`` in one statement per chunk, computing the
same deterministic ids in SQL as ``app.search.ids`` does in Python (SHA-256 over
length-prefixed parts; ``pg_key`` is its first 64 bits), so a later publish of
the same endpoint merges into the seeded row instead of duplicating it. Endpoint
``n`` is host ``10.0.0.0 + n // len(services)`` on service ``n % len(services)``,
like ``app.bench.store._endpoints``. Only ever used on scratch databases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.documents import observation_key


def _part(expression: str) -> str:
    """One length-prefixed part of ``app.search.ids._digest`` as a bytea expression."""
    raw = f"convert_to(({expression})::text, 'UTF8')"
    return f"int4send(octet_length({raw})) || {raw}"


def _digest(kind: str, *parts: str) -> str:
    pieces = [f"convert_to('{kind}', 'UTF8')", *(_part(p) for p in parts)]
    return "sha256(" + " || ".join(pieces) + ")"


_USER_HASH = _digest("asset", "'user'", ":owner_id", "host(ip)", "port", "'tcp'")
_GLOBAL_HASH = _digest("asset", "'global'", "'global'", "host(ip)", "port", "'tcp'")
_COLUMNS = """key, id, ip, port, transport, first_seen, first_execution_id, last_seen,
    last_execution_id, observation_key, state, service, product, version, banner, hostname,
    tags, details"""


def _insert(table: str, digest: str, owner_column: str) -> sa.TextClause:
    return sa.text(
        f"""
        WITH endpoint AS (
            SELECT '10.0.0.0'::inet + (n / :services) AS ip,
                   CAST(:seen AS timestamptz)
                     - ((n::bigint * 7919) % :spread) * interval '1 minute' AS seen,
                   s.*
              FROM generate_series(:low, :high - 1) AS n
              JOIN jsonb_to_recordset(CAST(:catalogue AS jsonb)) AS s(
                       i int, port int, service text, product text, version text,
                       banner text, okey text) ON s.i = n % :services
        ), hashed AS (
            SELECT endpoint.*, {digest} AS h FROM endpoint
        )
        INSERT INTO {table} ({owner_column}{_COLUMNS})
        SELECT {":owner_id, " if owner_column else ""}
               ('x' || encode(substr(h, 1, 8), 'hex'))::bit(64)::bigint,
               encode(substr(h, 1, 16), 'hex')::uuid,
               ip, port, 'tcp', seen, :execution_id, seen, :execution_id, okey, 'open',
               service, product, version, banner, NULL, ARRAY['bench'],
               '{{"tls": null}}'::jsonb
          FROM hashed
        """  # noqa: S608 - table names and hash expressions are module constants; values bound
    )


_INSERT_USER = _insert("search_assets_user", _USER_HASH, "owner_id, ")
_INSERT_GLOBAL = _insert("search_assets_global", _GLOBAL_HASH, "")


def seed_current_assets(
    conn: Connection,
    *,
    owner_id: int,
    execution_id: int,
    low: int,
    high: int,
    seen: datetime,
    services: Sequence[tuple[int, str, str, str, str]],
    spread_minutes: int = 0,
) -> int:
    """Endpoints ``low`` .. ``high - 1`` as open current assets of ``owner_id`` and global.

    ``services``: (port, service, product, version, banner) per endpoint class. Every
    asset is seen at ``seen``, or with ``spread_minutes`` at one of that many whole minutes
    before it (scattered over the endpoints, many assets per minute: lists sorted by
    last_seen meet realistic ties). Returns the number of user-scope rows written."""
    catalogue: list[dict[str, Any]] = []
    for index, (port, service, product, version, banner) in enumerate(services):
        newest = {
            "state": "open",
            "service": service,
            "product": product,
            "version": version,
            "banner": banner,
            "hostname": None,
            "tags": ("bench",),
            "details": {"tls": None},
        }
        catalogue.append(
            {
                "i": index,
                "port": port,
                "service": service,
                "product": product,
                "version": version,
                "banner": banner,
                "okey": observation_key(newest),
            }
        )
    params = {
        "owner_id": owner_id,
        "execution_id": execution_id,
        "low": low,
        "high": high,
        "seen": seen,
        "spread": max(spread_minutes, 1),
        "services": len(services),
        "catalogue": json.dumps(catalogue),
    }
    written = conn.execute(_INSERT_USER, params).rowcount
    conn.execute(_INSERT_GLOBAL, params)
    return written
