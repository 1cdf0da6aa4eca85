"""Change analysis: leased analysis queue, per-owner endpoint state, change table, asset status.

Revision ID: 20261130_0115
Revises: 20261130_0110
Create Date: 2026-11-30

* ``scan_analysis_queue`` (filled by every final since 0040) gains the leased
  worker columns (claim token, lease, phase, attempts, last error,
  ``available_at``) in place: rows already queued stay and become claimable.
* ``analysis_assets``: per owner and endpoint, the compact state the analysis
  compares against (the values it last recorded, open or gone, and since when).
* ``analysis_changes``: one row per new / changed / gone / reappeared endpoint
  per execution, with old and new values: the change sets and the history.
* ``analysis_execution_summaries``: counts per kind of every analysed execution.
* ``analysis_owner_watermarks``: the newest (finish time, execution) analysed
  per owner, so an older execution never overrides what a newer one decided.
* ``analysis_sightings``: unlogged staging of an execution's endpoints when the
  search store is not this database (Elasticsearch).
* Current assets (both scopes) gain ``status`` (open | gone), ``gone_since`` and
  ``gone_execution_id``; the new columns have constant defaults, so adding them
  rewrites no table.
"""

from alembic import op

revision = "20261130_0115"
down_revision = "20261130_0110"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE scan_analysis_queue
    ADD COLUMN claim_token      uuid,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN phase            text        NOT NULL DEFAULT 'analyse',
    ADD COLUMN attempts         integer     NOT NULL DEFAULT 0,
    ADD COLUMN last_error       text,
    ADD COLUMN available_at     timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN updated_at       timestamptz NOT NULL DEFAULT now();
ALTER TABLE scan_analysis_queue
    DROP CONSTRAINT IF EXISTS ck_scan_analysis_queue_phase,
    ADD CONSTRAINT ck_scan_analysis_queue_phase CHECK (phase IN ('analyse', 'publish', 'done')),
    DROP CONSTRAINT IF EXISTS ck_scan_analysis_queue_lease,
    ADD CONSTRAINT ck_scan_analysis_queue_lease
        CHECK ((claim_token IS NULL) = (lease_expires_at IS NULL));
CREATE INDEX ix_scan_analysis_queue_backlog
    ON scan_analysis_queue (enqueued_at, execution_id) WHERE processed_at IS NULL;
CREATE INDEX ix_scan_analysis_queue_processed
    ON scan_analysis_queue (processed_at) WHERE processed_at IS NOT NULL;

CREATE TABLE analysis_assets (
    owner_id             bigint NOT NULL,
    ip                   inet   NOT NULL,
    port                 integer NOT NULL,
    transport            text   NOT NULL,
    state                text,
    service              text,
    product              text,
    version              text,
    banner_hash          text,
    status               text   NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'gone')),
    first_execution_id   bigint NOT NULL,
    changed_execution_id bigint NOT NULL,
    gone_since           timestamptz,
    gone_execution_id    bigint,
    PRIMARY KEY (owner_id, ip, port, transport)
);
-- The global view's status looks at every owner's row of one endpoint.
CREATE INDEX ix_analysis_assets_endpoint
    ON analysis_assets (ip, port, transport);

CREATE TABLE analysis_changes (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id         bigint      NOT NULL,
    execution_id     bigint      NOT NULL,
    task_id          bigint      NOT NULL,
    finished_at      timestamptz NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('new', 'changed', 'gone', 'reappeared')),
    ip               inet        NOT NULL,
    port             integer     NOT NULL,
    transport        text        NOT NULL,
    old_state        text,
    old_service      text,
    old_product      text,
    old_version      text,
    old_banner_hash  text,
    new_state        text,
    new_service      text,
    new_product      text,
    new_version      text,
    new_banner_hash  text
);
CREATE INDEX ix_analysis_changes_task ON analysis_changes (task_id, id);
CREATE INDEX ix_analysis_changes_task_kind ON analysis_changes (task_id, kind, id);
CREATE INDEX ix_analysis_changes_execution
    ON analysis_changes (execution_id, id) WHERE kind IN ('gone', 'reappeared');
CREATE INDEX ix_analysis_changes_endpoint
    ON analysis_changes (owner_id, ip, port, transport, id);

