"""What every ``netmap`` command shares: opening the database, printing, reading a password.

The root CLI (``app/cli.py``) imports the command groups of the domains; those
groups import this module, never ``app.cli``, so the import graph has no cycle
(tests/unit/test_cli_structure.py checks it). Like the commands themselves, this
module imports its heavier dependencies inside the functions, so a cron-style
command pays only for what it uses (PRF-3).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import click


@contextlib.contextmanager
def database_for_command(
    settings: Any,
    *,
    check_schema: bool = True,
    install_engine: bool = True,
    application_name: str = "netmap-cli",
    **engine_options: Any,
) -> Iterator[str]:
    """Open the database for one command and yield its URL.

    The URL is ``[database] url`` when configured, else the embedded server under the
    data directory, started for the duration of the command when nobody else runs it
    (and stopped again at exit unless ``NETMAP_KEEP_EMBEDDED`` is set).

    ``check_schema`` refuses a database that is not migrated to head with a sentence
    naming ``netmap db upgrade``. ``install_engine`` makes ``app.db.transaction()``
    work for the command: by default an unpooled engine (a one-off command has no use
    for idle connections); ``engine_options`` replace that, e.g. a one-connection pool
    for a command with several short transactions. The engine is disposed at exit and
    whatever engine was installed before comes back.
    """
    with _database_url(settings) as url:
        if not install_engine:
            if check_schema:
                _require_schema(url)
            yield url
            return
        import sqlalchemy as sa

        from app import db

        options = engine_options or {"poolclass": sa.pool.NullPool}
        engine = db.create_engine(url, application_name=application_name, **options)
        with db.engine_installed(engine):
            if check_schema:
                # Through the command's own engine: a pooled command reuses the connection.
                _require_schema_on(engine)
            yield url


@contextlib.contextmanager
def direct_connection_for_command(
    settings: Any, *, check_schema: bool = True, application_name: str = "netmap-cli"
) -> Iterator[Any]:
    """Like ``database_for_command``, but yield one psycopg2 connection
    (``app.dbapi.DirectConnection``) and never import SQLAlchemy: for a cron command
    whose SQL is written for psycopg2, started every few minutes (PRF-3). Closed at exit."""
    with _database_url(settings) as url:
        import psycopg2

        from app.dbapi import DirectConnection

        try:
            connection = DirectConnection(url, settings.database, application_name=application_name)
        except psycopg2.OperationalError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise click.ClickException(f"database is not reachable: {reason}") from None
        try:
            if check_schema:
                from app.migrations import current_revisions_on_cursor

                with connection.cursor() as cursor:
                    current = current_revisions_on_cursor(cursor)
                # Outside the transaction: the heads are read from the migration files.
                _refuse_unless_at_head(current)
            yield connection
        finally:
            connection.close()


@contextlib.contextmanager
def _database_url(settings: Any) -> Iterator[str]:
    if settings.database.url:
        yield settings.database.url
        return
    from app import embedded

    # A command that had to start the server wants it stopped when every process using
    # it is done (commands running at once share it; ``embedded.SharedServer``).
    keep = bool(os.environ.get("NETMAP_KEEP_EMBEDDED"))
    shared = embedded.SharedServer(
        settings.data_dir, stop_when_unused="never" if keep else "if_started"
    )
    server = shared.acquire()
    try:
        yield server.url
    finally:
        shared.release()


def _require_schema(url: str) -> None:
    from app.migrations import SchemaNotCurrent, require_schema_at_head

    try:
        require_schema_at_head(url)
    except SchemaNotCurrent as exc:
        raise click.ClickException(str(exc)) from None


def _require_schema_on(engine: Any) -> None:
    from app.migrations import current_revisions

    with engine.connect() as conn:
        current = current_revisions(conn)
    _refuse_unless_at_head(current)


def _refuse_unless_at_head(current: set[str]) -> None:
    """A sentence naming ``netmap db upgrade`` unless ``current`` is the schema's head."""
    from app.migrations import head_revisions, schema_problem

    problem = schema_problem(current, head_revisions())
    if problem:
        raise click.ClickException(problem)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=str))


def read_password(password_stdin: bool) -> str:
    """The password from one line of stdin, or a confirmed prompt on a terminal."""
    if password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if sys.stdin.isatty():
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    raise click.UsageError("no terminal to ask for the password: use --password-stdin")


def describe_error(exc: Any) -> str:
    """An ``ApiError`` as one line for the terminal: ``code: message {details}``."""
    details = f" {json.dumps(exc.details)}" if getattr(exc, "details", None) else ""
    return f"{exc.code}: {exc.message}{details}"


def existing_secret_key(settings) -> str | None:
    """The key the server uses: configured, or the one `netmap up` generated under the data
    directory (never a new one: a command that encrypts must use the server's key)."""
    if settings.security.secret_key:
        return settings.security.secret_key
    path = settings.data_dir / "secret_key"
    return path.read_text().strip() if path.exists() else None
