"""How much of the search store's value keys is in shared buffers (``pg_buffercache``).

``bench scale`` reads it just before the probe's projection: the projection looks every
new value up in these keys, one random leaf each, so what is missing here is read from
outside shared buffers during the projection (``relations``). The scratch server's
superuser creates the contrib extension; a server without it gives None.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.search.postgres_warming import value_keys

# One key's size in blocks and its blocks in this database's shared buffers.
_RESIDENT = sa.text(
    """
    SELECT pg_relation_size(CAST(:oid AS regclass))
           / current_setting('block_size')::int AS blocks,
           (SELECT count(*) FROM pg_buffercache b
             WHERE b.relfilenode = pg_relation_filenode(CAST(:oid AS regclass))
               AND b.reldatabase = (SELECT oid FROM pg_database
                                     WHERE datname = current_database())) AS resident
    """
)


def value_keys_resident() -> dict[str, dict[str, int]] | None:
    """Per value key: its blocks and how many of them are in shared buffers."""
    from app.db import get_engine

    with get_engine().connect() as conn:
        try:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_buffercache"))
        except sa.exc.DBAPIError:
            conn.rollback()
            return None
        found = {}
        for key in value_keys(conn):
            row = conn.execute(_RESIDENT, {"oid": key.oid}).one()
            found[key.key] = {"blocks": int(row.blocks), "resident": int(row.resident)}
        conn.commit()
    return found
