"""Who can call what: every route against every kind of caller (IDN-1..6).

The table below must list every route of the app; a route added without an
entry here fails ``test_every_route_is_in_the_matrix``, so access rules are
decided deliberately rather than by default.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from app.http.guards import SAFE_METHODS
from tests.support.scanner_protocol import observation, upload_body
from tests.support.settings import make_settings

ANON, USER, OTHER, ADMIN, SCANNER, OTHER_SCANNER, WRONG_TOKEN, USER_TOKEN = (
    "anonymous",
    "user",
    "other_user",
    "admin",
    "scanner",
    "other_scanner",
    "wrong_token",
    "user_api_token",  # the user's personal API token, with no cookie
)
READ_TOKEN = "user_read_only_token"
CALLERS = (ANON, USER, OTHER, ADMIN, SCANNER, OTHER_SCANNER, WRONG_TOKEN)
# Routes that act on the session itself refuse a token's caller (403 session_required).
SESSION_ONLY = {
    ("GET", "/api/auth/sessions"),
    ("POST", "/api/auth/sessions/end-others"),
    ("POST", "/api/auth/logout"),
    ("POST", "/api/auth/password"),
    ("POST", "/api/auth/tokens"),
}
_names = itertools.count()


@dataclass
class World:
    callers: dict[str, Any]
    task_id: int
    execution_id: int
    claim_token: str
    bystander_id: int
    export_id: int
    definition_id: int = 0
    report_id: int = 0
    alert_channel_id: int = 0
    alert_spare_channel_id: int = 0
    alert_rule_id: int = 0
    alert_delivery_id: str = ""
    run_id: int = 0
    user_token: str = ""
    read_token: str = ""


@dataclass(frozen=True)
class Route:
    method: str
    rule: str
    path: Callable[[World], str]
    body: Callable[[World], Any] | None
    expected: dict[str, int]
    html: bool = False  # a console page: errors are HTML pages, not JSON bodies


def _user_route(ok: int, *, owned: bool) -> dict[str, int]:
    return {
        ANON: 401,
        USER: ok,
        OTHER: 404 if owned else ok,
        ADMIN: ok,
        SCANNER: 401,
        OTHER_SCANNER: 401,
        WRONG_TOKEN: 401,
    }


def _admin_route(ok: int) -> dict[str, int]:
    return {
        ANON: 401,
        USER: 403,
        OTHER: 403,
        ADMIN: ok,
        SCANNER: 401,
        OTHER_SCANNER: 401,
        WRONG_TOKEN: 401,
    }


def _scanner_route(ok: int, other: int) -> dict[str, int]:
    return {
        ANON: 401,
        USER: 401,
        OTHER: 401,
        ADMIN: 401,
        SCANNER: ok,
        OTHER_SCANNER: other,
        WRONG_TOKEN: 401,
    }


PUBLIC = dict.fromkeys(CALLERS, 200)


def _page(ok: int, *, owned: bool = False) -> dict[str, int]:
    """A console page for signed-in users: anyone without a session is sent to sign in."""
    return {
        ANON: 302,
        USER: ok,
        OTHER: 404 if owned else ok,
        ADMIN: ok,
        SCANNER: 302,
        OTHER_SCANNER: 302,
        WRONG_TOKEN: 302,
    }


def _admin_page(ok: int) -> dict[str, int]:
    return {**_page(ok), USER: 403, OTHER: 403}


def _html(method: str, rule: str, path, expected, body=None) -> Route:
    return Route(method, rule, path, body, expected, html=True)


# The matrix posts JSON with the session's X-CSRF-Token header, which the console accepts
# like its form field; the form fields are then missing, so a form answers 400 once past
# access control.
CONSOLE_ROUTES: list[Route] = [
    _html("GET", "/console/", lambda w: "/console/", _page(200)),
    _html(
        "GET",
        "/console/sign-in",
        lambda w: "/console/sign-in",
        {**dict.fromkeys(CALLERS, 200), USER: 302, OTHER: 302, ADMIN: 302},
    ),
    # Without a session there is no CSRF token yet; with one the empty form is a wrong login.
    _html(
        "POST",
        "/console/sign-in",
        lambda w: "/console/sign-in",
        {**dict.fromkeys(CALLERS, 403), USER: 401, OTHER: 401, ADMIN: 401},
    ),
    _html("POST", "/console/sign-out", lambda w: "/console/sign-out", _page(303)),
    _html(
        "GET",
        "/console/static/<path:filename>",
        lambda w: "/console/static/console.css",
        PUBLIC,
    ),
    _html("GET", "/console/tasks", lambda w: "/console/tasks", _page(200)),
    _html("GET", "/console/tasks/new", lambda w: "/console/tasks/new", _page(200)),
    _html("POST", "/console/tasks/new", lambda w: "/console/tasks/new", _page(400)),
    _html(
        "GET",
        "/console/tasks/<int:task_id>",
        lambda w: f"/console/tasks/{w.task_id}",
        _page(200, owned=True),
    ),
    # The matrix's JSON body leaves the form empty: a cron line "" is refused (400) once
    # past access control.
    _html(
        "POST",
        "/console/tasks/<int:task_id>/schedule",
        lambda w: f"/console/tasks/{w.task_id}/schedule",
        _page(400, owned=True),
    ),
    _html(
        "POST",
        "/console/tasks/<int:task_id>/schedule/pause",
        lambda w: f"/console/tasks/{w.task_id}/schedule/pause",
        _page(303, owned=True),
    ),
    _html(
        "POST",
        "/console/tasks/<int:task_id>/schedule/resume",
        lambda w: f"/console/tasks/{w.task_id}/schedule/resume",
        _page(303, owned=True),
    ),
    _html(
        "GET",
        "/console/tasks/<int:task_id>/results",
        lambda w: f"/console/tasks/{w.task_id}/results",
        _page(200, owned=True),
    ),
    _html("GET", "/console/assets", lambda w: "/console/assets", _page(200)),
    _html("GET", "/console/changes", lambda w: "/console/changes", _page(200)),
    _html("GET", "/console/hosts/<path:ip>", lambda w: "/console/hosts/127.0.0.1", _page(200)),
    _html(
        "GET",
        "/console/assets/history",
        lambda w: "/console/assets/history?ip=127.0.0.1&port=80&transport=tcp",
        _page(200),
    ),
    _html(
        "GET",
        "/console/tasks/<int:task_id>/changes",
        lambda w: f"/console/tasks/{w.task_id}/changes",
        _page(200, owned=True),
    ),
    # The matrix task has no succeeded execution: 409 means the caller got past access control.
    _html(
        "POST",
        "/console/tasks/<int:task_id>/exports",
        lambda w: f"/console/tasks/{w.task_id}/exports?format=csv",
        {**_page(409, owned=True), OTHER: 404},
    ),
    # The form's format is missing: 400 invalid_format once past access control.
    _html(
        "POST",
        "/console/assets/export",
        lambda w: "/console/assets/export?port=80&status=all",
        _page(400),
    ),
    _html("GET", "/console/exports", lambda w: "/console/exports", _page(200)),
    # API tokens are their owner's: the form's name is missing (400), and the matrix
    # revokes a token nobody has (404 for every signed-in user).
    _html("GET", "/console/tokens", lambda w: "/console/tokens", _page(200)),
    _html("GET", "/console/account", lambda w: "/console/account", _page(200)),
    _html(
        "POST",
        "/console/account/sessions/end-others",
        lambda w: "/console/account/sessions/end-others",
        _page(303),
    ),
    # The form's current password is missing: 400 at that field once past access control.
    _html("POST", "/console/account/password", lambda w: "/console/account/password", _page(400)),
    _html("POST", "/console/tokens", lambda w: "/console/tokens", _page(400)),
    _html(
        "POST",
        "/console/tokens/<int:token_id>/revoke",
        lambda w: "/console/tokens/987654/revoke",
        _page(404),
    ),
    # Saved searches are strictly their owner's: the form's name is missing (400), and the
    # matrix deletes one nobody has (404 for every signed-in user).
    _html("POST", "/console/searches", lambda w: "/console/searches?q=port:80", _page(400)),
    _html(
        "POST",
        "/console/searches/<int:search_id>/delete",
        lambda w: "/console/searches/987654/delete",
        _page(404),
    ),
    _html(
        "POST",
        "/console/searches/<int:search_id>/update",
        lambda w: "/console/searches/987654/update",
        _page(404),
    ),
    # Run 1 still runs: 409 run_active means the caller got past access control.
    _html(
        "POST",
        "/console/tasks/<int:task_id>/runs",
        lambda w: f"/console/tasks/{w.task_id}/runs",
        _page(409, owned=True),
    ),
    # The owner cancels first; the admin, after, finds the run no longer active (409).
    _html(
        "POST",
        "/console/tasks/<int:task_id>/runs/<int:run_id>/cancel",
        lambda w: f"/console/tasks/{w.task_id}/runs/{w.run_id}/cancel",
        {**_page(303, owned=True), ADMIN: 409},
    ),
    _html(
        "GET",
        "/console/tasks/<int:task_id>/edit",
        lambda w: f"/console/tasks/{w.task_id}/edit",
        _page(200, owned=True),
    ),
    # An empty form is refused by the validation (a task needs a name): past access control.
    _html(
        "POST",
        "/console/tasks/<int:task_id>/edit",
        lambda w: f"/console/tasks/{w.task_id}/edit",
        _page(400, owned=True),
    ),
    _html(
        "GET",
        "/console/tasks/<int:task_id>/delete",
        lambda w: f"/console/tasks/{w.task_id}/delete",
        _page(200, owned=True),
    ),
    # The owner deletes first; for the admin, after, the task is gone (404).
    _html(
        "POST",
        "/console/tasks/<int:task_id>/delete",
        lambda w: f"/console/tasks/{w.task_id}/delete",
        {**_page(303, owned=True), ADMIN: 404},
    ),
    # Rollups belong to no user (as on /api/traffic/rollups): every signed-in caller reads them.
    _html("GET", "/console/traffic", lambda w: "/console/traffic", _page(200)),
    _html("GET", "/console/reports", lambda w: "/console/reports", _page(200)),
    _html(
        "GET",
        "/console/reports/<int:report_id>",
        lambda w: f"/console/reports/{w.report_id}",
        _page(200, owned=True),
    ),
    _html(
        "POST",
        "/console/reports/definitions/<int:definition_id>/run",
        lambda w: f"/console/reports/definitions/{w.definition_id}/run",
        _page(303, owned=True),
    ),
    # An empty form is refused by the validation: the caller got past access control.
    _html(
        "POST",
        "/console/reports/definitions",
        lambda w: "/console/reports/definitions",
        _page(400),
    ),
    # The owner deletes it first, so the admin after the owner finds nothing.
    _html(
        "POST",
        "/console/reports/definitions/<int:definition_id>/delete",
        lambda w: f"/console/reports/definitions/{w.definition_id}/delete",
        {**_page(303, owned=True), ADMIN: 404},
    ),
    _html("GET", "/console/scanners", lambda w: "/console/scanners", _admin_page(200)),
    _html("POST", "/console/scanners", lambda w: "/console/scanners", _admin_page(400)),
    _html(
        "POST",
        "/console/scanners/<int:scanner_id>/revoke",
        lambda w: f"/console/scanners/{w.callers[OTHER_SCANNER].id}/revoke",
        _admin_page(303),
    ),
    _html("GET", "/console/users", lambda w: "/console/users", _admin_page(200)),
    _html("GET", "/console/admin/audit", lambda w: "/console/admin/audit", _admin_page(200)),
    _html(
        "GET", "/console/admin/resources", lambda w: "/console/admin/resources", _admin_page(200)
    ),
    _html("GET", "/console/admin/slow-sql", lambda w: "/console/admin/slow-sql", _admin_page(200)),
    _html("POST", "/console/users", lambda w: "/console/users", _admin_page(400)),
    _html(
        "POST",
        "/console/users/<int:user_id>/<any(disable, enable):action>",
        lambda w: f"/console/users/{w.bystander_id}/disable",
        _admin_page(303),
    ),
    _html("GET", "/console/admin/renderer", lambda w: "/console/admin/renderer", _admin_page(200)),
    _html("POST", "/console/admin/renderer", lambda w: "/console/admin/renderer", _admin_page(400)),
    _html("GET", "/console/alerts", lambda w: "/console/alerts", _page(200)),
    _html("GET", "/console/help/search", lambda w: "/console/help/search", _page(200)),
    # An empty rule form is refused by the validation: the caller got past access control.
    _html("POST", "/console/alerts/rules", lambda w: "/console/alerts/rules", _page(400)),
    # The same for an empty channel form (an email channel without recipients).
    _html("POST", "/console/alerts/channels", lambda w: "/console/alerts/channels", _page(400)),
    _html(
        "POST",
        "/console/alerts/rules/<int:rule_id>/<any(disable, enable):action>",
        lambda w: f"/console/alerts/rules/{w.alert_rule_id}/disable",
        {**_page(303, owned=True), ADMIN: 404},
    ),
    _html(
        "POST",
        "/console/alerts/rules/<int:rule_id>/delete",
        lambda w: f"/console/alerts/rules/{w.alert_rule_id}/delete",
        {**_page(303, owned=True), ADMIN: 404},
    ),
    # The matrix's channel is used by its rule: refused (400) once past access control.
    _html(
        "POST",
        "/console/alerts/channels/<int:channel_id>/delete",
        lambda w: f"/console/alerts/channels/{w.alert_channel_id}/delete",
        {**_page(409, owned=True), ADMIN: 404},
    ),
    _html(
        "POST",
        "/console/alerts/channels/<int:channel_id>/test",
        lambda w: f"/console/alerts/channels/{w.alert_channel_id}/test",
        {**_page(200, owned=True), ADMIN: 404},
    ),
    _html(
        "POST",
        "/console/alerts/deliveries/<delivery_id>/redeliver",
        lambda w: f"/console/alerts/deliveries/{w.alert_delivery_id}/redeliver",
        {**_page(303, owned=True), ADMIN: 404},
    ),
]

ROUTES: list[Route] = [
    Route("GET", "/healthz", lambda w: "/healthz", None, PUBLIC),
    # The site root sends everyone to the console (which then asks for a sign-in).
    _html("GET", "/", lambda w: "/", dict.fromkeys(CALLERS, 302)),
    Route("GET", "/api/openapi.json", lambda w: "/api/openapi.json", None, PUBLIC),
    _html("GET", "/console/api", lambda w: "/console/api", _page(200)),
    Route("GET", "/readyz", lambda w: "/readyz", None, PUBLIC),
    # Operators only: the metrics token (none configured here) or an admin session.
    Route("GET", "/metrics", lambda w: "/metrics", None, _admin_route(200)),
    Route("GET", "/api/audit", lambda w: "/api/audit", None, _admin_route(200)),
    Route("GET", "/api/changes", lambda w: "/api/changes", None, _user_route(200, owned=False)),
    Route(
        "POST",
        "/api/auth/login",
        lambda w: "/api/auth/login",
        lambda w: {"username": "nobody", "password": "wrong password"},
        dict.fromkeys(CALLERS, 401),
    ),
    Route("GET", "/api/auth/me", lambda w: "/api/auth/me", None, _user_route(200, owned=False)),
    Route(
        "GET",
        "/api/auth/sessions",
        lambda w: "/api/auth/sessions",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "POST",
        "/api/auth/sessions/end-others",
        lambda w: "/api/auth/sessions/end-others",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET", "/api/auth/tokens", lambda w: "/api/auth/tokens", None, _user_route(200, owned=False)
    ),
    Route(
        "POST",
        "/api/auth/tokens",
        lambda w: "/api/auth/tokens",
        lambda w: {"name": f"matrix {next(_names)}"},
        _user_route(201, owned=False),
    ),
    # Tokens are strictly their owner's: the matrix revokes one nobody has.
    Route(
        "DELETE",
        "/api/auth/tokens/<int:token_id>",
        lambda w: "/api/auth/tokens/987654",
        None,
        _user_route(404, owned=False),
    ),
    Route(
        "POST",
        "/api/auth/logout",
        lambda w: "/api/auth/logout",
        None,
        _user_route(204, owned=False),
    ),
    Route(
        "POST",
        "/api/auth/password",
        lambda w: "/api/auth/password",
        lambda w: {
            "current_password": "correct horse battery staple",
            "new_password": f"a different secret {next(_names)}",
        },
        _user_route(200, owned=False),
    ),
    Route(
        "POST",
        "/api/users/<int:user_id>/disable",
        lambda w: f"/api/users/{w.bystander_id}/disable",
        None,
        _admin_route(200),
    ),
    Route(
        "POST",
        "/api/users/<int:user_id>/enable",
        lambda w: f"/api/users/{w.bystander_id}/enable",
        None,
        _admin_route(200),
    ),
    Route(
        "POST",
        "/api/users",
        lambda w: "/api/users",
        lambda w: {"username": f"made{next(_names)}", "password": "long enough password"},
        _admin_route(201),
    ),
    Route(
        "POST",
        "/api/scanners",
        lambda w: "/api/scanners",
        lambda w: {"name": f"made-scanner-{next(_names)}"},
        _admin_route(201),
    ),
    # Everyone signed in may list; a non-admin sees only the scanners they created.
    Route("GET", "/api/scanners", lambda w: "/api/scanners", None, _user_route(200, owned=False)),
    Route(
        "POST",
        "/api/scanners/<int:scanner_id>/disable",
        lambda w: f"/api/scanners/{w.callers[OTHER_SCANNER].id}/disable",
        None,
        _admin_route(200),
    ),
    Route(
        "GET",
        "/api/modules/report-render",
        lambda w: "/api/modules/report-render",
        None,
        _admin_route(200),
    ),
    Route(
        "POST",
        "/api/modules/report-render",
        lambda w: "/api/modules/report-render",
        lambda w: {"expectedRevision": 1, "releaseId": "builtin", "changeReason": "matrix"},
        _admin_route(200),
    ),
    Route(
        "POST",
        "/api/modules/report-render/close-stuck",
        lambda w: "/api/modules/report-render/close-stuck",
        lambda w: {"throughRevision": 1},
        _admin_route(202),
    ),
    Route("GET", "/api/config/check", lambda w: "/api/config/check", None, _admin_route(200)),
    Route(
        "GET",
        "/api/system/resources",
        lambda w: "/api/system/resources",
        None,
        _admin_route(200),
    ),
    Route("GET", "/api/system/slow-sql", lambda w: "/api/system/slow-sql", None, _admin_route(200)),
    Route(
        "GET",
        "/api/system/diagnostics",
        lambda w: "/api/system/diagnostics",
        None,
        _admin_route(200),
    ),
    Route(
        "GET",
        "/api/tasks/<int:task_id>/results",
        lambda w: f"/api/tasks/{w.task_id}/results",
        None,
        _user_route(200, owned=True),
    ),
    Route("GET", "/api/assets", lambda w: "/api/assets", None, _user_route(200, owned=False)),
    Route(
        "GET",
        "/api/tasks/<int:task_id>/changes",
        lambda w: f"/api/tasks/{w.task_id}/changes",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "GET",
        "/api/assets/history",
        lambda w: "/api/assets/history?ip=192.0.2.1&port=80",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/traffic/rollups",
        lambda w: "/api/traffic/rollups",
        None,
        _user_route(200, owned=False),
    ),
    # Only the rollup ingest token opens this route; no session or scanner token does.
    Route(
        "POST",
        "/api/traffic/rollups",
        lambda w: "/api/traffic/rollups",
        lambda w: {"rows": []},
        dict.fromkeys(CALLERS, 401),
    ),
    Route(
        "POST",
        "/api/tasks",
        lambda w: "/api/tasks",
        lambda w: {"name": "matrix", "targets": ["192.0.2.1"], "ports": "80"},
        _user_route(201, owned=False),
    ),
    Route("GET", "/api/tasks", lambda w: "/api/tasks", None, _user_route(200, owned=False)),
    Route(
        "GET",
        "/api/tasks/<int:task_id>",
        lambda w: f"/api/tasks/{w.task_id}",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "PATCH",
        "/api/tasks/<int:task_id>",
        lambda w: f"/api/tasks/{w.task_id}",
        lambda w: {"name": "renamed", "schedule": {"every_seconds": 7200}},
        _user_route(200, owned=True),
    ),
    Route(
        "POST",
        "/api/tasks/<int:task_id>/schedule/pause",
        lambda w: f"/api/tasks/{w.task_id}/schedule/pause",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "POST",
        "/api/tasks/<int:task_id>/schedule/resume",
        lambda w: f"/api/tasks/{w.task_id}/schedule/resume",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "GET",
        "/api/tasks/<int:task_id>/executions",
        lambda w: f"/api/tasks/{w.task_id}/executions",
        None,
        _user_route(200, owned=True),
    ),
    # Run 1 is still running: 409 run_active means the caller got past access control.
    Route(
        "POST",
        "/api/tasks/<int:task_id>/runs",
        lambda w: f"/api/tasks/{w.task_id}/runs",
        None,
        _user_route(409, owned=True),
    ),
    Route(
        "GET",
        "/api/tasks/<int:task_id>/runs",
        lambda w: f"/api/tasks/{w.task_id}/runs",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "GET",
        "/api/tasks/<int:task_id>/runs/<int:run_id>",
        lambda w: f"/api/tasks/{w.task_id}/runs/{w.run_id}",
        None,
        _user_route(200, owned=True),
    ),
    # The owner cancels first; the admin, after, finds the run no longer active (409).
    Route(
        "POST",
        "/api/tasks/<int:task_id>/runs/<int:run_id>/cancel",
        lambda w: f"/api/tasks/{w.task_id}/runs/{w.run_id}/cancel",
        None,
        {**_user_route(200, owned=True), ADMIN: 409},
    ),
    # The owner deletes first; for the admin, after, the task is already gone (404).
    Route(
        "DELETE",
        "/api/tasks/<int:task_id>",
        lambda w: f"/api/tasks/{w.task_id}",
        None,
        {**_user_route(202, owned=True), ADMIN: 404},
    ),
    # A JSON object is one naabu JSON line: the matrix's JSON body is a valid import file.
    Route(
        "POST",
        "/api/tasks/<int:task_id>/imports",
        lambda w: f"/api/tasks/{w.task_id}/imports?format=naabu-jsonl",
        lambda w: {"ip": "198.51.100.7", "port": 22, "protocol": "tcp"},
        _user_route(201, owned=True),
    ),
    Route(
        "POST",
        "/api/scanner/claim",
        lambda w: "/api/scanner/claim",
        None,
        _scanner_route(204, 204),
    ),
    Route(
        "POST",
        "/api/scanner/executions/<int:execution_id>/lease",
        lambda w: f"/api/scanner/executions/{w.execution_id}/lease",
        lambda w: {"claim_token": w.claim_token},
        _scanner_route(200, 404),
    ),
    Route(
        "POST",
        "/api/scanner/executions/<int:execution_id>/uploads",
        lambda w: f"/api/scanner/executions/{w.execution_id}/uploads",
        lambda w: upload_body(w.claim_token, 0, [observation("198.51.100.7", 22)]),
        _scanner_route(200, 404),
    ),
    Route(
        "POST",
        "/api/scanner/executions/<int:execution_id>/fail",
        lambda w: f"/api/scanner/executions/{w.execution_id}/fail",
        lambda w: {"claim_token": w.claim_token, "reason": "matrix"},
        _scanner_route(200, 404),
    ),
    # The matrix task has no succeeded execution: 409 means the caller got past access control.
    Route(
        "POST",
        "/api/tasks/<int:task_id>/exports",
        lambda w: f"/api/tasks/{w.task_id}/exports",
        lambda w: {"format": "csv"},
        _user_route(409, owned=True),
    ),
    Route("GET", "/api/exports", lambda w: "/api/exports", None, _user_route(200, owned=False)),
    # The search language's surfaces: an export by query, facets, saved searches and host
    # pages. Saved searches are strictly their owner's (admins included), so the matrix
    # asks for one nobody has: every signed-in user gets 404, everyone else 401.
    Route(
        "POST",
        "/api/exports",
        lambda w: "/api/exports",
        lambda w: {"query": "port:80", "format": "csv"},
        _user_route(202, owned=False),
    ),
    Route(
        "GET",
        "/api/assets/facets",
        lambda w: "/api/assets/facets",
        None,
        _user_route(200, owned=False),
    ),
    Route("GET", "/api/searches", lambda w: "/api/searches", None, _user_route(200, owned=False)),
    Route(
        "POST",
        "/api/searches",
        lambda w: "/api/searches",
        lambda w: {"name": "matrix", "query": "port:80"},
        _user_route(201, owned=False),
    ),
    *(
        Route(
            method,
            "/api/searches/<int:search_id>",
            lambda w: "/api/searches/999999",
            (lambda w: {"name": "renamed"}) if method == "PATCH" else None,
            _user_route(404, owned=False),
        )
        for method in ("GET", "PATCH", "DELETE")
    ),
    Route(
        "GET",
        "/api/hosts/<path:ip>",
        lambda w: "/api/hosts/127.0.0.1",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/exports/<int:export_id>",
        lambda w: f"/api/exports/{w.export_id}",
        None,
        _user_route(200, owned=True),
    ),
    # Deleting a deleted export answers 200 again, so the admin after the owner sees 200.
    Route(
        "DELETE",
        "/api/exports/<int:export_id>",
        lambda w: f"/api/exports/{w.export_id}",
        None,
        _user_route(200, owned=True),
    ),
    *CONSOLE_ROUTES,
    # The signed token is the credential; a forged one is refused for everybody.
    Route(
        "GET",
        "/api/objects/<token>",
        lambda w: "/api/objects/eyJrIjoiZXhwb3J0cy8xL2EuY3N2In0.forged",
        None,
        dict.fromkeys(CALLERS, 403),
    ),
    # Reports: definitions are owner-scoped; templates and retries are for admins.
    Route(
        "POST",
        "/api/reports/definitions",
        lambda w: "/api/reports/definitions",
        lambda w: {"name": "m", "scope": "all", "period": "daily", "recipients": ["a@example.com"]},
        _user_route(201, owned=False),
    ),
    Route(
        "GET",
        "/api/reports/definitions",
        lambda w: "/api/reports/definitions",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/reports/definitions/<int:definition_id>",
        lambda w: f"/api/reports/definitions/{w.definition_id}",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "PUT",
        "/api/reports/definitions/<int:definition_id>",
        lambda w: f"/api/reports/definitions/{w.definition_id}",
        lambda w: {"name": "renamed"},
        _user_route(200, owned=True),
    ),
    Route(
        "PATCH",
        "/api/reports/definitions/<int:definition_id>",
        lambda w: f"/api/reports/definitions/{w.definition_id}",
        lambda w: {"name": "renamed"},
        _user_route(200, owned=True),
    ),
    # The owner deletes it first, so the admin after the owner finds nothing.
    Route(
        "DELETE",
        "/api/reports/definitions/<int:definition_id>",
        lambda w: f"/api/reports/definitions/{w.definition_id}",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "POST",
        "/api/reports/definitions/<int:definition_id>/run",
        lambda w: f"/api/reports/definitions/{w.definition_id}/run",
        None,
        _user_route(202, owned=True),
    ),
    Route("GET", "/api/reports", lambda w: "/api/reports", None, _user_route(200, owned=False)),
    Route(
        "GET",
        "/api/reports/<int:report_id>",
        lambda w: f"/api/reports/{w.report_id}",
        None,
        _user_route(200, owned=True),
    ),
    Route(
        "GET",
        "/api/reports/<int:report_id>/mail.html",
        lambda w: f"/api/reports/{w.report_id}/mail.html",
        None,
        _user_route(200, owned=True),
    ),
    # The matrix report is queued, not failed: 409 means the admin got past access control.
    Route(
        "POST",
        "/api/reports/<int:report_id>/retry",
        lambda w: f"/api/reports/{w.report_id}/retry",
        None,
        _admin_route(409),
    ),
    Route(
        "GET",
        "/api/reports/templates",
        lambda w: "/api/reports/templates",
        None,
        _admin_route(200),
    ),
    Route(
        "POST",
        "/api/reports/templates",
        lambda w: "/api/reports/templates",
        lambda w: {"name": "matrix2", "version": "1", "subject": "s", "html": "<p>h</p>"},
        _admin_route(201),
    ),
    Route(
        "POST",
        "/api/reports/templates/<name>/publish",
        lambda w: "/api/reports/templates/matrix/publish",
        lambda w: {"version": "1"},
        _admin_route(200),
    ),
    # Alerts: rules, channels and deliveries are the owner's; an admin sees only their own
    # (and global rules), so another owner's are 404 to an admin too.
    Route(
        "POST",
        "/api/alerts/rules",
        lambda w: "/api/alerts/rules",
        lambda w: {"name": "m", "on": ["new"], "channels": [w.alert_channel_id]},
        {**_user_route(201, owned=True), ADMIN: 404},
    ),
    Route(
        "GET",
        "/api/alerts/rules",
        lambda w: "/api/alerts/rules",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/alerts/rules/<int:rule_id>",
        lambda w: f"/api/alerts/rules/{w.alert_rule_id}",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "PATCH",
        "/api/alerts/rules/<int:rule_id>",
        lambda w: f"/api/alerts/rules/{w.alert_rule_id}",
        lambda w: {"name": "renamed"},
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "DELETE",
        "/api/alerts/rules/<int:rule_id>",
        lambda w: f"/api/alerts/rules/{w.alert_rule_id}",
        None,
        {**_user_route(204, owned=True), ADMIN: 404},
    ),
    Route(
        "POST",
        "/api/alerts/channels",
        lambda w: "/api/alerts/channels",
        lambda w: {"kind": "email", "recipients": ["a@example.com"]},
        _user_route(201, owned=False),
    ),
    Route(
        "GET",
        "/api/alerts/channels",
        lambda w: "/api/alerts/channels",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/alerts/channels/<int:channel_id>",
        lambda w: f"/api/alerts/channels/{w.alert_channel_id}",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "DELETE",
        "/api/alerts/channels/<int:channel_id>",
        lambda w: f"/api/alerts/channels/{w.alert_spare_channel_id}",
        None,
        {**_user_route(204, owned=True), ADMIN: 404},
    ),
    Route(
        "POST",
        "/api/alerts/channels/<int:channel_id>/rotate-secret",
        lambda w: f"/api/alerts/channels/{w.alert_channel_id}/rotate-secret",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    # The test send to a loopback name is refused by the address rule: a 200 with ok false.
    Route(
        "POST",
        "/api/alerts/channels/<int:channel_id>/test",
        lambda w: f"/api/alerts/channels/{w.alert_channel_id}/test",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "GET",
        "/api/alerts/deliveries",
        lambda w: "/api/alerts/deliveries",
        None,
        _user_route(200, owned=False),
    ),
    Route(
        "GET",
        "/api/alerts/deliveries/<delivery_id>",
        lambda w: f"/api/alerts/deliveries/{w.alert_delivery_id}",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
    Route(
        "POST",
        "/api/alerts/deliveries/<delivery_id>/redeliver",
        lambda w: f"/api/alerts/deliveries/{w.alert_delivery_id}/redeliver",
        None,
        {**_user_route(200, owned=True), ADMIN: 404},
    ),
]


@pytest.fixture
def settings(database_url, tmp_path):
    # The world's webhook channel points at a closed port of this host (a test of it
    # fails fast): private targets are allowed, as a deployment on an intranet would.
    return make_settings(database_url, tmp_path, alerts={"allow_private_targets": True})


@pytest.fixture
def world(api) -> World:
    user = api.user()
    callers = {
        ANON: api.app.test_client(),
        USER: user,
        OTHER: api.user(),
        ADMIN: api.admin(),
        SCANNER: api.scanner(),
        OTHER_SCANNER: api.scanner(),
    }
    wrong = api.app.test_client()
    callers[WRONG_TOKEN] = wrong
    callers[USER_TOKEN] = callers[READ_TOKEN] = api.app.test_client()
    made = user.post("/api/auth/tokens", json={"name": "matrix"})
    assert made.status_code == 201, made.get_json()
    user_token = made.get_json()["secret"]
    made = user.post("/api/auth/tokens", json={"name": "matrix read", "access": "read"})
    assert made.status_code == 201, made.get_json()
    read_token = made.get_json()["secret"]
    created = user.post(
        "/api/tasks",
        json={
            "name": "owned",
            "targets": ["198.51.100.7"],
            "ports": "22",
            "schedule": {"every_seconds": 3600},
        },
    )
    task_id = created.get_json()["task"]["id"]
    run_id = created.get_json()["task"]["latest_run"]["id"]
    claimed = callers[SCANNER].claim().get_json()["execution"]
    from app.db import transaction
    from app.exports.records import insert_export

    with transaction() as conn:
        export = insert_export(
            conn,
            owner_id=user.id,
            task_id=task_id,
            task_name="owned",
            fmt="csv",
            execution_ids=[claimed["id"]],
        )
    import sqlalchemy as sa

    from app.reports.records import create_on_demand_report
    from app.reports.templates import add_template_version

    with transaction() as conn:
        definition = conn.execute(
            sa.text(
                "INSERT INTO report_definitions (owner_id, name, task_id, period, recipients, "
                "template) VALUES (:o, 'matrix', :t, 'daily', ARRAY['a@example.com'], 'default') "
                "RETURNING id, owner_id, task_id"
            ),
            {"o": user.id, "t": task_id},
        ).one()
        report = create_on_demand_report(conn, definition)
        conn.execute(
            sa.text("UPDATE reports SET html = '<p>archived</p>' WHERE id = :id"),
            {"id": report["id"]},
        )
        add_template_version(
            conn,
            {"name": "matrix", "version": "1", "subject": "s", "html": "<p>h</p>", "enabled": True},
            user_id=None,
        )
    hook = user.post(
        "/api/alerts/channels", json={"kind": "webhook", "url": "http://localhost:9/hook"}
    ).get_json()["channel"]
    spare = user.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["a@example.com"]}
    ).get_json()["channel"]
    rule = user.post(
        "/api/alerts/rules", json={"name": "matrix", "on": ["gone"], "channels": [hook["id"]]}
    ).get_json()["rule"]
    delivery_id = "msg_" + "0" * 32
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, message_kind, "
                "event_type, payload, status) VALUES (:id, :r, :c, :o, 'each', "
                "'netmap.change.gone', '{}', 'dead')"
            ),
            {"id": delivery_id, "r": rule["id"], "c": hook["id"], "o": user.id},
        )
    return World(
        callers=callers,
        task_id=task_id,
        execution_id=claimed["id"],
        claim_token=claimed["claim_token"],
        bystander_id=api.create_user()["id"],
        export_id=export.id,
        definition_id=definition.id,
        report_id=report["id"],
        alert_channel_id=hook["id"],
        alert_spare_channel_id=spare["id"],
        alert_rule_id=rule["id"],
        alert_delivery_id=delivery_id,
        run_id=run_id,
        user_token=user_token,
        read_token=read_token,
    )


def _call(world: World, caller: str, route: Route):
    client = world.callers[caller]
    body = route.body(world) if route.body else None
    path = route.path(world)
    if caller == WRONG_TOKEN:
        headers = {"Authorization": "Bearer nms_" + "x" * 43}
        return client.open(path, method=route.method, json=body, headers=headers)
    if caller in (USER_TOKEN, READ_TOKEN):
        token = world.user_token if caller == USER_TOKEN else world.read_token
        headers = {"Authorization": f"Bearer {token}"}
        return client.open(path, method=route.method, json=body, headers=headers)
    if caller == ANON:
        return client.open(path, method=route.method, json=body)
    if route.method in SAFE_METHODS:
        return client.get(path)
    if route.method != "POST":
        return client.client.open(
            path, method=route.method, json=body, headers=client._headers(None)
        )
    return client.post(path, json=body)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.rule}")
def test_route_access(world, route):
    results = {}
    # Scanner routes mutate the claimed execution: run the owning scanner last.
    order = sorted(CALLERS, key=lambda c: c == SCANNER)
    for caller in order:
        response = _call(world, caller, route)
        results[caller] = response.status_code
        if route.html:
            if response.status_code >= 400:
                assert response.mimetype == "text/html", (caller, response.status_code)
            continue
        body = response.get_json(silent=True)
        if response.status_code >= 400:
            assert body and set(body["error"]) >= {"code", "message"}, (caller, body)
    assert results == route.expected


@pytest.mark.parametrize("caller", [USER_TOKEN, READ_TOKEN])
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.rule}")
def test_route_access_with_the_users_api_tokens(world, route, caller):
    """The user's personal API tokens (read and write, read only), with no cookie, first
    in a fresh world (as the user's session is in the test above: a route that changes
    something answers the first caller past access control differently from the next)."""
    response = _call(world, caller, route)
    assert response.status_code == _token_expectation(route, read_only=caller == READ_TOKEN)
    if not route.html and response.status_code >= 400:
        assert set(response.get_json()["error"]) >= {"code", "message"}


def _token_expectation(route: Route, *, read_only: bool) -> int:
    """What the user's API token gets: on the API what the user's session gets, except
    where a route acts on the session itself, or changes something and the token is read
    only (403 either way); the console is for sessions only, so a page answers a token as
    it answers an anonymous caller."""
    if route.html:
        return route.expected[ANON]
    if (route.method, route.rule) in SESSION_ONLY:
        return 403
    if read_only and route.method not in SAFE_METHODS and route.expected[USER] != 401:
        return 403
    return route.expected[USER]


def test_every_route_is_in_the_matrix(app):
    listed = {(r.method, r.rule) for r in ROUTES}
    present = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            present.add((method, rule.rule))
    assert present == listed


def test_every_view_declares_its_access(app):
    missing = [
        endpoint
        for endpoint, view in app.view_functions.items()
        if endpoint != "static" and not getattr(view, "_netmap_access", None)
    ]
    assert missing == []


def test_csrf_is_required_for_session_writes(api):
    user = api.user()
    body = {"name": "x", "targets": ["192.0.2.1"], "ports": "80"}
    missing = user.client.post("/api/tasks", json=body)
    assert missing.status_code == 403
    assert missing.get_json()["error"]["code"] == "csrf_failed"
    wrong = user.client.post("/api/tasks", json=body, headers={"X-CSRF-Token": "nope"})
    assert wrong.status_code == 403
    other = api.user()
    stolen = user.client.post("/api/tasks", json=body, headers={"X-CSRF-Token": other.csrf})
    assert stolen.status_code == 403
    ok = user.post("/api/tasks", json=body)
    assert ok.status_code == 201
    # Reads need no token.
    assert user.client.get("/api/tasks").status_code == 200
    # Logout is state-changing too.
    assert user.client.post("/api/auth/logout").status_code == 403


def test_login_me_logout_cycle(api):
    created = api.create_user("Alice")
    client = api.app.test_client()
    response = client.post(
        "/api/auth/login", json={"username": "alice", "password": created["password"]}
    )
    assert response.status_code == 200
    body = response.get_json()
    assert body["user"] == {"id": created["id"], "username": "Alice", "is_admin": False}
    assert len(body["csrf_token"]) >= 32
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    me = client.get("/api/auth/me")
    assert me.get_json() == body
    logout = client.post("/api/auth/logout", headers={"X-CSRF-Token": body["csrf_token"]})
    assert logout.status_code == 204
    assert client.get("/api/auth/me").status_code == 401


def test_wrong_password_and_unknown_user_look_the_same(api):
    api.create_user("bob")
    client = api.app.test_client()
    wrong = client.post("/api/auth/login", json={"username": "bob", "password": "not the password"})
    unknown = client.post("/api/auth/login", json={"username": "carol", "password": "whatever12"})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.get_json() == unknown.get_json()
    assert wrong.get_json()["error"]["code"] == "invalid_credentials"


def test_disabled_user_loses_access_immediately(api):
    import sqlalchemy as sa

    from app.db import transaction

    session = api.user()
    assert session.get("/api/auth/me").status_code == 200
    with transaction() as conn:
        conn.execute(sa.text("UPDATE users SET disabled = true WHERE id = :id"), {"id": session.id})
    assert session.get("/api/auth/me").status_code == 401
    again = api.app.test_client().post(
        "/api/auth/login", json={"username": session.user["username"], "password": session.password}
    )
    assert again.status_code == 401


def test_login_rate_limit_answers_429_with_retry_after(tmp_path, database_url, engine):
    from app import create_app
    from tests.support.settings import make_settings

    settings = make_settings(database_url, tmp_path, security={"login_rate_limit": "3 per hour"})
    client = create_app(settings, engine=engine, modules="off").test_client()
    statuses = [
        client.post("/api/auth/login", json={"username": "x", "password": "y"}).status_code
        for _ in range(4)
    ]
    assert statuses == [401, 401, 401, 429]
    limited = client.post("/api/auth/login", json={"username": "x", "password": "y"})
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) > 0
    assert limited.get_json()["error"]["code"] == "rate_limited"


def test_admin_routes_are_rate_limited_per_user(tmp_path, database_url, engine):
    from app import create_app
    from tests.support.api import Api
    from tests.support.settings import make_settings

    settings = make_settings(database_url, tmp_path, security={"admin_rate_limit": "2 per hour"})
    api = Api(create_app(settings, engine=engine, modules="off"))
    admin = api.admin()
    statuses = [admin.post("/api/scanners", json={"name": f"rl-{i}"}).status_code for i in range(3)]
    assert statuses == [201, 201, 429]
    # Another admin has their own budget.
    assert api.admin().post("/api/scanners", json={"name": "rl-other"}).status_code == 201


def test_scanner_tokens_are_stored_hashed(api):
    import hashlib

    import sqlalchemy as sa

    from app.db import transaction

    admin = api.admin()
    created = admin.post("/api/scanners", json={"name": "hashed"}).get_json()
    token = created["token"]
    assert token.startswith("nms_") and len(token) >= 43
    with transaction() as conn:
        stored = conn.execute(
            sa.text("SELECT token_sha256 FROM scanners WHERE id = :id"), {"id": created["id"]}
        ).scalar()
        dump = conn.execute(sa.text("SELECT row_to_json(s)::text FROM scanners s")).scalars().all()
    assert bytes(stored) == hashlib.sha256(token.encode()).digest()
    assert not any(token in row for row in dump)


def test_admin_actions_are_audited(api):
    import sqlalchemy as sa

    from app.db import transaction

    admin = api.admin()
    user = admin.post("/api/users", json={"username": "audited", "password": "long enough pw"})
    scanner = admin.post("/api/scanners", json={"name": "audited-scanner"})
    assert user.status_code == scanner.status_code == 201
    with transaction() as conn:
        rows = conn.execute(
            sa.text("SELECT actor_user_id, action, target_id, details FROM audit_log ORDER BY id")
        ).all()
    assert [(r.actor_user_id, r.action) for r in rows] == [
        (admin.id, "user.create"),
        (admin.id, "scanner.create"),
    ]
    assert rows[0].details["username"] == "audited"
    assert "password" not in rows[0].details


def test_owner_scoping_hides_other_users_tasks_from_lists(api):
    alice, bob, admin = api.user(), api.user(), api.admin()
    body = {"name": "mine", "targets": ["192.0.2.1"], "ports": "80"}
    alice_task = alice.post("/api/tasks", json=body).get_json()["task"]["id"]
    bob_task = bob.post("/api/tasks", json=body).get_json()["task"]["id"]
    assert [t["id"] for t in alice.get("/api/tasks").get_json()["items"]] == [alice_task]
    assert [t["id"] for t in bob.get("/api/tasks").get_json()["items"]] == [bob_task]
    assert {t["id"] for t in admin.get("/api/tasks").get_json()["items"]} == {alice_task, bob_task}


def _redis_reachable(url: str) -> bool:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        return True
    except redis.RedisError:
        return False


REDIS_URL = "redis://127.0.0.1:6379/15"


@pytest.mark.skipif(not _redis_reachable(REDIS_URL), reason="no Redis on 127.0.0.1:6379")
def test_login_limits_are_shared_between_processes_through_redis(tmp_path, database_url, engine):
    """Two app instances (as two gunicorn workers would be) share one login budget."""
    import redis

    from app import create_app
    from tests.support.settings import make_settings

    redis.Redis.from_url(REDIS_URL).flushdb()  # database 15 belongs to these tests
    settings = make_settings(
        database_url,
        tmp_path,
        security={"login_rate_limit": "3 per hour", "ratelimit_storage_uri": REDIS_URL},
    )
    first = create_app(settings, engine=engine, modules="off").test_client()
    second = create_app(settings, engine=engine, modules="off").test_client()
    statuses = [
        client.post("/api/auth/login", json={"username": "x", "password": "y"}).status_code
        for client in (first, second, first, second)
    ]
    assert statuses == [401, 401, 401, 429]
