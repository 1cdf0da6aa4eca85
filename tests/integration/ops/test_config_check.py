"""The configuration check (OPS-1): problems named by key, exit codes, and no secret anywhere.

Every secret a deployment can configure is set to a recognisable value, plus a
URL with credentials in a key that is not declared secret; the CLI (text and
JSON), the start-up events, the admin API and the diagnostics archive must show
none of them.
"""

from __future__ import annotations

import io
import json
import subprocess
import zipfile

from click.testing import CliRunner

from app.cli import main
from app.config import load_settings
from app.observability import configure_logging
from app.ops.config_check import emit_check, full_check
from tests.support.api import Api
from tests.support.processes import base_env, netmap_command
from tests.support.settings import make_settings

SECRETS = {
    "smtp_password": "smtp-pass-Q7s9",
    "es_password": "es-pass-Z3k1",
    "es_api_key": "es-api-key-W8m2",
    "ingest_token": "traffic-token-H4v6",
    "url_password": "url-pass-J5n0",
    "db_password": "db-pass-R2c8",
    "encryption_key": "cQ1yJw8Hk5wQ0m3yWdWb2bqK8mJv6Qm3c2Z0cVh5bXk=",
}
SECRET_KEY = "ops-secret-key-that-must-never-leak-0123456789"


def secret_values() -> list[str]:
    return [*SECRETS.values(), SECRET_KEY]


def secret_sections(database_url: str | None = None) -> dict[str, dict]:
    return {
        "smtp": {
            "host": "mail.example.com",
            "starttls": False,
            "password": SECRETS["smtp_password"],
        },
        "elasticsearch": {"password": SECRETS["es_password"], "api_key": SECRETS["es_api_key"]},
        "traffic": {
            "ingest_token": SECRETS["ingest_token"],
            "source_server": f"https://opsuser:{SECRETS['url_password']}@logs.example.com/x",
        },
        "security": {"secret_key": SECRET_KEY, "encryption_key": SECRETS["encryption_key"]},
        **({"database": {"url": database_url}} if database_url else {}),
    }


def toml_file(tmp_path, sections: dict[str, dict]) -> str:
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {json.dumps(value)}")
    path = tmp_path / "netmap.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def assert_no_secret(text: str) -> None:
    leaked = [s for s in secret_values() if s in text]
    assert leaked == [], f"secrets leaked: {leaked}"


def test_config_check_names_key_value_and_reason(tmp_path):
    settings, loaded = load_settings(
        env={},
        overrides={
            "runner": {"heartbeat_seconds": 40.0, "worker_timeout": 100.0},
            "elasticsearch": {"projection_heartbeat_seconds": 35, "projection_lease_seconds": 120},
            "smtp": {"host": "mail.example.com", "starttls": False},
            "ops": {"min_free_disk_percent": 100.0},
            "server": {"data_dir": str(tmp_path / "var")},
        },
    )
    check = full_check(settings, loaded)
    warnings = {p.key: p for p in check.warnings}
    assert "runner.worker_timeout" in warnings["runner.heartbeat_seconds"].message
    assert warnings["runner.heartbeat_seconds"].value == 40.0
    assert "at most 30" in warnings["elasticsearch.projection_heartbeat_seconds"].message
    assert "starttls" in warnings["smtp.host"].message
    assert "ops.min_free_disk_percent" in warnings["server.data_dir"].message
    assert "generates one on first start" in warnings["security.secret_key"].message
    assert check.ok


def test_a_generated_secret_key_is_a_warning_that_does_not_show_it(tmp_path):
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    (data_dir / "secret_key").write_text(SECRET_KEY)
    settings, loaded = load_settings(
        env={},
        overrides={"server": {"data_dir": str(data_dir)}, "security": {"secret_key": SECRET_KEY}},
    )
    check = full_check(settings, loaded)
    (problem,) = [p for p in check.warnings if p.key == "security.secret_key"]
    assert "generated on first start" in problem.message
    assert str(data_dir / "secret_key") in problem.message
    assert_no_secret(problem.render())


