"""History moved from the PostgreSQL search store to Elasticsearch (ING-11).

Revision ID: 20261202_0700
Revises: 20261202_0620
Create Date: 2026-12-02

``search_store_migrations`` is the checkpoint of ``netmap search migrate --to
elasticsearch`` (one row per target store): the last fact id and execution id
copied, the counts so far, and when the copy finished. A final whose execution
has receipts confirmed before the copy finished reads the whole history (the
legacy scope of ING-11).
"""

from alembic import op

revision = "20261202_0700"
down_revision = "20261202_0620"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE search_store_migrations (
            target             text        PRIMARY KEY CHECK (target IN ('elasticsearch')),
            phase              text        NOT NULL DEFAULT 'facts'
                CHECK (phase IN ('facts', 'endpoints', 'done')),
            after_fact_id      uuid,
            after_execution_id bigint      NOT NULL DEFAULT 0,
            facts_copied       bigint      NOT NULL DEFAULT 0,
            endpoints_copied   bigint      NOT NULL DEFAULT 0,
            started_at         timestamptz NOT NULL DEFAULT now(),
            updated_at         timestamptz NOT NULL DEFAULT now(),
            finished_at        timestamptz
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS search_store_migrations")
