"""Sessions that end, accounts that can be changed, and the hardening around them.

A session is a server-side row: logout, a password change and disabling the user
end it even for a copy of the cookie. Login throttling is counted in PostgreSQL
per address and per username; passwords follow a policy; responses carry the
security headers; /metrics and the readiness details are for operators only; a
database error is logged without its statement parameters.
"""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa
from flask import Blueprint

from app import create_app
from app.db import transaction
from app.http.guards import public
from tests.support.api import DEFAULT_PASSWORD, Api
from tests.support.settings import make_settings

COOKIE = "netmap_session"


def _copy_session(api: Api, session) -> object:
    """A second browser holding a copy of the session cookie (as a thief would)."""
    cookie = session.client.get_cookie(COOKIE)
    assert cookie is not None
    thief = api.app.test_client()
    thief.set_cookie(COOKIE, cookie.value)
    return thief


# --- revocable sessions ------------------------------------------------------


def test_logout_ends_the_session_even_for_a_copied_cookie(api):
    session = api.user()
    thief = _copy_session(api, session)
    assert thief.get("/api/auth/me").status_code == 200
    assert session.post("/api/auth/logout").status_code == 204
    assert thief.get("/api/auth/me").status_code == 401
    assert session.get("/api/auth/me").status_code == 401


def test_logout_ends_only_that_session(api):
    created = api.create_user()
    laptop = api.login(created["username"])
    phone = api.login(created["username"])
    assert laptop.post("/api/auth/logout").status_code == 204
    assert phone.get("/api/auth/me").status_code == 200


def test_password_change_ends_every_session_and_keeps_the_caller_logged_in(api):
    created = api.create_user()
    laptop = api.login(created["username"])
    phone = api.login(created["username"])
    thief = _copy_session(api, laptop)
    wrong = laptop.post(
        "/api/auth/password",
        json={"current_password": "not it at all", "new_password": "a brand new secret 42"},
    )
    assert wrong.status_code == 401
    assert phone.get("/api/auth/me").status_code == 200
    changed = laptop.post(
        "/api/auth/password",
        json={"current_password": DEFAULT_PASSWORD, "new_password": "a brand new secret 42"},
    )
    assert changed.status_code == 200, changed.get_json()
    assert phone.get("/api/auth/me").status_code == 401
    assert thief.get("/api/auth/me").status_code == 401
    # The caller got a fresh session (new cookie and CSRF token).
    laptop.csrf = changed.get_json()["csrf_token"]
    assert laptop.get("/api/auth/me").status_code == 200
    assert api.login(created["username"], "a brand new secret 42")
    old = api.app.test_client().post(
        "/api/auth/login", json={"username": created["username"], "password": DEFAULT_PASSWORD}
    )
    assert old.status_code == 401
    # The product hashes at scrypt's full cost (test users are made cheaper, tests/support).
    with transaction() as conn:
        stored = conn.execute(
            sa.text("SELECT password_hash FROM users WHERE id = :id"), {"id": created["id"]}
        ).scalar()
    assert stored.startswith("scrypt:32768:8:1$")


def test_password_change_follows_the_password_policy(api):
    session = api.user()
    response = session.post(
        "/api/auth/password",
        json={"current_password": DEFAULT_PASSWORD, "new_password": "password1234"},
    )
    assert response.status_code == 400
    assert "new_password" in response.get_json()["error"]["details"]["fields"]
    assert session.get("/api/auth/me").status_code == 200


