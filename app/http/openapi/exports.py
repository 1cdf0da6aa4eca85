"""Result exports and the download links of stored objects."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    PUBLIC,
    USER,
    body,
    json_response,
    obj,
    page,
    path_id,
    query,
    ref,
)

_EXPORT = obj({"export": ref("Export")})

OPERATIONS = {
    ("post", "/api/tasks/{task_id}/exports"): {
        "summary": "Export the task's results (the runner builds the file)",
        "tags": ["exports"],
        "security": USER,
        "parameters": [
            path_id("task_id"),
            query(
                "run",
                {"type": "integer", "minimum": 1},
                "the run to export (default: the task's latest finished run)",
            ),
        ],
        "requestBody": body(obj({"format": {"type": "string", "enum": ["csv", "jsonl", "zip"]}})),
        "responses": {"202": json_response("queued", _EXPORT)},
    },
    ("get", "/api/exports"): {
        "summary": "Your exports",
        "tags": ["exports"],
        "security": USER,
        "parameters": [LIMIT, CURSOR],
        "responses": {"200": json_response("a page of exports", page(ref("Export")))},
    },
    ("get", "/api/exports/{export_id}"): {
        "summary": "One export; download_url once it is ready",
        "tags": ["exports"],
        "security": USER,
        "parameters": [path_id("export_id")],
        "responses": {"200": json_response("the export", _EXPORT)},
    },
    ("delete", "/api/exports/{export_id}"): {
        "summary": "Delete an export and its file",
        "tags": ["exports"],
        "security": USER,
        "parameters": [path_id("export_id")],
        "responses": {
            "200": json_response(
                "deleted",
                obj({"export": ref("Export"), "objects": {"type": "array", "items": {}}}),
            )
        },
    },
    ("get", "/api/objects/{token}"): {
        "summary": "Download a stored object (the signed link in download_url)",
        "tags": ["exports"],
        "security": PUBLIC,
        "parameters": [
            {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {
            "200": {
                "description": "the file",
                "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            }
        },
    },
}
