"""Property-based fuzzing of every HTTP route (issue 11 §2, FND-7).

Every rule in ``app.url_map`` is driven by hypothesis with malformed and extreme
bodies (random bytes, JSON with NUL, lone surrogates, NaN literals, huge
numbers, deep nesting, mutations of a valid body), query parameters (NUL,
``%`` zone ids, edge dates, forged cursors, very long values) and headers, by a
caller that may use the route (admin session, the scanner holding the claim,
the traffic bearer token). For every answer:

* no 5xx;
* an error answer is a strict JSON ``{"error": {"code", "message"}}`` (no bare
  NaN/Infinity);
* a 4xx wrote nothing: the row counts of the data tables are unchanged.

Each route gets a dozen examples (``_each_rule``), so the suite stays under a minute in CI.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import close_app, create_app
from app.db import transaction
from tests.support.api import Api
from tests.support.scanner_protocol import now_iso, observation, upload_body
from tests.support.settings import make_settings

TOKEN = "rollup-token-for-fuzz-tests-0123456789"
DATA_TABLES = (
    "scan_tasks",
    "scan_executions",
    "scan_upload_receipts",
    "scan_dns_answers",
    "search_facts",
    "search_execution_endpoints",
    "traffic_rollups",
    "users",
    "scanners",
)
# These would end the fuzzing session itself.
SKIPPED = {("POST", "/api/auth/logout"), ("POST", "/console/sign-out")}
FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@dataclass
class World:
    api: Api
    admin: Any
    scanner: Any
    task_id: int
    execution_id: int
    claim_token: str
    rules: list[tuple[str, str]]


@pytest.fixture
def world(database_url, tmp_path, engine):
    settings_ = make_settings(
        database_url,
        tmp_path,
        traffic={"ingest_token": TOKEN},
        security={"admin_rate_limit": "100000 per minute", "login_rate_limit": "100000/minute"},
    )
    app = create_app(settings_, engine=engine)
    api = Api(app)
    admin = api.admin()
    scanner = api.scanner()
    task = admin.post(
        "/api/tasks", json={"name": "fuzz", "targets": ["192.0.2.0/28"], "ports": "22,443"}
    ).get_json()["task"]
    claimed = scanner.claim().get_json()["execution"]
    rules = sorted(
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods - {"HEAD", "OPTIONS"}
        if (method, rule.rule) not in SKIPPED
    )
    yield World(api, admin, scanner, task["id"], claimed["id"], claimed["claim_token"], rules)
    close_app(app)


# --- strategies ------------------------------------------------------------------------------

NASTY_VALUES = [
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfff",
    "fe80::1%eth0",
    "fe80::%eth0/64",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+14:00",
    "NaN",
    "-1",
    "99999999999999999999999",
    "' OR 1=1 --",
    "%",
    "_",
    "\\",
    "x" * 5000,
]
# The hand-picked values first: hypothesis favours the first branch, and these are the
# inputs that broke routes before.
NASTY_TEXT = st.one_of(
    st.sampled_from(NASTY_VALUES),
    st.text(max_size=20),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc"]), max_size=5),
)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    NASTY_TEXT,
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(NASTY_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
RAW_TEXT_BODIES = st.sampled_from(
    [
        "",
        "null",
        "{",
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": -Infinity}',
        '{"a": 1e999}',
        '{"a": "\\ud800"}',
        '{"a": "\\u0000"}',
        "[" * 3000 + "]" * 3000,
        '{"a":' * 3000 + "1" + "}" * 3000,
        "1" * 5000,
        "\xff\xfe",
    ]
)
QUERY_NAMES = (
    "q",
    "service",
    "product",
    "domain",
    "cursor",
    "limit",
    "ip",
    "cidr",
    "from",
    "to",
    "first_seen_from",
    "last_seen_to",
    "status",
    "scope",
    "port",
    "transport",
    "granularity",
    "parent_task_id",
)


def _valid_body(world: World, method: str, rule: str) -> dict[str, Any] | None:
    """A well-formed body for the route, for the mutation strategy."""
    if rule.endswith("/uploads"):
        return upload_body(world.claim_token, 0, [observation("192.0.2.1")])
    if rule == "/api/tasks":
        return {"name": "n", "targets": ["192.0.2.1"], "ports": "22"}
    if rule == "/api/traffic/rollups":
        return {
            "rows": [
                {
                    "bucket_start": "2026-08-01T02:00:00Z",
                    "bucket_end": "2026-08-01T02:05:00Z",
                    "business_date": "2026-08-01",
                    "granularity": "5m",
                    "domain": "sc.example.com",
                    "method": "GET",
                    "path": "/",
                    "response_bytes": 1,
                    "request_bytes_known_count": 0,
                    "total_requests": 1,
                    "status_counts": {"2xx": 1},
                    "generated_at": now_iso(),
                }
            ]
        }
    if rule == "/api/auth/login":
        return {"username": "someone", "password": "wrong-password-123"}
    if rule.endswith("/lease") or rule.endswith("/fail"):
        return {"claim_token": world.claim_token, "reason": "r"}
    if rule == "/api/users":
        return {"username": "fuzzed", "password": "a-long-enough-password-1"}
    if rule == "/api/scanners":
        return {"name": "fuzzed"}
    if rule.startswith("/api/modules"):
        return {"expectedRevision": 1, "releaseId": "builtin", "changeReason": "fuzz"}
    return {}


def _mutate(body: dict[str, Any], data: st.DataObject) -> Any:
    """Replace one value somewhere in ``body`` (top level or first nested item)."""
    if not body:
        return data.draw(JSON_VALUE)
    key = data.draw(st.sampled_from(sorted(body)))
    target = body
    value = body[key]
    if (
        isinstance(value, list)
        and value
        and isinstance(value[0], dict)
        and data.draw(st.booleans())
    ):
        target = value[0]
        key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(JSON_VALUE)
    return body


def _path(world: World, rule: str, data: st.DataObject) -> str:
    ids = st.one_of(
        st.sampled_from([world.task_id, world.execution_id, 0, 2**63 - 1, 2**80]),
        st.integers(min_value=0, max_value=10),
    )
    return re.sub(r"<(?:int:)?[a-z_]+>", lambda _m: str(data.draw(ids)), rule)


def _counts() -> dict[str, int]:
    with transaction() as conn:
        return {
            table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()
            for table in DATA_TABLES
        }


def _send(world: World, method: str, path: str, *, data: bytes | None, headers: dict[str, str]):
    if path.startswith("/api/scanner"):
        client, auth = world.scanner.client, {"Authorization": f"Bearer {world.scanner.token}"}
    elif path == "/api/traffic/rollups" and method == "POST":
        client, auth = world.api.app.test_client(), {"Authorization": f"Bearer {TOKEN}"}
    else:
        client, auth = world.admin.client, world.admin._headers(None)
    return client.open(path, method=method, data=data, headers={**auth, **headers})


def _check(response, before: dict[str, int], what: Any) -> None:
    status = response.status_code
    assert status < 500, (what, status, response.get_data()[:500])
    if status >= 400 and response.mimetype == "text/html":
        # Console pages answer errors as HTML pages (the form again, or an error page).
        assert response.request.path.startswith("/console/"), (what, status)
        if status != 429:
            assert _counts() == before, (what, status)
        return
    if status >= 400:
        text = response.get_data(as_text=True)
        body = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in {text[:200]}"))
        assert set(body["error"]) >= {"code", "message"}, (what, body)
        if status != 429:
            assert _counts() == before, (what, status, body)


def _each_rule(rules: list[tuple[str, str]], examples: int, check) -> None:
    """Run ``check(method, rule, data)`` under hypothesis for every rule in turn, so each
    route gets its own examples instead of sharing one budget with the others."""
    for method, rule in rules:
        _fuzz_one(method, rule, examples, check)


def _fuzz_one(method: str, rule: str, examples: int, check) -> None:
    @given(data=st.data())
    @settings(FUZZ, max_examples=examples)
    def run(data):
        check(method, rule, data)

    run()


def test_bodies(world):
    def check(method, rule, data):
        path = _path(world, rule, data)
        kind = data.draw(st.sampled_from(["raw", "mutated", "json", "bytes"]))
        if kind == "raw":
            payload = data.draw(RAW_TEXT_BODIES).encode("utf-8", "surrogatepass")
        elif kind == "json":
            payload = json.dumps(data.draw(JSON_VALUE)).encode()
        elif kind == "mutated":
            payload = json.dumps(_mutate(_valid_body(world, method, rule) or {}, data)).encode()
        else:
            payload = data.draw(st.binary(max_size=64))
        content_type = data.draw(
            st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"])
        )
        before = _counts()
        response = _send(world, method, path, data=payload, headers={"Content-Type": content_type})
        _check(response, before, (method, path, payload[:200]))

    _each_rule([r for r in world.rules if r[0] != "GET"], 12, check)


def test_query_parameters(world):
    def check(method, rule, data):
        path = _path(world, rule, data)
        params = data.draw(
            st.dictionaries(st.sampled_from(QUERY_NAMES), NASTY_TEXT, min_size=1, max_size=6)
        )
        query = "&".join(
            f"{k}={''.join(f'%{b:02X}' for b in v.encode('utf-8', 'surrogatepass'))}"
            for k, v in params.items()
        )
        before = _counts()
        response = _send(world, method, f"{path}?{query}", data=None, headers={})
        _check(response, before, (path, params))

    _each_rule([r for r in world.rules if r[0] == "GET"], 12, check)


def test_headers(world):
    def check(method, rule, data):
        path = _path(world, rule, data)
        headers = {
            "Content-Type": data.draw(
                st.sampled_from(["application/json", "multipart/form-data", "x/y; charset=zz", ""])
            ),
            "X-Request-Id": data.draw(st.sampled_from(["", "x" * 500, "a\tb", "ok-1"])),
            "Accept": data.draw(st.sampled_from(["*/*", "text/html", "\x7f"])),
        }
        body = None if method == "GET" else json.dumps(_valid_body(world, method, rule)).encode()
        before = _counts()
        response = _send(world, method, path, data=body, headers=headers)
        _check(response, before, (method, path, headers))

    _each_rule(world.rules, 3, check)
