"""A rare HTTP page title or server is an index lookup (the certificate values' way).

Revision ID: 20261202_1800
Revises: 20261202_1700
Create Date: 2026-12-02

``title:`` and ``server:`` are substring searches of ``details.http.title`` and
``details.http.server`` (``app.search.endpoint_facts``), as ``cert.issuer:`` and
``cert.subject:`` are of the certificate's. Migration 1100 gave their expressions
statistics, so a common value is read in page order; a rare one was still a scan of
every asset of the owner that carries an ``http`` section. Migration 1610 made the two
certificate fields an index lookup; this one adds the two HTTP fields to the same
mechanism, unchanged:

* ``search_asset_fact_texts`` also holds each distinct title and server once (keyed by
  ``md5(value)`` as a uuid, the trigram index it has). The statement-level triggers of
  both asset views call the same function, replaced here to collect four values per
  row instead of two; rows with neither a ``tls`` nor an ``http`` section are skipped
  before any value is read. A key only answers for the field whose key it is compared
  with, so a title equal to an issuer shares one row and answers each field alone.
* each view gets, per field, a partial B-tree on ``(owner_id, key)`` (``key`` alone in
  the global view) over the rows that have the value, and statistics on the key
  expression, so a rare title is read through the index and a common server in page
  order.

The search side is ``FACT_TEXT_KEYS`` (``postgres_schema``): the lookup of matching
distinct values, the cap of a thousand and the fallback to the expression's ``ILIKE``
are the certificate fields' (``postgres_queries.matching_fact_text_ids``). The
downgrade puts back migration 1610's function; the titles and servers it collected stay
in the table (a row each, never an answer: the views decide what a search returns).
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1800"
down_revision = "20261202_1700"
branch_labels = None
depends_on = None


def _value(section: str, key: str) -> str:
    # Exactly endpoint_facts._fact_sql(section, key, "text") without the table alias.
    text = f"(details->'{section}'->>'{key}')"
    return (
        f"(CASE WHEN jsonb_typeof(details->'{section}'->'{key}') = 'string' "
        f"AND length({text}) <= 1024 THEN {text} END)"
    )


# (index suffix, details section, key): the HTTP text facts this migration adds.
FIELDS = (("http_title", "http", "title"), ("http_server", "http", "server"))
VIEWS = {"search_assets_user": "owner_id, ", "search_assets_global": ""}
CERTIFICATE_VALUES = (_value("tls", "issuer"), _value("tls", "subject_cn"))
HTTP_VALUES = tuple(_value(section, key) for _, section, key in FIELDS)


def _collect(values: tuple[str, ...], sections: str) -> str:
    """The trigger function: the distinct values of the inserted or updated rows (with
    the certificate values and ``details ? 'tls'``, migration 1610's text exactly)."""
    rows = ", ".join(f"({v})" for v in values)
    return rf"""
CREATE OR REPLACE FUNCTION search_asset_fact_texts_collect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_asset_fact_texts (id, text)
    SELECT DISTINCT ON (x.id) x.id, x.text
      FROM (SELECT md5(v.text)::uuid AS id, v.text
              FROM new_rows
             CROSS JOIN LATERAL (VALUES {rows}) AS v(text)
             WHERE {sections} AND v.text IS NOT NULL) AS x
     ORDER BY x.id
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
"""  # noqa: S608 - constant DDL, no values


# The values the views hold already (the triggers only see rows written from now on).
BACKFILL = rf"""
INSERT INTO search_asset_fact_texts (id, text)
SELECT DISTINCT ON (x.id) x.id, x.text
  FROM (SELECT md5(v.text)::uuid AS id, v.text
          FROM (SELECT details FROM search_assets_global WHERE details ? 'http'
                UNION ALL
                SELECT details FROM search_assets_user WHERE details ? 'http') AS r
         CROSS JOIN LATERAL (VALUES {", ".join(f"({v})" for v in HTTP_VALUES)}) AS v(text)
         WHERE v.text IS NOT NULL) AS x
 ORDER BY x.id
ON CONFLICT (id) DO NOTHING;
"""  # noqa: S608 - constant DDL, no values


def upgrade() -> None:
    op.execute(_collect(CERTIFICATE_VALUES + HTTP_VALUES, "(details ? 'tls' OR details ? 'http')"))
    op.execute(BACKFILL)
    for view, lead in VIEWS.items():
        for suffix, section, key in FIELDS:
            value_key = f"(md5({_value(section, key)})::uuid)"
            op.execute(
                f"CREATE INDEX ix_{view}_{suffix} ON {view} ({lead}{value_key}) "
                f"WHERE {value_key} IS NOT NULL"
            )
            op.execute(f"CREATE STATISTICS st_{view}_{suffix}_key ON {value_key} FROM {view}")
        # The new statistics exist once gathered (a sample: seconds even at millions).
        op.execute(f"ANALYZE {view}")


def downgrade() -> None:
    for view in VIEWS:
        for suffix, _, _ in FIELDS:
            op.execute(f"DROP STATISTICS IF EXISTS st_{view}_{suffix}_key")
            op.execute(f"DROP INDEX IF EXISTS ix_{view}_{suffix}")
    op.execute(_collect(CERTIFICATE_VALUES, "details ? 'tls'"))
