"""``netmap import FILE --task ID --format …``: the importer from the command line (AGT-7).

The same service as ``POST /api/tasks/<id>/imports``, run by an operator on
the server (it talks to the database and the search store directly, so it is
not bound by a web worker's request timeout: the way to import very large
files). Says how far it is on stderr; prints one JSON object describing the import.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import click

from app.agent.formats import FORMATS


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--task", "task_id", type=int, required=True, help="task the results belong to")
@click.option("--format", "format_name", type=click.Choice(FORMATS), required=True)
@click.option(
    "--observed-at",
    type=click.Choice(["file", "import"]),
    default="file",
    show_default=True,
    help="the scan's own times, or the time of the import",
)
@click.option(
    "--scope",
    "scope_mode",
    type=click.Choice(["check", "ignore"]),
    default="check",
    show_default=True,
    help="refuse rows outside the task's targets/ports, or import the file as it is",
)
@click.pass_obj
def import_command(
    state, file: Path, task_id: int, format_name: str, observed_at: str, scope_mode: str = "check"
) -> None:
    """Import an nmap XML, masscan JSON or naabu JSON-lines file into a task."""
    from app.cli_support import database_for_command, describe_error
    from app.errors import ApiError
    from app.identity.users import User
    from app.result_ingest.imports import import_results
    from app.search import open_store

    settings = state.settings()
    if "NETMAP_LOG_LEVEL" not in os.environ:
        # The upload pipeline's per-batch events drowned the progress lines (about thirty
        # JSON lines a file); warnings still show, and NETMAP_LOG_LEVEL=INFO shows all.
        logging.getLogger("netmap.events").setLevel(logging.WARNING)
    size = file.stat().st_size
    if size > settings.agent.import_max_bytes:
        raise click.ClickException(
            f"{file} is {size} bytes; [agent] import_max_bytes is {settings.agent.import_max_bytes}"
        )
    with database_for_command(settings) as url:
        store = open_store(settings.replace(database={"url": url}))
        # The operator at the server's command line may import into any task.
        operator = User(id=0, username="netmap-cli", is_admin=True, disabled=False)
        try:
            result = import_results(
                settings=settings,
                store=store,
                user=operator,
                task_id=task_id,
                path=file,
                format_name=format_name,
                observed_at_mode=observed_at,
                scope_mode=scope_mode,
                progress=lambda message: click.echo(f"netmap: {message}", err=True),
            )
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
        finally:
            store.close()
    click.echo(json.dumps({**result.public(), "bytes": size, "seconds": round(result.seconds, 3)}))
