"""Result ingest: upload receipts, DNS answers, analysis queue, projection outbox.

Revision ID: 20261130_0040
Revises: 20261130_0030
Create Date: 2026-11-30

The projection outbox starts with its queue columns only; the leased-worker
columns (claim token, lease, cursor, phase, progress) are added by a later
revision that keeps existing rows.
"""

from alembic import op

revision = "20261130_0040"
down_revision = "20261130_0030"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE scan_upload_receipts (
    execution_id       bigint      NOT NULL REFERENCES scan_executions (id) ON DELETE CASCADE,
    upload_id          text        NOT NULL,
    stream             text        NOT NULL DEFAULT 'main' CHECK (stream IN ('main', 'dns')),
    batch_index        integer     NOT NULL CHECK (batch_index >= 0),
    is_final           boolean     NOT NULL DEFAULT false,
    checksum           text        NOT NULL,
    observation_count  integer     NOT NULL CHECK (observation_count >= 0),
    status             text        NOT NULL CHECK (status IN ('pending', 'confirmed')),
    claim_token        uuid,
    -- Fact storage months (YYYY.MM) this batch wrote; NULL marks a legacy receipt (ING-11).
    storage_references text[],
    created_at         timestamptz NOT NULL DEFAULT now(),
    confirmed_at       timestamptz,
    PRIMARY KEY (execution_id, upload_id, stream, batch_index)
);

CREATE TABLE scan_dns_answers (
    execution_id bigint      NOT NULL REFERENCES scan_executions (id) ON DELETE CASCADE,
    name         text        NOT NULL,
    type         text        NOT NULL,
    value        text        NOT NULL,
    ttl          integer,
    observed_at  timestamptz NOT NULL,
    PRIMARY KEY (execution_id, name, type, value)
);

CREATE TABLE scan_analysis_queue (
    execution_id bigint PRIMARY KEY REFERENCES scan_executions (id) ON DELETE CASCADE,
    task_id      bigint      NOT NULL,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);

CREATE TABLE scan_projection_outbox (
    execution_id bigint PRIMARY KEY REFERENCES scan_executions (id) ON DELETE CASCADE,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    available_at timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_scan_projection_outbox_backlog
    ON scan_projection_outbox (available_at, execution_id) WHERE processed_at IS NULL;
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS scan_projection_outbox;
DROP TABLE IF EXISTS scan_analysis_queue;
DROP TABLE IF EXISTS scan_dns_answers;
DROP TABLE IF EXISTS scan_upload_receipts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
