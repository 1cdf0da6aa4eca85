"""Asset text search goes through the distinct texts, not a trigram index per asset (PRF-2).

Revision ID: 20261201_0170
Revises: 20261130_0160
Create Date: 2026-12-01

The asset search's ``text`` filter matches ``banner``, ``product`` and ``hostname``
(joined by a unit separator, ``postgres_schema.TEXT_EXPRESSION``) with ``ILIKE``. Until
now each asset view had a trigram GIN index on that expression, so every projection
merge added some fifty trigram entries per endpoint to each view, and an update (a
newer sighting) added them again for the new row version: about a quarter of
PostgreSQL's CPU per published endpoint. Yet the texts repeat: the same server banner
stands on thousands of endpoints, a hostname on every port of its address.

``search_asset_texts`` holds each distinct text once, keyed by ``md5(text)`` as a uuid,
and carries the trigram index. Each view gets a B-tree on that key (after ``owner_id``
in the user view), an expression index, so the rows themselves do not change. A text
search asks for the views' rows whose key is one of the matching texts' keys; a row's
key is the md5 of its own text, so the answer is the ``ILIKE`` of before
(``postgres_queries.asset_search_statement``).

Statement-level triggers fill the texts table from every statement that inserts or
updates view rows (the projection's pages, the generic merges, status updates, the
seed), whichever code runs it: the statement's new rows, their distinct texts, in key
order (so two writers never wait on each other's new texts in opposite orders),
``ON CONFLICT DO NOTHING``. A text whose assets have all changed or gone stays in the
table; it only costs its row (the table holds distinct texts, far fewer than assets),
and it cannot make a search return anything, because the answer comes from the views.

md5 here is a 128-bit key, not a security measure: two different texts sharing a key
would answer for each other in a text search, but two real texts colliding by chance is
out of reach, and a deliberate collision needs control of both texts.

The upgrade fills the texts table from the existing rows and builds the indexes
(``CREATE INDEX`` holds off writes to each table while it builds, as in migration
0140); the downgrade builds the trigram indexes of 0010 again.
"""

from alembic import op

revision = "20261201_0170"
down_revision = "20261130_0160"
branch_labels = None
depends_on = None

# The text of a view row: postgres_schema.TEXT_EXPRESSION, written out (a migration keeps
# the SQL it ran, whatever the application later calls the expression).
TEXT = (
    "(coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f' "
    "|| coalesce(hostname, ''))"
)
TEXT_ID = f"(md5({TEXT})::uuid)"

UPGRADE = rf"""
CREATE TABLE search_asset_texts (
    id   uuid PRIMARY KEY,
    text text NOT NULL
);

CREATE FUNCTION search_asset_texts_collect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_asset_texts (id, text)
    SELECT DISTINCT ON (x.id) x.id, x.text
      FROM (SELECT {TEXT_ID} AS id, {TEXT} AS text FROM new_rows) AS x
     ORDER BY x.id
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER tr_search_assets_global_texts_insert AFTER INSERT ON search_assets_global
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_asset_texts_collect();
CREATE TRIGGER tr_search_assets_global_texts_update AFTER UPDATE ON search_assets_global
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_asset_texts_collect();
CREATE TRIGGER tr_search_assets_user_texts_insert AFTER INSERT ON search_assets_user
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_asset_texts_collect();
CREATE TRIGGER tr_search_assets_user_texts_update AFTER UPDATE ON search_assets_user
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_asset_texts_collect();

INSERT INTO search_asset_texts (id, text)
SELECT DISTINCT ON (x.id) x.id, x.text
  FROM (SELECT {TEXT_ID} AS id, {TEXT} AS text FROM search_assets_global
        UNION ALL
        SELECT {TEXT_ID} AS id, {TEXT} AS text FROM search_assets_user) AS x
 ORDER BY x.id;

CREATE INDEX ix_search_asset_texts_trgm ON search_asset_texts USING gin (text gin_trgm_ops);
CREATE INDEX ix_search_assets_global_text ON search_assets_global ({TEXT_ID});
CREATE INDEX ix_search_assets_user_text ON search_assets_user (owner_id, {TEXT_ID});
DROP INDEX ix_search_assets_global_text_trgm;
DROP INDEX ix_search_assets_user_text_trgm;
"""  # noqa: S608 - constant DDL, no values

DOWNGRADE = rf"""
CREATE INDEX ix_search_assets_global_text_trgm
    ON search_assets_global USING gin ({TEXT} gin_trgm_ops);
CREATE INDEX ix_search_assets_user_text_trgm
    ON search_assets_user USING gin ({TEXT} gin_trgm_ops);
DROP INDEX ix_search_assets_user_text;
DROP INDEX ix_search_assets_global_text;
DROP TRIGGER tr_search_assets_user_texts_update ON search_assets_user;
DROP TRIGGER tr_search_assets_user_texts_insert ON search_assets_user;
DROP TRIGGER tr_search_assets_global_texts_update ON search_assets_global;
DROP TRIGGER tr_search_assets_global_texts_insert ON search_assets_global;
DROP FUNCTION search_asset_texts_collect();
DROP TABLE search_asset_texts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
