"""Which tables and indexes a benchmark phase's pages came from: the server's
``pg_statio`` counters (blocks found in shared buffers and blocks read into them, per
relation) before and after the phase.

``statements`` (``pg_stat_statements``) says which statement read pages from outside
shared buffers; these counters say from which relation. Once the database outgrows
shared buffers, that is the question: a B-tree whose inserts land on random leaves reads
a page per entry, one with insert locality almost none.

The counters are every backend's: autovacuum's pages count too, so each phase also names
the tables a vacuum or analyze worked on meanwhile. A backend publishes its counters when
it goes idle, but not twice within a second: one that published less than a second
before going idle holds them for PostgreSQL's idle interval (10 s), so a reading taken
right after a phase can miss its end and the next phase inherit it. ``read_blocks``
waits that long first. The projection's own reads are also in ``statements`` (per
statement, with nobody else's, at once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

# PGSTAT_IDLE_INTERVAL (10 s): the longest an idle backend holds its pending counters.
_FLUSH_SECONDS = 11

# Partitions are summed into their root ("search_facts_y2026m12" → "search_facts"), as
# ``bench scale`` reports bytes (``pg_partition_root``, as its ``_SIZES``).
_BLOCKS = sa.text(
    """
    SELECT COALESCE(pg_partition_root(c.oid), c.oid)::regclass::text AS name,
           COALESCE(pg_partition_root(coalesce(i.relid, c.oid)),
                    coalesce(i.relid, c.oid))::regclass::text AS owner,
           sum(coalesce(t.heap_blks_read, 0) + coalesce(t.toast_blks_read, 0)
               + coalesce(t.tidx_blks_read, 0) + coalesce(i.idx_blks_read, 0)) AS read,
           sum(coalesce(t.heap_blks_hit, 0) + coalesce(t.toast_blks_hit, 0)
               + coalesce(t.tidx_blks_hit, 0) + coalesce(i.idx_blks_hit, 0)) AS hit
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
      LEFT JOIN pg_statio_user_tables t ON t.relid = c.oid AND c.relkind = 'r'
      LEFT JOIN pg_statio_user_indexes i ON i.indexrelid = c.oid AND c.relkind = 'i'
     WHERE c.relkind IN ('r', 'i')
     GROUP BY 1, 2
    """
)

# Vacuums and analyzes each table has had, by any backend: a phase's counts include the
# pages autovacuum read meanwhile, and this says where it worked.
_MAINTENANCE = sa.text(
    """
    SELECT relname AS name,
           vacuum_count + autovacuum_count + analyze_count + autoanalyze_count AS runs
      FROM pg_stat_user_tables
    """
)


@dataclass(frozen=True)
class Reading:
    # (relation, the table it belongs to) → (blocks read, blocks hit)
    blocks: dict[tuple[str, str], tuple[int, int]]
    maintenance: dict[str, int]


def read_blocks() -> Reading:
    """Every table's and index's cumulative (blocks read, blocks hit) (a table's count
    includes its TOAST table and index) and maintenance runs, once the phase's backends
    have published theirs."""
    from app.db import transaction

    time.sleep(_FLUSH_SECONDS)
    with transaction("bench_relation_blocks") as conn:
        blocks = {
            (row.name, row.owner): (int(row.read), int(row.hit)) for row in conn.execute(_BLOCKS)
        }
        maintenance = {row.name: int(row.runs) for row in conn.execute(_MAINTENANCE)}
    return Reading(blocks, maintenance)


def phase_relations(
    before: Reading | None, after: Reading | None, endpoints: int, *, top: int = 8
) -> dict[str, Any] | None:
    """Blocks read from outside shared buffers and blocks touched per 1,000 endpoints of
    the phase: in all, per table (its heap and its indexes), and for the ``top``
    relations by blocks read (then by blocks touched); and the tables a vacuum or an
    analyze worked on meanwhile (``maintained``), whose pages are in the counts too."""
    if before is None or after is None:
        return None
    per_k = 1000 / endpoints
    spent = []
    tables: dict[str, list[int]] = {}
    for relation, (read, hit) in after.blocks.items():
        was_read, was_hit = before.blocks.get(relation, (0, 0))
        read, hit = read - was_read, hit - was_hit
        if read or hit:
            spent.append((relation[0], read, read + hit))
            table = tables.setdefault(relation[1], [0, 0])
            table[0] += read
            table[1] += read + hit
    spent.sort(key=lambda item: (-item[1], -item[2]))
    return {
        "read_per_1k": round(sum(read for _, read, _ in spent) * per_k, 1),
        "touched_per_1k": round(sum(touched for _, _, touched in spent) * per_k, 1),
        "tables": {
            name: {
                "read_per_1k": round(read * per_k, 1),
                "touched_per_1k": round(touched * per_k, 1),
            }
            for name, (read, touched) in sorted(tables.items(), key=lambda item: -item[1][1])
        },
        "top": [
            {
                "relation": name,
                "read_per_1k": round(read * per_k, 1),
                "touched_per_1k": round(touched * per_k, 1),
            }
            for name, read, touched in spent[:top]
        ],
        "maintained": sorted(
            name
            for name, runs in after.maintenance.items()
            if runs > before.maintenance.get(name, 0)
        ),
    }
