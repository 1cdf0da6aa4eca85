"""Indexes for the sorted asset lists (WEB-12).

Revision ID: 20261130_0140
Revises: 20261130_0130
Create Date: 2026-11-30

``GET /api/assets`` sorts by ip, port, last_seen or service, each followed by the
asset's address, port and transport (``app.search.asset_sort``). Each sort gets the
index whose key is exactly that column list (after ``owner_id`` in the user view), so
a page, ascending or read backwards for descending, is a range scan of at most
``limit + 1`` entries after the cursor, never a sort of the whole view:

* ip: ``ix_search_assets_*_order`` (migration 0010) already;
* port: ``(port, ip_order, transport)`` replaces ``(port, transport)``, of which it is
  a superset for the port filter;
* last_seen: ``(last_seen, ip_order, port, transport)`` replaces ``(last_seen)``, the
  same superset for the last-seen range filters;
* service: ``(coalesce(service, '') COLLATE "C", ip_order, port, transport)``, the
  exact expression the query orders by (a missing service sorts as "", names by code
  point, as Elasticsearch's keyword does). The ``lower(service)`` index stays for the
  case-insensitive service filter.

Replacing rather than adding keeps the number of indexes every projection write
maintains at one more per table. ``CREATE INDEX`` (not ``CONCURRENTLY``: Alembic runs
the script in one transaction) holds off writes to each table while it builds, so the
projection's merges wait for the deploy's migration step instead of racing it.
"""

from alembic import op

revision = "20261130_0140"
down_revision = "20261130_0130"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE INDEX ix_search_assets_global_port_ip
    ON search_assets_global (port, ip_order, transport);
DROP INDEX ix_search_assets_global_port;
CREATE INDEX ix_search_assets_global_last_seen_ip
    ON search_assets_global (last_seen, ip_order, port, transport);
DROP INDEX ix_search_assets_global_last_seen;
CREATE INDEX ix_search_assets_global_service_sort
    ON search_assets_global ((coalesce(service, '') COLLATE "C"), ip_order, port, transport);

CREATE INDEX ix_search_assets_user_port_ip
    ON search_assets_user (owner_id, port, ip_order, transport);
DROP INDEX ix_search_assets_user_port;
CREATE INDEX ix_search_assets_user_last_seen_ip
    ON search_assets_user (owner_id, last_seen, ip_order, port, transport);
DROP INDEX ix_search_assets_user_last_seen;
CREATE INDEX ix_search_assets_user_service_sort
    ON search_assets_user (owner_id, (coalesce(service, '') COLLATE "C"), ip_order, port, transport);
"""

DOWNGRADE = r"""
DROP INDEX IF EXISTS ix_search_assets_user_service_sort;
CREATE INDEX ix_search_assets_user_last_seen ON search_assets_user (owner_id, last_seen);
DROP INDEX IF EXISTS ix_search_assets_user_last_seen_ip;
CREATE INDEX ix_search_assets_user_port ON search_assets_user (owner_id, port, transport);
DROP INDEX IF EXISTS ix_search_assets_user_port_ip;

DROP INDEX IF EXISTS ix_search_assets_global_service_sort;
CREATE INDEX ix_search_assets_global_last_seen ON search_assets_global (last_seen);
DROP INDEX IF EXISTS ix_search_assets_global_last_seen_ip;
CREATE INDEX ix_search_assets_global_port ON search_assets_global (port, transport);
DROP INDEX IF EXISTS ix_search_assets_global_port_ip;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
