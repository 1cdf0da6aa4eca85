"""Sign-in, the session, and the admin's user and scanner accounts."""

from __future__ import annotations

from app.http.openapi.components import USER, body, json_response, obj, path_id, ref

_CREDENTIALS = obj({"username": {"type": "string"}, "password": {"type": "string"}})

OPERATIONS = {
    ("post", "/api/auth/login"): {
        "summary": "Sign in: sets the session cookie and returns the CSRF token",
        "tags": ["auth"],
        "security": [],
        "requestBody": body(_CREDENTIALS),
        "responses": {"200": json_response("signed in", ref("Session"))},
    },
    ("get", "/api/auth/me"): {
        "summary": "The signed-in user and the session's CSRF token",
        "tags": ["auth"],
        "security": USER,
        "responses": {"200": json_response("the session", ref("Session"))},
    },
    ("post", "/api/auth/logout"): {
        "summary": "End this session",
        "tags": ["auth"],
        "security": USER,
        "responses": {"204": {"description": "signed out"}},
    },
    ("post", "/api/auth/password"): {
        "summary": "Change your password (ends your other sessions)",
        "tags": ["auth"],
        "security": USER,
        "requestBody": body(
            obj({"current_password": {"type": "string"}, "new_password": {"type": "string"}})
        ),
        "responses": {"200": json_response("changed; a new session", ref("Session"))},
    },
    ("post", "/api/users"): {
        "summary": "Create a user (admin)",
        "tags": ["admin"],
        "security": USER,
        "requestBody": body(
            obj(
                {"username": {"type": "string"}, "password": {"type": "string"}},
                {"is_admin": {"type": "boolean"}},
            )
        ),
        "responses": {"201": json_response("created", ref("User"))},
    },
    ("post", "/api/users/{user_id}/disable"): {
        "summary": "Disable a user and end their sessions (admin)",
        "tags": ["admin"],
        "security": USER,
        "parameters": [path_id("user_id")],
        "responses": {
            "200": json_response("disabled", obj({"id": {"type": "integer"}, "disabled": {}}))
        },
    },
    ("post", "/api/users/{user_id}/enable"): {
        "summary": "Enable a user again (admin)",
        "tags": ["admin"],
        "security": USER,
        "parameters": [path_id("user_id")],
        "responses": {
            "200": json_response("enabled", obj({"id": {"type": "integer"}, "disabled": {}}))
        },
    },
    ("post", "/api/scanners"): {
        "summary": "Create a scanner; its token is shown only in this answer (admin)",
        "tags": ["admin"],
        "security": USER,
        "requestBody": body(obj({"name": {"type": "string"}})),
        "responses": {
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
    },
}
