"""Result exports and the record of object deletes still to retry (EXP-6, EXP-7).

Revision ID: 20261130_0090
Revises: 20261130_0070
Create Date: 2026-11-30

* ``exports``: one requested export of a task's results. The runner builds it
  under a lease (``claim_token`` + ``lease_expires_at``, checked in every
  write), records the stored object, and deletes it once ``expires_at`` has
  passed. ``execution_ids`` are the task's succeeded executions when the export
  was requested, so a build (and a rebuild after a crash) exports exactly them.
* ``object_delete_failures``: keys whose compensation delete failed; the
  ``object_delete_retry`` job tries them again until they are gone.
"""

from alembic import op

revision = "20261130_0090"
down_revision = "20261130_0070"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE exports (
    id               bigserial   PRIMARY KEY,
    owner_id         bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    task_id          bigint      NOT NULL REFERENCES scan_tasks (id) ON DELETE CASCADE,
    format           text        NOT NULL CHECK (format IN ('csv', 'jsonl', 'zip')),
    status           text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'building', 'ready', 'failed', 'expired', 'deleted')),
    task_name        text        NOT NULL,
    execution_ids    bigint[]    NOT NULL,
    object_key       text,
    content_type     text,
    size_bytes       bigint,
    row_count        bigint,
    sha256           text,
    attempts         integer     NOT NULL DEFAULT 0,
    claim_token      uuid,
    lease_expires_at timestamptz,
    build_host       text,
    available_at     timestamptz NOT NULL DEFAULT now(),
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    expires_at       timestamptz,
    deleted_at       timestamptz,
    CONSTRAINT ck_exports_building_has_lease
        CHECK (status <> 'building' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX ix_exports_owner_id_id ON exports (owner_id, id DESC);
CREATE INDEX ix_exports_due ON exports (available_at, id)
    WHERE status IN ('queued', 'building');
CREATE INDEX ix_exports_building_host ON exports (build_host)
    WHERE status = 'building';
CREATE INDEX ix_exports_expiry ON exports (expires_at) WHERE status = 'ready';

CREATE TABLE object_delete_failures (
    key             text        PRIMARY KEY,
    origin          text        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 1,
    last_error      text        NOT NULL,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_object_delete_failures_due
    ON object_delete_failures (next_attempt_at);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS object_delete_failures;
DROP TABLE IF EXISTS exports;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