def test_disabling_a_user_ends_every_session_and_enabling_allows_login_again(api):
    admin = api.admin()
    created = api.create_user()
    one, two = api.login(created["username"]), api.login(created["username"])
    disabled = admin.post(f"/api/users/{created['id']}/disable")
    assert disabled.status_code == 200
    assert disabled.get_json() == {
        "id": created["id"],
        "username": created["username"],
        "is_admin": False,
        "disabled": True,
    }
    assert one.get("/api/auth/me").status_code == 401
    assert two.get("/api/auth/me").status_code == 401
    login = api.app.test_client().post(
        "/api/auth/login", json={"username": created["username"], "password": DEFAULT_PASSWORD}
    )
    assert login.status_code == 401
    # A misspelt field is named, not ignored (and counted against the sign-in budget).
    extra = api.app.test_client().post(
        "/api/auth/login",
        json={"username": created["username"], "password": DEFAULT_PASSWORD, "remember": True},
    )
    assert extra.status_code == 400 and extra.get_json()["error"]["code"] == "unknown_field"
    enabled = admin.post(f"/api/users/{created['id']}/enable")
    assert enabled.status_code == 200 and enabled.get_json()["disabled"] is False
    # Enabling does not bring the old sessions back.
    assert one.get("/api/auth/me").status_code == 401
    assert api.login(created["username"]).get("/api/auth/me").status_code == 200
    assert admin.post("/api/users/999999/disable").status_code == 404
    with transaction() as conn:
        actions = conn.execute(sa.text("SELECT action FROM audit_log ORDER BY id")).scalars().all()
    assert actions == ["user.disable", "user.enable"]


def test_an_admin_cannot_disable_themselves(api):
    admin = api.admin()
    response = admin.post(f"/api/users/{admin.id}/disable")
    assert response.status_code == 409
    assert admin.get("/api/auth/me").status_code == 200


def test_sessions_are_stored_hashed_and_expire(api):
    session = api.user()
    cookie = session.client.get_cookie(COOKIE).value
    with transaction() as conn:
        dump = conn.execute(sa.text("SELECT row_to_json(s)::text FROM user_sessions s")).scalars()
        assert all(cookie not in row for row in dump)
        conn.execute(sa.text("UPDATE user_sessions SET expires_at = now() - interval '1 second'"))
    assert session.get("/api/auth/me").status_code == 401


# --- password policy ---------------------------------------------------------


@pytest.mark.parametrize(
    "password",
    [
        "short1!",  # the length rule stays
        "password123",  # common
        "Qwertyuiop1!",  # common keyboard walk with decorations
        "iloveyou2024",
        "aaaaaaaaaaaaaaaa",  # low entropy
        "1234567890123",
        "abcabcabcabcabc",
        "xx-Mallory-xx-2026",  # contains the username
    ],
)
def test_password_policy_rejects_weak_passwords(engine, password):
    from app.errors import ValidationError
    from app.identity.users import create_user

    with pytest.raises(ValidationError) as caught, transaction() as conn:
        create_user(conn, "mallory", password)
    assert "password" in caught.value.details["fields"]


@pytest.mark.parametrize(
    "password", ["correct horse battery staple", "long enough password", "Tr0ub4dor&3-xk"]
)
def test_password_policy_accepts_reasonable_passwords(engine, password):
    from app.identity.users import create_user

    with transaction() as conn:
        assert create_user(conn, "mallory", password).username == "mallory"


def test_the_blocklist_ships_inside_the_package():
    from importlib.resources import files

    text = files("app.identity").joinpath("common_passwords.txt").read_text()
    assert "password123" in text.split()


# --- login throttling --------------------------------------------------------


def _login(client, username: str, address: str):
    return client.post(
        "/api/auth/login",
        json={"username": username, "password": "wrong password!"},
        environ_base={"REMOTE_ADDR": address},
    )


def test_login_throttle_is_per_username_across_addresses(tmp_path, database_url, engine):
    settings = make_settings(
        database_url,
        tmp_path,
        security={"login_rate_limit": "100 per minute", "login_username_rate_limit": "3/hour"},
    )
    client = create_app(settings, engine=engine, modules="off").test_client()
    statuses = [_login(client, "Victim", f"10.0.0.{i}").status_code for i in range(1, 5)]
    assert statuses == [401, 401, 401, 429]
    limited = _login(client, "victim", "10.0.0.99")
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) > 0
    assert limited.get_json()["error"]["code"] == "rate_limited"
    # Another username from the same addresses is not affected.
    assert _login(client, "someone-else", "10.0.0.1").status_code == 401


