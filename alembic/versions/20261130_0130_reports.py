"""Reports: definitions, templates, reports with their generation jobs, mail deliveries (REP-1..7).

Revision ID: 20261130_0130
Revises: 20261130_0115
Create Date: 2026-11-30

* ``report_templates`` / ``report_template_versions``: admin-managed mail
  templates (subject and HTML source per version); the published version is the
  one reports render with. The built-in ``default`` template lives in code and
  needs no row.
* ``report_definitions``: what an owner wants reported (one task or all of
  theirs), how often, to whom, with which template.
* ``reports``: one report of one period. ``schedule_key`` is unique, so a
  scheduled period is created once even when several runners close it at the
  same moment (an insert that conflicts, never a check-then-insert).
* ``report_jobs``: the generation work of a report, claimed under a lease
  (``claim_token`` + ``lease_expires_at``), retried with backoff.
* ``report_deliveries``: one mail per recipient; the Message-ID is stored
  before the message is handed to SMTP.
* ``report_execution_aggregates``: per succeeded execution, its top services,
  products and ports and its endpoints' first-seen counts per hour, computed
  once (an execution's endpoints no longer change after it succeeded), so the
  capture transaction reads small rows instead of scanning endpoints.
"""

from alembic import op

revision = "20261130_0130"
down_revision = "20261130_0115"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE report_templates (
    name              text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    published_version text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE report_template_versions (
    name           text        NOT NULL REFERENCES report_templates (name) ON DELETE CASCADE,
    version        text        NOT NULL CHECK (length(version) BETWEEN 1 AND 128),
    subject_source text        NOT NULL,
    html_source    text        NOT NULL,
    enabled        boolean     NOT NULL DEFAULT true,
    created_by     bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE report_definitions (
    id          bigserial   PRIMARY KEY,
    owner_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    task_id     bigint      REFERENCES scan_tasks (id) ON DELETE CASCADE,
    period      text        NOT NULL CHECK (period IN ('daily', 'weekly', 'on_demand')),
    recipients  text[]      NOT NULL,
    template    text        NOT NULL,
    timezone    text        NOT NULL DEFAULT 'UTC',
    enabled     boolean     NOT NULL DEFAULT true,
    revision    integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_report_definitions_owner ON report_definitions (owner_id, id DESC);
CREATE INDEX ix_report_definitions_scheduled ON report_definitions (period)
    WHERE enabled AND period <> 'on_demand';

CREATE TABLE reports (
    id            bigserial   PRIMARY KEY,
    definition_id bigint      NOT NULL REFERENCES report_definitions (id) ON DELETE CASCADE,
    owner_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    task_id       bigint      REFERENCES scan_tasks (id) ON DELETE SET NULL,
    period_kind   text        NOT NULL,
    period_start  timestamptz NOT NULL,
    period_end    timestamptz NOT NULL,
    schedule_key  text        UNIQUE,
    status        text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'generating', 'ready', 'failed')),
    revision      integer     NOT NULL DEFAULT 1,
    statistics    jsonb,
    quality       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    subject       text,
    html          text,
    images        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX ix_reports_owner_id ON reports (owner_id, id DESC);

CREATE TABLE report_jobs (
    report_id        bigint      PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
    status           text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'retry_wait', 'done', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    claim_token      uuid,
    lease_expires_at timestamptz,
    available_at     timestamptz NOT NULL DEFAULT now(),
    error_kind       text,
    last_error       text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_report_jobs_running_has_lease
        CHECK (status <> 'running' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX ix_report_jobs_due ON report_jobs (available_at, report_id)
    WHERE status IN ('queued', 'retry_wait', 'running');

CREATE TABLE report_deliveries (
    id               bigserial   PRIMARY KEY,
    report_id        bigint      NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
    recipient        text        NOT NULL,
    status           text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'sending', 'sent', 'written', 'failed')),
    message_id       text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    claim_token      uuid,
    lease_expires_at timestamptz,
    available_at     timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    sent_at          timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (report_id, recipient)
);
CREATE INDEX ix_report_deliveries_due ON report_deliveries (available_at, id)
    WHERE status IN ('queued', 'sending');

CREATE TABLE report_execution_aggregates (
    execution_id     bigint      PRIMARY KEY REFERENCES scan_executions (id) ON DELETE CASCADE,
    services         jsonb       NOT NULL,
    products         jsonb       NOT NULL,
    ports            jsonb       NOT NULL,
    first_seen_hours jsonb       NOT NULL,
    computed_at      timestamptz NOT NULL DEFAULT now()
);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS report_execution_aggregates;
DROP TABLE IF EXISTS report_deliveries;
DROP TABLE IF EXISTS report_jobs;
DROP TABLE IF EXISTS reports;
DROP TABLE IF EXISTS report_definitions;
DROP TABLE IF EXISTS report_template_versions;
DROP TABLE IF EXISTS report_templates;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
