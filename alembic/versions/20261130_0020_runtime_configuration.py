"""Runtime configuration with revision history (the report renderer selection, MOD-3).

Revision ID: 20261130_0020
Revises: 20261130_0010
Create Date: 2026-11-30

The current document per namespace plus every revision with who changed it and
why. Revisions are positive and only grow; schema_version is checked by the
reader (a newer server may write a version this one must refuse to interpret).
"""

from alembic import op

revision = "20261130_0020"
down_revision = "20261130_0010"
branch_labels = None
depends_on = None


UPGRADE = r"""
CREATE TABLE runtime_configuration (
    namespace      text        PRIMARY KEY CHECK (length(namespace) BETWEEN 1 AND 64),
    schema_version integer     NOT NULL CHECK (schema_version > 0),
    revision       bigint      NOT NULL CHECK (revision > 0),
    document       jsonb       NOT NULL,
    updated_by     bigint      REFERENCES users (id) ON DELETE SET NULL,
    change_reason  text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runtime_configuration_revisions (
    namespace      text        NOT NULL,
    revision       bigint      NOT NULL CHECK (revision > 0),
    schema_version integer     NOT NULL CHECK (schema_version > 0),
    document       jsonb       NOT NULL,
    changed_by     bigint      REFERENCES users (id) ON DELETE SET NULL,
    change_reason  text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, revision)
);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS runtime_configuration_revisions;
DROP TABLE IF EXISTS runtime_configuration;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
