"""Schemas and helpers shared by every area's entries (the error envelope, pages, ids)."""

from __future__ import annotations

from typing import Any

from app.scan_control.query import TASK_STATUSES

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}

SCHEMAS: dict[str, Any] = {
    "Error": ERROR,
    "User": {
        "type": "object",
        "required": ["id", "username", "is_admin"],
        "properties": {
            "id": {"type": "integer"},
            "username": {"type": "string"},
            "is_admin": {"type": "boolean"},
        },
    },
    "Session": {
        "type": "object",
        "required": ["user", "csrf_token"],
        "properties": {
            "user": {"$ref": "#/components/schemas/User"},
            "csrf_token": {
                "type": ["string", "null"],
                "description": "Send it back as the X-CSRF-Token header on every change; "
                "null for a bearer token's caller, which needs none.",
            },
        },
    },
    "Task": {
        "type": "object",
        "required": [
            "id",
            "name",
            "status",
            "targets",
            "ports",
            "transports",
            "profile",
            "scan",
            "owner_id",
            "parent_task_id",
            "execution_count",
            "created_at",
            "updated_at",
            "finished_at",
        ],
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "status": {
                "type": "string",
                "enum": list(TASK_STATUSES),
                "description": "the newest run's (idle: an import-only task before its "
                "first import)",
            },
            "targets": {"type": "array", "items": {"type": "string"}},
            "ports": {"type": "string", "description": "ports and ranges, normalised"},
            "transports": {"type": "array", "items": {"type": "string", "enum": ["tcp", "udp"]}},
            "profile": {"type": "string", "enum": ["quick", "standard", "deep"]},
            "owner_id": {"type": "integer"},
            "parent_task_id": {
                "type": ["integer", "null"],
                "description": "the task whose DNS execution made this one",
            },
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "counts": {
                "type": "object",
                "description": "one task only: executions by status, observations, endpoints "
                "over every run",
                "properties": {
                    "executions": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "observations": {"type": "integer"},
                    "endpoints": {"type": "integer"},
                },
            },
            "projection_status": {"type": "string", "description": "one task only"},
            "changes": {
                "type": "object",
                "description": "one task only: change counts per kind",
            },
            "child_task_ids": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "one task only: the DNS follow-up tasks it made",
            },
            "execution_count": {"type": "integer"},
            "scan": {"type": "boolean", "description": "false: an import-only task"},
            "latest_run": {
                "type": ["object", "null"],
                "description": "the task's newest run (id, number, status, trigger, times, counts)",
            },
            "schedule": {"oneOf": [{"$ref": "#/components/schemas/Schedule"}, {"type": "null"}]},
        },
    },
    "TaskRequest": {
        "type": "object",
        "required": ["name", "targets", "ports"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "targets": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string"},
                "description": "Addresses, CIDR ranges or domain names.",
                "example": ["192.0.2.10", "198.51.100.0/28", "www.example.com"],
            },
            "ports": {
                "type": ["string", "integer"],
                "example": "22,80,443,8000-8100",
                "description": "ports and ranges, comma-separated; one port may be a number",
            },
            "transports": {
                "type": "array",
                "items": {"type": "string", "enum": ["tcp", "udp"]},
                "default": ["tcp"],
            },
            "profile": {
                "type": "string",
                "enum": ["quick", "standard", "deep"],
                "default": "standard",
            },
            "scan": {
                "type": "boolean",
                "default": True,
                "description": "false: an import-only task; nothing is queued, each import "
                "becomes a run",
            },
            "schedule": {
                "oneOf": [{"$ref": "#/components/schemas/ScheduleRequest"}, {"type": "null"}]
            },
        },
    },
    "ScheduleRequest": {
        "type": "object",
        "additionalProperties": False,
        "description": "Either cron (with timezone, default UTC) or every_seconds "
        "(at least [scan] min_schedule_seconds). docs/schedules.md",
        "properties": {
            "cron": {"type": "string", "example": "0 3 * * *"},
            "timezone": {"type": "string", "example": "Europe/Berlin"},
            "every_seconds": {"type": "integer", "minimum": 1, "example": 3600},
            "start_at": {"type": "string", "format": "date-time"},
            "end_at": {"type": "string", "format": "date-time"},
            "jitter_seconds": {"type": "integer", "minimum": 0, "default": 0},
        },
    },
    "Schedule": {
        "type": "object",
        "required": ["paused", "next_run_at"],
        "properties": {
            "cron": {"type": ["string", "null"]},
            "timezone": {"type": ["string", "null"]},
            "every_seconds": {"type": ["integer", "null"]},
            "start_at": {"type": ["string", "null"], "format": "date-time"},
            "end_at": {"type": ["string", "null"], "format": "date-time"},
            "jitter_seconds": {"type": "integer"},
            "paused": {"type": "boolean"},
            "next_run_at": {
                "type": ["string", "null"],
                "format": "date-time",
                "description": "when the next run starts (fire time plus jitter); null while "
                "paused or after end_at",
            },
            "recent_slots": {
                "type": "array",
                "description": "the latest fire times handled: started (run_id, and the "
                "run's run_number) or skipped (reason, e.g. run_active); caught_up counts the "
                "missed fire times a catch-up run stands for",
                "items": {"type": "object"},
            },
        },
    },
    "Export": {
        "type": "object",
        "required": ["id", "status", "download_url"],
        "properties": {
            "id": {"type": "integer"},
            "status": {
                "type": "string",
                "enum": ["queued", "running", "ready", "failed", "expired", "deleted"],
            },
            "download_url": {"type": ["string", "null"]},
            "task_id": {"type": ["integer", "null"], "description": "null: an asset export"},
            "owner_id": {"type": "integer"},
            "format": {"type": "string", "enum": ["csv", "jsonl", "zip"]},
            "executions": {"type": "array", "items": {"type": "integer"}},
            "size": {"type": ["integer", "null"], "description": "bytes, once built"},
            "rows": {"type": ["integer", "null"], "description": "endpoints, once built"},
            "attempts": {"type": "integer"},
            "error": {"type": ["string", "null"]},
            "created_at": {"type": ["string", "null"], "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "expires_at": {"type": ["string", "null"], "format": "date-time"},
            "deleted_at": {"type": ["string", "null"], "format": "date-time"},
            "query": {"type": ["string", "null"], "description": "an asset export's query"},
            "filters": {
                "type": ["object", "null"],
                "description": "an asset export's GET /api/assets parameters",
            },
        },
    },
    "Endpoint": {
        "type": "object",
        "description": "an endpoint as a task's results list it (an execution's sighting)",
        "required": ["ip", "port", "transport", "state"],
        "properties": {
            "ip": {"type": "string"},
            "port": {"type": "integer"},
            "transport": {"type": "string", "enum": ["tcp", "udp"]},
            "state": {"type": ["string", "null"]},
            "service": {"type": ["string", "null"]},
            "product": {"type": ["string", "null"]},
            "version": {"type": ["string", "null"]},
            "banner": {"type": ["string", "null"]},
            "hostname": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "first_seen": {"type": "string", "format": "date-time"},
            "last_seen": {"type": "string", "format": "date-time"},
            "first_execution_id": {"type": "integer"},
            "last_execution_id": {"type": "integer"},
            "details": {
                "type": "object",
                "description": "the certificate (tls) and HTTP (http) facts, when scanned "
                "(docs/inventory.md); exports carry the whole details",
                "properties": {"tls": {"type": "object"}, "http": {"type": "object"}},
            },
            "observed": {
                "type": "object",
                "description": "when each probed field (service, product, version, banner, "
                "hostname) and details document (tls, http) was last observed",
                "additionalProperties": {"type": "string", "format": "date-time"},
            },
        },
    },
    "Asset": {
        "description": "a current asset: an endpoint deduplicated over every task, with "
        "whether it is open or gone",
        "allOf": [
            {"$ref": "#/components/schemas/Endpoint"},
            {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"type": "string", "enum": ["open", "gone"]},
                    "gone_since": {"type": ["string", "null"], "format": "date-time"},
                    "gone_execution_id": {"type": ["integer", "null"]},
                },
            },
        ],
    },
    "Report": {
        "type": "object",
        "required": ["id", "status", "deliveries"],
        "properties": {
            "id": {"type": "integer"},
            "status": {"type": "string"},
            "run_id": {
                "type": ["integer", "null"],
                "description": "the run shown (null: each task's latest finished run)",
            },
            "subject": {"type": ["string", "null"]},
            "statistics": {"type": ["object", "null"]},
            "deliveries": {"type": "array", "items": {"type": "object"}},
            "definition_id": {"type": ["integer", "null"]},
            "definition_name": {"type": ["string", "null"]},
            "owner_id": {"type": "integer"},
            "task_id": {"type": ["integer", "null"]},
            "period": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string"},
                    "start": {"type": "string", "format": "date-time"},
                    "end": {"type": "string", "format": "date-time"},
                },
            },
            "quality": {
                "type": ["object", "null"],
                "description": "renderer (release, generation, input checksum), mail_error",
            },
            "images": {"type": "array", "items": {"type": "string"}},
            "job": {
                "type": "object",
                "description": "the generation job: status, attempts, available_at, error_kind",
            },
            "error": {"type": ["string", "null"]},
            "created_at": {"type": "string", "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "SearchReference": {
        "type": "object",
        "description": (
            "one of your saved searches (read when used, so edits apply; while referenced "
            "it cannot be deleted) or a search-language query of its own; not both"
        ),
        "properties": {
            "search": {"type": "integer", "description": "a saved search id (/api/searches)"},
            "query": {"type": "string", "maxLength": 1000, "description": "search language"},
        },
        "additionalProperties": False,
    },
    "ReportDefinition": {
        "type": "object",
        "required": ["id", "name", "period", "recipients"],
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "task_id": {"type": ["integer", "null"]},
            "scope": {
                "oneOf": [
                    {"type": "string", "enum": ["task", "all"]},
                    {"$ref": "#/components/schemas/SearchReference"},
                ],
                "description": "task (see task_id), all, or the search that narrows all tasks",
            },
            "period": {"type": "string"},
            "recipients": {"type": "array", "items": {"type": "string"}},
            "owner_id": {"type": "integer"},
            "template": {"type": "string"},
            "timezone": {"type": "string"},
            "enabled": {"type": "boolean"},
            "revision": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object with these required (and optional) properties; others may follow."""
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def page(item: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A keyset page: ``items`` and ``next_cursor`` (null on the last page)."""
    return obj(
        {
            "items": {"type": "array", "items": item or {"type": "object"}},
            "next_cursor": {"type": ["string", "null"]},
        },
        extra,
    )


def json_response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*statuses: str) -> dict[str, Any]:
    """The error envelope under each status (``4XX`` covers every client error)."""
    return {status: json_response("error", ref("Error")) for status in statuses}