def test_cli_exits_non_zero_on_errors_and_zero_on_warnings(tmp_path):
    runner = CliRunner()
    bad = toml_file(tmp_path, {"runner": {"heartbeat_seconds": 80.0, "worker_timeout": 100.0}})
    result = runner.invoke(main, ["config", "check", "--config", bad], env={"NETMAP_DATA_DIR": ""})
    assert result.exit_code == 1, result.output
    assert "config error: runner.heartbeat_seconds = 80.0: must be at most" in result.output
    invalid = toml_file(tmp_path, {"scan": {"max_attempts": 0}})
    result = runner.invoke(main, ["config", "check", "--config", invalid])
    assert result.exit_code == 1
    assert "scan.max_attempts = 0: must be between 1 and 50" in result.output
    # Settings that do not load answer --json in the shape every other check has: a
    # script reading errors[i]["key"] used to get plain strings here.
    result = runner.invoke(main, ["config", "check", "--config", invalid, "--json"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert set(report) == {"ok", "errors", "warnings", "sources", "effective"}
    assert report["ok"] is False and report["effective"] is None
    (error,) = report["errors"]
    assert (error["key"], error["value"]) == ("scan.max_attempts", "0")
    assert error["message"] == "must be between 1 and 50"
    warn_only = toml_file(tmp_path, {"smtp": {"host": "mail.example.com", "starttls": False}})
    result = runner.invoke(main, ["config", "check", "--config", warn_only])
    assert result.exit_code == 0, result.output
    assert "config warning: smtp.host = 'mail.example.com'" in result.output


def test_no_secret_in_cli_text_json_or_start_up_events(tmp_path, capfd):
    sections = secret_sections(f"postgresql://netmap:{SECRETS['db_password']}@db.example.com/nm")
    sections["runner"] = {"heartbeat_seconds": 80.0, "worker_timeout": 100.0}  # one error too
    path = toml_file(tmp_path, sections)
    env = base_env(NETMAP_DATA_DIR=str(tmp_path / "var"))
    outputs = []
    for extra in ((), ("--json",)):
        done = subprocess.run(
            netmap_command("config", "check", "--config", path, *extra),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        outputs.append(done.stdout + done.stderr)
    report = json.loads(outputs[1].splitlines()[0])
    assert report["effective"]["smtp"]["password"] == "<set>"
    assert report["effective"]["traffic"]["source_server"].startswith("https://<redacted>@logs")
    settings, loaded = load_settings(path, env={}, overrides={"runner": {"heartbeat_seconds": 2.0}})
    # As a process starts: logging configured, then the check's events. Without this the
    # events reach stderr only if an earlier test in this worker configured logging.
    configure_logging()
    emit_check(full_check(settings, loaded), "web")
    captured = capfd.readouterr()
    assert "ConfigWarning" in captured.err
    for output in (*outputs, captured.out + captured.err):
        assert_no_secret(output)


def test_no_secret_in_the_api_or_the_diagnostics_archive(tmp_path, database_url, engine):
    from app import close_app, create_app

    settings = make_settings(database_url, tmp_path, **secret_sections())
    app = create_app(settings, engine=engine, modules="off")
    try:
        admin = Api(app).admin()
        response = admin.get("/api/config/check")
        assert response.status_code == 200
        body = response.get_json()
        assert body["effective"]["security"]["secret_key"] == "<set>"
        assert {w["key"] for w in body["warnings"]} >= {"smtp.host"}
        archive = admin.get("/api/system/diagnostics")
        assert archive.status_code == 200
        assert archive.mimetype == "application/zip"
        texts = [response.get_data(as_text=True)]
        with zipfile.ZipFile(io.BytesIO(archive.get_data())) as zipped:
            assert "config_check.json" in zipped.namelist()
            texts += [zipped.read(name).decode() for name in zipped.namelist()]
    finally:
        close_app(app)
    for text in texts:
        assert_no_secret(text)


def test_config_check_is_for_admins_only(api):
    assert api.user().get("/api/config/check").status_code == 403


def bulk_settings(**elasticsearch):
    return load_settings(
        env={},
        overrides={
            "elasticsearch": {"url": "https://es.example.com:9200", **elasticsearch},
            "server": {"web_workers": 2},
            "runner": {"processes": 3},
        },
    )


def bulk_check(**elasticsearch):
    check = full_check(*bulk_settings(**elasticsearch))
    assert not any(p.key.startswith("elasticsearch.bulk_max") for p in check.warnings)
    return [p for p in check.errors if p.key.startswith("elasticsearch.bulk_max_concurrency")]


def test_bulk_concurrency_above_the_deployment_total_refuses_start_up(caplog):
    # 2 web workers + 3 runner processes on this host, 4 bulk requests each: 20 at once.
    (problem,) = bulk_check(bulk_max_concurrency=4, bulk_max_concurrency_total=12)
    assert problem.key == "elasticsearch.bulk_max_concurrency" and problem.value == 4
    assert "5 processes" in problem.message and "= 20 bulk requests" in problem.message
    assert "bulk_max_concurrency_total (12): set it to at most 2" in problem.message
    settings, loaded = bulk_settings(bulk_max_concurrency=4, bulk_max_concurrency_total=12)
    caplog.set_level("INFO", logger="netmap.events")
    check = full_check(settings, loaded)
    assert not check.ok
    emit_check(check, "runner")
    refused = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "ConfigError"
        and "elasticsearch.bulk_max_concurrency = 4" in r.netmap_fields["problem"]
    ]
    assert [w["process"] for w in refused] == ["runner"]


def test_the_deployment_total_is_required_with_elasticsearch():
    """STO-4: with Elasticsearch configured the total must be declared."""
    (problem,) = bulk_check(bulk_max_concurrency=2)
    assert problem.key == "elasticsearch.bulk_max_concurrency_total"
    assert "required with elasticsearch.url" in problem.message
    assert "5 processes x 2 = 10" in problem.message
    assert not full_check(*bulk_settings(bulk_max_concurrency=2)).ok


def test_the_web_server_and_the_runner_refuse_a_budget_they_cannot_honour(tmp_path, database_url):
    """Start-up itself (not only `netmap config check`) refuses: web and runner."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env.update(
        NETMAP_DATA_DIR=str(tmp_path),
        NETMAP_DATABASE_URL=database_url,
        NETMAP_SECRET_KEY="x" * 48,
        NETMAP_ELASTICSEARCH_URL="http://127.0.0.1:1",
        NETMAP_ELASTICSEARCH_BULK_MAX_CONCURRENCY="4",
        NETMAP_ELASTICSEARCH_BULK_MAX_CONCURRENCY_TOTAL="3",
    )
    runner = subprocess.run(
        [sys.executable, "-m", "app", "runner", "--processes", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert runner.returncode == 2, runner.stderr
    assert "elasticsearch.bulk_max_concurrency" in runner.stderr
    web = subprocess.run(
        [sys.executable, "-c", "from app import create_app; create_app()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert web.returncode != 0
    assert "ConfigError" in web.stderr and "bulk_max_concurrency" in web.stderr


def test_bulk_concurrency_within_the_total_or_without_elasticsearch_is_quiet():
    assert bulk_check(bulk_max_concurrency=2, bulk_max_concurrency_total=10) == []  # 10 = 10
    settings, loaded = load_settings(
        env={},
        overrides={"elasticsearch": {"bulk_max_concurrency": 8, "bulk_max_concurrency_total": 1}},
    )
    check = full_check(settings, loaded)
    keys = {p.key for p in check.warnings + check.errors}
    assert "elasticsearch.bulk_max_concurrency" not in keys  # no Elasticsearch configured
    assert "elasticsearch.bulk_max_concurrency_total" not in keys


def test_declared_deployment_processes_are_what_counts():
    # Three hosts of 2 web workers and 3 runner processes each: declared, not guessed.
    (problem,) = bulk_check(
        bulk_max_concurrency=2, bulk_max_concurrency_total=12, bulk_processes=15
    )
    assert "15 processes (elasticsearch.bulk_processes) x 2 = 30" in problem.message
    assert "even 1 per process is too many" in problem.message
    assert bulk_check(bulk_max_concurrency=2, bulk_max_concurrency_total=12, bulk_processes=6) == []


def test_the_drain_timeout_must_exceed_the_ipc_timeout():
    """MOD-2: start-up checks the drain settings against the IPC timeout."""
    settings, loaded = load_settings(
        env={},
        overrides={"report_renderer": {"drain_timeout_seconds": 10, "ipc_timeout_seconds": 10}},
    )
    check = full_check(settings, loaded)
    (problem,) = [p for p in check.errors if p.key == "report_renderer.drain_timeout_seconds"]
    assert "above report_renderer.ipc_timeout_seconds (10)" in problem.message
    assert not check.ok
    settings, loaded = load_settings(env={})  # the defaults: 30 s against 10 s
    keys = {p.key for p in full_check(settings, loaded).errors}
    assert "report_renderer.drain_timeout_seconds" not in keys
