"""Slow SQL (OBS-4) against real PostgreSQL: the three unavailable reasons, sampling failures
and the top statements between two samples."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app import db
from app.db import normalise_url, transaction
from app.ops import slow_sql
from tests.support.processes import free_port


def _admin_execute(url: str, *statements: str) -> None:
    engine = sa.create_engine(
        normalise_url(url), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool
    )
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


@pytest.fixture
def with_extension(database_url: str) -> str:
    _admin_execute(database_url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return database_url


@pytest.fixture
def with_loaded_extension(with_extension: str) -> str:
    # The embedded test server preloads pg_stat_statements; an external one
    # (NETMAP_TEST_DATABASE_URL) may not, and then there are no statistics to sample.
    engine = sa.create_engine(normalise_url(with_extension), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            preload = conn.execute(sa.text("SHOW shared_preload_libraries")).scalar() or ""
    finally:
        engine.dispose()
    if "pg_stat_statements" not in preload:
        pytest.skip("this test server does not preload pg_stat_statements")
    return with_extension


def test_extension_missing_is_unavailable(database_url, engine):
    reading = slow_sql.read_statements()
    assert (reading.status, reading.reason) == ("unavailable", "extension missing")


def test_insufficient_privilege_is_unavailable(with_extension):
    role = f"nm_reader_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    _admin_execute(
        with_extension,
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}'",
        "REVOKE ALL ON pg_stat_statements FROM PUBLIC",
    )
    url = make_url(normalise_url(with_extension)).set(username=role, password=password)
    engine = db.create_engine(url.render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
    try:
        reading = slow_sql.read_statements(engine)
    finally:
        engine.dispose()
        _admin_execute(with_extension, f"DROP OWNED BY {role}", f"DROP ROLE {role}")
    assert (reading.status, reading.reason) == ("unavailable", "insufficient privilege")


def test_not_preloaded_is_unavailable():
    """A server started without pg_stat_statements in shared_preload_libraries."""
    from app import embedded

    directory = Path(tempfile.mkdtemp(prefix="netmap-test-nopreload-"))
    server = embedded.start(directory, stat_statements=False, tuning={"fsync": "off"})
    try:
        _admin_execute(server.url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        engine = db.create_engine(server.url, poolclass=sa.pool.NullPool)
        try:
            reading = slow_sql.read_statements(engine)
        finally:
            engine.dispose()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    assert (reading.status, reading.reason) == (
        "unavailable",
        "not loaded in shared_preload_libraries",
    )


def test_a_pool_timeout_is_a_sampling_failure_not_unavailable(
    with_extension, with_loaded_extension
):
    engine = db.create_engine(
        with_extension, pool_size=1, max_overflow=0, pool_timeout=0.1, pool_pre_ping=False
    )
    try:
        held = engine.connect()
        try:
            reading = slow_sql.read_statements(engine)
        finally:
            held.close()
        assert (reading.status, reading.reason) == ("failed", "pool timeout")
        # The same engine, once a connection is free again, reads fine.
        assert slow_sql.read_statements(engine).status == "ok"
    finally:
        engine.dispose()


def test_a_refused_connection_is_a_sampling_failure_reported_separately(
    with_extension, settings, engine
):
    unreachable = db.create_engine(
        f"postgresql://nobody@127.0.0.1:{free_port()}/netmap",
        poolclass=sa.pool.NullPool,
        connect_args={"connect_timeout": 2},
    )
    try:
        sample = slow_sql.take_sample(settings, source=unreachable)
    finally:
        unreachable.dispose()
    assert (sample["status"], sample["reason"]) == ("failed", "connection failed")
    report = slow_sql.report(settings)
    assert report["available"] is True and report["reason"] is None
    assert report["sampling_failure"]["reason"] == "connection failed"


def test_top_statements_between_two_samples(
    with_extension, with_loaded_extension, settings, engine, api
):
    first = slow_sql.take_sample(settings)
    assert first["status"] == "ok"
    with transaction() as conn:
        for _ in range(5):
            conn.execute(sa.text("SELECT pg_sleep(0.02), 'slow-marker'"))
        for _ in range(3):
            conn.execute(sa.text("SELECT count(*) FROM generate_series(1, 100)"))
    second = slow_sql.take_sample(settings)
    assert second["status"] == "ok"
    assert second["window"]["from"] is not None
    slow = [s for s in second["by_total"] if "pg_sleep" in s["query"]]
    assert len(slow) == 1 and slow[0]["calls"] == 5
    assert slow[0]["mean_ms"] >= 20.0 and slow[0]["total_ms"] >= 100.0
    assert "slow-marker" not in slow[0]["query"]  # constants are normalised away
    totals = [s["total_ms"] for s in second["by_total"]]
    assert totals == sorted(totals, reverse=True)
    means = [s["mean_ms"] for s in second["by_mean"]]
    assert means == sorted(means, reverse=True)
    # Statements not run again since the first sample are not in the window.
    third = slow_sql.take_sample(settings)
    assert not [s for s in third["by_total"] if "pg_sleep" in s["query"]]
    body = api.admin().get("/api/system/slow-sql").get_json()
    assert body["available"] is True and body["sampling_failure"] is None
    assert body["source"] == "sample"
    assert body["by_total"] == third["by_total"]


def test_retention_keeps_a_bounded_number_of_samples(
    with_extension, tmp_path, database_url, engine
):
    from tests.support.settings import make_settings

    settings = make_settings(database_url, tmp_path, ops={"slow_sql_retention_samples": 3})
    for _ in range(5):
        slow_sql.take_sample(settings)
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ops_slow_sql_samples")).scalar() == 3
