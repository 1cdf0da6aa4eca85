"""Tasks, their executions, results, changes and imports; current assets and their history."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    LIMIT_1000,
    SCHEMAS,
    SEARCH_TIME_LIMIT,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    query,
    ref,
)

_TASK = obj({"task": ref("Task")})
_SCHEDULE = obj({"schedule": ref("Schedule")})
# What a task scans, as a new task gives it; a change applies from the next run.
_SCOPE = {
    name: SCHEMAS["TaskRequest"]["properties"][name]
    for name in ("targets", "ports", "transports", "profile")
}

OPERATIONS = {
    ("post", "/api/tasks"): operation(
        "tasks",
        "Create a task: what to scan",
        {"201": json_response("created, its executions queued", _TASK)},
        requestBody=body(ref("TaskRequest")),
    ),
    ("get", "/api/tasks"): operation(
        "tasks",
        "Your tasks, newest first",
        {"200": json_response("a page of tasks", page(ref("Task")))},
        parameters=[
            LIMIT,
            CURSOR,
            query("status"),
            query("q", description="part of the name"),
            query("parent_task_id", {"type": "integer", "minimum": 1}),
        ],
    ),
    ("get", "/api/tasks/{task_id}"): operation(
        "tasks",
        "One task with its counts",
        {"200": json_response("the task", _TASK)},
        parameters=[path_id("task_id")],
        description=(
            "`counts` adds up every execution of the task's runs (those kept, `[scan] "
            "keep_runs`): a task scanned on a schedule finds its endpoints again in each "
            "run, so its `endpoints` grows with the runs. `latest_run.counts` are the "
            "latest run's own."
        ),
    ),
    ("patch", "/api/tasks/{task_id}"): operation(
        "tasks",
        "Rename the task, set, replace or remove (null) its schedule, or change its scope",
        {"200": json_response("the task", _TASK)},
        parameters=[path_id("task_id")],
        description=(
            "Targets, ports, transports and profile are checked as for a new task (a 400 "
            "names each refused item) and apply from the next run: a run already started "
            "scans what it started with. An endpoint left outside the new scope is not "
            "concluded gone, since absence is judged inside each execution's own scope."
        ),
        requestBody=body(
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 200},
                    "schedule": {
                        "oneOf": [ref("ScheduleRequest"), {"type": "null"}],
                    },
                    **_SCOPE,
                },
            }
        ),
    ),
    ("post", "/api/tasks/{task_id}/schedule/pause"): operation(
        "tasks",
        "Pause the task's schedule (no runs start until resumed)",
        {"200": json_response("the schedule", _SCHEDULE)},
        parameters=[path_id("task_id")],
    ),
    ("post", "/api/tasks/{task_id}/schedule/resume"): operation(
        "tasks",
        "Resume the task's schedule from the next fire time after now",
        {"200": json_response("the schedule", _SCHEDULE)},
        parameters=[path_id("task_id")],
    ),
    ("get", "/api/tasks/{task_id}/executions"): operation(
        "tasks",
        "The task's executions (one per scan job)",
        {"200": json_response("a page of executions", page())},
        parameters=[path_id("task_id"), LIMIT_1000, CURSOR],
    ),
    ("get", "/api/tasks/{task_id}/results"): operation(
        "tasks",
        "The endpoints the task's executions found, by address and port",
        {
            "200": json_response(
                "a page of endpoints",
                page(
                    ref("Endpoint"),
                    total_ips={"type": "integer"},
                    total_endpoints={"type": "integer"},
                ),
            )
        },
        parameters=[
            path_id("task_id"),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the run whose results to list (default: the latest finished run)",
            ),
            LIMIT_1000,
            CURSOR,
        ],
    ),
    ("get", "/api/changes"): operation(
        "tasks",
        "What changed across all of your tasks, newest first (each with its task_name)",
        {"200": json_response("a page of changes", page())},
        parameters=[
            query("kind", {"type": "string", "enum": ["new", "changed", "gone", "reappeared"]}),
            LIMIT_1000,
            CURSOR,
        ],
    ),
    ("get", "/api/tasks/{task_id}/changes"): operation(
        "tasks",
        "What the task's scans changed: new, changed, gone, reappeared",
        {"200": json_response("a page of changes", page(counts={"type": "object"}))},
        parameters=[
            path_id("task_id"),
            query("kind", {"type": "string", "enum": ["new", "changed", "gone", "reappeared"]}),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the id (not the number) of the run whose change set to list (default: the latest "
                "finished run)",
            ),
            query(
                "from_run",
                {"type": "integer", "minimum": 1},
                "with to_run: compare two runs of the task by id (either order): the net of the "
                "change sets of the runs after the earlier one up to the later one. Change sets "
                "compare each scan with what the owner's assets were (any task's), so an "
                "endpoint another task saw first is 'changed' from that task's values, not "
                "'new'. Items carry kind new, gone or changed, and a changed item its "
                "changed_fields. Not with run.",
            ),
            query("to_run", {"type": "integer", "minimum": 1}),
            LIMIT_1000,
            CURSOR,
        ],
    ),
    ("post", "/api/tasks/{task_id}/imports"): operation(
        "tasks",
        "Import a result file (nmap XML, masscan JSON, naabu JSON) into the task",
        {"201": json_response("imported", obj({"import": {"type": "object"}}))},
        parameters=[
            path_id("task_id"),
            query(
                "format", {"type": "string", "enum": ["nmap-xml", "masscan-json", "naabu-jsonl"]}
            ),
            query("observed_at", {"type": "string", "enum": ["file", "import"]}),
        ],
        requestBody={
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {
                    "schema": obj(
                        {"file": {"type": "string", "format": "binary"}},
                        {"format": {"type": "string"}},
                    )
                },
            },
        },
    ),
    ("get", "/api/assets"): operation(
        "assets",
        "Search current assets (your view, or the global one)",
        {"200": json_response("a page of current assets", page(ref("Asset")))},
        description=SEARCH_TIME_LIMIT,
        parameters=[
            query("ip"),
            query("cidr"),
            query("port", {"type": "integer", "minimum": 1, "maximum": 65535}),
            query("transport", {"type": "string", "enum": ["tcp", "udp"]}),
            query("service"),
            query("product"),
            query(
                "q",
                description="the search language (docs/search-language.md); bare words "
                "are text in banner, product or hostname",
            ),
            query("search", {"type": "integer", "minimum": 1}, "a saved search's id"),
            query("status", {"type": "string", "enum": ["open", "gone", "all"]}),
            query("scope", {"type": "string", "enum": ["user", "global"]}),
            query("sort", {"type": "string", "enum": ["ip", "port", "last_seen", "service"]}),
            query("order", {"type": "string", "enum": ["asc", "desc"]}),
            query("first_seen_from"),
            query("first_seen_to"),
            query("last_seen_from"),
            query("last_seen_to"),
            LIMIT,
            CURSOR,
        ],
    ),
    ("get", "/api/assets/history"): operation(
        "assets",
        "One endpoint's verdict and its events (new, changed, gone, reappeared)",
        {"200": json_response("the history", {"type": "object"})},
        parameters=[
            {"name": "ip", "in": "query", "required": True, "schema": {"type": "string"}},
            {
                "name": "port",
                "in": "query",
                "required": True,
                "schema": {"type": "integer", "minimum": 1, "maximum": 65535},
            },
            query("transport", {"type": "string", "enum": ["tcp", "udp"]}),
            LIMIT_1000,
            CURSOR,
        ],
    ),
}
