"""Text fact values keyed in first-seen order: a new value's index entry goes to the end.

Revision ID: 20261204_2200
Revises: 20261204_2100
Create Date: 2026-12-04

Migrations 1610 and 1800 gave each asset view, per text fact (certificate issuer and
subject, HTTP title and server), a partial B-tree on the ``md5`` of the row's value, so a
search finds a rare value's rows through the distinct values table
(``search_asset_fact_texts``). An md5 is random: every endpoint with a new value (each
HTTPS endpoint's own certificate subject) put one entry at a random place of each
view's index. Once the indexes outgrow memory, each of those entries reads a page from
disk: at ten million endpoints, 92 % of the projection's reads were in the two views'
subject indexes and the texts table's own key (docs/scaling.md).

The distinct values table now hands each value a number when it first sees it
(``number``, an identity), and each view row carries the numbers of its four values
(``cert_issuer_number``, ``cert_subject_number``, ``title_number``, ``server_number``).
The views' indexes are on those numbers, so a new value's entries go to the right-hand
end of each index, where the pages are already in memory; the texts table's md5 key
stays the one random lookup per value.

* The merges (``app.search.postgres_schema``: shards and server-side pages) first add a
  shard's new values to the table in a short transaction of their own, then read each
  row's numbers by md5 as they write it; a view row's numbers go with its details under
  the merge rule. ``search_asset_fact_text_number(value)`` reads a value's number, or
  adds the value and takes a new one; a value another transaction adds meanwhile is read
  again (each statement of the function sees what has committed), so both get the same
  number. The merges call it for a value their snapshot does not see.
* Row triggers keep every other writer right: ``BEFORE INSERT`` numbers a row that has a
  ``tls`` or ``http`` section and no numbers, ``BEFORE UPDATE`` one whose ``details``
  changed while its numbers did not. The statement-level triggers of migration 1610 go.
* Existing rows get their numbers here, in one pass over the rows that have a section;
  the values they hold are all in the table already (the old triggers and backfills),
  and the function adds any that is not.
* The ``md5`` indexes and their expression statistics go; the number indexes keep their
  names, partial on the rows that have the value, and a plain column needs no extended
  statistics for the planner to weigh a common value by its frequency.

The search side (``postgres_queries.matching_fact_text_ids``) reads the matching
values' numbers instead of their keys. The upgrade rewrites every view row that has a
certificate or a page (a fifth of them in a typical scan). It drops the view's other
secondary indexes first and builds them again afterwards: a rewritten row would
otherwise take an entry in each of them, and one sorted build per index is cheaper and
leaves them compact. The rows are numbered by ``search_asset_fact_text_number()``, a
range of heap pages per statement, so the rewrite itself never nears the migrations'
statement timeout. A million endpoints took 30 to 31 s on a 2-core host with 128 MB of
shared buffers, against 34 to 43 s with the indexes kept (docs/upgrading.md). Run it with
the web and runner processes stopped, as every migration.
The downgrade puts back migration 1800's triggers, indexes and statistics.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261204_2200"
down_revision = "20261204_2100"
branch_labels = None
depends_on = None


def _value(row: str, section: str, key: str) -> str:
    # Exactly endpoint_facts._fact_sql(section, key, "text") over ``row``'s details.
    node = f"{row}details->'{section}'->'{key}'"
    text = f"({row}details->'{section}'->>'{key}')"
    return f"(CASE WHEN jsonb_typeof({node}) = 'string' AND length({text}) <= 1024 THEN {text} END)"


# (index suffix and column prefix, details section, key): the text facts with numbers.
FIELDS = (
    ("cert_issuer", "tls", "issuer"),
    ("cert_subject", "tls", "subject_cn"),
    ("http_title", "http", "title"),
    ("http_server", "http", "server"),
)
COLUMNS = {
    "cert_issuer": "cert_issuer_number",
    "cert_subject": "cert_subject_number",
    "http_title": "title_number",
    "http_server": "server_number",
}
VIEWS = {"search_assets_user": "owner_id, ", "search_assets_global": ""}

NUMBER_FUNCTION = r"""
CREATE FUNCTION search_asset_fact_text_number(value text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    found_number bigint;
BEGIN
    IF value IS NULL THEN
        RETURN NULL;
    END IF;
    LOOP
        SELECT number INTO found_number
          FROM search_asset_fact_texts WHERE id = md5(value)::uuid;
        IF FOUND THEN
            RETURN found_number;
        END IF;
        INSERT INTO search_asset_fact_texts (id, text) VALUES (md5(value)::uuid, value)
            ON CONFLICT (id) DO NOTHING
            RETURNING number INTO found_number;
        IF FOUND THEN
            RETURN found_number;
        END IF;
        -- Another transaction inserted the value after our read and has committed
        -- (ON CONFLICT waited for it): the next read sees it.
    END LOOP;
END
$$;
"""


def _numbers(row: str) -> list[tuple[str, str]]:
    """(column, its number) per field, the values read from ``row``'s details."""
    return [
        (COLUMNS[suffix], f"search_asset_fact_text_number({_value(row, section, key)})")
        for suffix, section, key in FIELDS
    ]


NUMBERS_TRIGGER_FUNCTION = rf"""
CREATE FUNCTION search_asset_fact_text_numbers() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    {" ".join(f"NEW.{column} := {number};" for column, number in _numbers("NEW."))}
    RETURN NEW;
END
$$;
"""


def _sections(row: str) -> str:
    return f"({row}details ? 'tls' OR {row}details ? 'http')"


# Heap pages per numbering statement: each statement stays far below the migrations'
# statement timeout whatever the view's size (a range of 20,000 pages took about 2 s
# with the secondary indexes dropped, 7 s with them, on a 2-core host).
PAGES_PER_STATEMENT = 20_000


def _number_rows(view: str) -> None:
    """Write the numbers of every row of ``view`` that has a section, one range of heap
    pages per statement (a TID range scan). A row's new version lands past the ranges
    or in one already passed, or is skipped for having a number already."""
    bind = op.get_bind()
    pages = bind.execute(
        sa.text(
            "SELECT pg_relation_size(CAST(:v AS regclass)) / current_setting('block_size')::int"
        ),
        {"v": view},
    ).scalar_one()
    sets = ", ".join(f"{c} = {n}" for c, n in _numbers(""))
    unnumbered = " AND ".join(f"{c} IS NULL" for c in COLUMNS.values())
    statement = sa.text(
        f"UPDATE {view} SET {sets} "  # noqa: S608 - constant DDL; the bounds are bound
        f"WHERE ctid >= CAST(:low AS tid) AND ctid < CAST(:high AS tid) "
        f"AND {_sections('')} AND {unnumbered}"
    )
    for low in range(0, int(pages) + 1, PAGES_PER_STATEMENT):
        bind.execute(statement, {"low": f"({low},0)", "high": f"({low + PAGES_PER_STATEMENT},0)"})


def _drop_secondary_indexes(view: str) -> list[str]:
    """Drop every index of ``view`` but its constraints' (the primary key), returning
    their definitions as PostgreSQL spells them, to be run again as they were."""
    bind = op.get_bind()
    indexes = bind.execute(
        sa.text(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = CAST(:v AS regclass) "
            "AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid) "
            "ORDER BY c.relname"
        ),
        {"v": view},
    ).all()
    for name, _ in indexes:
        op.execute(f"DROP INDEX {name}")
    return [definition for _, definition in indexes]


def upgrade() -> None:
    op.execute(
        "ALTER TABLE search_asset_fact_texts ADD COLUMN number bigint GENERATED ALWAYS AS IDENTITY"
    )
    op.execute(NUMBER_FUNCTION)
    op.execute(NUMBERS_TRIGGER_FUNCTION)
    for view in VIEWS:
        for operation in ("insert", "update"):
            op.execute(f"DROP TRIGGER tr_{view}_fact_texts_{operation} ON {view}")
        for suffix, _, _ in FIELDS:
            op.execute(f"DROP STATISTICS st_{view}_{suffix}_key")
            op.execute(f"DROP INDEX ix_{view}_{suffix}")
        columns = ", ".join(f"ADD COLUMN {column} bigint" for column in COLUMNS.values())
        op.execute(f"ALTER TABLE {view} {columns}")
        # A rewritten row would take an entry in every index of its view, at random
        # places for most of them; building those indexes again afterwards sorts once.
        rebuilt = _drop_secondary_indexes(view)
        _number_rows(view)
        for definition in rebuilt:
            op.execute(definition)
        # The merges write the numbers themselves; the triggers number what any other
        # writer leaves unnumbered: a row inserted with none, details changed alone.
        unnumbered = " AND ".join(f"NEW.{c} IS NULL" for c in COLUMNS.values())
        kept = " AND ".join(f"NEW.{c} IS NOT DISTINCT FROM OLD.{c}" for c in COLUMNS.values())
        op.execute(
            f"CREATE TRIGGER tr_{view}_fact_text_numbers_insert BEFORE INSERT ON {view} "
            f"FOR EACH ROW WHEN ({_sections('NEW.')} AND {unnumbered}) "
            "EXECUTE FUNCTION search_asset_fact_text_numbers()"
        )
        op.execute(
            f"CREATE TRIGGER tr_{view}_fact_text_numbers_update BEFORE UPDATE ON {view} "
            f"FOR EACH ROW WHEN (NEW.details IS DISTINCT FROM OLD.details AND {kept}) "
            "EXECUTE FUNCTION search_asset_fact_text_numbers()"
        )
        lead = VIEWS[view]
        for suffix, column in COLUMNS.items():
            op.execute(
                f"CREATE INDEX ix_{view}_{suffix} ON {view} ({lead}{column}) "
                f"WHERE {column} IS NOT NULL"
            )
        op.execute(f"ANALYZE {view}")


# Migration 1800's trigger function, indexes and statistics, as it left them.
COLLECT_FUNCTION = rf"""
CREATE OR REPLACE FUNCTION search_asset_fact_texts_collect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_asset_fact_texts (id, text)
    SELECT DISTINCT ON (x.id) x.id, x.text
      FROM (SELECT md5(v.text)::uuid AS id, v.text
              FROM new_rows
             CROSS JOIN LATERAL (VALUES {", ".join(f"({_value('', s, k)})" for _, s, k in FIELDS)})
                   AS v(text)
             WHERE {_sections("")} AND v.text IS NOT NULL) AS x
     ORDER BY x.id
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
"""  # noqa: S608 - constant DDL, no values


def downgrade() -> None:
    op.execute(COLLECT_FUNCTION)
    for view, lead in VIEWS.items():
        for operation in ("insert", "update"):
            op.execute(f"DROP TRIGGER tr_{view}_fact_text_numbers_{operation} ON {view}")
        for suffix, _, _ in FIELDS:
            op.execute(f"DROP INDEX ix_{view}_{suffix}")
        op.execute(
            f"ALTER TABLE {view} "
            + ", ".join(f"DROP COLUMN {column}" for column in COLUMNS.values())
        )
        for operation in ("INSERT", "UPDATE"):
            op.execute(
                f"CREATE TRIGGER tr_{view}_fact_texts_{operation.lower()} AFTER {operation} "
                f"ON {view} REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
                "EXECUTE FUNCTION search_asset_fact_texts_collect()"
            )
        for suffix, section, key in FIELDS:
            value_key = f"(md5({_value('', section, key)})::uuid)"
            op.execute(
                f"CREATE INDEX ix_{view}_{suffix} ON {view} ({lead}{value_key}) "
                f"WHERE {value_key} IS NOT NULL"
            )
            op.execute(f"CREATE STATISTICS st_{view}_{suffix}_key ON {value_key} FROM {view}")
        op.execute(f"ANALYZE {view}")
    op.execute("DROP FUNCTION search_asset_fact_text_numbers()")
    op.execute("DROP FUNCTION search_asset_fact_text_number(text)")
    op.execute("ALTER TABLE search_asset_fact_texts DROP COLUMN number")
