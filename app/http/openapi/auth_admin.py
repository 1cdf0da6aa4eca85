"""Sign-in, the session, and the admin's user and scanner accounts."""

from __future__ import annotations

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    SESSION,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    query,
    ref,
)

_CREDENTIALS = obj({"username": {"type": "string"}, "password": {"type": "string"}})

_TIME = {"type": ["string", "null"], "format": "date-time"}
_TOKEN = obj(
    {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "hint": {"type": "string", "description": "the secret's last four characters"},
        "access": {"type": "string", "enum": ["write", "read"]},
        "created_at": {"type": "string", "format": "date-time"},
        "expires_at": _TIME,
        "last_used_at": _TIME,
    }
)

OPERATIONS = {
    ("post", "/api/auth/login"): operation(
        "auth",
        "Sign in: sets the session cookie and returns the CSRF token",
        {"200": json_response("signed in", ref("Session"))},
        security=[],
        requestBody=body(_CREDENTIALS),
    ),
    ("get", "/api/auth/me"): operation(
        "auth",
        "The signed-in user and the session's CSRF token",
        {"200": json_response("the session", ref("Session"))},
    ),
    ("post", "/api/auth/logout"): operation(
        "auth",
        "End this session",
        {"204": {"description": "signed out"}},
        security=SESSION,
    ),
    ("get", "/api/auth/sessions"): operation(
        "auth",
        "Your live sessions (this one first, then the newest 100) and their total",
        {
            "200": json_response(
                "your sessions",
                obj(
                    {
                        "total": {"type": "integer"},
                        "items": {
                            "type": "array",
                            "items": obj(
                                {
                                    "current": {"type": "boolean"},
                                    "created_at": {"type": "string", "format": "date-time"},
                                    "expires_at": {"type": "string", "format": "date-time"},
                                }
                            ),
                        },
                    }
                ),
            )
        },
        security=SESSION,
    ),
    ("post", "/api/auth/sessions/end-others"): operation(
        "auth",
        "Sign out everywhere else: every other session of yours ends (audited)",
        {"200": json_response("how many ended", obj({"ended": {"type": "integer"}}))},
        security=SESSION,
    ),
    ("get", "/api/audit"): operation(
        "admin",
        "The audit trail, newest first (admins)",
        {
            "200": json_response(
                "one page",
                page(
                    obj(
                        {
                            "id": {"type": "integer"},
                            "at": {"type": "string", "format": "date-time"},
                            "actor": {"type": ["object", "null"]},
                            "action": {"type": "string"},
                            "target_type": {"type": ["string", "null"]},
                            "target_id": {"type": ["string", "null"]},
                            "details": {"type": "object"},
                        }
                    )
                ),
            )
        },
        parameters=[
            query("action", description="an action (user.disable) or a family (user)"),
            query("actor", description="the acting user's name"),
            LIMIT,
            CURSOR,
        ],
    ),
    ("get", "/api/auth/tokens"): operation(
        "auth",
        "Your personal API tokens (never their secrets)",
        {"200": json_response("your tokens", obj({"items": {"type": "array", "items": _TOKEN}}))},
    ),
    ("post", "/api/auth/tokens"): operation(
        "auth",
        "Make a personal API token: its secret is in this answer only",
        {
            "201": json_response(
                "made (Cache-Control: no-store)",
                obj({"token": _TOKEN, "secret": {"type": "string", "example": "nmu_…"}}),
            )
        },
        security=SESSION,
        description=(
            "Send the secret as `Authorization: Bearer <secret>` to call the API's user "
            "routes as yourself, without a session or CSRF header. Only a signed-in "
            "session may make a token (403 `session_required` for a token). "
            "`expires_in_days` 1-3650; absent or null: the token does not expire."
        ),
        requestBody=body(
            obj(
                {"name": {"type": "string", "minLength": 1, "maxLength": 100}},
                {
                    "expires_in_days": {"type": ["integer", "null"], "minimum": 1, "maximum": 3650},
                    "access": {
                        "type": "string",
                        "enum": ["write", "read"],
                        "description": "write (default): any request you may make; "
                        "read: GET and HEAD only (403 read_only_token otherwise)",
                    },
                },
            )
        ),
    ),
    ("delete", "/api/auth/tokens/{token_id}"): operation(
        "auth",
        "Revoke one of your API tokens (the next request with it is a 401)",
        {"204": {"description": "revoked"}},
        parameters=[path_id("token_id")],
    ),
    ("post", "/api/auth/password"): operation(
        "auth",
        "Change your password (ends your other sessions)",
        {"200": json_response("changed; a new session", ref("Session"))},
        security=SESSION,
        requestBody=body(
            obj({"current_password": {"type": "string"}, "new_password": {"type": "string"}})
        ),
    ),
    ("post", "/api/users"): operation(
        "admin",
        "Create a user (admin)",
        {"201": json_response("created", ref("User"))},
        requestBody=body(
            obj(
                {"username": {"type": "string"}, "password": {"type": "string"}},
                {"is_admin": {"type": "boolean"}},
            )
        ),
    ),
    ("post", "/api/users/{user_id}/disable"): operation(
        "admin",
        "Disable a user and end their sessions (admin)",
        {"200": json_response("disabled", obj({"id": {"type": "integer"}, "disabled": {}}))},
        parameters=[path_id("user_id")],
    ),
    ("post", "/api/users/{user_id}/enable"): operation(
        "admin",
        "Enable a user again (admin)",
        {"200": json_response("enabled", obj({"id": {"type": "integer"}, "disabled": {}}))},
        parameters=[path_id("user_id")],
    ),
    ("post", "/api/scanners"): operation(
        "admin",
        "Create a scanner; its token is shown only in this answer (admin)",
        {
            "201": json_response(
                "created",
                obj(
                    {
                        "id": {"type": "integer"},
                        "name": {"type": "string"},
                        "token": {"type": "string"},
                    }
                ),
            )
        },
        requestBody=body(obj({"name": {"type": "string"}})),
    ),
}
