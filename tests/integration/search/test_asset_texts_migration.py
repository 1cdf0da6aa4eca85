"""Migration 0170 moves the asset text search to the distinct texts on a populated
database: the texts table holds every view row's text once, the triggers keep it filled,
and the downgrade restores the per-view trigram indexes (FND-3, PRF-2)."""

from __future__ import annotations

import sqlalchemy as sa

from app import migrations
from app.db import normalise_url
from app.search.seed import seed_current_assets
from tests.support.search_documents import at
from tests.support.sql import valid_indexes

BEFORE, REVISION = "20261130_0160", "20261201_0170"
TRGM = {"ix_search_assets_global_text_trgm", "ix_search_assets_user_text_trgm"}
TEXT_INDEXES = {"ix_search_assets_global_text", "ix_search_assets_user_text"}
SERVICES = (
    (22, "ssh", "OpenSSH", "9.6p1", "SSH-2.0-OpenSSH_9.6p1"),
    (443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),
)
VIEW_TEXTS = """
    SELECT DISTINCT coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f'
           || coalesce(hostname, '')
      FROM (SELECT banner, product, hostname FROM search_assets_global
            UNION ALL SELECT banner, product, hostname FROM search_assets_user) AS v
"""


def _indexes(conn: sa.Connection) -> set[str]:
    return valid_indexes(conn, "search_assets_global", "search_assets_user")


def _texts(conn: sa.Connection) -> dict[str, str]:
    rows = conn.execute(sa.text("SELECT CAST(id AS text), text FROM search_asset_texts")).all()
    return {text: key for key, text in rows}


def test_the_upgrade_fills_the_texts_of_populated_views_and_downgrade_restores_trigrams(
    empty_database_url,
):
    migrations.upgrade(empty_database_url, BEFORE)
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            seed_current_assets(
                conn, owner_id=1, execution_id=1, low=0, high=400, seen=at(0), services=SERVICES
            )
            conn.execute(
                sa.text(
                    "UPDATE search_assets_user SET hostname = 'db-' || port || '.example' "
                    "WHERE ip <<= '10.0.0.0/28'"
                )
            )
            expected = set(conn.execute(sa.text(VIEW_TEXTS)).scalars())
        with engine.connect() as conn:
            indexes_before = _indexes(conn)
        assert TRGM <= indexes_before
        assert len(expected) == 4  # two banners, two with a hostname

        migrations.upgrade(empty_database_url, REVISION)
        with engine.begin() as conn:
            assert _indexes(conn) == indexes_before - TRGM | TEXT_INDEXES
            texts = _texts(conn)
            assert set(texts) == expected
            md5 = conn.execute(
                sa.text("SELECT CAST(md5(t) AS uuid)::text FROM unnest(CAST(:t AS text[])) t"),
                {"t": sorted(texts)},
            ).scalars()
            assert list(md5) == [texts[t] for t in sorted(texts)]
            # The triggers keep the table filled from here on, inserts and updates alike.
            conn.execute(
                sa.text(
                    "UPDATE search_assets_global SET banner = 'Server: quokka-httpd/0.9' "
                    "WHERE ip = '10.0.0.1'"
                )
            )
            assert set(_texts(conn)) == set(conn.execute(sa.text(VIEW_TEXTS)).scalars()) | (
                expected
            )

        migrations.downgrade(empty_database_url, BEFORE)
        with engine.connect() as conn:
            assert _indexes(conn) == indexes_before
            assert (
                conn.execute(sa.text("SELECT to_regclass('search_asset_texts')")).scalar() is None
            )
            triggers = conn.execute(
                sa.text("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tr_search_assets_%'")
            ).scalar_one()
            assert triggers == 0
        migrations.upgrade(empty_database_url)
    finally:
        engine.dispose()
