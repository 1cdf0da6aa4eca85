"""Foundation: identity, audit, scan control, search targets, periodic job leases.

Revision ID: 20261130_0001
Revises:
Create Date: 2026-11-30

DDL creates every object outright (no ``IF NOT EXISTS``): a database that
already holds some of these objects without the matching Alembic revision has
drifted from the schema, and the upgrade stops on the first one instead of
adopting it silently. The one exception is the ``pg_trgm`` extension: it is
database-wide, not part of netmap's schema, and managed PostgreSQL services
often have an administrator create it beforehand.
"""

from alembic import op

revision = "20261130_0001"
down_revision = None
branch_labels = None
depends_on = None


UPGRADE = r"""
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE users (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    username      text        NOT NULL CHECK (length(username) BETWEEN 1 AND 64),
    password_hash text        NOT NULL,
    is_admin      boolean     NOT NULL DEFAULT false,
    disabled      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX uq_users_lower_username ON users (lower(username));

CREATE TABLE scanners (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    token_sha256 bytea       NOT NULL,
    disabled     boolean     NOT NULL DEFAULT false,
    created_by   bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz
);
CREATE UNIQUE INDEX uq_scanners_name ON scanners (name);
CREATE UNIQUE INDEX uq_scanners_token_sha256 ON scanners (token_sha256);

CREATE TABLE audit_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor_user_id bigint      REFERENCES users (id) ON DELETE SET NULL,
    action        text        NOT NULL,
    target_type   text,
    target_id     text,
    details       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_audit_log_created_at ON audit_log (created_at);

CREATE TABLE stored_secrets (
    name       text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    ciphertext text        NOT NULL,
    updated_by bigint      REFERENCES users (id) ON DELETE SET NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scan_tasks (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id            bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name                text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    status              text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'partially_failed', 'failed')),
    targets             jsonb       NOT NULL,
    ports               text        NOT NULL,
    transports          text[]      NOT NULL,
    scan_plan           jsonb       NOT NULL,
    parent_task_id      bigint      REFERENCES scan_tasks (id) ON DELETE CASCADE,
    parent_execution_id bigint,
    execution_count     integer     NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX ix_scan_tasks_owner_id_id ON scan_tasks (owner_id, id DESC);
CREATE INDEX ix_scan_tasks_parent_task_id ON scan_tasks (parent_task_id)
    WHERE parent_task_id IS NOT NULL;

CREATE TABLE scan_executions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id           bigint      NOT NULL REFERENCES scan_tasks (id) ON DELETE CASCADE,
    kind              text        NOT NULL CHECK (kind IN ('ports', 'dns')),
    status            text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    targets           jsonb       NOT NULL,
    ports             text        NOT NULL,
    transports        text[]      NOT NULL,
    scanner_id        bigint      REFERENCES scanners (id) ON DELETE SET NULL,
    claim_token       uuid,
    lease_expires_at  timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    max_attempts      integer     NOT NULL DEFAULT 3,
    available_at      timestamptz NOT NULL DEFAULT now(),
    last_error        text,
    observation_count bigint      NOT NULL DEFAULT 0,
    endpoint_count    bigint      NOT NULL DEFAULT 0,
    ip_count          bigint      NOT NULL DEFAULT 0,
    started_at        timestamptz,
    finished_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_scan_executions_running_has_lease
        CHECK (status <> 'running' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX ix_scan_executions_task_id ON scan_executions (task_id, id);
CREATE INDEX ix_scan_executions_claimable ON scan_executions (available_at, id)
    WHERE status = 'queued';
CREATE INDEX ix_scan_executions_lease ON scan_executions (lease_expires_at)
    WHERE status = 'running';

CREATE TABLE search_targets (
    owner_id          bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind              text        NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    key               text        NOT NULL,
    target_ip         inet GENERATED ALWAYS AS (
        CASE WHEN kind IN ('ip', 'cidr') THEN key::inet END
    ) STORED,
    last_scanned_at   timestamptz,
    last_execution_id bigint,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, kind, key)
);
CREATE INDEX ix_search_targets_cidr_gist
    ON search_targets USING gist (target_ip inet_ops) WHERE kind = 'cidr';

CREATE TABLE runner_periodic_jobs (
    name             text PRIMARY KEY,
    claim_token      uuid,
    lease_expires_at timestamptz,
    holder           text,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    last_started_at  timestamptz,
    last_finished_at timestamptz,
    last_error       text,
    runs             bigint      NOT NULL DEFAULT 0
);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS runner_periodic_jobs;
DROP TABLE IF EXISTS search_targets;
DROP TABLE IF EXISTS scan_executions;
DROP TABLE IF EXISTS scan_tasks;
DROP TABLE IF EXISTS stored_secrets;
DROP TABLE IF EXISTS audit_log;
DROP TABLE IF EXISTS scanners;
DROP TABLE IF EXISTS users;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