def body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def path_id(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }


def query(name: str, schema: dict[str, Any] | None = None, description: str = "") -> dict:
    entry = {"name": name, "in": "query", "required": False, "schema": schema or {"type": "string"}}
    if description:
        entry["description"] = description
    return entry


SEARCH_TIME_LIMIT = (
    "A search that runs past `[search] interactive_timeout_seconds` is stopped: 503 "
    "`search_timeout`, without `Retry-After` (narrow the search rather than retry it)."
)


def limit_param(maximum: int) -> dict:
    """A list's ``limit``, with the maximum its route takes (``page_limit``)."""
    return query("limit", {"type": "integer", "minimum": 1, "maximum": maximum})


LIMIT = limit_param(500)  # ``page_limit``'s default maximum
LIMIT_1000 = limit_param(1000)  # lists of results, changes and deliveries
CURSOR = query("cursor", description="next_cursor of the previous page")

# Who may call: the session cookie plus, on changes, the CSRF header; or a bearer token.
USER = [{"session": []}, {"token": []}]
# Routes that act on the session itself (sign out, change the password, make a token).
SESSION = [{"session": []}]
SCANNER = [{"scanner": []}]
PUBLIC: list[dict[str, list]] = []


def operation(
    tag: str,
    summary: str,
    responses: dict[str, Any],
    *,
    security: list[dict[str, list]] = USER,
    **extra: Any,
) -> dict[str, Any]:
    """One operation's entry: its tag, summary, who may call it (a signed-in user unless
    said otherwise) and its answers; ``extra`` adds ``parameters``, ``requestBody``,
    ``description``."""
    return {
        "summary": summary,
        "tags": [tag],
        "security": security,
        "responses": responses,
        **extra,
    }
