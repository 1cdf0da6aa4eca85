"""Health, metrics, the admin's system pages, the report renderer and traffic rollups."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    PUBLIC,
    body,
    json_response,
    obj,
    operation,
    page,
    query,
)

_TEXT = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}
# A rollup row. Its names are snake_case; netmap 0.1 used camelCase (bucketStart …),
# still accepted on ingest and answered with ?names=camelCase (docs/upgrading.md).
_ROLLUP_ROW = obj(
    {
        "granularity": {"type": "string", "enum": ["5m", "day"]},
        "domain": _TEXT,
        "method": _TEXT,
        "path": _TEXT,
    },
    {
        "bucket_start": {"type": "string", "format": "date-time"},
        "bucket_end": {"type": "string", "format": "date-time"},
        "business_date": {"type": "string", "format": "date"},
        "response_bytes": _COUNT,
        "request_bytes": {"type": ["integer", "null"], "minimum": 0},
        "request_bytes_known_count": _COUNT,
        "total_requests": _COUNT,
        "status_counts": {"type": "object", "additionalProperties": _COUNT},
        "source_server": _TEXT,
        "generated_at": {"type": "string", "format": "date-time"},
        "frozen": {"type": "boolean"},
    },
)

OPERATIONS = {
    ("get", "/api/openapi.json"): operation(
        "system",
        "This document (OpenAPI 3.1)",
        {"200": json_response("the document", obj({"openapi": _TEXT, "paths": {}}))},
        security=PUBLIC,
    ),
    ("get", "/healthz"): operation(
        "system",
        "The process is alive",
        {"200": json_response("alive", obj({"status": {"const": "ok"}}))},
        security=PUBLIC,
    ),
    ("get", "/readyz"): operation(
        "system",
        "Ready to serve: database reachable and schema current",
        {
            "200": json_response("ready", obj({"status": {"const": "ready"}})),
            "503": json_response(
                "not ready", obj({"status": {"const": "unavailable"}, "reason": _TEXT})
            ),
        },
        security=PUBLIC,
    ),
    ("get", "/metrics"): operation(
        "system",
        "Prometheus metrics (admin session or the metrics bearer token)",
        {"200": {"description": "text exposition", "content": {"text/plain": {"schema": _TEXT}}}},
        security=[{"session": []}, {"metrics": []}],
    ),
    ("get", "/api/config/check"): operation(
        "system",
        "The configuration check with effective values, secrets hidden (admin)",
        {"200": json_response("the check", {"type": "object"})},
    ),
    ("get", "/api/system/resources"): operation(
        "system",
        "Resource samples of this instance's processes and host (admin)",
        {
            "200": json_response(
                "series",
                obj(
                    {
                        "from": _TEXT,
                        "to": _TEXT,
                        "max_points": {"type": "integer"},
                        "series": {
                            "type": "array",
                            "items": obj(
                                {
                                    "metric": _TEXT,
                                    "unit": {
                                        "type": "string",
                                        "enum": ["bytes", "bytes_per_second", "percent", ""],
                                    },
                                    "host": _TEXT,
                                    "process": {"type": ["string", "null"]},
                                    "points": {
                                        "type": "array",
                                        "description": "[sampled at, average, peak] per bucket",
                                        "items": {"type": "array"},
                                    },
                                }
                            ),
                        },
                    }
                ),
            )
        },
        parameters=[query("from"), query("to"), query("metric")],
        description="Series per metric, host and process, averaged into at most "
        "max_points buckets; each names its unit (bytes, bytes_per_second, percent, or "
        "empty for a load average).",
    ),
    ("get", "/api/system/slow-sql"): operation(
        "system",
        "The slowest statements (pg_stat_statements) (admin)",
        {"200": json_response("the report", {"type": "object"})},
    ),
    ("get", "/api/system/diagnostics"): operation(
        "system",
        "A redacted diagnostics archive for a bug report (admin)",
        {
            "200": {
                "description": "ZIP archive",
                "content": {"application/zip": {"schema": {"type": "string"}}},
            }
        },
    ),
    ("get", "/api/modules/report-render"): operation(
        "system",
        "The published report renderer and its revision (admin)",
        {"200": json_response("status", {"type": "object"})},
    ),
    ("post", "/api/modules/report-render"): operation(
        "system",
        "Publish a renderer release (admin)",
        {"200": json_response("published", {"type": "object"})},
        requestBody=body(
            obj(
                {
                    "expectedRevision": {"type": "integer"},
                    "releaseId": _TEXT,
                    "changeReason": _TEXT,
                }
            )
        ),
    ),
    ("post", "/api/modules/report-render/close-stuck"): operation(
        "system",
        "Close the stuck draining renderer generations up to a revision (admin)",
        {"202": json_response("requested", {"type": "object"})},
        requestBody=body(obj({"throughRevision": {"type": "integer", "minimum": 1}})),
    ),
    ("post", "/api/traffic/rollups"): operation(
        "traffic",
        "Ingest rollup rows from `netmap traffic rollup` (rollup bearer token)",
        {"200": json_response("accepted", obj({"accepted": {"type": "integer"}}))},
        security=[{"traffic": []}],
        requestBody=body(obj({"rows": {"type": "array", "items": _ROLLUP_ROW}})),
    ),
    ("get", "/api/traffic/rollups"): operation(
        "traffic",
        "Traffic rollup rows per domain and bucket",
        {"200": json_response("a page of rows", page(_ROLLUP_ROW))},
        parameters=[
            query("domain"),
            query("granularity", {"type": "string", "enum": ["5m", "day"]}),
            query(
                "from",
                description="bucket starts from here: a date (midnight in the business time "
                "zone) or an ISO 8601 timestamp",
            ),
            query(
                "to",
                description="bucket starts before this timestamp; a date includes that day",
            ),
            query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
            query("names", {"type": "string", "enum": ["snake_case", "camelCase"]}),
            CURSOR,
        ],
    ),
}
