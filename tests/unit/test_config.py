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


def test_relative_paths_from_elsewhere_resolve_against_the_working_directory(tmp_path, monkeypatch):
    # With a file in another directory, `--data-dir var`, NETMAP_DATA_DIR=var and the
    # default ./var all mean the working directory's var: they used to be taken from the
    # file's directory, where a new, empty database was then started (and backed up).
    (tmp_path / "etc").mkdir()
    (tmp_path / "work").mkdir()
    path = write(tmp_path / "etc", "[traffic]\nlog_dir = 'logs'\n")
    monkeypatch.chdir(tmp_path / "work")
    work = (tmp_path / "work").resolve()
    settings, _ = load_settings(path, env={})
    assert settings.data_dir == work / "var"
    assert settings.resolve_path(settings.traffic.log_dir) == (tmp_path / "etc" / "logs").resolve()
    settings, _ = load_settings(path, env={"NETMAP_DATA_DIR": "state"})
    assert settings.data_dir == work / "state"
    settings, _ = load_settings(path, env={}, overrides={"server": {"data_dir": "cli"}})
    assert settings.data_dir == work / "cli"
    in_file = write(tmp_path / "etc", "[server]\ndata_dir = 'var'\n")
    settings, _ = load_settings(in_file, env={})
    assert settings.data_dir == (tmp_path / "etc" / "var").resolve()


def test_timezone_and_rate_limit_syntax_are_validated(tmp_path):
    path = write(
        tmp_path,
        "[traffic]\ntimezone = 'Mars/Olympus'\n[security]\nlogin_rate_limit = 'lots'\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    keys = {p.key for p in info.value.check.errors}
    assert keys == {"traffic.timezone", "security.login_rate_limit"}


# The rules below are what the pydantic-settings models must keep from the hand-written
# loader they replaced: strict types from the file, text conversions from the environment,
# one problem per key, the allowed values spelled out.


def _errors(tmp_path, text: str = "", env: dict[str, str] | None = None) -> list[str]:
    config = tmp_path / "netmap.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(config, env=env or {})
    return [problem.render() for problem in info.value.check.errors]


def test_the_file_is_strict_about_types(tmp_path):
    errors = _errors(
        tmp_path,
        '[server]\nport = "8000"\n[agent]\nservice_detection = 1\n'
        'nmap_extra_args = ["-Pn", 3]\n[database]\npool_timeout_seconds = "5"\n',
    )
    assert errors == [
        "server.port = '8000': must be an integer",
        "database.pool_timeout_seconds = '5': must be a number",
        "agent.service_detection = 1: must be true or false",
        "agent.nmap_extra_args = ['-Pn', 3]: must be a string",
    ]


def test_a_whole_number_is_a_float_and_a_list_is_a_tuple(tmp_path):
    config = tmp_path / "netmap.toml"
    config.write_text('[database]\npool_timeout_seconds = 3\n[traffic]\ndomains = ["a.example"]\n')
    settings, _ = load_settings(config, env={})
    assert settings.database.pool_timeout_seconds == 3.0
    assert isinstance(settings.database.pool_timeout_seconds, float)
    assert settings.traffic.domains == ("a.example",)
    hash(settings)  # frozen all the way down: settings can key a cache


def test_environment_text_converts_to_the_declared_type():
    settings, check = load_settings(
        env={
            "NETMAP_AGENT_SERVICE_DETECTION": "yes",
            "NETMAP_SMTP_STARTTLS": "off",
            "NETMAP_SCAN_SPECIAL_USE_TARGETS": "loopback, private,",
            "NETMAP_DATABASE_POOL_TIMEOUT_SECONDS": " 2.5 ",
            "NETMAP_SERVER_WEB_WORKERS": "3",
        }
    )
    assert settings.agent.service_detection is True
    assert settings.smtp.starttls is False
    assert settings.scan.special_use_targets == ("loopback", "private")
    assert settings.database.pool_timeout_seconds == 2.5
    assert settings.server.web_workers == 3
    assert check.value_sources["server.web_workers"] == "environment:NETMAP_SERVER_WEB_WORKERS"


def test_environment_text_that_does_not_convert_names_the_key_and_the_type(tmp_path):
    errors = _errors(
        tmp_path,
        env={"NETMAP_AGENT_SERVICE_DETECTION": "maybe", "NETMAP_SERVER_PORT": "80.5"},
    )
    assert errors == [
        "server.port = '80.5': must be an integer",
        "agent.service_detection = 'maybe': must be true or false",
    ]


def test_a_choice_lists_what_is_allowed(tmp_path):
    errors = _errors(tmp_path, '[smtp]\nsecurity = "ssl"\n[agent]\nnmap_timing = "T9"\n')
    assert errors == [
        "smtp.security = 'ssl': must be one of 'auto', 'starttls', 'tls', 'none'",
        "agent.nmap_timing = 'T9': must be one of 'T0', 'T1', 'T2', 'T3', 'T4', 'T5'",
    ]


def test_a_section_that_is_not_a_table_and_an_unknown_key_are_named(tmp_path):
    errors = _errors(tmp_path, "server = 5\n[search]\nfacts_retention = 3\n")
    assert errors[0] == "server = 5: must be a table"
    assert errors[1].startswith("search.facts_retention = 3: unknown key; known: ")
    assert "facts_retention_months" in errors[1]


def test_precedence_is_override_environment_file_platform_default(tmp_path):
    config = tmp_path / "netmap.toml"
    config.write_text("[server]\nweb_workers = 4\nweb_threads = 5\nupload_concurrency = 6\n")
    env = {"NETMAP_SERVER_WEB_WORKERS": "7", "NETMAP_SERVER_WEB_THREADS": "8"}
    settings, check = load_settings(config, env=env, overrides={"server": {"web_workers": 9}})
    assert (settings.server.web_workers, settings.server.web_threads) == (9, 8)
    assert settings.server.upload_concurrency == 6
    sources = check.value_sources
    assert sources["server.web_workers"] == "override"
    assert sources["server.web_threads"] == "environment:NETMAP_SERVER_WEB_THREADS"
    assert sources["server.upload_concurrency"] == "file"
    assert sources["server.request_timeout_seconds"] == "default"


def test_every_toml_example_in_the_docs_passes_the_config_check(tmp_path):
    """A reader copies these: each ```toml block of docs/ and deploy/ must load as it is
    (secret values are placeholders; a missing required companion setting is a doc bug)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    blocks = [
        (path.relative_to(root), block)
        for path in sorted([*root.glob("docs/*.md"), *root.glob("deploy/**/*.md")])
        for block in re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)
    ]
    assert blocks, "no TOML examples found"
    for number, (path, block) in enumerate(blocks):
        file = tmp_path / f"example-{number}.toml"
        file.write_text(block)
        try:
            load_settings(file, env={})
        except ConfigError as error:
            raise AssertionError(f"{path}: its TOML example does not load: {error}") from None


def test_an_encryption_key_that_is_no_fernet_key_is_a_start_up_error():
    # It used to pass `config check` and fail as a traceback when a secret was stored.
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"NETMAP_ENCRYPTION_KEY": "abc"})
    text = str(caught.value)
    assert "security.encryption_key" in text and "key 1 is not a Fernet key" in text
    assert "abc" not in text  # a secret is never echoed
    good = "x" * 43 + "="
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"NETMAP_ENCRYPTION_KEY": f"{good},bad"})
    assert "key 2 is not a Fernet key" in str(caught.value)
