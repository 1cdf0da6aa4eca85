"""Health, metrics, the admin's system pages, the report renderer and traffic rollups."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    PUBLIC,
    USER,
    body,
    json_response,
    obj,
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
    ("get", "/api/openapi.json"): {
        "summary": "This document (OpenAPI 3.1)",
        "tags": ["system"],
        "security": PUBLIC,
        "responses": {"200": json_response("the document", obj({"openapi": _TEXT, "paths": {}}))},
    },
    ("get", "/healthz"): {
        "summary": "The process is alive",
        "tags": ["system"],
        "security": PUBLIC,
        "responses": {"200": json_response("alive", obj({"status": {"const": "ok"}}))},
    },
    ("get", "/readyz"): {
        "summary": "Ready to serve: database reachable and schema current",
        "tags": ["system"],
        "security": PUBLIC,
        "responses": {
            "200": json_response("ready", obj({"status": {"const": "ready"}})),
            "503": json_response(
                "not ready", obj({"status": {"const": "unavailable"}, "reason": _TEXT})
            ),
        },
    },
    ("get", "/metrics"): {
        "summary": "Prometheus metrics (admin session or the metrics bearer token)",
        "tags": ["system"],
        "security": [{"session": []}, {"metrics": []}],
        "responses": {
            "200": {"description": "text exposition", "content": {"text/plain": {"schema": _TEXT}}}
        },
    },
    ("get", "/api/config/check"): {
        "summary": "The configuration check with effective values, secrets hidden (admin)",
        "tags": ["system"],
        "security": USER,
        "responses": {"200": json_response("the check", {"type": "object"})},
    },
    ("get", "/api/system/resources"): {
        "summary": "Resource samples of this instance's processes and host (admin)",
        "description": "Series per metric, host and process, averaged into at most "
        "max_points buckets; each names its unit (bytes, bytes_per_second, percent, or "
        "empty for a load average).",
        "tags": ["system"],
        "security": USER,
        "parameters": [query("from"), query("to"), query("metric")],
        "responses": {
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
    },
    ("get", "/api/system/slow-sql"): {
        "summary": "The slowest statements (pg_stat_statements) (admin)",
        "tags": ["system"],
        "security": USER,
        "responses": {"200": json_response("the report", {"type": "object"})},
    },
    ("get", "/api/system/diagnostics"): {
        "summary": "A redacted diagnostics archive for a bug report (admin)",
        "tags": ["system"],
        "security": USER,
        "responses": {
            "200": {
                "description": "ZIP archive",
                "content": {"application/zip": {"schema": {"type": "string"}}},
            }
        },
    },
    ("get", "/api/modules/report-render"): {
        "summary": "The published report renderer and its revision (admin)",
        "tags": ["system"],
        "security": USER,
        "responses": {"200": json_response("status", {"type": "object"})},
    },
    ("post", "/api/modules/report-render"): {
        "summary": "Publish a renderer release (admin)",
        "tags": ["system"],
        "security": USER,
        "requestBody": body(
            obj(
                {
                    "expectedRevision": {"type": "integer"},
                    "releaseId": _TEXT,
                    "changeReason": _TEXT,
                }
            )
        ),
        "responses": {"200": json_response("published", {"type": "object"})},
    },
    ("post", "/api/modules/report-render/close-stuck"): {
        "summary": "Close the stuck draining renderer generations up to a revision (admin)",
        "tags": ["system"],
        "security": USER,
        "requestBody": body(obj({"throughRevision": {"type": "integer", "minimum": 1}})),
        "responses": {"202": json_response("requested", {"type": "object"})},
    },
    ("post", "/api/traffic/rollups"): {
        "summary": "Ingest rollup rows from `netmap traffic rollup` (rollup bearer token)",
        "tags": ["traffic"],
        "security": [{"traffic": []}],
        "requestBody": body(obj({"rows": {"type": "array", "items": _ROLLUP_ROW}})),
        "responses": {"200": json_response("accepted", obj({"accepted": {"type": "integer"}}))},
    },
    ("get", "/api/traffic/rollups"): {
        "summary": "Traffic rollup rows per domain and bucket",
        "tags": ["traffic"],
        "security": USER,
        "parameters": [
            query("domain"),
            query("granularity", {"type": "string", "enum": ["5m", "day"]}),
            query("from"),
            query("to"),
            query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
            query("names", {"type": "string", "enum": ["snake_case", "camelCase"]}),
            CURSOR,
        ],
        "responses": {"200": json_response("a page of rows", page(_ROLLUP_ROW))},
    },
}
