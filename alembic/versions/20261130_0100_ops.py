"""Operator tables: resource samples and slow-SQL samples (OPS-2, OBS-4).

Revision ID: 20261130_0100
Revises: 20261130_0090
Create Date: 2026-11-30

Both tables are bounded by the sampler itself (age and row cap for resource
samples, a sample count for slow SQL), so they never grow with traffic.
"""

from alembic import op

revision = "20261130_0100"
down_revision = "20261130_0090"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE ops_resource_samples (
    id          bigserial PRIMARY KEY,
    sampled_at  timestamptz      NOT NULL,
    host        text             NOT NULL,
    metric      text             NOT NULL,
    process     text             NOT NULL DEFAULT '',
    value       double precision NOT NULL
);
CREATE INDEX ix_ops_resource_samples_metric_sampled_at
    ON ops_resource_samples (metric, sampled_at);
CREATE INDEX ix_ops_resource_samples_sampled_at
    ON ops_resource_samples (sampled_at);

CREATE TABLE ops_slow_sql_samples (
    id           bigserial PRIMARY KEY,
    sampled_at   timestamptz NOT NULL DEFAULT now(),
    window_start timestamptz,
    status       text        NOT NULL,
    reason       text,
    by_total     jsonb       NOT NULL DEFAULT '[]'::jsonb,
    by_mean      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    baseline     jsonb,
    CONSTRAINT ck_ops_slow_sql_samples_status
        CHECK (status IN ('ok', 'unavailable', 'failed'))
);
CREATE INDEX ix_ops_slow_sql_samples_sampled_at
    ON ops_slow_sql_samples (sampled_at);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS ops_slow_sql_samples;
DROP TABLE IF EXISTS ops_resource_samples;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
