"""Execution endpoints keyed by (execution_id, id): one index leads with the execution.

Revision ID: 20261204_2100
Revises: 20261204_2000
Create Date: 2026-12-04

Migration 2000 keyed ``search_execution_endpoints`` by ``(execution_id, key)`` so a
run's inserts land side by side. That made it the second index leading with the
execution, beside ``ix_search_execution_endpoints_execution_id_id``, through which
every walk of one execution reads it in id order (projection pages, the analysis's
sightings, exports, the generic page read). The planner estimates an execution newer
than the table's last ANALYZE at one row, and for one row reading the primary key and
sorting looks as cheap as reading the id index in order: so each page of a new run
read and sorted the whole run (docs/scaling.md, "One index per walk").

The primary key becomes ``(execution_id, id)``, which is that very index, and the
separate index goes: there is one way to walk an execution, whatever the estimate. A
run's inserts still land in their execution's stretch of the key. ``key`` stays as a
column (the projection's parts split on it); dropping it would rewrite the table. An
id is 128 bits, so two endpoints of one execution can no longer meet on a 64-bit key.

The deleted-task sweep now walks the execution endpoints by id, its cursor the first
64 bits of the last id (``app.search.ids.cursor_key``), as the Elasticsearch store's
does. A sweep in progress stored a cursor in the old order: it is reset, and the sweep
starts its task again (removing an asset twice removes nothing the second time).

The downgrade rebuilds ``(execution_id, key)``; should two endpoints of one execution
have come to share a 64-bit key meanwhile, it stops on the unique violation and changes
nothing.

Rebuilding the key holds an exclusive lock on the table while the index is built over
every row; run it with the web and runner processes stopped, as every migration.
"""

from alembic import op

revision = "20261204_2100"
down_revision = "20261204_2000"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE search_execution_endpoints DROP CONSTRAINT search_execution_endpoints_pkey,
    ADD CONSTRAINT search_execution_endpoints_pkey PRIMARY KEY (execution_id, id);
DROP INDEX ix_search_execution_endpoints_execution_id_id;
UPDATE task_purges SET cursor = NULL WHERE phase = 'assets' AND status <> 'done';
"""

DOWNGRADE = """
CREATE INDEX ix_search_execution_endpoints_execution_id_id
    ON search_execution_endpoints (execution_id, id);
ALTER TABLE search_execution_endpoints DROP CONSTRAINT search_execution_endpoints_pkey,
    ADD CONSTRAINT search_execution_endpoints_pkey PRIMARY KEY (execution_id, key);
UPDATE task_purges SET cursor = NULL WHERE phase = 'assets' AND status <> 'done';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
