"""The scanner protocol: claim, lease, fail and upload (docs/scanner-protocol.md has the
bodies in full; a scanner authenticates with its bearer token)."""

from __future__ import annotations

from app.http.openapi.components import SCANNER, body, json_response, obj, operation, path_id

# What the agent says about itself on every claim and renewal (optional; the fleet list
# shows it). A bad value is a 400 naming ``agent.<field>``.
AGENT = {
    "type": "object",
    "properties": {
        "version": {"type": ["string", "null"], "maxLength": 64},
        "hostname": {"type": ["string", "null"], "maxLength": 255},
        "engines": {
            "type": "object",
            "maxProperties": 8,
            "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,31}$"},
            "additionalProperties": {"type": ["string", "null"], "maxLength": 64},
        },
    },
    "additionalProperties": False,
}


def closed(schema: dict) -> dict:
    """A body that refuses fields it does not name (400 ``unknown_field``)."""
    return {**schema, "additionalProperties": False}


OPERATIONS = {
    ("post", "/api/scanner/claim"): operation(
        "scanner",
        "Claim the next queued execution (204 when there is none)",
        {
            "200": json_response(
                "an execution under lease", obj({"execution": {"type": "object"}})
            ),
            "204": {"description": "nothing to do"},
        },
        security=SCANNER,
        requestBody=body(
            closed(
                obj({}, {"kinds": {"type": "array", "items": {"type": "string"}}, "agent": AGENT})
            ),
            required=False,
        ),
    ),
    ("post", "/api/scanner/executions/{execution_id}/lease"): operation(
        "scanner",
        "Renew the lease of a claimed execution",
        {"200": json_response("renewed", obj({"lease_expires_at": {"type": "string"}}))},
        security=SCANNER,
        parameters=[path_id("execution_id")],
        requestBody=body(closed(obj({"claim_token": {"type": "string"}}, {"agent": AGENT}))),
    ),
    ("post", "/api/scanner/executions/{execution_id}/fail"): operation(
        "scanner",
        "Report a claimed execution failed",
        {"200": json_response("recorded", obj({"success": {"const": True}}))},
        security=SCANNER,
        parameters=[path_id("execution_id")],
        requestBody=body(
            closed(obj({"claim_token": {"type": "string"}}, {"reason": {"type": "string"}}))
        ),
    ),
    ("post", "/api/scanner/executions/{execution_id}/uploads"): operation(
        "scanner",
        "Upload one batch of observations (the last one with is_final: true)",
        {
            "200": json_response(
                "saved (0 when the batch was already confirmed)",
                obj({"success": {"const": True}, "saved": {"type": "integer"}}),
            )
        },
        security=SCANNER,
        parameters=[path_id("execution_id")],
        requestBody=body(
            obj(
                {
                    "protocol_version": {"const": 1},
                    "claim_token": {"type": "string"},
                    "upload_id": {"type": "string"},
                    "batch_index": {"type": "integer", "minimum": 0},
                    "is_final": {"type": "boolean"},
                    "checksum": {"type": "string"},
                    "observations": {"type": "array", "items": {"type": "object"}},
                },
                {
                    "stream": {"type": "string", "enum": ["main", "dns"]},
                    "dns_records": {"type": "array", "items": {"type": "object"}},
                },
            )
        ),
    ),
}
