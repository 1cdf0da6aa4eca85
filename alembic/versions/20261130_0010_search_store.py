"""Search store on PostgreSQL: monthly fact partitions, execution endpoints, current assets.

Revision ID: 20261130_0010
Revises: 20261130_0001
Create Date: 2026-11-30

The tables behind ``app.search.postgres_store`` (STO-1). Facts are partitioned
by month of ``observed_at``; the partitions themselves are created on demand by
the store (``search_facts_yYYYYmMM``), so this migration creates none. The
projection tables use a narrow ``key bigint`` primary key (the first 64 bits of
the document id, ``app.search.ids.pg_key``) and keep the full 128-bit id beside
it, so the merge statement can tell a 64-bit collision from a repeated
sighting. ``ip_order`` maps IPv4 into the IPv4-mapped IPv6 range so that rows
sort like Elasticsearch's ``ip`` type does (both adapters page identically).
"""

from alembic import op

revision = "20261130_0010"
down_revision = "20261130_0001"
branch_labels = None
depends_on = None


UPGRADE = r"""
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE search_facts (
    id           uuid        NOT NULL,
    observed_at  timestamptz NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('observation', 'dns_record')),
    execution_id bigint      NOT NULL,
    task_id      bigint      NOT NULL,
    owner_id     bigint      NOT NULL,
    scanner_id   bigint,
    upload_id    text        NOT NULL,
    stream       text        NOT NULL,
    batch_index  integer     NOT NULL,
    position     integer     NOT NULL,
    body         jsonb       NOT NULL,
    PRIMARY KEY (id, observed_at)
) PARTITION BY RANGE (observed_at);
CREATE INDEX ix_search_facts_execution_id ON search_facts (execution_id, kind);

CREATE TABLE search_execution_endpoints (
    key                bigint      PRIMARY KEY,
    id                 uuid        NOT NULL,
    execution_id       bigint      NOT NULL,
    task_id            bigint      NOT NULL,
    owner_id           bigint,
    ip                 inet        NOT NULL,
    ip_order           inet GENERATED ALWAYS AS (
        CASE WHEN family(ip) = 4 THEN ('::ffff:' || host(ip))::inet ELSE ip END
    ) STORED,
    port               integer     NOT NULL,
    transport          text        NOT NULL,
    first_seen         timestamptz NOT NULL,
    first_execution_id bigint      NOT NULL,
    last_seen          timestamptz NOT NULL,
    last_execution_id  bigint      NOT NULL,
    observation_key    text COLLATE "C" NOT NULL,
    state              text,
    service            text,
    product            text,
    version            text,
    banner             text,
    hostname           text,
    tags               text[]      NOT NULL DEFAULT '{}',
    details            jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX ix_search_execution_endpoints_execution_id_id
    ON search_execution_endpoints (execution_id, id);
CREATE INDEX ix_search_execution_endpoints_task_order
    ON search_execution_endpoints (task_id, ip_order, port, transport, execution_id);

CREATE TABLE search_assets_global (
    key                bigint      PRIMARY KEY,
    id                 uuid        NOT NULL,
    ip                 inet        NOT NULL,
    ip_order           inet GENERATED ALWAYS AS (
        CASE WHEN family(ip) = 4 THEN ('::ffff:' || host(ip))::inet ELSE ip END
    ) STORED,
    port               integer     NOT NULL,
    transport          text        NOT NULL,
    first_seen         timestamptz NOT NULL,
    first_execution_id bigint      NOT NULL,
    last_seen          timestamptz NOT NULL,
    last_execution_id  bigint      NOT NULL,
    observation_key    text COLLATE "C" NOT NULL,
    state              text,
    service            text,
    product            text,
    version            text,
    banner             text,
    hostname           text,
    tags               text[]      NOT NULL DEFAULT '{}',
    details            jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX ix_search_assets_global_order
    ON search_assets_global (ip_order, port, transport);
CREATE INDEX ix_search_assets_global_ip_gist
    ON search_assets_global USING gist (ip inet_ops);
CREATE INDEX ix_search_assets_global_port
    ON search_assets_global (port, transport);
CREATE INDEX ix_search_assets_global_service
    ON search_assets_global (lower(service));
CREATE INDEX ix_search_assets_global_product
    ON search_assets_global (lower(product));
CREATE INDEX ix_search_assets_global_first_seen
    ON search_assets_global (first_seen);
CREATE INDEX ix_search_assets_global_last_seen
    ON search_assets_global (last_seen);
CREATE INDEX ix_search_assets_global_text_trgm
    ON search_assets_global USING gin (
        (coalesce(banner, '') || E'\x1f' || coalesce(product, '') || E'\x1f' || coalesce(hostname, ''))
        gin_trgm_ops
    );

CREATE TABLE search_assets_user (
    key                bigint      PRIMARY KEY,
    id                 uuid        NOT NULL,
    owner_id           bigint      NOT NULL,
    ip                 inet        NOT NULL,
    ip_order           inet GENERATED ALWAYS AS (
        CASE WHEN family(ip) = 4 THEN ('::ffff:' || host(ip))::inet ELSE ip END
    ) STORED,
    port               integer     NOT NULL,
    transport          text        NOT NULL,
    first_seen         timestamptz NOT NULL,
    first_execution_id bigint      NOT NULL,
    last_seen          timestamptz NOT NULL,
    last_execution_id  bigint      NOT NULL,
    observation_key    text COLLATE "C" NOT NULL,
    state              text,
    service            text,
    product            text,
    version            text,
    banner             text,
    hostname           text,
    tags               text[]      NOT NULL DEFAULT '{}',
    details            jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX ix_search_assets_user_order
    ON search_assets_user (owner_id, ip_order, port, transport);
CREATE INDEX ix_search_assets_user_ip_gist
    ON search_assets_user USING gist (ip inet_ops);
CREATE INDEX ix_search_assets_user_port
    ON search_assets_user (owner_id, port, transport);
CREATE INDEX ix_search_assets_user_service
    ON search_assets_user (owner_id, lower(service));
CREATE INDEX ix_search_assets_user_product
    ON search_assets_user (owner_id, lower(product));
CREATE INDEX ix_search_assets_user_first_seen
    ON search_assets_user (owner_id, first_seen);
CREATE INDEX ix_search_assets_user_last_seen
    ON search_assets_user (owner_id, last_seen);
CREATE INDEX ix_search_assets_user_text_trgm
    ON search_assets_user USING gin (
        (coalesce(banner, '') || E'\x1f' || coalesce(product, '') || E'\x1f' || coalesce(hostname, ''))
        gin_trgm_ops
    );
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS search_assets_user;
DROP TABLE IF EXISTS search_assets_global;
DROP TABLE IF EXISTS search_execution_endpoints;
DROP TABLE IF EXISTS search_facts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
