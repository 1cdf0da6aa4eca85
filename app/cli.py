"""The `netmap` command line (FND-4), a thin Click layer over the domain services.

Every command that needs the database uses ``NETMAP_DATABASE_URL`` / ``[database]
url`` when set, else the embedded server under the data directory, starting it
for the duration of the command when nobody else is running it.

Command groups owned by other packages are attached *lazily*: ``main`` is a
``LazyGroup`` and ``main.add_command("app.traffic.cli:traffic")`` names the
command by import path, so its module is imported only when that command runs
(or ``--help`` lists the commands). A cron job every five minutes
(``netmap traffic rollup``) then starts without the web application, charts or
search clients it never uses. Passing a command object (``main.add_command(cmd)``)
works as in plain Click.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from typing import Any

import click

from app.config import ConfigError, Settings, load_settings


@dataclass
class CliState:
    config_path: str | None
    data_dir: str | None = None
    _settings: Settings | None = None

    def settings(self, **overrides: dict[str, Any]) -> Settings:
        if self._settings is None or overrides:
            server_overrides = dict(overrides.pop("server", {}))
            if self.data_dir:
                server_overrides["data_dir"] = self.data_dir
            if server_overrides:
                overrides["server"] = server_overrides
            try:
                settings, check = load_settings(self.config_path, overrides=overrides or None)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
            for warning in check.warnings:
                click.echo(f"config warning: {warning.render()}", err=True)
            self._settings = settings
        return self._settings


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=str))


class LazyGroup(click.Group):
    """A Click group whose subcommands may be given as ``"module:attribute"`` import paths.

    The module is imported the first time the command is looked up, so a command's
    dependencies cost nothing to the other commands.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}

    def add_command(self, cmd: click.Command | str, name: str | None = None) -> None:
        if isinstance(cmd, str):
            module, _, attribute = cmd.partition(":")
            if not module or not attribute:
                raise ValueError(f"lazy command {cmd!r}: expected 'package.module:attribute'")
            self.lazy_commands[name or attribute.replace("_", "-")] = cmd
            return
        super().add_command(cmd, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name]} is not a Click command")
            self.commands[cmd_name] = command
        return command


@click.group(cls=LazyGroup)
@click.option(
    "--config",
    "config_path",
    envvar="NETMAP_CONFIG",
    type=click.Path(dir_okay=False),
    help="TOML settings file (default: $NETMAP_CONFIG).",
)
@click.option(
    "--data-dir",
    envvar="NETMAP_DATA_DIR",
    type=click.Path(file_okay=False),
    help="Embedded PostgreSQL data and runtime files (default ./var).",
)
@click.pass_context
def main(ctx: click.Context, config_path: str | None, data_dir: str | None) -> None:
    """netmap: network-mapping platform."""
    from app.observability import configure_logging

    configure_logging()
    ctx.obj = CliState(config_path=config_path, data_dir=data_dir)


def _database(state: CliState):
    from app import embedded

    return embedded.database_url_for_command(state.settings())


def _require_schema(url: str) -> None:
    import sqlalchemy as sa

    from app import db
    from app.migrations import current_revisions, head_revisions

    engine = db.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            current = current_revisions(conn)
    finally:
        engine.dispose()
    if current != head_revisions():
        raise click.ClickException(
            "the database schema is not at the current version; run `netmap db upgrade` first"
        )


def _with_engine(url: str):
    import sqlalchemy as sa

    from app import db

    db.set_engine(db.create_engine(url, poolclass=sa.pool.NullPool, application_name="netmap-cli"))


# ---------------------------------------------------------------------------
@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@click.pass_obj
def db_upgrade(state: CliState, revision: str) -> None:
    """Apply Alembic migrations up to REVISION."""
    import sqlalchemy as sa

    from app import migrations
    from app.db import create_engine

    with _database(state) as url:
        migrations.upgrade(url, revision)
        engine = create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            current = sorted(migrations.current_revisions(conn))
        engine.dispose()
    print_json({"revision": current})


# ---------------------------------------------------------------------------
@main.group()
def users() -> None:
    """User accounts."""


@users.command("create")
@click.argument("username")
@click.option("--admin", is_flag=True, help="Give the user admin rights.")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.pass_obj
def users_create(state: CliState, username: str, admin: bool, password_stdin: bool) -> None:
    """Create a user; prints {"id", "username"}."""
    from app.db import transaction
    from app.errors import ApiError
    from app.identity.users import create_user_audited

    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        raise click.UsageError("no terminal to ask for the password: use --password-stdin")
    with _database(state) as url:
        _require_schema(url)
        _with_engine(url)
        try:
            with transaction() as conn:
                user = create_user_audited(
                    conn, username, password, is_admin=admin, actor_user_id=None, via="cli"
                )
        except ApiError as exc:
            raise click.ClickException(_describe(exc)) from None
    print_json({"id": user.id, "username": user.username})


@main.group()
def scanners() -> None:
    """Scanner identities."""


@scanners.command("create")
@click.argument("name")
@click.pass_obj
def scanners_create(state: CliState, name: str) -> None:
    """Create a scanner; prints {"id", "name", "token"} (the token is shown only now)."""
    from app.db import transaction
    from app.errors import ApiError
    from app.identity.scanners import create_scanner_audited

    with _database(state) as url:
        _require_schema(url)
        _with_engine(url)
        try:
            with transaction() as conn:
                scanner, token = create_scanner_audited(conn, name, actor_user_id=None, via="cli")
        except ApiError as exc:
            raise click.ClickException(_describe(exc)) from None
    print_json({"id": scanner.id, "name": scanner.name, "token": token})


def _describe(exc: Any) -> str:
    details = f" {json.dumps(exc.details)}" if getattr(exc, "details", None) else ""
    return f"{exc.code}: {exc.message}{details}"


# ---------------------------------------------------------------------------
@main.command()
@click.option(
    "--processes", type=click.IntRange(1, 64), help="Worker processes (default [runner] processes)."
)
@click.pass_obj
def runner(state: CliState, processes: int | None) -> None:
    """Run the background job runner (Procfile `worker`)."""
    from jobs.runner import run_runner

    settings = state.settings()
    with _database(state) as url:
        _require_schema(url)
        code = run_runner(settings, url, processes)
    sys.exit(code)


@main.command()
@click.option("--host", help="Address to serve on (default [server] host).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default [server] port).")
@click.option("--no-runner", is_flag=True, help="Serve only; do not start `netmap runner`.")
@click.pass_obj
def up(state: CliState, host: str | None, port: int | None, no_runner: bool) -> None:
    """Embedded database, migrations, web server and runner in one foreground command."""
    from app.local_stack import run_local_stack

    server: dict[str, Any] = {}
    if host:
        server["host"] = host
    if port is not None:
        server["port"] = port
    settings = state.settings(server=server) if server else state.settings()
    sys.exit(run_local_stack(settings, with_runner=not no_runner))


# Command groups owned by other domains are attached below, one line each. An import
# path ("package.module:command") defers the import until the command is used; a command
# object imported here works too, but every `netmap` invocation then pays for its imports.
main.add_command("app.bench.cli:bench")
main.add_command("app.modules.cli:modules")
main.add_command("app.traffic.cli:traffic")
