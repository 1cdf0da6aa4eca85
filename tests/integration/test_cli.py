"""The `netmap` command line as a real process against the test database (FND-4)."""

from __future__ import annotations

import json
import subprocess

import sqlalchemy as sa

from app.db import transaction
from tests.support.processes import PROJECT_ROOT, base_env, netmap_command


def run_cli(database_url: str, *args: str, stdin: str = "", **env: str):
    return subprocess.run(
        netmap_command(*args),
        input=stdin,
        capture_output=True,
        text=True,
        env=base_env(NETMAP_DATABASE_URL=database_url, **env),
        cwd=PROJECT_ROOT,
        timeout=60,
    )


def test_users_create_reads_the_password_from_stdin(database_url, engine):
    result = run_cli(
        database_url,
        "users",
        "create",
        "carol",
        "--admin",
        "--password-stdin",
        stdin="long password 1\n",
    )
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["username"] == "carol" and isinstance(created["id"], int)
    with transaction() as conn:
        row = conn.execute(sa.text("SELECT is_admin, password_hash FROM users")).one()
    assert row.is_admin and row.password_hash.startswith("scrypt:")
    again = run_cli(
        database_url, "users", "create", "carol", "--password-stdin", stdin="long password 1\n"
    )
    assert again.returncode != 0
    assert "user_exists" in again.stderr


def test_users_create_rejects_a_weak_password(database_url, engine):
    result = run_cli(database_url, "users", "create", "dave", "--password-stdin", stdin="short\n")
    assert result.returncode != 0
    assert "password" in result.stderr


def test_scanners_create_prints_the_token_once(database_url, engine, api):
    result = run_cli(database_url, "scanners", "create", "edge-1")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert set(created) == {"id", "name", "token"}
    scanner_client = api.app.test_client()
    response = scanner_client.post(
        "/api/scanner/claim", headers={"Authorization": f"Bearer {created['token']}"}
    )
    assert response.status_code == 204
    assert created["token"] not in result.stderr


def test_users_token_makes_a_working_token_shown_once(database_url, engine, api):
    created = api.create_user("frank")
    result = run_cli(
        database_url, "users", "token", "frank", "--name", "ansible", "--expires-in-days", "30"
    )
    assert result.returncode == 0, result.stderr
    token = json.loads(result.stdout)
    assert token["username"] == "frank" and token["access"] == "write" and token["expires_at"]
    assert token["secret"].startswith("nmu_") and token["secret"] not in result.stderr
    client = api.app.test_client()
    me = client.get("/api/auth/me", headers={"Authorization": f"Bearer {token['secret']}"})
    assert me.status_code == 200 and me.get_json()["user"]["id"] == created["id"]
    reader = run_cli(database_url, "users", "token", "frank", "--name", "siem", "--read-only")
    assert (
        json.loads(reader.stdout)["access"] == "read"
        and json.loads(reader.stdout)["expires_at"] is None
    )
    with transaction() as conn:
        actors = conn.execute(
            sa.text(
                "SELECT actor_user_id, details->>'via' FROM audit_log "
                "WHERE action = 'api_token.create' ORDER BY id"
            )
        ).all()
    assert [tuple(row) for row in actors] == [(None, "cli"), (None, "cli")]
    for args, words in (
        (("nobody", "--name", "x"), "user_not_found"),
        (("frank", "--name", "ansible"), "duplicate_name"),
        (("frank", "--name", "x", "--expires-in-days", "0"), "--expires-in-days"),
        (("frank",), "--name"),
    ):
        refused = run_cli(database_url, "users", "token", *args)
        assert refused.returncode != 0 and words in refused.stderr, (args, refused.stderr)


def test_db_upgrade_on_an_empty_database(empty_database_url):
    result = run_cli(empty_database_url, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["revision"]
    again = run_cli(empty_database_url, "db", "upgrade")
    assert again.returncode == 0


def test_commands_refuse_an_unmigrated_database(empty_database_url):
    result = run_cli(empty_database_url, "scanners", "create", "x")
    assert result.returncode != 0
    assert "netmap db upgrade" in result.stderr


def test_bad_configuration_is_a_clear_start_up_error(database_url, tmp_path):
    config = tmp_path / "netmap.toml"
    config.write_text("[runner]\nprocesses = 0\n")
    result = run_cli(database_url, "--config", str(config), "runner")
    assert result.returncode != 0
    assert "runner.processes = 0: must be between 1 and 64" in result.stderr


def test_users_set_password_and_disable_end_every_session(database_url, engine, api):
    created = api.create_user("erin")
    session = api.login("erin")
    weak = run_cli(
        database_url, "users", "set-password", "erin", "--password-stdin", stdin="erin12345678\n"
    )
    assert weak.returncode != 0 and "username" in weak.stderr
    changed = run_cli(
        database_url,
        "users",
        "set-password",
        "erin",
        "--password-stdin",
        stdin="a fresh start 77\n",
    )
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout) == {
        "id": created["id"],
        "username": "erin",
        "sessions_ended": 1,
    }
    assert session.get("/api/auth/me").status_code == 401
    again = api.login("erin", "a fresh start 77")
    disabled = run_cli(database_url, "users", "disable", "erin")
    assert disabled.returncode == 0, disabled.stderr
    assert json.loads(disabled.stdout)["disabled"] is True
    assert again.get("/api/auth/me").status_code == 401
    enabled = run_cli(database_url, "users", "enable", "erin")
    assert enabled.returncode == 0 and json.loads(enabled.stdout)["disabled"] is False
    assert api.login("erin", "a fresh start 77").get("/api/auth/me").status_code == 200
    missing = run_cli(database_url, "users", "disable", "nobody-here")
    assert missing.returncode != 0 and "user_not_found" in missing.stderr


