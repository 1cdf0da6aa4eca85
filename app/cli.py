"""The `netmap` command line (FND-4), a thin Click layer over the domain services.

Every command that needs the database opens it with
``app.cli_support.database_for_command``: ``NETMAP_DATABASE_URL`` / ``[database]
url`` when set, else the embedded server under the data directory, started for
the duration of the command when nobody else is running it. Command groups of
other packages import that module, never this one: this module imports them.

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
import os
import sys
from dataclasses import dataclass
from typing import Any

import click

from app.cli_support import database_for_command, describe_error, print_json, read_password
from app.config import ConfigCheck, ConfigError, Settings, load_settings


@dataclass
class CliState:
    config_path: str | None
    data_dir: str | None = None
    _settings: Settings | None = None
    _check: ConfigCheck | None = None

    def settings(self, **overrides: dict[str, Any]) -> Settings:
        if self._settings is None or overrides:
            server_overrides = dict(overrides.pop("server", {}))
            if self.data_dir:
                server_overrides["data_dir"] = self.data_dir
            if server_overrides:
                overrides["server"] = server_overrides
            from app.ops.config_check import scrub

            try:
                settings, check = load_settings(self.config_path, overrides=overrides or None)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
            for warning in check.warnings:
                click.echo(f"config warning: {scrub(warning.render())}", err=True)
            self._settings = settings
            self._check = check
        return self._settings

    def value_sources(self) -> dict[str, str]:
        """Where each configured (non-default) value came from, for the start-up log."""
        self.settings()
        return self._check.configured_sources() if self._check else {}


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

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a failure a person can act on (a path that cannot be written,
        a store that cannot be reached, an unknown schema revision) is one line and exit
        code 1, not a traceback. Anything else is a bug and keeps its traceback."""
        try:
            return super().invoke(ctx)
        except Exception as error:
            message = _operator_error(error)
            if message is None:
                raise
            raise click.ClickException(message) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module), attribute)
            except ModuleNotFoundError as missing:
                # An install for the scanner agent only (``netmap[agent]``) has no server
                # libraries: ``netmap --help`` must still list, and the command say why.
                if (missing.name or "app").partition(".")[0] == "app":
                    raise
                command = _needs_server_install(cmd_name, missing.name or "")
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name]} is not a Click command")
            self.commands[cmd_name] = command
        return command


def _operator_error(error: Exception) -> str | None:
    """The one-line message of a failure the operator can act on; None for a bug."""
    if isinstance(error, FileExistsError) and error.filename and os.path.isfile(error.filename):
        return f"{error.filename} is a file, not a directory"
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror or error}"
    module = type(error).__module__
    if module.startswith("alembic."):
        return f"database migration: {error}"
    if module == "app.search.port" and type(error).__name__.startswith("Store"):
        return f"search store: {error}"
    return None


