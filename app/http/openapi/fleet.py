"""The scanner fleet: each scanner's status and what its agent reported; revoking a token."""

from __future__ import annotations

from app.http.openapi.components import json_response, obj, operation, path_id

_NULLABLE_TEXT = {"type": ["string", "null"]}
_NULLABLE_ID = {"type": ["integer", "null"]}

SCANNER_ITEM = obj(
    {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "status": {"type": "string", "enum": ["never_seen", "online", "busy", "offline"]},
        "last_seen_at": {"type": ["string", "null"], "format": "date-time"},
        "version": _NULLABLE_TEXT,
        "hostname": _NULLABLE_TEXT,
        "engines": {
            "type": "object",
            "description": "engine name (nmap, masscan) -> its version (null: not known)",
            "additionalProperties": _NULLABLE_TEXT,
        },
        "current_execution_id": _NULLABLE_ID,
    },
    {
        "disabled": {"type": "boolean"},
        "last_execution_id": _NULLABLE_ID,
        "observations_per_second": {
            "type": ["number", "null"],
            "description": "observations of the last finished execution per second it ran",
        },
        "created_at": {"type": "string", "format": "date-time"},
    },
)

OPERATIONS = {
    ("get", "/api/scanners"): operation(
        "scanners",
        "The scanners with their status (admins: all; others: those they created)",
        {
            "200": json_response(
                "scanners by id",
                obj({"items": {"type": "array", "items": SCANNER_ITEM}}),
            )
        },
    ),
    ("post", "/api/scanners/{scanner_id}/disable"): operation(
        "scanners",
        "Revoke a scanner's token: its next call answers 401 (admin, audited)",
        {
            "200": json_response(
                "revoked",
                obj(
                    {
                        "id": {"type": "integer"},
                        "name": {"type": "string"},
                        "disabled": {"const": True},
                    }
                ),
            )
        },
        parameters=[path_id("scanner_id")],
    ),
}