CREATE TABLE analysis_execution_summaries (
    execution_id bigint      PRIMARY KEY,
    task_id      bigint      NOT NULL,
    owner_id     bigint      NOT NULL,
    finished_at  timestamptz NOT NULL,
    new          bigint      NOT NULL DEFAULT 0,
    changed      bigint      NOT NULL DEFAULT 0,
    gone         bigint      NOT NULL DEFAULT 0,
    reappeared   bigint      NOT NULL DEFAULT 0,
    -- false: the execution could not mark anything gone (not succeeded, DNS-only, older
    -- than what the owner's analysis already decided, or no address targets).
    absence_checked boolean  NOT NULL,
    superseded   boolean     NOT NULL DEFAULT false,
    analysed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_analysis_execution_summaries_task
    ON analysis_execution_summaries (task_id);

CREATE TABLE analysis_owner_watermarks (
    owner_id     bigint      PRIMARY KEY,
    finished_at  timestamptz NOT NULL,
    execution_id bigint      NOT NULL
);

CREATE UNLOGGED TABLE analysis_sightings (
    execution_id bigint  NOT NULL,
    ip           inet    NOT NULL,
    port         integer NOT NULL,
    transport    text    NOT NULL,
    state        text,
    service      text,
    product      text,
    version      text,
    banner_hash  text,
    PRIMARY KEY (execution_id, ip, port, transport)
);

ALTER TABLE search_assets_user
    ADD COLUMN status            text NOT NULL DEFAULT 'open',
    ADD COLUMN gone_since        timestamptz,
    ADD COLUMN gone_execution_id bigint;
ALTER TABLE search_assets_global
    ADD COLUMN status            text NOT NULL DEFAULT 'open',
    ADD COLUMN gone_since        timestamptz,
    ADD COLUMN gone_execution_id bigint;
ALTER TABLE search_assets_user
    DROP CONSTRAINT IF EXISTS ck_search_assets_user_status,
    ADD CONSTRAINT ck_search_assets_user_status CHECK (status IN ('open', 'gone'));
ALTER TABLE search_assets_global
    DROP CONSTRAINT IF EXISTS ck_search_assets_global_status,
    ADD CONSTRAINT ck_search_assets_global_status CHECK (status IN ('open', 'gone'));
-- Gone assets are few; listing them must not walk the open ones.
CREATE INDEX ix_search_assets_user_gone
    ON search_assets_user (owner_id, ip_order, port, transport) WHERE status = 'gone';
CREATE INDEX ix_search_assets_global_gone
    ON search_assets_global (ip_order, port, transport) WHERE status = 'gone';
"""

DOWNGRADE = r"""
DROP INDEX IF EXISTS ix_search_assets_global_gone;
DROP INDEX IF EXISTS ix_search_assets_user_gone;
ALTER TABLE search_assets_global
    DROP CONSTRAINT IF EXISTS ck_search_assets_global_status,
    DROP COLUMN IF EXISTS gone_execution_id,
    DROP COLUMN IF EXISTS gone_since,
    DROP COLUMN IF EXISTS status;
ALTER TABLE search_assets_user
    DROP CONSTRAINT IF EXISTS ck_search_assets_user_status,
    DROP COLUMN IF EXISTS gone_execution_id,
    DROP COLUMN IF EXISTS gone_since,
    DROP COLUMN IF EXISTS status;
DROP TABLE IF EXISTS analysis_sightings;
DROP TABLE IF EXISTS analysis_owner_watermarks;
DROP TABLE IF EXISTS analysis_execution_summaries;
DROP TABLE IF EXISTS analysis_changes;
DROP TABLE IF EXISTS analysis_assets;
DROP INDEX IF EXISTS ix_scan_analysis_queue_processed;
DROP INDEX IF EXISTS ix_scan_analysis_queue_backlog;
ALTER TABLE scan_analysis_queue
    DROP CONSTRAINT IF EXISTS ck_scan_analysis_queue_lease,
    DROP CONSTRAINT IF EXISTS ck_scan_analysis_queue_phase,
    DROP COLUMN IF EXISTS updated_at,
    DROP COLUMN IF EXISTS available_at,
    DROP COLUMN IF EXISTS last_error,
    DROP COLUMN IF EXISTS attempts,
    DROP COLUMN IF EXISTS phase,
    DROP COLUMN IF EXISTS lease_expires_at,
    DROP COLUMN IF EXISTS claim_token;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
