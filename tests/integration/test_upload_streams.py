"""``scan_upload_stream`` counters kept by triggers, repair after deletes, backfill (ING-5)."""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import migrations
from app.db import normalise_url, transaction
from tests.support.scanner_protocol import claim, observation

STREAM_COLUMNS = (
    "batch_count, confirmed_count, pending_count, min_batch, max_batch, final_count, "
    "final_batch, confirmed_observations"
)
RECOUNT = """
    SELECT count(*), count(*) FILTER (WHERE status = 'confirmed'),
           count(*) FILTER (WHERE status = 'pending'), min(batch_index), max(batch_index),
           count(*) FILTER (WHERE is_final), max(batch_index) FILTER (WHERE is_final),
           COALESCE(sum(observation_count) FILTER (WHERE status = 'confirmed'), 0)
    FROM scan_upload_receipts WHERE execution_id = :e AND upload_id = :u AND stream = :s
"""
_uploads = itertools.count()


def _execution(api) -> int:
    user = api.user()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.1"], "ports": "80"})
    return claim(api.scanner()).id


def _insert(conn, e, u, s, b, status, final=False, count=1):
    conn.execute(
        sa.text(
            "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, "
            "is_final, checksum, observation_count, status) "
            "VALUES (:e, :u, :s, :b, :f, 'c', :n, :st) ON CONFLICT DO NOTHING"
        ),
        {"e": e, "u": u, "s": s, "b": b, "f": final, "n": count, "st": status},
    )


def _stream(conn, e, u, s):
    return conn.execute(
        sa.text(
            f"SELECT {STREAM_COLUMNS}, dirty FROM scan_upload_stream "
            "WHERE execution_id = :e AND upload_id = :u AND stream = :s"
        ),
        {"e": e, "u": u, "s": s},
    ).one_or_none()


def _recount(conn, e, u, s):
    return tuple(conn.execute(sa.text(RECOUNT), {"e": e, "u": u, "s": s}).one())


