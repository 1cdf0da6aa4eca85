"""The lease-columns migration keeps queued rows and makes them claimable.

The operators' outbox query (docs/operations.md) works on the migrated table.
"""

from __future__ import annotations

import importlib.util

import pytest
import sqlalchemy as sa

from app import db, migrations
from app.db import normalise_url
from app.migrations import PROJECT_ROOT
from app.projection import outbox

# Verbatim from docs/operations.md (the outbox query): operators run exactly this.
OPERATOR_QUERY = """SELECT execution_id, phase, processed_endpoints, attempts, claim_token,
       lease_expires_at, last_error, NOW() - created_at AS age
FROM scan_projection_outbox
WHERE processed_at IS NULL
ORDER BY available_at, execution_id;"""

LEASE_COLUMNS = {
    "claim_token",
    "lease_expires_at",
    "cursor",
    "phase",
    "processed_endpoints",
    "updated_at",
}


def _columns(engine) -> set[str]:
    with engine.connect() as conn:
        return {c["name"] for c in sa.inspect(conn).get_columns("scan_projection_outbox")}


def _seed_old_queue(engine) -> None:
    """What the previous version left: queued rows with only the old columns."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO users (username, password_hash) VALUES ('o', 'x');
                INSERT INTO scan_tasks (owner_id, name, targets, ports, transports, scan_plan)
                VALUES (1, 't', '[]', '80', '{tcp}', '{}');
                INSERT INTO scan_executions (task_id, kind, status, targets, ports, transports)
                VALUES (1, 'ports', 'succeeded', '[]', '80', '{tcp}'),
                       (1, 'ports', 'succeeded', '[]', '80', '{tcp}');
                INSERT INTO scan_projection_outbox (execution_id, attempts, last_error)
                VALUES (1, 2, 'old error'), (2, 0, NULL);
                UPDATE scan_projection_outbox SET processed_at = now() WHERE execution_id = 2;
                """
            )
        )


def test_rows_queued_before_the_upgrade_survive_and_become_claimable(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0041")
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        _seed_old_queue(engine)
        assert not LEASE_COLUMNS & _columns(engine)
        migrations.upgrade(empty_database_url)
        assert LEASE_COLUMNS <= _columns(engine)
        with engine.connect() as conn:
            rows = conn.execute(sa.text(OPERATOR_QUERY)).all()
        assert [(r.execution_id, r.phase, r.processed_endpoints, r.attempts) for r in rows] == [
            (1, "pages", 0, 2)
        ]
        assert rows[0].claim_token is None and rows[0].last_error == "old error"
        assert rows[0].age.total_seconds() >= 0

        previous = db._engine
        db.set_engine(db.create_engine(empty_database_url))
        try:
            claim = outbox.claim_next(lease_seconds=30)
            assert claim is not None and claim.execution_id == 1
            assert (claim.cursor, claim.phase, claim.processed_endpoints) == (None, "pages", 0)
            assert outbox.claim_next(lease_seconds=30) is None  # the processed row stays done
            with db.transaction() as conn:
                row = conn.execute(sa.text(OPERATOR_QUERY)).one()
            assert row.claim_token == claim.claim_token and row.lease_expires_at is not None
        finally:
            db.dispose_engine()
            db.set_engine(previous)
    finally:
        engine.dispose()


def test_the_revision_refuses_to_reapply_and_downgrades_keeping_the_rows(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0041")
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        _seed_old_queue(engine)
        migrations.upgrade(empty_database_url)
        path = PROJECT_ROOT / "alembic" / "versions" / "20261130_0050_projection_leases.py"
        spec = importlib.util.spec_from_file_location("projection_leases", path)
        revision = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(revision)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE scan_projection_outbox SET cursor = 'abc'"))
        # Applied again it stops at the first existing column (drift is loud), changing nothing.
        with pytest.raises(sa.exc.ProgrammingError, match="already exists"):
            with engine.begin() as conn:
                conn.execute(sa.text(revision.UPGRADE))
        with engine.begin() as conn:
            assert (
                conn.execute(sa.text("SELECT count(*) FROM scan_projection_outbox")).scalar() == 2
            )
            assert set(
                conn.execute(sa.text("SELECT cursor FROM scan_projection_outbox")).scalars()
            ) == {"abc"}
        migrations.downgrade(empty_database_url, "20261130_0041")
        assert not LEASE_COLUMNS & _columns(engine)
        with engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT count(*) FROM scan_projection_outbox")).scalar() == 2
            )
        migrations.upgrade(empty_database_url)
        with engine.connect() as conn:
            assert conn.execute(sa.text(OPERATOR_QUERY)).one().execution_id == 1
    finally:
        engine.dispose()


def test_the_operator_query_uses_the_backlog_index(database_url, engine):
    with db.transaction() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(conn.execute(sa.text("EXPLAIN " + OPERATOR_QUERY)).scalars())
    assert "ix_scan_projection_outbox_backlog" in plan
