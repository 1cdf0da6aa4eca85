"""Report definitions, reports, their archived mail and templates."""

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
    ref,
)

_DEFINITION_FIELDS = {
    "name": {"type": "string"},
    "task_id": {"type": "integer"},
    "scope": {"type": "string", "enum": ["all"]},
    "period": {"type": "string", "enum": ["daily", "weekly", "on_demand"]},
    "recipients": {"type": "array", "items": {"type": "string", "format": "email"}},
    "template": {"type": "string"},
    "timezone": {"type": "string", "example": "Europe/Berlin"},
    "enabled": {"type": "boolean"},
}
_DEFINITION = obj({"definition": ref("ReportDefinition")})
_REPORT = obj({"report": ref("Report")})

OPERATIONS = {
    ("post", "/api/reports/definitions"): {
        "summary": "Define a report: a task (or all your assets), a period, recipients",
        "tags": ["reports"],
        "security": USER,
        "requestBody": body(
            {
                "type": "object",
                "required": ["name", "period", "recipients"],
                "properties": _DEFINITION_FIELDS,
            }
        ),
        "responses": {"201": json_response("created", _DEFINITION)},
    },
    ("get", "/api/reports/definitions"): {
        "summary": "Your report definitions",
        "tags": ["reports"],
        "security": USER,
        "responses": {
            "200": json_response(
                "definitions",
                obj({"items": {"type": "array", "items": ref("ReportDefinition")}}),
            )
        },
    },
    ("get", "/api/reports/definitions/{definition_id}"): {
        "summary": "One report definition",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("definition_id")],
        "responses": {"200": json_response("the definition", _DEFINITION)},
    },
    ("put", "/api/reports/definitions/{definition_id}"): {
        "summary": "Change a report definition",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("definition_id")],
        "requestBody": body({"type": "object", "properties": _DEFINITION_FIELDS}),
        "responses": {"200": json_response("changed", _DEFINITION)},
    },
    ("patch", "/api/reports/definitions/{definition_id}"): {
        "summary": "Change some fields of a report definition",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("definition_id")],
        "requestBody": body({"type": "object", "properties": _DEFINITION_FIELDS}),
        "responses": {"200": json_response("changed", _DEFINITION)},
    },
    ("delete", "/api/reports/definitions/{definition_id}"): {
        "summary": "Delete a report definition",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("definition_id")],
        "responses": {"200": json_response("deleted", obj({"deleted": {"type": "integer"}}))},
    },
    ("post", "/api/reports/definitions/{definition_id}/run"): {
        "summary": "Queue a report of this definition now",
        "description": 'Optional body {"run": id}: show that run of the definition\'s task '
        "(default: its latest finished run).",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("definition_id")],
        "requestBody": body(obj({}, {"run": {"type": "integer", "minimum": 1}}), required=False),
        "responses": {"202": json_response("queued", _REPORT)},
    },
    ("get", "/api/reports"): {
        "summary": "Your reports, newest first",
        "tags": ["reports"],
        "security": USER,
        "parameters": [LIMIT, CURSOR],
        "responses": {"200": json_response("a page of reports", page(ref("Report")))},
    },
    ("get", "/api/reports/{report_id}"): {
        "summary": "One report: status, statistics, deliveries",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("report_id")],
        "responses": {"200": json_response("the report", _REPORT)},
    },
    ("get", "/api/reports/{report_id}/mail.html"): {
        "summary": "The report's mail as archived, with its images",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("report_id")],
        "responses": {
            "200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}
        },
    },
    ("post", "/api/reports/{report_id}/retry"): {
        "summary": "Run a failed report again, or resend its failed deliveries (admin)",
        "tags": ["reports"],
        "security": USER,
        "parameters": [path_id("report_id")],
        "responses": {"202": json_response("queued again", _REPORT)},
    },
    ("get", "/api/reports/templates"): {
        "summary": "Mail templates and their versions (admin)",
        "tags": ["reports"],
        "security": USER,
        "responses": {
            "200": json_response("templates", obj({"items": {"type": "array", "items": {}}}))
        },
    },
    ("post", "/api/reports/templates"): {
        "summary": "Add a template version (admin)",
        "tags": ["reports"],
        "security": USER,
        "requestBody": body(
            obj(
                {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "subject": {"type": "string"},
                    "html": {"type": "string"},
                },
                {"enabled": {"type": "boolean"}},
            )
        ),
        "responses": {"201": json_response("added", obj({"template": {"type": "object"}}))},
    },
    ("post", "/api/reports/templates/{name}/publish"): {
        "summary": "Publish a template version (admin)",
        "tags": ["reports"],
        "security": USER,
        "parameters": [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "requestBody": body(obj({"version": {"type": "string"}})),
        "responses": {"200": json_response("published", obj({"template": {"type": "object"}}))},
    },
}
