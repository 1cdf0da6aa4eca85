"""Every bad input a clear 4xx (issue 11 §2): deep JSON, NUL and lone surrogates, scoped IPv6,
edge dates, forged cursors, oversized chunked bodies, long echoes and non-JSON numbers."""

from __future__ import annotations

import base64
import io
import json

import pytest

from app import create_app, db
from app.errors import ValidationError
from tests.support.api import Api
from tests.support.scanner_protocol import claim, make_task, observation, upload_body
from tests.support.settings import make_settings
from tests.support.sql import scalar

TOKEN = "rollup-token-for-tests-0123456789"
EDGE_DATES = ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00")


@pytest.fixture
def traffic_api(database_url, tmp_path):
    settings = make_settings(database_url, tmp_path, traffic={"ingest_token": TOKEN})
    engine = db.create_engine(settings.database.url, settings.database)
    db.set_engine(engine)
    yield Api(create_app(settings, engine=engine, modules="off"))
    db.set_engine(None)
    engine.dispose()


def _error(response, status: int = 400) -> dict:
    assert response.status_code == status, (response.status_code, response.get_data()[:300])
    # Strict JSON: no bare NaN/Infinity, whatever the request held.
    body = json.loads(response.get_data(), parse_constant=lambda c: pytest.fail(c))
    return body["error"]


def _raw_json(user, path: str, text: str, method: str = "post"):
    return getattr(user.client, method)(
        path,
        data=text.encode("utf-8"),
        headers=user._headers({"Content-Type": "application/json"}),
    )


def test_deeply_nested_json_is_a_400_on_every_json_route(api):
    user = api.user()
    deep = "[" * 50_000 + "]" * 50_000
    for path in ("/api/tasks", "/api/auth/login"):
        assert _error(_raw_json(user, path, deep))["code"] == "invalid_json"
    nested = '{"name": "x", "targets": ["192.0.2.1"], "ports": "80", "y": ' + "[" * 60
    nested += "]" * 60 + "}"
    assert _error(_raw_json(user, "/api/tasks", nested))["code"] == "invalid_json"
    assert scalar("SELECT count(*) FROM scan_tasks") == 0


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b"])
def test_nul_and_lone_surrogates_in_json_strings_are_a_400(api, text):
    user = api.user()
    encoded = json.dumps({"name": text, "targets": ["192.0.2.1"], "ports": "80"})
    error = _error(_raw_json(user, "/api/tasks", encoded))
    assert error["details"]["items"][0]["field"] == "name"
    login = _raw_json(user, "/api/auth/login", json.dumps({"username": text, "password": text}))
    assert login.status_code == 400
    assert scalar("SELECT count(*) FROM scan_tasks") == 0


def test_nul_in_a_module_change_reason_is_a_400_not_a_503(api):
    admin = api.admin()
    body = {"expectedRevision": 1, "releaseId": "builtin", "changeReason": "why\x00"}
    error = _error(admin.post("/api/modules/report-render", json=body))
    assert error["details"]["items"][0]["field"] == "changeReason"


def test_nan_and_infinity_in_json_bodies_are_a_400(api):
    user = api.user()
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        text = '{"name": "x", "targets": ["192.0.2.1"], "ports": ' + literal + "}"
        assert _error(_raw_json(user, "/api/tasks", text))["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/assets", "q"),
        ("/api/assets", "service"),
        ("/api/assets", "product"),
        ("/api/tasks", "q"),
        ("/api/traffic/rollups", "domain"),
    ],
)
def test_nul_in_query_parameters_is_a_400_naming_it(api, path, parameter):
    user = api.user()
    error = _error(user.get(f"{path}?{parameter}=a%00b"))
    assert error["details"]["parameter"] == parameter


def test_scoped_ipv6_in_ip_and_cidr_is_a_400(api):
    user = api.user()
    for query in ("cidr=fe80::%25eth0/64", "ip=fe80::1%25eth0"):
        assert _error(user.get(f"/api/assets?{query}"))["code"] == "invalid_parameter"
    # An endpoint's history (API and console) was a 500: the zone reached PostgreSQL.
    for path in ("/api/assets/history", "/console/assets/history"):
        answer = user.get(f"{path}?ip=fe80::1%25eth0&port=80&transport=tcp")
        assert answer.status_code == 400, (path, answer.status_code)
    assert _error(user.get("/api/assets/history?port=80"))["details"]["parameter"] == "ip"


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/tasks?limit={}", "limit"),
        ("/api/assets?port={}", "port"),
        ("/api/assets/history?ip=192.0.2.1&port={}", "port"),
    ],
)
def test_integers_in_query_parameters_are_ascii_digits(api, path, parameter):
    """``int()`` also reads ``1_0``, ``+5``, `` 5`` and other scripts' digits; a URL's
    number is ASCII digits (an optional minus), anything else a 400 naming it."""
    user = api.user()
    for text in ("1_0", "%2B5", "%205", "%EF%BC%95", "%D9%A5", "5.0"):
        answer = user.get(path.format(text))
        assert answer.status_code == 400, (path, text, answer.status_code)
        assert _error(answer)["details"]["parameter"] == parameter
    assert user.get(path.format("5")).status_code == 200


