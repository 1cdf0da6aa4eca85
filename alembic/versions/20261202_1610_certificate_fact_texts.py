"""A rare certificate issuer or subject is an index lookup (distinct values, as for texts).

Revision ID: 20261202_1610
Revises: 20261202_1600
Create Date: 2026-12-02

``cert.issuer:`` and ``cert.subject:`` are substring searches of a value inside
``details`` (``app.search.endpoint_facts``). Migration 1100 gave their expressions
statistics, so a common value is read in page order; a rare one was still a scan of
every asset of the owner that carries the section (480 ms at a million assets). A
trigram index on each expression was measured too dear for the projection (every
endpoint's value indexed again at every merge), so these fields take the way free text
takes (migration 0170):

* ``search_asset_fact_texts`` holds each distinct issuer and subject once, keyed by
  ``md5(value)`` as a uuid, with the trigram index. Statement-level triggers on both
  asset views add the values of every inserted or updated row (distinct, in key order,
  ``ON CONFLICT DO NOTHING``), whoever writes them. The values of both fields share the
  table: a key only answers for the field whose key it is compared with.
* each view gets, per field, a B-tree on ``(owner_id, key)`` (``key`` alone in the global
  view) over the rows that have the value (a partial index: an endpoint without a
  certificate costs no entry), and statistics on the key expression, so the planner
  weighs a key by its real frequency: a rare issuer is read through the index, a common
  one in page order as before.

A search first reads the matching distinct values (their trigram index) and then asks
for the view rows whose key is one of theirs (``postgres_queries``); beyond a thousand
matching values it falls back to the expression's own ``ILIKE``. Values whose assets are
gone stay in the table (a row each; they cannot make a search return anything, the
answer comes from the views). md5 is a key, not a security measure (see migration 0170).
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1610"
down_revision = "20261202_1600"
branch_labels = None
depends_on = None


def _value(key: str) -> str:
    # Exactly endpoint_facts._fact_sql("tls", key, "text") without the table alias.
    text = f"(details->'tls'->>'{key}')"
    return (
        f"(CASE WHEN jsonb_typeof(details->'tls'->'{key}') = 'string' "
        f"AND length({text}) <= 1024 THEN {text} END)"
    )


# (index suffix, details.tls key): the certificate text facts.
FIELDS = (("cert_issuer", "issuer"), ("cert_subject", "subject_cn"))
VIEWS = {"search_assets_user": "owner_id, ", "search_assets_global": ""}
ISSUER, SUBJECT = _value("issuer"), _value("subject_cn")

UPGRADE = rf"""
CREATE TABLE search_asset_fact_texts (
    id   uuid PRIMARY KEY,
    text text NOT NULL
);

CREATE FUNCTION search_asset_fact_texts_collect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_asset_fact_texts (id, text)
    SELECT DISTINCT ON (x.id) x.id, x.text
      FROM (SELECT md5(v.text)::uuid AS id, v.text
              FROM new_rows
             CROSS JOIN LATERAL (VALUES ({ISSUER}), ({SUBJECT})) AS v(text)
             WHERE details ? 'tls' AND v.text IS NOT NULL) AS x
     ORDER BY x.id
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;

INSERT INTO search_asset_fact_texts (id, text)
SELECT DISTINCT ON (x.id) x.id, x.text
  FROM (SELECT md5(v.text)::uuid AS id, v.text
          FROM (SELECT details FROM search_assets_global WHERE details ? 'tls'
                UNION ALL
                SELECT details FROM search_assets_user WHERE details ? 'tls') AS r
         CROSS JOIN LATERAL (VALUES ({ISSUER}), ({SUBJECT})) AS v(text)
         WHERE v.text IS NOT NULL) AS x
 ORDER BY x.id;

CREATE INDEX ix_search_asset_fact_texts_trgm
    ON search_asset_fact_texts USING gin (text gin_trgm_ops);
"""  # noqa: S608 - constant DDL, no values


def upgrade() -> None:
    op.execute(UPGRADE)
    for view, lead in VIEWS.items():
        for operation in ("INSERT", "UPDATE"):
            op.execute(
                f"CREATE TRIGGER tr_{view}_fact_texts_{operation.lower()} AFTER {operation} "
                f"ON {view} REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
                "EXECUTE FUNCTION search_asset_fact_texts_collect()"
            )
        for suffix, key in FIELDS:
            value_key = f"(md5({_value(key)})::uuid)"
            op.execute(
                f"CREATE INDEX ix_{view}_{suffix} ON {view} ({lead}{value_key}) "
                f"WHERE {value_key} IS NOT NULL"
            )
            op.execute(f"CREATE STATISTICS st_{view}_{suffix}_key ON {value_key} FROM {view}")
        # The new statistics exist once gathered (a sample: seconds even at millions).
        op.execute(f"ANALYZE {view}")


def downgrade() -> None:
    for view in VIEWS:
        for suffix, _ in FIELDS:
            op.execute(f"DROP STATISTICS IF EXISTS st_{view}_{suffix}_key")
            op.execute(f"DROP INDEX IF EXISTS ix_{view}_{suffix}")
        for operation in ("insert", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS tr_{view}_fact_texts_{operation} ON {view}")
    op.execute("DROP FUNCTION IF EXISTS search_asset_fact_texts_collect()")
    op.execute("DROP TABLE IF EXISTS search_asset_fact_texts")
