"""Traffic rollups: published rows, per-file checkpoints, per-file partial sums, dirty keys.

Revision ID: 20261130_0030
Revises: 20261130_0020
Create Date: 2026-11-30

``traffic_rollups`` holds the published rows (TRF-2) that the API serves and the
ingest endpoint upserts. The other tables are the runner's checkpoint store
(TRF-3..5, see ``app/traffic/__init__.py``): a version per domain that every
commit compare-and-sets, one row per logical log file (identity + byte offset), that file's partial sums per row key, the keys whose
published row is out of date, and when each past day was last revalidated.
"""

from alembic import op

revision = "20261130_0030"
down_revision = "20261130_0020"
branch_labels = None
depends_on = None


UPGRADE = r"""
CREATE TABLE traffic_rollups (
    domain                    text        NOT NULL CHECK (length(domain) BETWEEN 1 AND 253),
    granularity               text        NOT NULL CHECK (granularity IN ('5m', 'day')),
    bucket_start              timestamptz NOT NULL,
    method                    text        NOT NULL CHECK (length(method) BETWEEN 1 AND 32),
    path                      text        NOT NULL CHECK (length(path) BETWEEN 1 AND 2100),
    bucket_end                timestamptz NOT NULL CHECK (bucket_end > bucket_start),
    business_date             date        NOT NULL,
    response_bytes            bigint      NOT NULL CHECK (response_bytes >= 0),
    request_bytes             bigint               CHECK (request_bytes >= 0),
    request_bytes_known_count bigint      NOT NULL CHECK (request_bytes_known_count >= 0),
    total_requests            bigint      NOT NULL CHECK (total_requests >= 0),
    status_1xx                bigint      NOT NULL DEFAULT 0,
    status_2xx                bigint      NOT NULL DEFAULT 0,
    status_3xx                bigint      NOT NULL DEFAULT 0,
    status_4xx                bigint      NOT NULL DEFAULT 0,
    status_5xx                bigint      NOT NULL DEFAULT 0,
    status_other              bigint      NOT NULL DEFAULT 0,
    source_server             text        NOT NULL DEFAULT '',
    generated_at              timestamptz NOT NULL,
    frozen                    boolean     NOT NULL DEFAULT false,
    updated_at                timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, granularity, bucket_start, method, path)
);
CREATE INDEX ix_traffic_rollups_granularity_bucket_start
    ON traffic_rollups (granularity, bucket_start);

CREATE TABLE traffic_domains (
    domain     text        PRIMARY KEY,
    version    bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE traffic_files (
    id                 text        PRIMARY KEY,
    domain             text        NOT NULL,
    device             numeric(20) NOT NULL,
    inode              numeric(20) NOT NULL,
    fingerprint_length integer     NOT NULL CHECK (fingerprint_length > 0),
    fingerprint        text        NOT NULL,
    offset_bytes       bigint      NOT NULL CHECK (offset_bytes >= 0),
    lines              bigint      NOT NULL DEFAULT 0,
    compressed         boolean     NOT NULL DEFAULT false,
    path               text        NOT NULL,
    newest_bucket      timestamptz,
    version            bigint      NOT NULL DEFAULT 1,
    vanished_at        timestamptz,
    first_seen_at      timestamptz NOT NULL DEFAULT now(),
    last_read_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_traffic_files_domain ON traffic_files (domain);

CREATE TABLE traffic_file_partials (
    domain           text        NOT NULL,
    granularity      text        NOT NULL CHECK (granularity IN ('5m', 'day')),
    bucket_start     timestamptz NOT NULL,
    method           text        NOT NULL,
    path             text        NOT NULL,
    file_id          text        NOT NULL REFERENCES traffic_files (id) ON DELETE CASCADE,
    response_bytes   bigint      NOT NULL,
    request_bytes    bigint      NOT NULL,
    request_known    bigint      NOT NULL,
    total_requests   bigint      NOT NULL,
    status_1xx       bigint      NOT NULL,
    status_2xx       bigint      NOT NULL,
    status_3xx       bigint      NOT NULL,
    status_4xx       bigint      NOT NULL,
    status_5xx       bigint      NOT NULL,
    status_other     bigint      NOT NULL,
    PRIMARY KEY (domain, granularity, bucket_start, method, path, file_id)
);
CREATE INDEX ix_traffic_file_partials_file_id
    ON traffic_file_partials (file_id, granularity, bucket_start);

CREATE SEQUENCE traffic_dirty_generation;

CREATE TABLE traffic_dirty_keys (
    domain       text        NOT NULL,
    granularity  text        NOT NULL CHECK (granularity IN ('5m', 'day')),
    bucket_start timestamptz NOT NULL,
    method       text        NOT NULL,
    path         text        NOT NULL,
    generation   bigint      NOT NULL,
    PRIMARY KEY (domain, granularity, bucket_start, method, path)
);

CREATE TABLE traffic_verified_days (
    domain        text        NOT NULL,
    business_date date        NOT NULL,
    verified_at   timestamptz NOT NULL,
    PRIMARY KEY (domain, business_date)
);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS traffic_verified_days;
DROP TABLE IF EXISTS traffic_dirty_keys;
DROP SEQUENCE IF EXISTS traffic_dirty_generation;
DROP TABLE IF EXISTS traffic_file_partials;
DROP TABLE IF EXISTS traffic_files;
DROP TABLE IF EXISTS traffic_domains;
DROP TABLE IF EXISTS traffic_rollups;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
