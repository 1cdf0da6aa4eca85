"""Tasks, their executions, results, changes and imports; current assets and their history."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    USER,
    body,
    json_response,
    obj,
    page,
    path_id,
    query,
    ref,
)

_TASK = obj({"task": ref("Task")})
_SCHEDULE = obj({"schedule": ref("Schedule")})

OPERATIONS = {
    ("post", "/api/tasks"): {
        "summary": "Create a task: what to scan",
        "tags": ["tasks"],
        "security": USER,
        "requestBody": body(ref("TaskRequest")),
        "responses": {"201": json_response("created, its executions queued", _TASK)},
    },
    ("get", "/api/tasks"): {
        "summary": "Your tasks, newest first",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [
            LIMIT,
            CURSOR,
            query("status"),
            query("q", description="part of the name"),
            query("parent_task_id", {"type": "integer", "minimum": 1}),
        ],
        "responses": {"200": json_response("a page of tasks", page(ref("Task")))},
    },
    ("get", "/api/tasks/{task_id}"): {
        "summary": "One task with its counts",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [path_id("task_id")],
        "responses": {"200": json_response("the task", _TASK)},
    },
    ("patch", "/api/tasks/{task_id}"): {
        "summary": "Rename the task, or set, replace or remove (null) its schedule",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [path_id("task_id")],
        "requestBody": body(
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 200},
                    "schedule": {
                        "oneOf": [ref("ScheduleRequest"), {"type": "null"}],
                    },
                },
            }
        ),
        "responses": {"200": json_response("the task", _TASK)},
    },
    ("post", "/api/tasks/{task_id}/schedule/pause"): {
        "summary": "Pause the task's schedule (no runs start until resumed)",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [path_id("task_id")],
        "responses": {"200": json_response("the schedule", _SCHEDULE)},
    },
    ("post", "/api/tasks/{task_id}/schedule/resume"): {
        "summary": "Resume the task's schedule from the next fire time after now",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [path_id("task_id")],
        "responses": {"200": json_response("the schedule", _SCHEDULE)},
    },
    ("get", "/api/tasks/{task_id}/executions"): {
        "summary": "The task's executions (one per scan job)",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [path_id("task_id"), LIMIT, CURSOR],
        "responses": {"200": json_response("a page of executions", page())},
    },
    ("get", "/api/tasks/{task_id}/results"): {
        "summary": "The endpoints the task's executions found, by address and port",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [
            path_id("task_id"),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the run whose results to list (default: the latest finished run)",
            ),
            LIMIT,
            CURSOR,
        ],
        "responses": {
            "200": json_response(
                "a page of endpoints",
                page(
                    obj({"ip": {"type": "string"}, "port": {"type": "integer"}}),
                    total_ips={"type": "integer"},
                    total_endpoints={"type": "integer"},
                ),
            )
        },
    },
    ("get", "/api/tasks/{task_id}/changes"): {
        "summary": "What the task's scans changed: new, changed, gone, reappeared",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [
            path_id("task_id"),
            query("kind", {"type": "string", "enum": ["new", "changed", "gone", "reappeared"]}),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the run whose change set to list (default: the latest finished run)",
            ),
            query(
                "from_run",
                {"type": "integer", "minimum": 1},
                "with to_run: compare two runs of the task (either order); items carry kind "
                "new, gone or changed",
            ),
            query("to_run", {"type": "integer", "minimum": 1}),
            LIMIT,
            CURSOR,
        ],
        "responses": {"200": json_response("a page of changes", page(counts={"type": "object"}))},
    },
    ("post", "/api/tasks/{task_id}/imports"): {
        "summary": "Import a result file (nmap XML, masscan JSON, naabu JSON) into the task",
        "tags": ["tasks"],
        "security": USER,
        "parameters": [
            path_id("task_id"),
            query("format", {"type": "string", "enum": ["nmap-xml", "masscan-json", "naabu-json"]}),
            query("observed_at", {"type": "string", "enum": ["file", "import"]}),
        ],
        "requestBody": {
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
        "responses": {"201": json_response("imported", obj({"import": {"type": "object"}}))},
    },
    ("get", "/api/assets"): {
        "summary": "Search current assets (your view, or the global one)",
        "tags": ["assets"],
        "security": USER,
        "parameters": [
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
        "responses": {"200": json_response("a page of current assets", page())},
    },
    ("get", "/api/assets/history"): {
        "summary": "One endpoint's verdict and its events (new, changed, gone, reappeared)",
        "tags": ["assets"],
        "security": USER,
        "parameters": [
            {"name": "ip", "in": "query", "required": True, "schema": {"type": "string"}},
            {
                "name": "port",
                "in": "query",
                "required": True,
                "schema": {"type": "integer", "minimum": 1, "maximum": 65535},
            },
            query("transport", {"type": "string", "enum": ["tcp", "udp"]}),
            LIMIT,
            CURSOR,
        ],
        "responses": {"200": json_response("the history", {"type": "object"})},
    },
}