def test_set_smtp_password_uses_the_key_netmap_up_generated(database_url, engine, tmp_path):
    """The default `make up` setup: no NETMAP_SECRET_KEY, the key lives in the data dir."""
    import sqlalchemy as sa

    from app.config import SecuritySettings
    from app.identity.secrets_at_rest import SecretBox

    data_dir = tmp_path / "var"
    missing = run_cli(
        database_url,
        "reports",
        "set-smtp-password",
        "--password-stdin",
        stdin="relay-password-1\n",
        NETMAP_DATA_DIR=str(data_dir),
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "NETMAP_SECRET_KEY" in missing.stderr and "netmap up" in missing.stderr

    data_dir.mkdir()
    (data_dir / "secret_key").write_text("generated-by-netmap-up-0123456789abcdef\n")
    stored = run_cli(
        database_url,
        "reports",
        "set-smtp-password",
        "--password-stdin",
        stdin="relay-password-1\n",
        NETMAP_DATA_DIR=str(data_dir),
    )
    assert stored.returncode == 0, stored.stderr
    with engine.connect() as conn:
        ciphertext = conn.execute(
            sa.text("SELECT ciphertext FROM stored_secrets WHERE name = 'smtp.password'")
        ).scalar_one()
    box = SecretBox(SecuritySettings(secret_key="generated-by-netmap-up-0123456789abcdef"))
    assert box.decrypt(ciphertext) == "relay-password-1"


def test_tasks_commands_create_run_cancel_and_delete(database_url, engine, api):
    owner = api.create_user("tasker")
    created = run_cli(
        database_url,
        "tasks",
        "create",
        "--owner",
        "tasker",
        "--name",
        "cli task",
        "--target",
        "192.0.2.0/24",
        "--target",
        "198.51.100.0/24",
        "--ports",
        "22,443",
        "--profile",
        "quick",
    )
    assert created.returncode == 0, created.stderr
    task = json.loads(created.stdout)["task"]
    assert task["owner_id"] == owner["id"] and task["profile"] == "quick"
    assert task["latest_run"]["number"] == 1 and task["latest_run"]["status"] == "queued"

    busy = run_cli(database_url, "tasks", "run", str(task["id"]))
    assert busy.returncode != 0 and "run_active" in busy.stderr
    cancelled = run_cli(database_url, "tasks", "cancel", str(task["id"]))
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["run"]["status"] == "cancelled"
    started = run_cli(database_url, "tasks", "run", str(task["id"]))
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)["run"]
    assert (run["number"], run["status"], run["trigger"]) == (2, "queued", "manual")

    shown = json.loads(run_cli(database_url, "tasks", "show", str(task["id"])).stdout)
    assert [r["number"] for r in shown["runs"]] == [2, 1]
    listed = json.loads(run_cli(database_url, "tasks", "list").stdout)
    assert task["id"] in [t["id"] for t in listed["items"]]

    deleted = run_cli(database_url, "tasks", "delete", str(task["id"]))
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["purge"]["status"] == "queued"
    listed = json.loads(run_cli(database_url, "tasks", "list").stdout)
    assert task["id"] not in [t["id"] for t in listed["items"]]
    gone = run_cli(database_url, "tasks", "show", str(task["id"]))
    assert gone.returncode != 0 and "task_not_found" in gone.stderr
    nobody = run_cli(
        database_url, "tasks", "create", "--owner", "nobody", "--name", "x",
        "--target", "192.0.2.1", "--ports", "80",
    )  # fmt: skip
    assert nobody.returncode != 0 and "user_not_found" in nobody.stderr
    bad = run_cli(
        database_url, "tasks", "create", "--owner", "tasker", "--name", "x",
        "--target", "not a target", "--ports", "80",
    )  # fmt: skip
    assert bad.returncode != 0 and "targets" in bad.stderr


def test_failures_an_operator_can_act_on_are_one_line_not_a_traceback(
    database_url, engine, tmp_path
):
    """A path that cannot be written, an unknown schema revision, an unreachable store:
    one ``Error:`` line naming it, exit code 1."""
    occupied = tmp_path / "taken"
    occupied.write_text("a file where a directory is needed")
    cases = [
        (("backup", "--out", str(occupied / "x.backup")), f"{occupied} is a file, not a directory"),
        (("diagnostics", "--out", str(occupied / "d.zip")), str(occupied)),
        (("db", "upgrade", "--revision", "bogus"), "database migration: "),
        (
            ("search", "migrate", "--to", "elasticsearch", "--es-url", "http://127.0.0.1:9"),
            "search store: ",
        ),
    ]
    for args, expected in cases:
        result = run_cli(database_url, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, (args, result.stderr[-2000:])
        assert expected in result.stderr, (args, result.stderr[-1000:])


def test_a_misspelt_log_format_or_level_is_a_usage_error(database_url, engine):
    """``NETMAP_LOG_FORMAT=xml`` was silently JSON and ``NETMAP_LOG_LEVEL=verbose`` a
    traceback; ``--log-format xml`` was already refused. A lower-case level is a level."""
    for variable, value, said in (
        ("NETMAP_LOG_FORMAT", "xml", "NETMAP_LOG_FORMAT='xml' must be one of auto, text, json"),
        ("NETMAP_LOG_LEVEL", "verbose", "NETMAP_LOG_LEVEL='verbose' must be one of DEBUG, INFO"),
    ):
        result = run_cli(database_url, "config", "check", **{variable: value})
        assert result.returncode == 2, (variable, result.stderr[-2000:])
        assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
    fine = run_cli(database_url, "config", "check", NETMAP_LOG_LEVEL="warning")
    assert fine.returncode == 0, fine.stderr[-2000:]
