"""Report definitions, reports, their archived mail and templates."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    ref,
)

_DEFINITION_FIELDS = {
    "name": {"type": "string"},
    "task_id": {"type": "integer"},
    "scope": {
        "oneOf": [{"type": "string", "enum": ["all"]}, ref("SearchReference")],
        "description": (
            'all your tasks, or {"search": id} / {"query": "…"}: all your tasks, the figures '
            "counted over the current assets the search finds"
        ),
    },
    "period": {"type": "string", "enum": ["daily", "weekly", "on_demand"]},
    "recipients": {"type": "array", "items": {"type": "string", "format": "email"}},
    "template": {"type": "string"},
    "timezone": {"type": "string", "example": "Europe/Berlin"},
    "enabled": {"type": "boolean"},
}
_DEFINITION = obj({"definition": ref("ReportDefinition")})
_REPORT = obj({"report": ref("Report")})

OPERATIONS = {
    ("post", "/api/reports/definitions"): operation(
        "reports",
        "Define a report: a task (or all your assets, or those a search finds), a period, "
        "recipients",
        {"201": json_response("created", _DEFINITION)},
        requestBody=body(
            {
                "type": "object",
                "required": ["name", "period", "recipients"],
                "properties": _DEFINITION_FIELDS,
            }
        ),
    ),
    ("get", "/api/reports/definitions"): operation(
        "reports",
        "Your report definitions",
        {
            "200": json_response(
                "definitions",
                obj({"items": {"type": "array", "items": ref("ReportDefinition")}}),
            )
        },
    ),
    ("get", "/api/reports/definitions/{definition_id}"): operation(
        "reports",
        "One report definition",
        {"200": json_response("the definition", _DEFINITION)},
        parameters=[path_id("definition_id")],
    ),
    ("put", "/api/reports/definitions/{definition_id}"): operation(
        "reports",
        "Change a report definition",
        {"200": json_response("changed", _DEFINITION)},
        parameters=[path_id("definition_id")],
        requestBody=body({"type": "object", "properties": _DEFINITION_FIELDS}),
    ),
    ("patch", "/api/reports/definitions/{definition_id}"): operation(
        "reports",
        "Change some fields of a report definition",
        {"200": json_response("changed", _DEFINITION)},
        parameters=[path_id("definition_id")],
        requestBody=body({"type": "object", "properties": _DEFINITION_FIELDS}),
    ),
    ("delete", "/api/reports/definitions/{definition_id}"): operation(
        "reports",
        "Delete a report definition",
        {"200": json_response("deleted", obj({"deleted": {"type": "integer"}}))},
        parameters=[path_id("definition_id")],
    ),
    ("post", "/api/reports/definitions/{definition_id}/run"): operation(
        "reports",
        "Queue a report of this definition now",
        {
            "202": json_response("queued", _REPORT),
            "409": json_response(
                "run_not_reportable: the run was cancelled or failed before any scan of it "
                "finished",
                ref("Error"),
            ),
        },
        parameters=[path_id("definition_id")],
        requestBody=body(obj({}, {"run": {"type": "integer", "minimum": 1}}), required=False),
        description='Optional body {"run": id}: show that run of the definition\'s task '
        "(default: its latest finished run).",
    ),
    ("get", "/api/reports"): operation(
        "reports",
        "Your reports, newest first",
        {"200": json_response("a page of reports", page(ref("Report")))},
        parameters=[LIMIT, CURSOR],
    ),
    ("get", "/api/reports/{report_id}"): operation(
        "reports",
        "One report: status, statistics, deliveries",
        {"200": json_response("the report", _REPORT)},
        parameters=[path_id("report_id")],
    ),
    ("get", "/api/reports/{report_id}/mail.html"): operation(
        "reports",
        "The report's mail as archived, with its images",
        {"200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}},
        parameters=[path_id("report_id")],
    ),
    ("post", "/api/reports/{report_id}/retry"): operation(
        "reports",
        "Run a failed report again, or resend its failed deliveries (admin)",
        {"202": json_response("queued again", _REPORT)},
        parameters=[path_id("report_id")],
    ),
    ("get", "/api/reports/templates"): operation(
        "reports",
        "Mail templates and their versions (admin)",
        {"200": json_response("templates", obj({"items": {"type": "array", "items": {}}}))},
    ),
    ("post", "/api/reports/templates"): operation(
        "reports",
        "Add a template version (admin)",
        {"201": json_response("added", obj({"template": {"type": "object"}}))},
        requestBody=body(
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
    ),
    ("post", "/api/reports/templates/{name}/publish"): operation(
        "reports",
        "Publish a template version (admin)",
        {"200": json_response("published", obj({"template": {"type": "object"}}))},
        parameters=[{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
        requestBody=body(obj({"version": {"type": "string"}})),
    ),
}