def _needs_server_install(name: str, missing: str) -> click.Command:
    """A stand-in for a command whose libraries this install lacks (an agent-only one)."""
    message = (
        f"`netmap {name}` needs the server's libraries ({missing} is not installed): "
        "install netmap[server]; this install runs the scanner agent (`netmap agent`)"
    )

    def refuse() -> None:
        raise click.ClickException(message)

    return click.Command(
        name,
        callback=refuse,
        help=message,
        short_help=f"(needs netmap[server]: {missing} is not installed)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


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
    from app.observability import configure_logging, logging_environment_problem

    problem = logging_environment_problem()
    if problem:
        raise click.UsageError(problem)
    configure_logging()
    ctx.obj = CliState(config_path=config_path, data_dir=data_dir)


# ---------------------------------------------------------------------------
# The Python name is not ``db``: that would shadow the module ``app.db``.
@main.group("db")
def db_group() -> None:
    """Database schema."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@click.pass_obj
def db_upgrade(state: CliState, revision: str) -> None:
    """Apply Alembic migrations up to REVISION (safe to run from several processes at once)."""
    from app import migrations
    from app.db import transaction

    database = state.settings().database
    timeouts = migrations.MigrationTimeouts(
        lock_timeout_ms=database.migration_lock_timeout_ms,
        statement_timeout_ms=database.migration_statement_timeout_ms,
    )
    with database_for_command(state.settings(), check_schema=False) as url:
        migrations.upgrade(url, revision, timeouts)
        with transaction() as conn:
            current = sorted(migrations.current_revisions(conn))
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

    password = read_password(password_stdin)
    with database_for_command(state.settings()):
        try:
            with transaction() as conn:
                user = create_user_audited(
                    conn, username, password, is_admin=admin, actor_user_id=None, via="cli"
                )
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json({"id": user.id, "username": user.username})


def _user_id(conn: Any, username: str) -> int:
    from app.errors import NotFound
    from app.identity.users import find_by_username

    user = find_by_username(conn, username)
    if user is None:
        raise NotFound(f"user {username!r} not found", code="user_not_found")
    return user.id


@users.command("set-password")
@click.argument("username")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.pass_obj
def users_set_password(state: CliState, username: str, password_stdin: bool) -> None:
    """Set a user's password and end every session of that user."""
    from app.db import transaction
    from app.errors import ApiError
    from app.identity.users import set_password

    password = read_password(password_stdin)
    with database_for_command(state.settings()):
        try:
            with transaction() as conn:
                user, ended = set_password(
                    conn, _user_id(conn, username), password, actor_user_id=None, via="cli"
                )
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json({"id": user.id, "username": user.username, "sessions_ended": ended})


def _set_disabled_command(state: CliState, username: str, disabled: bool) -> None:
    from app.db import transaction
    from app.errors import ApiError
    from app.identity.users import set_disabled

    with database_for_command(state.settings()):
        try:
            with transaction() as conn:
                user = set_disabled(
                    conn, _user_id(conn, username), disabled, actor_user_id=None, via="cli"
                )
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json({"id": user.id, "username": user.username, "disabled": user.disabled})


@users.command("disable")
@click.argument("username")
@click.pass_obj
def users_disable(state: CliState, username: str) -> None:
    """Disable a user: every session of that user ends, logins are refused."""
    _set_disabled_command(state, username, True)


@users.command("enable")
@click.argument("username")
@click.pass_obj
def users_enable(state: CliState, username: str) -> None:
    """Enable a disabled user again (old sessions stay ended)."""
    _set_disabled_command(state, username, False)


@users.command("token")
@click.argument("username")
@click.option(
    "--name", "token_name", required=True, help="What the token is for (unique per user)."
)
@click.option(
    "--expires-in-days",
    type=click.IntRange(1, 3650),
    default=None,
    help="Days until the token stops working (default: it does not expire).",
)
@click.option("--read-only", is_flag=True, help="The token may only read (GET and HEAD).")
@click.pass_obj
def users_token(
    state: CliState, username: str, token_name: str, expires_in_days: int | None, read_only: bool
) -> None:
    """Make a personal API token for a user (a script's credential, e.g. when provisioning
    without a browser); prints the token with its "secret", shown only now."""
    from app.db import transaction
    from app.errors import ApiError
    from app.identity.api_tokens import create_token, validate_token_request
    from app.identity.users import get_user

    body = {
        "name": token_name,
        "expires_in_days": expires_in_days,
        "access": "read" if read_only else "write",
    }
    with database_for_command(state.settings()):
        try:
            request = validate_token_request(body)
            with transaction() as conn:
                user = get_user(conn, _user_id(conn, username))
                token, secret = create_token(conn, user, request, via="cli", actor_user_id=None)
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json({**token.public(), "username": username, "secret": secret})


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

    with database_for_command(state.settings()):
        try:
            with transaction() as conn:
                scanner, token = create_scanner_audited(conn, name, actor_user_id=None, via="cli")
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json({"id": scanner.id, "name": scanner.name, "token": token})


# ---------------------------------------------------------------------------
@main.command()
@click.option(
    "--processes", type=click.IntRange(1, 64), help="Worker processes (default [runner] processes)."
)
@click.pass_obj
def runner(state: CliState, processes: int | None) -> None:
    """Run the background job runner (Procfile `worker`)."""
    import logging

    from app.observability import emit
    from app.ops.config_check import startup_event_level
    from jobs.runner import run_runner

    settings = state.settings()
    emit(
        "ConfigSources",
        level=startup_event_level(logging.INFO),
        process="runner",
        value_sources=state.value_sources(),
    )
    with database_for_command(settings, install_engine=False) as url:
        code = run_runner(settings, url, processes)
    sys.exit(code)


@main.command()
@click.option("--host", help="Address to serve on (default [server] host).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default [server] port).")
@click.option("--no-runner", is_flag=True, help="Serve only; do not start `netmap runner`.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    help="Embedded PostgreSQL data and runtime files (same as `netmap --data-dir DIR up`).",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "text", "json"]),
    default=None,
    help="Log lines on stderr: text for a person, json (one object a line) for machines; "
    "auto (default, or NETMAP_LOG_FORMAT): text on a terminal, json otherwise.",
)
@click.pass_obj
def up(
    state: CliState,
    host: str | None,
    port: int | None,
    no_runner: bool,
    data_dir: str | None,
    log_format: str | None,
) -> None:
    """Embedded database, migrations, web server and runner in one foreground command."""
    from app.local_stack import choose_log_format, run_local_stack

    choose_log_format(log_format)
    if data_dir:
        state.data_dir = data_dir
        state._settings = None

    server: dict[str, Any] = {}
    if host:
        server["host"] = host
    if port is not None:
        server["port"] = port
    settings = state.settings(server=server) if server else state.settings()
    from app.observability import log_format_in_use
    from app.ops.config_check import emit_check, full_check, render_text

    check = full_check(settings)
    if log_format_in_use() == "text":
        click.echo(render_text(check), err=True)
    else:
        emit_check(check, "up")
    if not check.ok:
        sys.exit(1)
    sys.exit(run_local_stack(settings, with_runner=not no_runner))


# Command groups owned by other domains are attached below, one line each. An import
# path ("package.module:command") defers the import until the command is used; a command
# object imported here works too, but every `netmap` invocation then pays for its imports.
main.add_command("app.bench.cli:bench")
main.add_command("app.modules.cli:modules")
main.add_command("app.traffic.cli:traffic")
main.add_command("app.ops.cli:config_group", name="config")
main.add_command("app.ops.cli:diagnostics")
main.add_command("app.ops.cli:backup")
main.add_command("app.ops.cli:restore")
main.add_command("app.result_ingest.cli:import_command", name="import")
main.add_command("app.reports.cli:reports")
main.add_command("app.scan_control.cli:tasks")
main.add_command("app.ops.search_cli:search")


@main.command(
    "agent",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def agent_command(state: CliState, args: tuple[str, ...]) -> None:
    """The scanner agent (see `netmap agent --help`); loaded only when run."""
    from app.agent.cli import agent

    agent.main(args=list(args), prog_name="netmap agent", obj=state)
