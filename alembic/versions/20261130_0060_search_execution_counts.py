"""Exact per-execution counters kept by the PostgreSQL store's own writes (ING-2).

Revision ID: 20261130_0060
Revises: 20261130_0050
Create Date: 2026-11-30

The final batch used to count an execution's facts, endpoints and distinct IPs
with ``count(*)``/``count(DISTINCT ip)``, so its latency grew with the
execution (49 ms at 10k endpoints, 831 ms at 1M). The store now maintains the
numbers in the same statement that writes the rows:

* ``search_execution_fact_counts``: facts per (execution, month, kind); a
  final sums the months of its scope, like the Elasticsearch count request
  over the monthly indices.
* ``search_execution_ips``: the set of (execution, ip) seen; its primary key
  decides which writer saw an address first, so concurrent batches never count
  an IP twice.
* ``search_execution_endpoint_counts``: endpoints and distinct IPs per execution.

Only first inserts count (a replay or a merge into an existing row does not),
so every write stays idempotent. The upgrade backfills the counters from the
rows already stored, once, under a lock that keeps writers out meanwhile.

Upgrading: stop every old instance first, as for every release; code from
before this revision writes rows without counting them. After running older
code against this schema anyway, re-run the backfill (``BACKFILL`` below): it
recounts from the rows and never adds twice.
"""

from alembic import op

revision = "20261130_0060"
down_revision = "20261130_0050"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE search_execution_fact_counts (
    execution_id bigint NOT NULL,
    month        date   NOT NULL,
    kind         text   NOT NULL,
    facts        bigint NOT NULL,  -- no CHECK: a moved fact's -1 row is checked before ON CONFLICT
    PRIMARY KEY (execution_id, month, kind)
);

CREATE TABLE search_execution_ips (
    execution_id bigint NOT NULL,
    ip           inet   NOT NULL,
    PRIMARY KEY (execution_id, ip)
);

CREATE TABLE search_execution_endpoint_counts (
    execution_id bigint PRIMARY KEY,
    endpoints    bigint NOT NULL CHECK (endpoints >= 0),
    ips          bigint NOT NULL CHECK (ips >= 0)
);
"""

BACKFILL = r"""
-- Writers wait while the backfill reads what is already there.
LOCK TABLE search_facts, search_execution_endpoints IN SHARE MODE;

INSERT INTO search_execution_fact_counts (execution_id, month, kind, facts)
SELECT execution_id, (date_trunc('month', observed_at AT TIME ZONE 'UTC'))::date, kind, count(*)
  FROM search_facts
 GROUP BY 1, 2, 3
ON CONFLICT (execution_id, month, kind) DO UPDATE SET facts = excluded.facts;

INSERT INTO search_execution_ips (execution_id, ip)
SELECT DISTINCT execution_id, ip FROM search_execution_endpoints
ON CONFLICT DO NOTHING;

INSERT INTO search_execution_endpoint_counts (execution_id, endpoints, ips)
SELECT e.execution_id, e.endpoints, i.ips
  FROM (SELECT execution_id, count(*) AS endpoints
          FROM search_execution_endpoints GROUP BY execution_id) e
  JOIN (SELECT execution_id, count(*) AS ips
          FROM search_execution_ips GROUP BY execution_id) i USING (execution_id)
ON CONFLICT (execution_id) DO UPDATE SET endpoints = excluded.endpoints, ips = excluded.ips;
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS search_execution_endpoint_counts;
DROP TABLE IF EXISTS search_execution_ips;
DROP TABLE IF EXISTS search_execution_fact_counts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(BACKFILL)


def downgrade() -> None:
    op.execute(DOWNGRADE)
