"""The keys a scan's writes insert into lead with what a run's rows share.

Revision ID: 20261204_2000
Revises: 20261203_1900
Create Date: 2026-12-04

Every row a scan writes is keyed by a SHA-256 id, so each insert lands on a random
leaf of its primary key. While those keys fit in memory that costs nothing; once
they do not, every new fact, execution endpoint and current asset reads a page from
disk (docs/scaling.md, "Keys with insert locality"). Led by what a run's rows share,
they land side by side instead:

* ``search_execution_endpoints``: the primary key becomes ``(execution_id, key)``
  (it was ``key``), so a run's rows fill the key's newest end.
* ``search_assets_global``: ``(ip, key)``; ``search_assets_user``: ``(owner_id, ip,
  key)``, so a new range of addresses fills one stretch of the key.
* Each leading column is hashed into ``key`` (``app.search.ids``), so one document
  still has one row; the merges name the new keys as their conflict targets.
* ``search_facts``: the key stays ``(id, observed_at)``; new fact ids lead with their
  execution's id (``app.search.ids.fact_ids``, scheme 2). Stored facts keep theirs.
  ``scan_upload_receipts.fact_ids`` records the scheme a batch was reserved under:
  receipts from before this migration are scheme 1, so a pending batch retried after
  the upgrade rewrites the ids it wrote the first time instead of adding new ones.

Rebuilding each key holds an exclusive lock on its table while the new index is
built over every row; run it with the web and runner processes stopped, as every
migration.
"""

from alembic import op

revision = "20261204_2000"
down_revision = "20261203_1900"
branch_labels = None
depends_on = None


PRIMARY_KEYS = {
    "search_execution_endpoints": ("execution_id, key", "key"),
    "search_assets_global": ("ip, key", "key"),
    "search_assets_user": ("owner_id, ip, key", "key"),
}


def _primary_key(table: str, columns: str) -> None:
    op.execute(
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
        f"ADD CONSTRAINT {table}_pkey PRIMARY KEY ({columns})"
    )


def upgrade() -> None:
    for table, (columns, _before) in PRIMARY_KEYS.items():
        _primary_key(table, columns)
    # Existing receipts were reserved under scheme 1; new ones under scheme 2. The first
    # default fills the column without rewriting the table, the second is for new rows.
    op.execute("ALTER TABLE scan_upload_receipts ADD COLUMN fact_ids smallint NOT NULL DEFAULT 1")
    op.execute("ALTER TABLE scan_upload_receipts ALTER COLUMN fact_ids SET DEFAULT 2")
    # NOT VALID: the rows already there hold the default 1; checking them would read the
    # whole table under the migration's lock for nothing.
    op.execute(
        "ALTER TABLE scan_upload_receipts ADD CONSTRAINT ck_scan_upload_receipts_fact_ids "
        "CHECK (fact_ids IN (1, 2)) NOT VALID"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE scan_upload_receipts DROP COLUMN IF EXISTS fact_ids")
    for table, (_after, columns) in PRIMARY_KEYS.items():
        _primary_key(table, columns)
