"""`netmap tasks …`: tasks and their runs from the server's command line, JSON out (issue 33).

The operator at the command line acts as an administrator (every task); ``create``
names the owner with ``--owner``. Each command calls the same services as the API
(``app.scan_control.service``, ``runs``, ``purge``, ``schedules``) and prints one JSON
document. ``update`` renames a task or changes its scope for the next runs, and
``schedule`` sets, replaces, removes, pauses or resumes a task's schedule with
the validation of ``PATCH /api/tasks/<id>`` (the same 400 codes; docs/schedules.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def _operator():
    from app.identity.users import User

    return User(id=0, username="netmap-cli", is_admin=True, disabled=False)


def _run(state, work: Callable[[], Any]) -> None:
    from app.cli_support import database_for_command, describe_error, print_json
    from app.errors import ApiError

    with database_for_command(state.settings()):
        try:
            result = work()
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json(result)


@click.group("tasks")
def tasks() -> None:
    """Tasks and their runs (list, show, create, update, run, cancel, delete, schedule)."""


@tasks.command("list")
@click.option("--status", help="only tasks with this status")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.pass_obj
def list_command(state, status: str | None, limit: int) -> None:
    """Tasks, newest first: {"items": [...], "more": bool}."""
    from app.scan_control import service
    from app.scan_control.query import TASK_STATUSES

    if status is not None and status not in TASK_STATUSES:
        raise click.BadParameter(f"one of {', '.join(TASK_STATUSES)}", param_hint="--status")

    def work():
        page = service.tasks_of(_operator(), limit=limit, cursor=None, status=status)
        return {"items": page.items, "more": page.next_cursor is not None}

    _run(state, work)


@tasks.command("show")
@click.argument("task_id", type=int)
@click.pass_obj
def show_command(state, task_id: int) -> None:
    """One task with its newest runs: {"task": ..., "runs": [...]}."""
    from app.scan_control import runs, service

    def work():
        task = service.find_task(_operator(), task_id)
        items, _ = runs.runs_of_task(_operator(), task_id, limit=20)
        return {"task": task, "runs": [r.public() for r in items]}

    _run(state, work)


@tasks.command("create")
@click.option("--owner", required=True, help="the username the task belongs to")
@click.option("--name", required=True)
@click.option("--target", "targets", multiple=True, required=True, help="repeat for more")
@click.option("--ports", required=True, help='e.g. "22,80,443,8000-8100"')
@click.option("--transport", "transports", multiple=True, type=click.Choice(["tcp", "udp"]))
@click.option("--profile", type=click.Choice(["quick", "standard", "deep"]))
@click.option("--no-scan", is_flag=True, help="an import-only task: nothing is queued")
@click.pass_obj
def create_command(
    state,
    owner: str,
    name: str,
    targets: tuple[str, ...],
    ports: str,
    transports: tuple[str, ...],
    profile: str | None,
    no_scan: bool,
) -> None:
    """Create a task (run 1 is queued unless --no-scan): {"task": ...}."""
    from app.scan_control import service
    from app.scan_control.creation import validate_task_request

    body: dict[str, Any] = {"name": name, "targets": list(targets), "ports": ports}
    if transports:
        body["transports"] = list(transports)
    if profile:
        body["profile"] = profile
    if no_scan:
        body["scan"] = False

    def work():
        limits = state.settings().scan
        request = validate_task_request(body, limits)
        user = service.user_named(owner)
        return {"task": service.create_task_for(user, request, limits=limits, via="cli")}

    _run(state, work)


@tasks.command("update")
@click.argument("task_id", type=click.IntRange(min=1))
@click.option("--name")
@click.option("--target", "targets", multiple=True, help="the new targets; repeat for more")
@click.option("--ports", help='the new ports, e.g. "22,80,443,8000-8100"')
@click.option("--transport", "transports", multiple=True, type=click.Choice(["tcp", "udp"]))
@click.option("--profile", type=click.Choice(["quick", "standard", "deep"]))
@click.pass_obj
def update_command(
    state,
    task_id: int,
    name: str | None,
    targets: tuple[str, ...],
    ports: str | None,
    transports: tuple[str, ...],
    profile: str | None,
) -> None:
    """Rename the task or change what its next runs scan (the options given replace the
    task's; a run already started keeps its scope): {"task": ...}."""
    from app.scan_control import schedules

    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name  # even empty: the service says what a name must be
    for key, value in (
        ("targets", list(targets)),
        ("ports", ports),
        ("transports", list(transports)),
        ("profile", profile),
    ):
        if value:
            body[key] = value
    if not body:
        raise click.UsageError(
            "give what to change: --name, --target, --ports, --transport, --profile"
        )

    def work():
        task = schedules.update_task(_operator(), task_id, body, state.settings().scan)
        return {"task": task}

    _run(state, work)


@tasks.command("run")
@click.argument("task_id", type=int)
@click.pass_obj
def run_command(state, task_id: int) -> None:
    """Start a run of the task now: {"run": ...} (fails with run_active while one is)."""
    from app.scan_control import runs

    def work():
        run = runs.start_run(
            task_id, trigger="manual", limits=state.settings().scan, user=_operator()
        )
        return {"run": run.public()}

    _run(state, work)


@tasks.command("cancel")
@click.argument("task_id", type=int)
@click.option("--run", "run_id", type=int, help="the run to cancel (default: the active one)")
@click.pass_obj
def cancel_command(state, task_id: int, run_id: int | None) -> None:
    """Cancel the task's active run (or --run): {"run": ...}."""
    from app.scan_control import runs, service

    def work():
        target = run_id if run_id is not None else service.active_run_of(_operator(), task_id)
        return {"run": runs.cancel_run(_operator(), task_id, target).public()}

    _run(state, work)


@tasks.command("delete")
@click.argument("task_id", type=int)
@click.pass_obj
def delete_command(state, task_id: int) -> None:
    """Delete the task (hidden now, purged by the runner): {"purge": ...}."""
    from app.scan_control import purge

    _run(state, lambda: {"purge": purge.request_delete(_operator(), task_id)})


@tasks.command("schedule")
@click.argument("task_id", type=click.IntRange(min=1))
@click.option("--cron", help='a five-field cron expression, e.g. "0 3 * * *"')
@click.option("--timezone", help="the cron expression's IANA time zone (default UTC)")
@click.option("--every", type=int, help="an interval in seconds instead of cron")
@click.option("--start-at", help="ISO 8601 date-time: no fire time before it")
@click.option("--end-at", help="ISO 8601 date-time: no fire time after it")
@click.option("--jitter", type=int, help="start each run up to this many seconds late")
@click.option("--remove", is_flag=True, help="remove the task's schedule")
@click.option("--pause", is_flag=True, help="pause the schedule")
@click.option("--resume", is_flag=True, help="resume the schedule")
@click.pass_obj
def schedule_command(
    state,
    task_id: int,
    cron: str | None,
    timezone: str | None,
    every: int | None,
    start_at: str | None,
    end_at: str | None,
    jitter: int | None,
    remove: bool,
    pause: bool,
    resume: bool,
) -> None:
    """Set (--cron/--timezone or --every), --remove, --pause or --resume a task's schedule;
    prints the schedule (null once removed)."""
    from app.scan_control import schedules

    timing = {
        "cron": cron,
        "timezone": timezone,
        "every_seconds": every,
        "start_at": start_at,
        "end_at": end_at,
        "jitter_seconds": jitter,
    }
    given = {k: v for k, v in timing.items() if v is not None}
    # One of them: --pause and --resume together used to be taken as the last one given.
    if sum([bool(given), remove, pause, resume]) != 1:
        raise click.UsageError(
            "give the schedule (--cron [--timezone] or --every), or --remove, --pause, --resume"
        )

    def work():
        if pause or resume:
            return schedules.set_paused(_operator(), task_id, pause)
        body = {"schedule": None if remove else given}
        return schedules.update_task(_operator(), task_id, body, state.settings().scan)["schedule"]

    _run(state, work)