def test_login_throttle_is_per_address_across_usernames(tmp_path, database_url, engine):
    settings = make_settings(database_url, tmp_path, security={"login_rate_limit": "3/hour"})
    client = create_app(settings, engine=engine, modules="off").test_client()
    statuses = [_login(client, f"name{i}", "10.1.1.1").status_code for i in range(4)]
    assert statuses == [401, 401, 401, 429]
    assert _login(client, "name9", "10.1.1.2").status_code == 401


def test_login_throttle_counts_in_the_database(tmp_path, database_url, engine):
    """Two apps with their own engines (nothing shared in memory) share one budget."""
    from app import db

    settings = make_settings(database_url, tmp_path, security={"login_rate_limit": "3/hour"})
    other_engine = db.create_engine(database_url, settings.database)
    try:
        first = create_app(settings, engine=engine, modules="off").test_client()
        with transaction() as conn:
            before = conn.execute(sa.text("SELECT count(*) FROM login_throttle")).scalar()
        assert before == 0
        statuses = [_login(first, "x", "10.2.2.2").status_code for _ in range(2)]
        with transaction(engine=other_engine) as conn:
            hits = conn.execute(
                sa.text("SELECT max(hits) FROM login_throttle WHERE bucket LIKE 'addr:%'")
            ).scalar()
        assert statuses == [401, 401] and hits == 2
    finally:
        other_engine.dispose()
        db.set_engine(engine)


# --- response headers and cookies --------------------------------------------


def test_security_headers_on_api_responses(api, client):
    session = api.user()
    for response in (
        session.get("/api/auth/me"),
        client.get("/api/tasks"),
        client.post("/api/auth/login", json={"username": "x", "password": "y"}),
        client.get("/healthz"),
    ):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert session.get("/api/auth/me").headers["Cache-Control"] == "no-store"
    assert client.get("/api/tasks").headers["Cache-Control"] == "no-store"


def test_html_responses_get_a_restrictive_csp(settings, engine):
    app = create_app(settings, engine=engine, modules="off")
    page = Blueprint("page", __name__)

    @page.get("/page-for-test")
    @public
    def html_page():
        return "<!doctype html><title>t</title>"

    app.register_blueprint(page)
    response = app.test_client().get("/page-for-test")
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def _login_cookie(app, base_url: str) -> str:
    client = app.test_client()
    response = client.post(
        "/api/auth/login",
        json={"username": "cookie", "password": DEFAULT_PASSWORD},
        base_url=base_url,
    )
    assert response.status_code == 200, response.get_json()
    return response.headers["Set-Cookie"]


def test_session_cookie_is_secure_except_on_loopback(api):
    api.create_user("cookie")
    assert "Secure" in _login_cookie(api.app, "https://netmap.example")
    assert "Secure" in _login_cookie(api.app, "http://netmap.example")
    assert "Secure" not in _login_cookie(api.app, "http://127.0.0.1:8000")
    assert "Secure" not in _login_cookie(api.app, "http://localhost")
    assert "Secure" not in _login_cookie(api.app, "http://[::1]:8000")


def test_session_cookie_secure_can_be_forced_off(tmp_path, database_url, engine):
    settings = make_settings(database_url, tmp_path, security={"session_cookie_secure": False})
    api = Api(create_app(settings, engine=engine, modules="off"))
    api.create_user("cookie")
    assert "Secure" not in _login_cookie(api.app, "http://netmap.example")


# --- /metrics and /readyz ----------------------------------------------------


