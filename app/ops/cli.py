"""The operator's commands: `netmap config check`, `diagnostics`, `backup`, `restore`.

Thin Click wrappers over ``app.ops``: each prints its result (JSON on stdout,
progress on stderr) and exits non-zero with a clear message when something is
wrong, so the commands work in CI and in deploy scripts.
"""

from __future__ import annotations

import json
import sys

import click

from app.config import ConfigError, load_settings


@click.group("config")
def config_group() -> None:
    """Configuration."""


@config_group.command("check")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML settings file (default: the one given to netmap, or $NETMAP_CONFIG).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the redacted JSON report.")
@click.pass_context
def config_check(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Print the configuration check; exit 1 when it found errors."""
    from app.ops.config_check import check_report, failed_report, full_check, render_text

    state = ctx.obj
    path = config_path or getattr(state, "config_path", None)
    overrides = (
        {"server": {"data_dir": state.data_dir}} if getattr(state, "data_dir", None) else None
    )
    try:
        settings, loaded = load_settings(path, overrides=overrides)
    except ConfigError as exc:
        if as_json:
            click.echo(json.dumps(failed_report(exc.check), default=str))
        else:
            click.echo(render_text(exc.check))
        sys.exit(1)
    check = full_check(settings, loaded)
    if as_json:
        click.echo(json.dumps(check_report(settings, check), default=str))
    else:
        click.echo(render_text(check))
    sys.exit(0 if check.ok else 1)


@click.command("diagnostics")
@click.option(
    "--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Zip file to write."
)
@click.option(
    "--events",
    "event_log",
    type=click.Path(dir_okay=False, exists=True),
    help="A netmap JSON-lines log (web or runner stderr) to take recent warning/error events from.",
)
@click.pass_obj
def diagnostics(state, out_path: str, event_log: str | None) -> None:
    """Write a redacted diagnostics archive (versions, config check, queues, leases, ...)."""
    from pathlib import Path

    from app.cli_support import database_for_command
    from app.ops.diagnostics import write_archive

    settings = state.settings()
    # No schema check: diagnostics are most wanted when something is wrong.
    with database_for_command(settings, check_schema=False):
        click.echo("collecting diagnostics...", err=True)
        members = write_archive(
            settings, out_path, event_log=Path(event_log) if event_log else None
        )
    click.echo(json.dumps({"out": out_path, "members": members}))


def _progress(message: str) -> None:
    click.echo(f"netmap: {message}", err=True)


@click.command("backup")
@click.option(
    "--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Archive to write."
)
@click.pass_obj
def backup(state, out_path: str) -> None:
    """Back up the database (pg_dump -Fc), object-store files and generated secret key."""
    from pathlib import Path

    from app.cli_support import database_for_command
    from app.ops.backup import BackupError
    from app.ops.backup import backup as run_backup

    settings = state.settings()
    # pg_dump works on any schema version; backup makes its own connections.
    with database_for_command(settings, check_schema=False, install_engine=False) as url:
        try:
            result = run_backup(settings, url, Path(out_path), _progress)
        except BackupError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result))


def _confirm_restore(summary: str) -> bool:
    click.echo(summary, err=True)
    try:
        return click.confirm("replace it?", default=False, err=True)
    except click.Abort:
        # No answer to read (stdin closed, as in a script): nothing is replaced, and the
        # way to restore without a question is said.
        raise click.ClickException(
            "restore cancelled: nothing was changed (no answer to read: --yes replaces "
            "the database without asking)"
        ) from None


@click.command("restore")
@click.argument("archive", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Restore across PostgreSQL major versions.")
@click.option("--yes", "assume_yes", is_flag=True, help="Do not ask before replacing the database.")
@click.pass_obj
def restore(state, archive: str, force: bool, assume_yes: bool = False) -> None:
    """Restore a backup made by `netmap backup` (netmap must be stopped).

    Shows what will be replaced and asks for confirmation unless --yes."""
    from pathlib import Path

    from app import embedded
    from app.cli_support import database_for_command
    from app.ops.backup import BackupError
    from app.ops.backup import restore as run_restore

    settings = state.settings()
    if not settings.database.url and embedded.is_running(settings.data_dir / "pgdata"):
        raise click.ClickException(
            f"the embedded PostgreSQL under {settings.data_dir} is running (is `netmap up` "
            "running?): stop netmap before restoring"
        )
    # The database is replaced wholesale; restore makes its own connections.
    with database_for_command(settings, check_schema=False, install_engine=False) as url:
        try:
            result = run_restore(
                settings,
                url,
                Path(archive),
                force=force,
                progress=_progress,
                confirm=None if assume_yes else _confirm_restore,
            )
        except BackupError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result))
