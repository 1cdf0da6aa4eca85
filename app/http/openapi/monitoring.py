"""Continuous monitoring (issue 33): a task's runs, cancelling one, deleting a task."""

from __future__ import annotations

from app.http.openapi.components import (
    LIMIT,
    json_response,
    obj,
    operation,
    path_id,
    query,
)

_TIME = {"type": ["string", "null"], "format": "date-time"}

RUN = obj(
    {
        "id": {"type": "integer"},
        "task_id": {"type": "integer"},
        "number": {"type": "integer", "minimum": 1},
        "status": {
            "type": "string",
            "enum": ["queued", "running", "succeeded", "partial", "failed", "cancelled"],
        },
        "trigger": {"type": "string", "enum": ["manual", "schedule", "import"]},
        "created_at": {"type": "string", "format": "date-time"},
        "started_at": _TIME,
        "finished_at": _TIME,
        "counts": obj(
            {
                "executions": {"type": "object"},
                "endpoints": {"type": "integer"},
                "observations": {"type": "integer"},
                "ips": {"type": "integer"},
            }
        ),
    }
)
_RUN = obj({"run": RUN})

OPERATIONS = {
    ("post", "/api/tasks/{task_id}/runs"): operation(
        "tasks",
        "Start a run of the task now (409 run_active while one is queued or running)",
        {"201": json_response("the run, its executions queued", _RUN)},
        parameters=[path_id("task_id")],
    ),
    ("get", "/api/tasks/{task_id}/runs"): operation(
        "tasks",
        "The task's runs, newest first",
        {
            "200": json_response(
                "a page of runs",
                obj(
                    {
                        "items": {"type": "array", "items": RUN},
                        "next_before": {"type": ["integer", "null"]},
                    }
                ),
            )
        },
        parameters=[
            path_id("task_id"),
            LIMIT,
            query("before", {"type": "integer", "minimum": 1}, "runs numbered below this"),
        ],
    ),
    ("get", "/api/tasks/{task_id}/runs/{run_id}"): operation(
        "tasks",
        "One run with its counts",
        {"200": json_response("the run", _RUN)},
        parameters=[path_id("task_id"), path_id("run_id")],
    ),
    ("post", "/api/tasks/{task_id}/runs/{run_id}/cancel"): operation(
        "tasks",
        "Cancel a queued or running run (409 run_not_active otherwise)",
        {"200": json_response("the cancelled run", _RUN)},
        parameters=[path_id("task_id"), path_id("run_id")],
        description="Queued executions are cancelled at once; a running execution's "
        "scanner gets 409 execution_cancelled at its next lease renewal or upload and stops. "
        "What was already confirmed stays; a cancelled run marks nothing gone.",
    ),
    ("delete", "/api/tasks/{task_id}"): operation(
        "tasks",
        "Delete a task: hidden at once, its data purged in the background",
        {
            "202": json_response(
                "the purge, queued",
                obj(
                    {
                        "purge": obj(
                            {
                                "task_id": {"type": "integer"},
                                "status": {
                                    "type": "string",
                                    "enum": ["queued", "running", "done"],
                                },
                                "phase": {"type": "string"},
                                "removed": {"type": "object"},
                                "batches": {"type": "integer"},
                            }
                        )
                    }
                ),
            )
        },
        parameters=[path_id("task_id")],
        description="The task (and the DNS follow-up tasks it made) disappears from lists "
        "and lookups at once; queued and running executions are cancelled. The runner's purge "
        "removes its runs, executions, receipts and results in bounded batches, and the "
        "current assets only this task had evidence for; assets other tasks saw stay. The "
        "task's report definitions go with it (a definition reports one task). Alert rules "
        "that filter by it keep its id, which then matches nothing; a saved search is "
        "untouched.",
    ),
}