def test_metrics_need_the_token_or_an_admin_session(tmp_path, database_url, engine):
    settings = make_settings(database_url, tmp_path, security={"metrics_token": "m" * 40})
    api = Api(create_app(settings, engine=engine, modules="off"))
    anonymous = api.app.test_client()
    assert anonymous.get("/metrics").status_code == 401
    assert anonymous.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert api.user().get("/metrics").status_code == 403
    scraped = anonymous.get("/metrics", headers={"Authorization": "Bearer " + "m" * 40})
    assert scraped.status_code == 200
    assert "netmap_http_request_duration_seconds" in scraped.get_data(as_text=True)
    assert api.admin().get("/metrics").status_code == 200


def test_metrics_without_a_token_configured_need_an_admin(api, client):
    assert client.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 401
    assert api.admin().get("/metrics").status_code == 200


def test_readyz_shows_the_schema_revision_only_to_admins(api, client):
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 200
    assert anonymous.get_json() == {"status": "ready"}
    assert api.user().get("/readyz").get_json() == {"status": "ready"}
    detailed = api.admin().get("/readyz").get_json()
    assert detailed["status"] == "ready" and detailed["revision"]


def test_readyz_hides_pending_migration_details_from_anonymous_callers(
    empty_database_url, tmp_path
):
    from app import db

    settings = make_settings(empty_database_url, tmp_path)
    engine = db.create_engine(empty_database_url, settings.database)
    try:
        client = create_app(settings, engine=engine, modules="off").test_client()
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.get_json() == {"status": "unavailable", "reason": "migrations_pending"}
    finally:
        db.set_engine(None)
        engine.dispose()


# --- logs --------------------------------------------------------------------


def test_an_unhandled_database_error_logs_no_statement_parameters(settings, engine, capsys):
    from app.observability import configure_logging

    configure_logging()
    app = create_app(settings, engine=engine, modules="off")
    failing = Blueprint("failing", __name__)

    @failing.get("/db-boom")
    @public
    def db_boom():
        with transaction() as conn:
            conn.execute(
                sa.text("SELECT CAST(:observation AS integer) FROM users WHERE username = :who"),
                {"observation": "banner-secret-hunter2", "who": "user-secret-alice"},
            )

    app.register_blueprint(failing)
    capsys.readouterr()
    logging.getLogger("netmap.http").setLevel(logging.INFO)
    response = app.test_client().get("/db-boom", headers={"X-Request-ID": "req-db-1"})
    assert response.status_code == 500
    err = capsys.readouterr().err
    assert "hunter2" not in err and "user-secret-alice" not in err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    logged = [e for e in events if e.get("event") == "UnhandledDatabaseError"]
    assert len(logged) == 1, err
    assert logged[0]["request_id"] == "req-db-1"
    assert logged[0]["error"] == "DataError"
    assert logged[0]["statement"] == "SELECT users"
    assert "exception" not in logged[0]


@pytest.fixture
def redis_url(tmp_path):
    """A throwaway redis-server on 127.0.0.1 and a free port (skipped where not installed)."""
    import shutil
    import subprocess

    import redis

    from tests.support.processes import free_port
    from tests.support.waiting import wait_until

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answers, timeout=20, interval=0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_login_throttle_uses_a_configured_shared_store(tmp_path, database_url, engine, redis_url):
    settings = make_settings(
        database_url,
        tmp_path,
        security={
            "login_rate_limit": "100/minute",
            "login_username_rate_limit": "3/hour",
            "ratelimit_storage_uri": redis_url,
        },
    )
    first = create_app(settings, engine=engine, modules="off").test_client()
    second = create_app(settings, engine=engine, modules="off").test_client()
    statuses = [
        _login(client, "shared", f"10.3.3.{i}").status_code
        for i, client in enumerate((first, second, first, second))
    ]
    assert statuses == [401, 401, 401, 429]
    assert int(_login(second, "shared", "10.3.3.9").headers["Retry-After"]) > 0
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM login_throttle")).scalar() == 0


