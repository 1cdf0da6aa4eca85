"""Health, readiness, metrics and the JSON error contract (FND-6)."""

from __future__ import annotations

import json
import logging

import pytest
from flask import Blueprint

from app import create_app
from app.http.guards import public


def test_healthz_and_readyz(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json()["status"] == "ready"


def test_readyz_is_503_when_migrations_are_not_at_head(empty_database_url, tmp_path):
    from app import db
    from tests.support.settings import make_settings

    settings = make_settings(empty_database_url, tmp_path)
    engine = db.create_engine(empty_database_url, settings.database)
    try:
        client = create_app(settings, engine=engine, modules="off").test_client()
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.get_json()["reason"] == "migrations_pending"
    finally:
        db.set_engine(None)
        engine.dispose()


def test_readyz_is_503_when_the_database_is_unreachable(tmp_path):
    from app import db
    from tests.support.settings import make_settings

    url = "postgresql://nobody@127.0.0.1:1/none"
    settings = make_settings(url, tmp_path)
    engine = db.create_engine(url, settings.database)
    try:
        client = create_app(settings, engine=engine, modules="off").test_client()
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.get_json()["reason"] == "database_unavailable"
    finally:
        db.set_engine(None)
        engine.dispose()


def test_metrics_expose_request_latency(client, api):
    client.get("/healthz")
    answer = api.admin().get("/metrics")
    # Each parameter once: Prometheus 3 refuses a Content-Type that repeats one.
    assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = answer.get_data(as_text=True)
    assert "netmap_http_request_duration_seconds_bucket" in text
    assert 'route="/healthz"' in text
    assert "netmap_db_pool_wait_seconds" in text


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/no/such/route", 404, "not_found"),
        ("DELETE", "/healthz", 405, "method_not_allowed"),
        ("PUT", "/api/tasks", 405, "method_not_allowed"),
    ],
)
def test_http_errors_are_json(client, method, path, status, code):
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.is_json
    assert response.get_json()["error"]["code"] == code


def test_oversized_body_is_413_json(tmp_path, database_url, engine, api):
    from tests.support.api import Api
    from tests.support.settings import make_settings

    settings = make_settings(database_url, tmp_path, ingest={"max_body_bytes": 2048})
    small = Api(create_app(settings, engine=engine, modules="off"))
    user = small.user()
    response = user.post(
        "/api/tasks", json={"name": "x" * 4000, "targets": ["192.0.2.1"], "ports": "80"}
    )
    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "request_entity_too_large"


def test_unhandled_exception_is_logged_and_answered_without_a_trace(settings, engine, caplog):
    app = create_app(settings, engine=engine, modules="off")
    boom = Blueprint("boom", __name__)

    @boom.get("/boom")
    @public
    def explode():
        raise RuntimeError("secret internals: password=hunter2")

    app.register_blueprint(boom)
    with caplog.at_level(logging.ERROR, logger="netmap.http"):
        response = app.test_client().get("/boom", headers={"X-Request-ID": "req-123"})
    assert response.status_code == 500
    body = response.get_json()
    assert body == {
        "error": {
            "code": "internal_error",
            "message": "internal server error",
            "details": {"request_id": "req-123"},
        }
    }
    assert "hunter2" not in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)
    records = [
        r for r in caplog.records if getattr(r, "netmap_event", None) == "UnhandledException"
    ]
    assert records and records[0].netmap_fields["request_id"] == "req-123"
    assert records[0].exc_info is not None


def test_events_are_json_lines_without_secrets(capsys):
    from app.observability import JsonLineFormatter, emit, span

    logger = logging.getLogger("netmap.events")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLineFormatter())
    logger.addHandler(handler)
    # Self-contained: INFO events are emitted whether or not an earlier test in this
    # process configured logging (the root logger is at WARNING until then).
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with span(request_id="r1", scanner_id=7):
            emit("Probe", token="t0ps3cret", password="pw", checksum="abc", observations=[1], ok=1)
    finally:
        logger.setLevel(level)
        logger.removeHandler(handler)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    event = json.loads(line)
    assert event["event"] == "Probe" and event["request_id"] == "r1" and event["scanner_id"] == 7
    assert event["ok"] == 1
    for forbidden in ("t0ps3cret", 'pw"', "abc", "observations"):
        assert forbidden not in line


def test_pool_timeout_becomes_503_with_retry_after(small_pool_app):
    import threading

    from app import db

    api = small_pool_app(pool_timeout_seconds=0.2).api
    user = api.user()
    held = threading.Event()
    release = threading.Event()

    def hold_the_only_connection():
        with db.transaction():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_only_connection)
    holder.start()
    held.wait(5)
    try:
        response = user.get("/api/tasks")
    finally:
        release.set()
        holder.join()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"
    assert response.get_json()["error"]["code"] == "database_busy"
    assert user.get("/api/tasks").status_code == 200
