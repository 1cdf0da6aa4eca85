"""Result exports and the download links of stored objects."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    PUBLIC,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    query,
    ref,
)

_EXPORT = obj({"export": ref("Export")})

OPERATIONS = {
    ("post", "/api/tasks/{task_id}/exports"): operation(
        "exports",
        "Export the task's results (the runner builds the file)",
        {"202": json_response("queued", _EXPORT)},
        parameters=[
            path_id("task_id"),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the run to export (default: the task's latest finished run)",
            ),
        ],
        requestBody=body(obj({"format": {"type": "string", "enum": ["csv", "jsonl", "zip"]}})),
    ),
    ("get", "/api/exports"): operation(
        "exports",
        "Your exports",
        {"200": json_response("a page of exports", page(ref("Export")))},
        parameters=[LIMIT, CURSOR],
    ),
    ("get", "/api/exports/{export_id}"): operation(
        "exports",
        "One export; download_url once it is ready",
        {"200": json_response("the export", _EXPORT)},
        parameters=[path_id("export_id")],
    ),
    ("delete", "/api/exports/{export_id}"): operation(
        "exports",
        "Delete an export and its file",
        {
            "200": json_response(
                "deleted",
                obj({"export": ref("Export"), "objects": {"type": "array", "items": {}}}),
            )
        },
        parameters=[path_id("export_id")],
    ),
    ("get", "/api/objects/{token}"): operation(
        "exports",
        "Download a stored object (the signed link in download_url)",
        {
            "200": {
                "description": "the file",
                "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            }
        },
        security=PUBLIC,
        parameters=[
            {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
    ),
}
