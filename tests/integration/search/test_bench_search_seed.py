"""`netmap bench search`'s seed statements (certificates, host names) run per key range
without the serving statement timeout: a range slower than it (a GIN pending-list merge on
a busy host) must not end a seed of tens of minutes."""

from __future__ import annotations

import sqlalchemy as sa

from app import db
from app.bench.search import _in_key_ranges
from app.bench.store import BASE_TIME, SERVICES
from app.db import transaction
from app.search.seed import seed_current_assets

# A range's statement that outlasts the timeout below: the sleep runs once per statement.
_SLOW_RANGE = """
    UPDATE search_assets_user SET hostname = 'slow'
     WHERE owner_id = :owner_id AND key >= :low AND key < :high
       AND (SELECT 1 FROM pg_sleep(0.4)) = 1
"""


def test_a_key_range_slower_than_the_statement_timeout_completes(settings) -> None:
    engine = db.create_engine(
        settings.database.url,
        settings.database.replace(statement_timeout_ms=100),
        application_name="netmap-test",
    )
    db.set_engine(engine)
    try:
        with transaction() as conn:
            seeded = seed_current_assets(
                conn, owner_id=5, execution_id=7, low=0, high=12, seen=BASE_TIME, services=SERVICES
            )
        # The timeout holds for any other statement on these connections.
        with transaction() as conn:
            try:
                conn.execute(sa.text("SELECT pg_sleep(0.4)"))
            except sa.exc.OperationalError as exc:
                assert "statement timeout" in str(exc)
            else:
                raise AssertionError("the 100 ms statement timeout did not apply")

        assert _in_key_ranges(5, _SLOW_RANGE, "slow ranges") == seeded

        with transaction() as conn:
            named = conn.execute(
                sa.text("SELECT count(*) FROM search_assets_user WHERE hostname = 'slow'")
            ).scalar_one()
        assert named == seeded == 12
    finally:
        db.set_engine(None)
        engine.dispose()
