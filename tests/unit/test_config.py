"""Start-up configuration: TOML + env overrides, validation naming key, value and range."""

from __future__ import annotations

import pytest

from app.config import ConfigError, load_settings, redacted_snapshot


def write(tmp_path, text: str):
    path = tmp_path / "netmap.toml"
    path.write_text(text)
    return path


def test_defaults_load_without_a_file():
    settings, check = load_settings(env={})
    assert settings.elasticsearch.projection_page_size == 1000
    assert settings.elasticsearch.projection_bulk_max_bytes == 5_242_880
    assert settings.elasticsearch.projection_pages_per_tick == 4
    assert settings.elasticsearch.projection_lease_seconds == 120
    assert settings.elasticsearch.projection_heartbeat_seconds == 20
    assert settings.traffic.timezone == "+08:00"
    assert check.ok


def test_out_of_range_value_names_key_value_and_range(tmp_path):
    path = write(tmp_path, "[elasticsearch]\nprojection_page_size = 5000\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    message = str(info.value)
    assert "elasticsearch.projection_page_size" in message
    assert "5000" in message
    assert "between 1 and 2000" in message


def test_every_bad_key_is_reported_at_once(tmp_path):
    path = write(
        tmp_path,
        "[elasticsearch]\nprojection_bulk_max_bytes = 1024\nprojection_pages_per_tick = 0\n"
        "[runner]\nprocesses = 'two'\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    keys = {p.key for p in info.value.check.errors}
    assert keys == {
        "elasticsearch.projection_bulk_max_bytes",
        "elasticsearch.projection_pages_per_tick",
        "runner.processes",
    }
    assert "projection_bulk_max_bytes = 1024: must be between 65536 and 16777216" in str(info.value)


def test_heartbeat_must_be_at_most_a_third_of_the_lease(tmp_path):
    path = write(
        tmp_path,
        "[elasticsearch]\nprojection_lease_seconds = 60\nprojection_heartbeat_seconds = 30\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert "projection_heartbeat_seconds" in str(info.value)
    assert "lease_seconds / 3" in str(info.value)


def test_unknown_keys_and_sections_are_errors(tmp_path):
    path = write(tmp_path, "[database]\npool_sise = 3\n[databse]\nurl = 'x'\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    keys = {p.key for p in info.value.check.errors}
    assert "database.pool_sise" in keys
    assert "databse" in keys


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, "[database]\nurl = 'postgresql://file/db'\npool_size = 3\n")
    settings, check = load_settings(
        path,
        env={
            "NETMAP_DATABASE_URL": "postgresql://env/db",
            "NETMAP_DATABASE_POOL_SIZE": "7",
            "NETMAP_SECRET_KEY": "from-env",
            "NETMAP_TRAFFIC_DOMAINS": "a.example, b.example",
            "NETMAP_SECURITY_SESSION_COOKIE_SECURE": "true",
        },
    )
    assert settings.database.url == "postgresql://env/db"
    assert settings.database.pool_size == 7
    assert settings.security.secret_key == "from-env"
    assert settings.traffic.domains == ("a.example", "b.example")
    assert settings.security.session_cookie_secure is True
    assert "environment" in check.sources


def test_bad_env_value_is_reported_with_its_key():
    with pytest.raises(ConfigError) as info:
        load_settings(env={"NETMAP_RUNNER_PROCESSES": "many"})
    assert "runner.processes" in str(info.value)
    assert "integer" in str(info.value)


def test_invalid_toml_is_a_clear_error(tmp_path):
    path = write(tmp_path, "[database\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert "not valid TOML" in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "absent.toml", env={})
    assert "file not found" in str(info.value)


def test_secrets_never_appear_in_errors_or_snapshot(tmp_path):
    path = write(tmp_path, "[database]\nurl = 'mysql://user:hunter2@db/x'\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert "hunter2" not in str(info.value)
    settings, _ = load_settings(
        env={"NETMAP_SECRET_KEY": "s3cret", "NETMAP_DATABASE_URL": "postgresql://u:pw@h/d"}
    )
    snapshot = redacted_snapshot(settings)
    text = repr(snapshot)
    assert "s3cret" not in text and "pw@" not in text
    assert snapshot["security"]["secret_key"] == "<set>"
    assert snapshot["elasticsearch"]["url"] == "<unset>"


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    path = write(tmp_path, "[report_renderer]\nreleases_directory = 'releases'\n")
    settings, _ = load_settings(path, env={})
    assert (
        settings.resolve_path(settings.report_renderer.releases_directory)
        == (tmp_path / "releases").resolve()
    )


def test_timezone_and_rate_limit_syntax_are_validated(tmp_path):
    path = write(
        tmp_path,
        "[traffic]\ntimezone = 'Mars/Olympus'\n[security]\nlogin_rate_limit = 'lots'\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    keys = {p.key for p in info.value.check.errors}
    assert keys == {"traffic.timezone", "security.login_rate_limit"}
