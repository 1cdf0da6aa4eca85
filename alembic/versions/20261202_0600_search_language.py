"""Asset exports by search-language query, and saved searches (issue 37).

Revision ID: 20261202_0600
Revises: 20261201_0170
Create Date: 2026-12-02

* ``exports`` may now export the current assets a search-language query finds
  instead of a task's executions: ``query`` holds the query text, ``query_at`` the
  moment its durations (``cert.expires:<30d``) are relative to, so a rebuild after a
  crash exports the same set; ``task_id`` is then NULL (a CHECK keeps one of the two).
* ``saved_searches``: named queries, one owner each (names unique per owner).
"""

from __future__ import annotations

from alembic import op

revision = "20261202_0600"
down_revision = "20261201_0170"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE exports
    ALTER COLUMN task_id DROP NOT NULL,
    ADD COLUMN query text,
    ADD COLUMN query_at timestamptz,
    ADD CONSTRAINT ck_exports_task_or_query CHECK (
        (task_id IS NOT NULL AND query IS NULL)
        OR (task_id IS NULL AND query IS NOT NULL AND query_at IS NOT NULL)
    );

CREATE TABLE saved_searches (
    id         bigserial   PRIMARY KEY,
    owner_id   bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    query      text        NOT NULL CHECK (length(query) <= 1000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_saved_searches_owner_name UNIQUE (owner_id, name)
);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS saved_searches;
DELETE FROM exports WHERE task_id IS NULL;
ALTER TABLE exports
    DROP CONSTRAINT IF EXISTS ck_exports_task_or_query,
    DROP COLUMN IF EXISTS query_at,
    DROP COLUMN IF EXISTS query,
    ALTER COLUMN task_id SET NOT NULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
