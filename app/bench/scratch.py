"""Scratch environments for benchmarks: never real data.

``scratch_database()`` starts a private embedded PostgreSQL in a temporary
directory (durability off: the data is thrown away), migrates it, installs it
as the process engine and removes everything afterwards. ``--database-url``
style overrides are deliberately not offered, so a benchmark cannot be pointed
at a production database by mistake; a benchmark that needs a server it
cannot start itself (a real Elasticsearch cluster) takes its URL explicitly.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app import db, embedded, migrations
from app.config import Settings, load_settings

SCRATCH_TUNING = {"fsync": "off", "full_page_writes": "off", "max_connections": "200"}


@dataclass
class Scratch:
    settings: Settings
    database_url: str
    directory: Path


@contextlib.contextmanager
def scratch_database(
    *,
    pool_size: int = 10,
    overrides: dict[str, dict[str, object]] | None = None,
    server_tuning: dict[str, str] | None = None,
) -> Iterator[Scratch]:
    """``server_tuning``: more PostgreSQL settings for this scratch server (e.g. a
    benchmark's ``shared_buffers``), applied over ``SCRATCH_TUNING``."""
    directory = Path(tempfile.mkdtemp(prefix="netmap-bench-"))
    server = embedded.start(directory, tuning={**SCRATCH_TUNING, **(server_tuning or {})})
    try:
        migrations.upgrade(server.url)
        merged: dict[str, dict[str, object]] = {
            "database": {"url": server.url, "pool_size": pool_size, "max_overflow": 0},
            "security": {"secret_key": "bench-only-secret-key"},
            "server": {"data_dir": str(directory / "var")},
        }
        for section, values in (overrides or {}).items():
            merged.setdefault(section, {}).update(values)
        settings, _ = load_settings(env={}, overrides=merged)
        engine = db.create_engine(server.url, settings.database, application_name="netmap-bench")
        db.set_engine(engine)
        try:
            yield Scratch(settings=settings, database_url=server.url, directory=directory)
        finally:
            db.dispose_engine()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def vacuum_analyze(*tables: str) -> None:
    """``VACUUM ANALYZE`` the installed database, or only ``tables``: the visibility maps
    and statistics autovacuum would soon give a bulk load (VACUUM cannot run inside a
    transaction block, so on a connection of its own in autocommit)."""
    import sqlalchemy as sa

    with db.get_engine().connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("VACUUM ANALYZE " + ", ".join(tables)))


def drop_elasticsearch_prefix(url: str, prefix: str) -> None:
    """Delete what a benchmark created on an Elasticsearch cluster: its own prefix's
    indices, index templates and merge script, nothing else."""
    from elasticsearch import Elasticsearch

    from app.search.elasticsearch_schema import IndexNames

    names = IndexNames(prefix)
    client = Elasticsearch(url, request_timeout=60)
    try:
        quiet = client.options(ignore_status=404)
        quiet.indices.delete(index=f"{prefix}-*", expand_wildcards="all")
        for template in names.templates:
            quiet.indices.delete_index_template(name=template)
        quiet.delete_script(id=names.merge_script)
    finally:
        client.close()