@pytest.mark.parametrize("moment", EDGE_DATES)
def test_dates_at_the_edges_of_the_calendar_are_a_400(traffic_api, moment):
    user = traffic_api.user()
    encoded = moment.replace("+", "%2B")
    for path in (
        f"/api/assets?first_seen_from={encoded}",
        f"/api/assets?last_seen_to={encoded}",
        f"/api/traffic/rollups?from={encoded}",
        f"/api/traffic/rollups?to={encoded}",
    ):
        assert _error(user.get(path))["code"] == "invalid_parameter", path
    row = {
        "bucket_start": moment,
        "bucket_end": moment,
        "business_date": "2026-08-01",
        "granularity": "5m",
        "domain": "sc.example.com",
        "method": "GET",
        "path": "/",
        "response_bytes": 1,
        "request_bytes_known_count": 0,
        "total_requests": 1,
        "status_counts": {"2xx": 1},
        "generated_at": moment,
    }
    response = user.client.post(
        "/api/traffic/rollups",
        json={"rows": [row]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 400
    assert scalar("SELECT count(*) FROM traffic_rollups") == 0


def _forged(position: dict) -> str:
    raw = json.dumps(position).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "position",
    [
        {"_kind": "page"},
        {"_kind": "page", "id": "x"},
        {"_kind": "page", "id": float("nan")},
        {"_kind": "page", "id": [[[[1]]]]},
        {"_kind": "results", "after": "fe80::1%eth0", "ips": 1},
        {"_kind": "assets", "ip": "fe80::1%eth0", "port": 1, "transport": "tcp"},
    ],
)
def test_forged_cursors_are_refused_up_front(api, position):
    user = api.user()
    task = make_task(user)
    for path in (
        "/api/tasks",
        f"/api/tasks/{task['id']}/executions",
        f"/api/tasks/{task['id']}/results",
        "/api/assets",
        "/api/traffic/rollups",
    ):
        assert _error(user.get(f"{path}?cursor={_forged(position)}"))["code"] == "invalid_cursor"


def test_signed_cursors_page_and_one_of_another_kind_is_refused(api):
    user = api.user()
    for index in range(3):
        make_task(user, targets=(f"192.0.2.{index}",))
    first = user.get("/api/tasks?limit=2").get_json()
    cursor = first["next_cursor"]
    second = user.get(f"/api/tasks?limit=2&cursor={cursor}").get_json()
    assert len(first["items"]) == 2 and len(second["items"]) == 1
    # Same signature scheme, another page kind: refused.
    assert _error(user.get(f"/api/assets?cursor={cursor}"))["code"] == "invalid_cursor"
    assert _error(user.get(f"/api/tasks?cursor={cursor[:-2]}"))["code"] == "invalid_cursor"
    # Every other list with id-ordered pages refuses the tasks list's cursor too: it would
    # read a page of its own rows from a position in another table.
    task_id = first["items"][0]["id"]
    for path in (
        "/api/searches",
        "/api/exports",
        "/api/reports",
        f"/api/tasks/{task_id}/executions",
        "/api/changes",
    ):
        assert _error(user.get(f"{path}?cursor={cursor}"))["code"] == "invalid_cursor", path


def test_a_chunked_body_over_the_limit_is_413_not_invalid_json(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    limit = api.app.config["MAX_CONTENT_LENGTH"]
    big = upload_body(upload.token, 0, [observation("192.0.2.1", service={"banner": "x" * 100})])
    big["padding"] = "y" * (limit + 10)
    for path, client, headers in (
        (f"/api/scanner/executions/{upload.id}/uploads", scanner.client, scanner._headers(None)),
        ("/api/tasks", user.client, user._headers(None)),
    ):
        response = client.post(
            path,
            input_stream=io.BytesIO(json.dumps(big).encode()),
            headers={**headers, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
            environ_overrides={"wsgi.input_terminated": True},
        )
        assert _error(response, 413)["code"] == "request_entity_too_large"
    # Under the limit, a chunked body is read whole.
    small = upload_body(upload.token, 0, [observation("192.0.2.1")])
    response = scanner.client.post(
        f"/api/scanner/executions/{upload.id}/uploads",
        input_stream=io.BytesIO(json.dumps(small).encode()),
        headers={**scanner._headers(None), "Content-Type": "application/json"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert response.status_code == 200 and response.get_json()["saved"] == 1


def test_a_400_does_not_echo_a_long_field_back(api):
    user = api.user()
    long_target = "a" * 1_000_000
    response = user.post(
        "/api/tasks", json={"name": "x", "targets": [long_target + ".example"], "ports": "80"}
    )
    _error(response)
    assert len(response.get_data()) < 5_000
    response = user.post("/api/tasks", json={"name": "n" * 1_000_000, "targets": [], "ports": "1"})
    _error(response)
    assert len(response.get_data()) < 5_000


def test_error_bodies_never_carry_bare_nan_or_infinity():
    error = ValidationError(
        "x" * 5000,
        details={"value": float("nan"), "items": [float("inf"), -float("inf")], "deep": "y" * 999},
    )
    text = json.dumps(error.body(), allow_nan=False)
    body = json.loads(text)["error"]
    assert body["details"]["value"] == "nan" and body["details"]["items"] == ["inf", "-inf"]
    assert len(body["message"]) < 1100 and len(body["details"]["deep"]) < 300


def test_a_name_with_control_characters_is_refused_everywhere_names_are_given(api):
    """One rule for every display name (tasks, report definitions, alert rules and
    channels, API tokens): one line of text, no control characters."""
    user = api.user()
    task = make_task(user)
    bad = "a\u0001\u001fb"
    answers = {
        "task": user.post(
            "/api/tasks", json={"name": bad, "targets": ["192.0.2.1"], "ports": "80"}
        ),
        "task rename": user.patch(f"/api/tasks/{task['id']}", json={"name": "x\ny"}),
        "report": user.post(
            "/api/reports/definitions",
            json={
                "name": bad,
                "task_id": task["id"],
                "period": "daily",
                "recipients": ["a@b.example"],
            },
        ),
        "channel": user.post(
            "/api/alerts/channels",
            json={"name": bad, "kind": "email", "recipients": ["a@b.example"]},
        ),
        "token": user.post("/api/auth/tokens", json={"name": bad}),
    }
    channel = user.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["a@b.example"]}
    )
    answers["rule"] = user.post(
        "/api/alerts/rules",
        json={"name": bad, "on": ["new"], "channels": [channel.get_json()["channel"]["id"]]},
    )
    for what, answer in answers.items():
        assert answer.status_code == 400, (what, answer.get_json())
        assert "control characters" in json.dumps(answer.get_json()), what
    assert [t["name"] for t in user.get("/api/tasks").get_json()["items"]] == [task["name"]]


def test_a_channel_that_could_never_deliver_is_refused_when_made(api) -> None:
    """What delivery would refuse is refused at creation, naming the url field: the
    other spellings of a loopback address, localhost, Apprise's plain HTTP targets, and
    URLs that are no URL (spaces, control characters, a bad host or port 0)."""
    user = api.user()
    before = user.get("/api/alerts/channels").get_json()["items"]
    for body in (
        {"kind": "webhook", "url": "https://0x7f000001/x"},
        {"kind": "webhook", "url": "https://2130706433/x"},
        {"kind": "webhook", "url": "https://127.1/x"},
        {"kind": "webhook", "url": "https://localhost/x"},
        # A final dot names the same host.
        {"kind": "webhook", "url": "https://localhost.:8399/x"},
        {"kind": "webhook", "url": "https://LOCALHOST./x"},
        {"kind": "webhook", "url": "https://127.0.0.1./x"},
        {"kind": "apprise", "url": "json://localhost./x"},
        {"kind": "webhook", "url": "https://exa mple.com/"},
        {"kind": "webhook", "url": "https://example.com/\u0001"},
        {"kind": "webhook", "url": "https://-bad-.com/"},
        {"kind": "webhook", "url": "https://example.com:0/x"},
        {"kind": "apprise", "url": "json://127.0.0.1/x"},
        {"kind": "apprise", "url": "xml://169.254.169.254/"},
        {"kind": "apprise", "url": "form://localhost:80"},
    ):
        refused = user.post("/api/alerts/channels", json=body)
        assert refused.status_code == 400, (body, refused.get_json())
        assert refused.get_json()["error"]["details"]["field"] == "url", body
    assert user.get("/api/alerts/channels").get_json()["items"] == before
    # Global hosts, internationalised names and single-label intranet names are fine.
    for url in ("https://hooks.example.com/x", "https://bücher.example/x", "https://hooks/x"):
        made = user.post("/api/alerts/channels", json={"kind": "webhook", "url": url})
        assert made.status_code == 201, (url, made.get_json())
