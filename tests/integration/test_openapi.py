"""The OpenAPI document is never stale: every JSON route has an entry, every entry names a
route, the document is valid OpenAPI 3.1, and what the routes answer matches it."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from app.agent.formats import FORMATS
from app.http.openapi import openapi_document
from app.saved_searches.records import MAX_NAME
from tests.support.openapi import check_response
from tests.support.scanner_protocol import observation, upload_body

# The console's HTML pages and the root redirect are not part of the JSON API.
UNDOCUMENTED = re.compile(r"^/$|^/console(/|$)|^/static/")


def _routes(app) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        if UNDOCUMENTED.search(rule.rule):
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            found.add((method.lower(), path))
    return found


def test_the_document_is_valid_openapi_3_1():
    document = openapi_document()
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_has_an_entry_and_every_entry_a_route(app):
    documented = {
        (method, path)
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    routes = _routes(app)
    assert routes - documented == set(), "routes without an OpenAPI entry"
    assert documented - routes == set(), "OpenAPI entries without a route"


def test_the_document_is_served_without_signing_in(app):
    response = app.test_client().get("/api/openapi.json")
    assert response.status_code == 200
    assert response.get_json() == openapi_document()


def test_what_the_routes_answer_matches_their_entries(api):
    admin = api.admin()
    user = api.user()
    anonymous = api.app.test_client()

    check_response(
        "post",
        "/api/auth/login",
        anonymous.post(
            "/api/auth/login", json={"username": "nobody", "password": "wrong-password-1"}
        ),
    )
    check_response("get", "/api/auth/me", user.get("/api/auth/me"))
    check_response("get", "/api/auth/me", anonymous.get("/api/auth/me"))
    # A bearer token's caller: no CSRF token (null), as the document says.
    secret = user.post("/api/auth/tokens", json={"name": "openapi"}).get_json()["secret"]
    as_token = anonymous.get("/api/auth/me", headers={"Authorization": f"Bearer {secret}"})
    assert as_token.get_json()["csrf_token"] is None
    check_response("get", "/api/auth/me", as_token)
    scanner = admin.post("/api/scanners", json={"name": "openapi-scanner"})
    check_response("post", "/api/scanners", scanner)
    check_response("post", "/api/scanners", user.post("/api/scanners", json={"name": "x"}))

    created = user.post(
        "/api/tasks", json={"name": "openapi", "targets": ["192.0.2.1"], "ports": "80"}
    )
    check_response("post", "/api/tasks", created)
    task_id = created.get_json()["task"]["id"]
    check_response("post", "/api/tasks", user.post("/api/tasks", json={"name": ""}))
    check_response("get", "/api/tasks", user.get("/api/tasks"))
    check_response("get", "/api/tasks/{task_id}", user.get(f"/api/tasks/{task_id}"))
    check_response("get", "/api/tasks/{task_id}", user.get("/api/tasks/999999"))
    executions = user.get(f"/api/tasks/{task_id}/executions")
    check_response("get", "/api/tasks/{task_id}/executions", executions)

    client = api.scanner()
    claimed = client.claim()
    check_response("post", "/api/scanner/claim", claimed)
    execution = claimed.get_json()["execution"]
    upload = client.post(
        f"/api/scanner/executions/{execution['id']}/uploads",
        json=upload_body(
            execution["claim_token"], 0, [observation("192.0.2.1", 80)], is_final=True
        ),
    )
    check_response("post", "/api/scanner/executions/{execution_id}/uploads", upload)
    assert upload.status_code == 200, upload.get_json()
    check_response("post", "/api/scanner/claim", client.claim())  # 204: nothing left

    for path in ("results", "changes"):
        check_response(
            "get", f"/api/tasks/{{task_id}}/{path}", user.get(f"/api/tasks/{task_id}/{path}")
        )
    check_response("get", "/api/assets", user.get("/api/assets"))
    check_response("get", "/api/assets", user.get("/api/assets?sort=nonsense"))
    check_response(
        "get", "/api/assets/history", user.get("/api/assets/history?ip=192.0.2.1&port=80")
    )

    export = user.post(f"/api/tasks/{task_id}/exports", json={"format": "csv"})
    check_response("post", "/api/tasks/{task_id}/exports", export)
    assert export.status_code == 202, export.get_json()
    export_id = export.get_json()["export"]["id"]
    check_response("get", "/api/exports", user.get("/api/exports"))
    check_response("get", "/api/exports/{export_id}", user.get(f"/api/exports/{export_id}"))

    definition = user.post(
        "/api/reports/definitions",
        json={
            "name": "openapi",
            "task_id": task_id,
            "period": "on_demand",
            "recipients": ["owner@example.com"],
        },
    )
    check_response("post", "/api/reports/definitions", definition)
    definition_id = definition.get_json()["definition"]["id"]
    check_response("get", "/api/reports/definitions", user.get("/api/reports/definitions"))
    run = user.post(f"/api/reports/definitions/{definition_id}/run")
    check_response("post", "/api/reports/definitions/{definition_id}/run", run)
    report_id = run.get_json()["report"]["id"]
    check_response("get", "/api/reports", user.get("/api/reports"))
    check_response("get", "/api/reports/{report_id}", user.get(f"/api/reports/{report_id}"))
    check_response("get", "/api/reports/templates", admin.get("/api/reports/templates"))

    check_response("get", "/healthz", anonymous.get("/healthz"))
    check_response("get", "/readyz", anonymous.get("/readyz"))
    check_response("get", "/api/system/resources", admin.get("/api/system/resources"))
    check_response("get", "/api/system/resources", user.get("/api/system/resources"))
    check_response("get", "/api/modules/report-render", admin.get("/api/modules/report-render"))
    check_response("get", "/api/traffic/rollups", user.get("/api/traffic/rollups"))
    check_response("post", "/api/auth/logout", user.post("/api/auth/logout"))


@pytest.mark.parametrize("status", ["200", "201", "202", "204"])
def test_check_response_refuses_an_undocumented_status(status, api):
    user = api.user()
    response = user.get("/api/tasks")
    if status == "200":
        check_response("get", "/api/tasks", response)
        return
    response.status_code = int(status)
    with pytest.raises(AssertionError, match="not documented"):
        check_response("get", "/api/tasks", response)


def test_every_documented_limit_is_the_one_its_route_takes(api):
    """A client following the document must not be refused: each list's ``limit`` has the
    maximum its route enforces (the document said 1000 where routes took 500)."""
    admin = api.admin()
    task = admin.post("/api/tasks", json={"name": "l", "targets": ["192.0.2.1"], "ports": "80"})
    task_id = task.get_json()["task"]["id"]
    ids = {"task_id": task_id, "run_id": task.get_json()["task"]["latest_run"]["id"]}
    checked = []
    for path, operations in openapi_document()["paths"].items():
        get = operations.get("get")
        limits = [p for p in (get or {}).get("parameters", []) if p["name"] == "limit"]
        if not limits:
            continue
        maximum = limits[0]["schema"]["maximum"]
        url = re.sub(r"\{([a-z_]+)\}", lambda m: str(ids[m.group(1)]), path)
        extra = "&ip=192.0.2.1&port=80" if path == "/api/assets/history" else ""
        for limit, allowed in ((maximum, True), (maximum + 1, False)):
            answer = admin.get(f"{url}?limit={limit}{extra}")
            refused = answer.status_code == 400 and (
                answer.get_json()["error"].get("details", {}).get("parameter") == "limit"
            )
            assert refused is not allowed, (path, limit, answer.status_code, answer.get_json())
        checked.append(path)
    assert len(checked) >= 10, checked


def test_names_and_limits_the_document_gives_are_the_servers(app, api):
    """A client generated from the document signs in, imports and saves searches as the
    server takes them (it named the cookie ``session``, the naabu format ``naabu-json``
    and allowed 200-character search names, all refused)."""
    document = openapi_document()
    cookie = document["components"]["securitySchemes"]["session"]["name"]
    assert cookie == app.config["SESSION_COOKIE_NAME"]
    imports = document["paths"]["/api/tasks/{task_id}/imports"]["post"]["parameters"]
    (fmt,) = [p for p in imports if p["name"] == "format"]
    assert tuple(fmt["schema"]["enum"]) == FORMATS
    search_name = document["paths"]["/api/searches"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]["properties"]["name"]
    assert search_name["maxLength"] == MAX_NAME
    user = api.user()
    longest = user.post("/api/searches", json={"name": "n" * MAX_NAME, "query": "port:22"})
    assert longest.status_code == 201, longest.get_json()
    # Facets count the whole search: they list no page parameters and read none.
    facets = document["paths"]["/api/assets/facets"]["get"]["parameters"]
    assert not {"limit", "cursor", "sort", "order"} & {p["name"] for p in facets}
    assert user.get("/api/assets/facets?cursor=anything&limit=0").status_code == 200
