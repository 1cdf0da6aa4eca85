"""Sign-in, the session, and the admin's user and scanner accounts."""

from __future__ import annotations

from app.http.openapi.components import body, json_response, obj, operation, path_id, ref

_CREDENTIALS = obj({"username": {"type": "string"}, "password": {"type": "string"}})

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
    ),
    ("post", "/api/auth/password"): operation(
        "auth",
        "Change your password (ends your other sessions)",
        {"200": json_response("changed; a new session", ref("Session"))},
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