operations = st.lists(
    st.tuples(
        st.sampled_from(["insert_pending", "insert_confirmed", "confirm", "confirm", "delete"]),
        st.integers(0, 7),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_trigger_counters_equal_a_recount(api, ops):
    if not hasattr(api, "_stream_execution"):
        api._stream_execution = _execution(api)
    e, u, s = api._stream_execution, f"prop-{next(_uploads)}", "main"
    with transaction() as conn:
        for op, batch, count in ops:
            if op == "insert_pending":
                _insert(conn, e, u, s, batch, "pending", final=batch == 7, count=count)
            elif op == "insert_confirmed":
                _insert(conn, e, u, s, batch, "confirmed", count=count)
            elif op == "confirm":
                # Repeated confirms of an already confirmed receipt must not count twice.
                conn.execute(
                    sa.text(
                        "UPDATE scan_upload_receipts "
                        "SET status = 'confirmed', confirmed_at = now() "
                        "WHERE execution_id = :e AND upload_id = :u AND stream = :s "
                        "AND batch_index = :b"
                    ),
                    {"e": e, "u": u, "s": s, "b": batch},
                )
            else:
                conn.execute(
                    sa.text(
                        "DELETE FROM scan_upload_receipts WHERE execution_id = :e "
                        "AND upload_id = :u AND stream = :s AND batch_index = :b"
                    ),
                    {"e": e, "u": u, "s": s, "b": batch},
                )
    with transaction() as conn:
        row = _stream(conn, e, u, s)
        recount = _recount(conn, e, u, s)
        deleted = any(op == "delete" for op, _, _ in ops)
        if row is not None and not row.dirty:
            assert tuple(row[:8]) == recount
        else:
            assert deleted or recount[0] == 0
        conn.execute(
            sa.text("SELECT scan_upload_stream_repair(:e, :u, :s)"), {"e": e, "u": u, "s": s}
        )
        repaired = _stream(conn, e, u, s)
        if recount[0] == 0:
            assert repaired is None
        else:
            assert tuple(repaired[:8]) == recount and not repaired.dirty


def test_receipt_identity_fields_are_immutable(api):
    e = _execution(api)
    with transaction() as conn:
        _insert(conn, e, "u", "main", 0, "pending")
    for change in (
        "batch_index = 5",
        "is_final = true",
        "observation_count = 99",
        "upload_id = 'other'",
        "checksum = 'x'",
    ):
        with pytest.raises(sa.exc.IntegrityError, match="immutable"):
            with transaction() as conn:
                conn.execute(sa.text(f"UPDATE scan_upload_receipts SET {change}"))
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_upload_receipts SET status = 'confirmed'"))
    with pytest.raises(sa.exc.IntegrityError, match="cannot return to pending"):
        with transaction() as conn:
            conn.execute(sa.text("UPDATE scan_upload_receipts SET status = 'pending'"))


def test_deleted_receipts_mark_the_stream_dirty_and_the_next_upload_repairs_only_it(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.1"], "ports": "80-82"})
    upload = claim(scanner)
    for index in range(3):
        assert upload.batch(index, [observation("192.0.2.1", 80 + index)]).status_code == 200
    other = "someone-else"
    with transaction() as conn:
        _insert(conn, upload.id, other, "main", 0, "confirmed")
        conn.execute(
            sa.text(
                "DELETE FROM scan_upload_receipts WHERE batch_index = 1 "
                "AND upload_id IN ('upload-1', :other)"
            ),
            {"other": other},
        )
        conn.execute(
            sa.text("DELETE FROM scan_upload_receipts WHERE upload_id = :other"), {"other": other}
        )
        assert _stream(conn, upload.id, "upload-1", "main").dirty
        assert _stream(conn, upload.id, other, "main").dirty
    # The final now has a gap: the repaired stream reports it.
    gap = upload.final(3, [])
    assert gap.status_code == 409 and gap.get_json()["error"]["code"] == "batch_gap"
    with transaction() as conn:
        repaired = _stream(conn, upload.id, "upload-1", "main")
        assert not repaired.dirty and repaired.batch_count == 2
        assert _stream(conn, upload.id, other, "main").dirty  # untouched: not this upload
    assert upload.batch(1, [observation("192.0.2.1", 81)]).status_code == 200
    assert upload.final(3, []).status_code == 200


def test_deleting_an_execution_cascades_to_receipts_and_streams(api):
    e = _execution(api)
    with transaction() as conn:
        _insert(conn, e, "u", "main", 0, "confirmed")
        conn.execute(sa.text("DELETE FROM scan_executions WHERE id = :e"), {"e": e})
        assert conn.execute(sa.text("SELECT count(*) FROM scan_upload_receipts")).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM scan_upload_stream")).scalar() == 0


def _engine(url):
    return sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)


def _seed_receipts(engine):
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO users (username, password_hash) VALUES ('o', 'x');
                INSERT INTO scan_tasks (owner_id, name, targets, ports, transports, scan_plan)
                VALUES (1, 't', '[]', '80', '{tcp}', '{}');
                INSERT INTO scan_executions (task_id, kind, targets, ports, transports)
                VALUES (1, 'ports', '[]', '80', '{tcp}');
                INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index,
                    is_final, checksum, observation_count, status)
                VALUES (1, 'old', 'main', 0, false, 'c', 5, 'confirmed'),
                       (1, 'old', 'main', 1, false, 'c', 7, 'confirmed'),
                       (1, 'old', 'main', 2, false, 'c', 9, 'pending'),
                       (1, 'old', 'dns', 0, false, 'c', 1, 'confirmed');
                """
            )
        )


def test_migration_backfills_streams_from_existing_receipts(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0040")
    engine = _engine(empty_database_url)
    try:
        _seed_receipts(engine)
        migrations.upgrade(empty_database_url, "20261130_0041")
        with engine.connect() as conn:
            main = conn.execute(
                sa.text(f"SELECT {STREAM_COLUMNS} FROM scan_upload_stream WHERE stream = 'main'")
            ).one()
            assert tuple(main) == (3, 2, 1, 0, 2, 0, None, 12)
            assert conn.execute(sa.text("SELECT count(*) FROM scan_upload_stream")).scalar() == 2
            assert (
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM schema_markers WHERE name LIKE 'scan_upload_stream%'"
                    )
                ).scalar()
                == 1
            )
    finally:
        engine.dispose()


def test_a_leftover_marker_table_stops_the_stream_migration(empty_database_url):
    """Migrations create their objects outright: a schema_markers table that no recorded
    revision made is drift, and the upgrade stops on it with nothing changed (it used to
    skip the backfill silently)."""
    migrations.upgrade(empty_database_url, "20261130_0040")
    engine = _engine(empty_database_url)
    try:
        _seed_receipts(engine)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE TABLE schema_markers (name text PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now());"
                    "INSERT INTO schema_markers (name) VALUES ('scan_upload_stream_backfill_v1')"
                )
            )
        with pytest.raises(sa.exc.ProgrammingError, match="schema_markers"):
            migrations.upgrade(empty_database_url, "20261130_0041")
        with engine.connect() as conn:
            assert migrations.current_revisions(conn) == {"20261130_0040"}
            assert (
                conn.execute(sa.text("SELECT to_regclass('scan_upload_stream')")).scalar() is None
            )
    finally:
        engine.dispose()
