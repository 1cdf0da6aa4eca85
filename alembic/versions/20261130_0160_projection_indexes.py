"""The asset tables lose their inet GiST index; address searches use ip_order (PRF-2).

Revision ID: 20261130_0160
Revises: 20261130_0150
Create Date: 2026-11-30

Every projection merge maintains every index of ``search_assets_global`` and
``search_assets_user``; the GiST index on ``ip`` (migration 0010) was about a fifth
of PostgreSQL's CPU per published endpoint. The asset search was its only reader,
for ``ip <<= cidr`` and ``ip = address``. It now also asks for ``ip_order`` between
the bounds of the block (``postgres_queries.ip_order_range``) or equal to the
address, so both are a range of ``ix_search_assets_*_order`` (after ``owner_id`` in
the user view, which the GiST index could not narrow to), or, on PostgreSQL 18, of
the second column of a sort index (``port_ip``, ``service_sort``, by skip scan;
older servers read the block's range and sort it, as they did from the GiST index),
and the ``ip`` condition still decides, so the answers are the same. A block searched in address
order no longer walks the ordering index from its start (a /24 near the end of
200,000 assets: 130 ms before, 0.1 ms after). ``netmap bench projection --endpoints
100000 --republish``: PostgreSQL CPU per endpoint about a sixth lower on a first
publish.

The trigram GIN index keeps its defaults (``fastupdate`` on, the server's
``gin_pending_list_limit``): with ``fastupdate = off`` the same bench cost PostgreSQL
more than three times the CPU per endpoint, and a 32 MB pending list saved nothing
measurable on a first publish while every text search would scan that list.

Dropping an index is quick and takes the table's exclusive lock only briefly; the
downgrade builds the GiST indexes again (``CREATE INDEX`` holds off writes to each
table while it builds, as in migration 0140).
"""

from alembic import op

revision = "20261130_0160"
down_revision = "20261130_0150"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP INDEX ix_search_assets_global_ip_gist;
DROP INDEX ix_search_assets_user_ip_gist;
"""

DOWNGRADE = r"""
CREATE INDEX ix_search_assets_user_ip_gist ON search_assets_user USING gist (ip inet_ops);
CREATE INDEX ix_search_assets_global_ip_gist ON search_assets_global USING gist (ip inet_ops);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
