"""The distinct-value tables' keys read back into shared buffers (``ValueKeyWarming``).

Each new text or certificate value is looked up by its md5 in the key of
``search_asset_texts`` or ``search_asset_fact_texts``, so every lookup lands on a random
leaf of that key. While the projection runs steadily those leaves stay in shared
buffers. A bulk write elsewhere replaces them: the change analysis of a first scan of
half a million endpoints writes about a gigabyte of change rows and reads the
execution's endpoints through the same buffers (docs/scaling.md, "What pushes the value
key out, and warming it back"). The next projection then reads the key back, one random
leaf per new value.

``pg_prewarm`` reads a relation whole in file order instead, once. Here it is asked for
the two keys (about 8 MB per million endpoints together); blocks already in memory are
hits. It is a contrib extension that needs a superuser to create: the embedded server
has it (``app.embedded``), an administrator adds it to another server. Without it this
returns None and nothing else changes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from app.db import extension_schema
from app.search.postgres_schema import ASSET_TEXTS_TABLE, FACT_TEXTS_TABLE

VALUE_TABLES = (FACT_TEXTS_TABLE, ASSET_TEXTS_TABLE)

# Each value table's primary key, found in the catalogue rather than by its name.
_KEYS = text(
    """
    SELECT c.relname AS key, i.indexrelid AS oid
      FROM pg_index i
      JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indisprimary AND i.indrelid = ANY(CAST(:tables AS regclass[]))
     ORDER BY c.relname
    """
)


def value_keys(conn: Connection) -> list[Any]:
    """The value tables' primary keys, by name: rows of (``key``, ``oid``)."""
    return list(conn.execute(_KEYS, {"tables": list(VALUE_TABLES)}).all())


def warm_value_keys(conn: Connection) -> dict[str, int] | None:
    """Blocks ``pg_prewarm`` loaded per key, or None when the extension is not installed."""
    schema = extension_schema(conn, "pg_prewarm")
    if schema is None:
        return None
    prewarm = text(f'SELECT "{schema}".pg_prewarm(CAST(:oid AS regclass))')
    return {
        row.key: int(conn.execute(prewarm, {"oid": row.oid}).scalar_one())
        for row in value_keys(conn)
    }