def test_logged_database_errors_anywhere_carry_no_parameters_or_row_values(engine):
    """The runner's JobFailed/JobClaimFailed path: the formatter and describe_error."""
    import sys

    from app.observability import JsonLineFormatter, describe_error

    with transaction() as conn:
        conn.execute(
            sa.text("INSERT INTO users (username, password_hash) VALUES ('alice-row-value', 'x')")
        )
    try:
        try:
            with transaction() as conn:
                conn.execute(
                    sa.text("INSERT INTO users (username, password_hash) VALUES (:u, :h)"),
                    {"u": "alice-row-value", "h": "hash-param-secret"},
                )
        except sa.exc.IntegrityError as exc:
            raise RuntimeError("job step failed") from exc
    except RuntimeError as exc:
        described = describe_error(exc)
        record = logging.LogRecord(
            "netmap.runner", logging.ERROR, __file__, 1, "job failed", None, sys.exc_info()
        )
    line = JsonLineFormatter().format(record)
    assert described == "IntegrityError in INSERT users"
    for text in (described, line):
        assert "alice-row-value" not in text and "hash-param-secret" not in text
    assert "IntegrityError (message withheld)" in json.loads(line)["exception"]


def test_a_password_change_of_the_wrong_shape_is_a_400_and_no_guess(api):
    session = api.user()
    for body, field in (
        ({"new_password": "a brand new secret 42"}, "current_password"),
        ({"current_password": None, "new_password": "a brand new secret 42"}, "current_password"),
        ({"current_password": 5, "new_password": "a brand new secret 42"}, "current_password"),
        ({"current_password": DEFAULT_PASSWORD, "new_password": ["x"]}, "new_password"),
        ({"current_password": DEFAULT_PASSWORD, "new_password": "x", "extra": 1}, "extra"),
    ):
        refused = session.post("/api/auth/password", json=body)
        assert refused.status_code == 400, (body, refused.get_json())
        assert refused.get_json()["error"]["details"]["field"] == field
    # None of them counted against the sign-in throttle: the right password still works.
    assert (
        session.post(
            "/api/auth/password",
            json={"current_password": DEFAULT_PASSWORD, "new_password": "a brand new secret 42"},
        ).status_code
        == 200
    )


def test_a_misspelt_field_making_a_user_or_scanner_is_refused_and_nothing_is_made(api):
    admin = api.admin()
    refused = admin.post(
        "/api/users", json={"username": "dora", "password": DEFAULT_PASSWORD, "is_amdin": True}
    )
    assert refused.status_code == 400
    assert refused.get_json()["error"] == {
        "code": "unknown_field",
        "message": refused.get_json()["error"]["message"],
        "details": {"field": "is_amdin"},
    }
    with transaction() as conn:
        made = conn.execute(sa.text("SELECT count(*) FROM users WHERE username = 'dora'"))
        assert made.scalar() == 0
    # A value of the wrong type is named as the other fields' problems are.
    refused = admin.post(
        "/api/users", json={"username": "dora", "password": DEFAULT_PASSWORD, "is_admin": "yes"}
    )
    assert refused.status_code == 400
    assert refused.get_json()["error"]["details"] == {
        "fields": {"is_admin": "must be true or false"}
    }
    refused = admin.post("/api/scanners", json={"name": "probe", "nmae": "x"})
    assert refused.status_code == 400
    assert refused.get_json()["error"]["details"] == {"field": "nmae"}
    assert "probe" not in {s["name"] for s in admin.get("/api/scanners").get_json()["items"]}


def test_a_new_password_equal_to_the_current_one_is_refused_and_ends_no_session(api):
    created = api.create_user()
    laptop, phone = api.login(created["username"]), api.login(created["username"])
    same = laptop.post(
        "/api/auth/password",
        json={"current_password": DEFAULT_PASSWORD, "new_password": DEFAULT_PASSWORD},
    )
    assert same.status_code == 400
    assert same.get_json()["error"]["details"]["fields"] == {
        "new_password": "must differ from the current password"
    }
    assert phone.get("/api/auth/me").status_code == 200
