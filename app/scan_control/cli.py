"""`netmap tasks …`: task commands for scripts (issue 33).

``netmap tasks schedule ID`` sets, replaces, removes, pauses or resumes a task's
schedule through the same services as ``PATCH /api/tasks/<id>`` and
``/schedule/pause|resume`` (the same validation, the same 400 codes), as the operator:
any task, whoever owns it. Prints the schedule as JSON (``null`` once removed).
"""

from __future__ import annotations

import click

# The operator running the command acts on any task, as an admin would through the API.
OPERATOR_ID = 0


@click.group("tasks")
def tasks() -> None:
    """Tasks for scripts: schedules."""


@tasks.command("schedule")
@click.argument("task_id", type=click.IntRange(min=1))
@click.option("--cron", help='a five-field cron expression, e.g. "0 3 * * *"')
@click.option("--timezone", help="the cron expression's IANA time zone (default UTC)")
@click.option("--every", type=int, help="an interval in seconds instead of cron")
@click.option("--start-at", help="ISO 8601 date-time: no fire time before it")
@click.option("--end-at", help="ISO 8601 date-time: no fire time after it")
@click.option("--jitter", type=int, help="start each run up to this many seconds late")
@click.option("--remove", is_flag=True, help="remove the task's schedule")
@click.option("--pause", "pause", flag_value="pause", help="pause the schedule")
@click.option("--resume", "pause", flag_value="resume", help="resume the schedule")
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
    pause: str | None,
) -> None:
    """Set (--cron/--timezone or --every), --remove, --pause or --resume a task's schedule."""
    from app.cli_support import database_for_command, describe_error, print_json
    from app.errors import ApiError
    from app.identity.user_record import User
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
    actions = sum([bool(given), remove, pause is not None])
    if actions != 1:
        raise click.UsageError(
            "give the schedule (--cron [--timezone] or --every), or --remove, --pause, --resume"
        )
    settings = state.settings()
    operator = User(id=OPERATOR_ID, username="netmap-cli", is_admin=True, disabled=False)
    with database_for_command(settings):
        try:
            if pause is not None:
                result = schedules.set_paused(operator, task_id, pause == "pause")
            else:
                body = {"schedule": None if remove else given}
                task = schedules.update_task(operator, task_id, body, settings.scan)
                result = task["schedule"]
        except ApiError as exc:
            raise click.ClickException(describe_error(exc)) from None
    print_json(result)
