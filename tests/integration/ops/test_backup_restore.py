"""`netmap backup` / `netmap restore` (OPS-4) against real PostgreSQL and real pg_dump.

Round trip: data in, backup, wipe, restore, the same API answers. Refusals: a
corrupted or truncated archive, a newer schema, another PostgreSQL major
without --force, and a database netmap is still connected to — each with its
message and without touching the data. An archive of an older schema is
migrated to head after the restore.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from app import close_app, create_app, db, migrations
from app.db import normalise_url
from tests.support.api import Api
from tests.support.processes import base_env, netmap_command


def netmap(database_url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = base_env(NETMAP_DATABASE_URL=database_url, NETMAP_DATA_DIR=str(data_dir))
    return subprocess.run(
        netmap_command(*args), env=env, capture_output=True, text=True, timeout=300
    )


def admin_execute(url: str, *statements: str) -> None:
    engine = sa.create_engine(
        normalise_url(url), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool
    )
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def scalar(url: str, sql: str):
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar()
    finally:
        engine.dispose()


def rewrite(archive: Path, target: Path, change) -> Path:
    """A copy of the archive whose manifest was edited by ``change`` (members untouched)."""
    with tarfile.open(archive) as source, tarfile.open(target, "w") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if member.name == "manifest.json":
                manifest = json.loads(data)
                change(manifest)
                data = json.dumps(manifest).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    return target


@pytest.fixture
def data_dir(tmp_path) -> Path:
    path = tmp_path / "var"
    (path / "objects" / "reports").mkdir(parents=True)
    (path / "objects" / "reports" / "chart-1.png").write_bytes(b"\x89PNG fake image bytes")
    (path / "secret_key").write_text("generated-secret-key-for-the-backup-test")
    return path


def test_round_trip_answers_the_same(database_url, data_dir, tmp_path, settings, engine):
    app = create_app(settings, engine=engine, modules="off")
    try:
        api = Api(app)
        user = api.user()
        for name in ("first", "second"):
            created = user.post(
                "/api/tasks", json={"name": name, "targets": ["192.0.2.1"], "ports": "80"}
            )
            assert created.status_code == 201
        before = user.get("/api/tasks").get_json()
        engine.dispose()  # no session of ours may stay connected during the restore

        archive = tmp_path / "netmap.backup"
        made = netmap(database_url, data_dir, "backup", "--out", str(archive))
        assert made.returncode == 0, made.stderr[-2000:]
        assert json.loads(made.stdout)["members"] == 3
        assert "netmap: dumping the database with" in made.stderr
        with tarfile.open(archive) as opened:
            assert opened.getnames()[0] == "manifest.json"
            manifest = json.load(opened.extractfile("manifest.json"))
        assert set(manifest["members"]) == {
            "database.dump",
            "files/secret_key",
            "files/objects/reports/chart-1.png",
        }
        assert manifest["migration_revisions"] == sorted(migrations.head_revisions())
        assert manifest["server_major"] >= 15

        admin_execute(database_url, "DROP SCHEMA public CASCADE", "CREATE SCHEMA public")
        (data_dir / "objects" / "reports" / "chart-1.png").unlink()
        (data_dir / "secret_key").unlink()
        engine.dispose()

        # Without --yes and no answer to read: nothing is replaced, the way is said.
        unasked = netmap(database_url, data_dir, "restore", str(archive))
        assert unasked.returncode == 1
        assert "--yes replaces the database without asking" in unasked.stderr
        assert not (data_dir / "secret_key").exists()

        restored = netmap(database_url, data_dir, "restore", str(archive), "--yes")
        assert restored.returncode == 0, restored.stderr[-2000:]
        result = json.loads(restored.stdout)
        assert result["migrated"] is False and result["files"] == 2
        assert user.get("/api/tasks").get_json() == before
        assert (
            (data_dir / "objects" / "reports" / "chart-1.png").read_bytes().startswith(b"\x89PNG")
        )
        assert (data_dir / "secret_key").read_text() == "generated-secret-key-for-the-backup-test"
    finally:
        close_app(app)


def test_restore_refuses_with_clear_messages(database_url, data_dir, tmp_path, engine):
    engine.dispose()
    archive = tmp_path / "netmap.backup"
    assert netmap(database_url, data_dir, "backup", "--out", str(archive)).returncode == 0
    admin_execute(database_url, "CREATE TABLE restore_canary (id int)")

    def refused(path: Path, *extra: str) -> str:
        done = netmap(database_url, data_dir, "restore", str(path), "--yes", *extra)
        assert done.returncode == 1, done.stdout
        return done.stderr

    corrupted = tmp_path / "corrupted.backup"
    data = bytearray(archive.read_bytes())
    with tarfile.open(archive) as opened:
        offset = opened.getmember("database.dump").offset_data
    data[offset + 50] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    assert "corrupted archive: checksum mismatch for database.dump" in refused(corrupted)

    truncated = tmp_path / "truncated.backup"
    truncated.write_bytes(archive.read_bytes()[: offset + 100])
    assert "corrupted archive" in refused(truncated)

    newer = rewrite(
        archive,
        tmp_path / "newer.backup",
        lambda m: m.update(migration_revisions=["20991231_9999"]),
    )
    assert "is newer than this netmap's migrations" in refused(newer)

    other_major = rewrite(
        archive,
        tmp_path / "major.backup",
        lambda m: m.update(server_major=m["server_major"] - 1, server_version="old"),
    )
    assert "restoring across major versions needs --force" in refused(other_major)

    web = db.create_engine(database_url, poolclass=sa.pool.NullPool, application_name="netmap-web")
    try:
        with web.connect():
            message = refused(archive)
    finally:
        web.dispose()
    assert "(netmap-web): stop netmap's web and runner processes first" in message

    # Nothing was touched by any refusal.
    assert scalar(database_url, "SELECT to_regclass('restore_canary') IS NOT NULL") is True

    forced = netmap(database_url, data_dir, "restore", str(other_major), "--force", "--yes")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert scalar(database_url, "SELECT to_regclass('restore_canary') IS NULL") is True


def test_an_older_schema_is_migrated_after_the_restore(empty_database_url, data_dir, tmp_path):
    migrations.upgrade(empty_database_url, "20261130_0060")
    archive = tmp_path / "old.backup"
    made = netmap(empty_database_url, data_dir, "backup", "--out", str(archive))
    assert made.returncode == 0, made.stderr[-2000:]
    restored = netmap(empty_database_url, data_dir, "restore", str(archive), "--yes")
    assert restored.returncode == 0, restored.stderr[-2000:]
    result = json.loads(restored.stdout)
    assert result["schema_before"] == ["20261130_0060"]
    assert result["migrated"] is True
    assert result["schema_after"] == sorted(migrations.head_revisions())
    assert "migrating the restored schema" in restored.stderr


def test_restore_refuses_while_the_embedded_server_is_running(tmp_path):
    """`netmap up` keeps the embedded server running; restoring under it is refused."""
    import shutil
    import tempfile

    from app import embedded

    # Outside pytest's basetemp: the embedded server changes its parents' permissions.
    directory = Path(tempfile.mkdtemp(prefix="netmap-test-restore-"))
    server = embedded.start(directory, tuning={"fsync": "off"})
    try:
        archive = tmp_path / "any.backup"
        archive.write_bytes(b"not even read")
        env = base_env(NETMAP_DATA_DIR=str(directory))
        done = subprocess.run(
            netmap_command("restore", str(archive)),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1
        assert "is running (is `netmap up` running?): stop netmap before restoring" in done.stderr
        assert embedded.is_running(directory / "pgdata")
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_the_archive_is_created_0600_and_an_open_directory_is_warned_about(
    database_url, data_dir, tmp_path, engine
):
    engine.dispose()
    env = base_env(NETMAP_DATABASE_URL=database_url, NETMAP_DATA_DIR=str(data_dir))
    open_dir = tmp_path / "shared"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    private_dir = tmp_path / "private"
    private_dir.mkdir(mode=0o700)
    # Directories backup makes for the archive are private: no warning about its own work.
    made = tmp_path / "made" / "by" / "backup"
    for directory, warned in ((open_dir, True), (private_dir, False), (made, False)):
        archive = directory / "netmap.backup"
        done = subprocess.run(
            netmap_command("backup", "--out", str(archive)),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            umask=0o022,  # the common default: files would be -rw-r--r--
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert archive.stat().st_mode & 0o777 == 0o600
        assert ("is readable by other users" in done.stderr) is warned, done.stderr
    for path in (made, made.parent, made.parent.parent):
        assert path.stat().st_mode & 0o777 == 0o700, path


def test_restore_shows_what_it_replaces_and_asks_unless_yes(
    database_url, data_dir, tmp_path, engine
):
    engine.dispose()
    archive = tmp_path / "netmap.backup"
    assert netmap(database_url, data_dir, "backup", "--out", str(archive)).returncode == 0
    admin_execute(database_url, "CREATE TABLE restore_canary (id int)")
    env = base_env(NETMAP_DATABASE_URL=database_url, NETMAP_DATA_DIR=str(data_dir))

    def answer(text: str | None) -> subprocess.CompletedProcess:
        return subprocess.run(
            netmap_command("restore", str(archive)),
            env=env,
            input=text,
            capture_output=True,
            text=True,
            timeout=300,
        )

    for reply in ("n\n", "", None):  # no, just Enter, and no terminal at all
        declined = answer(reply)
        assert declined.returncode == 1
        assert "will REPLACE everything in database" in declined.stderr
        assert "will replace the secret key in" in declined.stderr
        assert "restore cancelled: nothing was changed" in declined.stderr
        assert scalar(database_url, "SELECT to_regclass('restore_canary') IS NOT NULL") is True
    accepted = answer("y\n")
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert scalar(database_url, "SELECT to_regclass('restore_canary') IS NULL") is True


def test_a_database_without_netmap_schema_is_not_backed_up(empty_database_url, data_dir, tmp_path):
    # A mistyped URL or data directory starts a new, empty database: its "backup" used to
    # succeed with nothing in it.
    archive = tmp_path / "empty.backup"
    done = netmap(empty_database_url, data_dir, "backup", "--out", str(archive))
    assert done.returncode == 1
    assert "has no netmap schema" in done.stderr and "nothing to back up" in done.stderr
    assert "Traceback" not in done.stderr
    assert not archive.exists()


def test_restoring_a_backup_whose_store_was_empty_empties_the_store(
    database_url, data_dir, tmp_path, engine
):
    engine.dispose()
    (data_dir / "objects" / "reports" / "chart-1.png").unlink()
    archive = tmp_path / "no-files.backup"
    made = netmap(database_url, data_dir, "backup", "--out", str(archive))
    assert made.returncode == 0, made.stderr[-2000:]
    with tarfile.open(archive) as opened:
        manifest = json.load(opened.extractfile("manifest.json"))
    assert manifest["object_store"] == "filesystem"
    # Files made after the backup belong to rows the restore takes away.
    later = data_dir / "objects" / "exports" / "9" / "netmap-task-1-export-9.csv"
    later.parent.mkdir(parents=True)
    later.write_text("later\n")
    restored = netmap(database_url, data_dir, "restore", str(archive), "--yes")
    assert restored.returncode == 0, restored.stderr[-2000:]
    assert "restored 0 object-store files into" in restored.stderr
    assert (data_dir / "objects").is_dir()
    assert [p for p in (data_dir / "objects").rglob("*") if p.is_file()] == []
