"""The keys a run's writes insert into lead with its execution.

Revision ID: 20261204_2000
Revises: 20261203_1900
Create Date: 2026-12-04

Every row a scan writes is keyed by a SHA-256 id, so each insert lands on a random
leaf of its primary key. While those keys fit in memory that costs nothing; once
they do not, every new fact and execution endpoint reads a page from disk
(docs/scaling.md, "Keys with insert locality"). Led by the execution, a run's rows
land side by side at the newest end of the key instead:

* ``search_execution_endpoints``: the primary key becomes ``(execution_id, key)``
  (it was ``key``); merges name it as their conflict target. ``key`` is derived from
  an id that hashes the execution, so one endpoint of one execution still has one row.
* ``search_facts``: the key stays ``(id, observed_at)``; new fact ids lead with their
  execution's id (``app.search.ids.fact_ids``, scheme 2). Stored facts keep theirs.
  ``scan_upload_receipts.fact_ids`` records the scheme a batch was reserved under:
  receipts from before this migration are scheme 1, so a pending batch retried after
  the upgrade rewrites the ids it wrote the first time instead of adding new ones.

Rebuilding the execution endpoints' key holds an exclusive lock on the table for as
long as the index build takes (about a minute per ten million rows on the bench
machine); run it with the web and runner processes stopped, as every migration.
"""

from alembic import op

revision = "20261204_2000"
down_revision = "20261203_1900"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE search_execution_endpoints
            DROP CONSTRAINT search_execution_endpoints_pkey,
            ADD CONSTRAINT search_execution_endpoints_pkey PRIMARY KEY (execution_id, key)
        """
    )
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
    op.execute(
        """
        ALTER TABLE search_execution_endpoints
            DROP CONSTRAINT search_execution_endpoints_pkey,
            ADD CONSTRAINT search_execution_endpoints_pkey PRIMARY KEY (key)
        """
    )
