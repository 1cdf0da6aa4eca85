"""Platform conventions (issue 20): PORT, DATABASE_URL, WEB_CONCURRENCY, REDIS_URL.

A Procfile platform's variables fill the matching keys only when netmap's own
settings leave them unset, and the check records where each value came from.
"""

from __future__ import annotations

import json
import sys

import pytest

from app.config import ConfigError, load_settings
from tests.support.processes import run_python

PLATFORM = {
    "PORT": "5123",
    "DATABASE_URL": "postgres://app:s3cret@db.internal:5432/netmap?sslmode=require",
    "WEB_CONCURRENCY": "5",
    "REDIS_URL": "redis://cache.internal:6379/0",
}


def test_platform_variables_fill_unset_keys_and_say_so():
    settings, check = load_settings(env=PLATFORM)
    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 5123)
    assert settings.server.web_workers == 5
    assert settings.database.url == (
        "postgresql://app:s3cret@db.internal:5432/netmap?sslmode=require"
    )
    assert settings.security.ratelimit_storage_uri == "redis://cache.internal:6379/0"
    assert check.configured_sources() == {
        "database.url": "platform:DATABASE_URL",
        "security.ratelimit_storage_uri": "platform:REDIS_URL",
        "server.host": "platform:PORT",
        "server.port": "platform:PORT",
        "server.web_workers": "platform:WEB_CONCURRENCY",
    }
    assert check.value_sources["server.web_threads"] == "default"
    assert "platform" in check.sources
    # The check says where values came from, never what they are.
    text = json.dumps(check.as_dict())
    assert "s3cret" not in text and "cache.internal" not in text
    assert check.as_dict()["value_sources"]["database.url"] == "platform:DATABASE_URL"


def test_netmap_environment_wins_over_the_platform():
    env = {
        **PLATFORM,
        "NETMAP_DATABASE_URL": "postgresql://own@localhost/own",
        "NETMAP_SERVER_WEB_WORKERS": "3",
        "NETMAP_RATELIMIT_STORAGE_URI": "memory://",
        "NETMAP_SERVER_HOST": "127.0.0.1",
    }
    settings, check = load_settings(env=env)
    assert settings.database.url == "postgresql://own@localhost/own"
    assert settings.server.web_workers == 3
    assert settings.security.ratelimit_storage_uri == "memory://"
    # PORT still applies, but netmap's own host wins over the platform's 0.0.0.0.
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 5123)
    sources = check.configured_sources()
    assert sources["database.url"] == "environment:NETMAP_DATABASE_URL"
    assert sources["server.web_workers"] == "environment:NETMAP_SERVER_WEB_WORKERS"
    assert sources["security.ratelimit_storage_uri"] == "environment:NETMAP_RATELIMIT_STORAGE_URI"
    assert sources["server.host"] == "environment:NETMAP_SERVER_HOST"
    assert sources["server.port"] == "platform:PORT"


def test_a_port_in_the_file_wins_and_keeps_the_default_host(tmp_path):
    path = tmp_path / "netmap.toml"
    path.write_text("[server]\nport = 9000\n")
    settings, check = load_settings(path, env={"PORT": "5123"})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 9000)
    assert check.value_sources["server.port"] == "file"
    assert check.value_sources["server.host"] == "default"


def test_an_override_wins_over_the_platform():
    settings, check = load_settings(env={"PORT": "5123"}, overrides={"server": {"port": 7000}})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 7000)
    assert check.value_sources["server.port"] == "override"


def test_empty_platform_variables_are_ignored():
    settings, check = load_settings(env={"PORT": "", "DATABASE_URL": " "})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8000)
    assert settings.database.url == ""
    assert check.configured_sources() == {}


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [("WEB_CONCURRENCY", "many", "server.web_workers"), ("PORT", "70000", "server.port")],
)
def test_a_bad_platform_value_names_the_variable(variable, value, key):
    with pytest.raises(ConfigError) as info:
        load_settings(env={variable: value})
    (problem,) = info.value.check.errors
    assert problem.key == key
    assert f"(from {variable})" in problem.message


def test_gunicorn_config_binds_the_platform_port_and_sets_up_multiprocess_metrics(tmp_path):
    # A fresh interpreter, as gunicorn loads the config: nothing imported before it.
    script = (
        "import json, os, app.gunicorn_conf as conf\n"
        "from prometheus_client import values\n"
        "print(json.dumps({'bind': conf.bind, 'workers': conf.workers,\n"
        "  'dir': os.environ.get('PROMETHEUS_MULTIPROC_DIR'),\n"
        "  'created': conf._created_metrics_dir,\n"
        "  'exists': os.path.isdir(os.environ.get('PROMETHEUS_MULTIPROC_DIR', '')),\n"
        "  'mutex': values.ValueClass is values.MutexValue}))\n"
        "conf.on_exit(None)\n"
        "print(os.path.exists(conf._created_metrics_dir))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PORT": "5123", "WEB_CONCURRENCY": "3", "HOME": str(tmp_path)}
    first, removed = run_python(script, env).splitlines()[-2:]
    report = json.loads(first)
    assert report["bind"] == "0.0.0.0:5123"
    assert report["workers"] == 3
    assert report["dir"] == report["created"] and report["exists"]
    assert report["mutex"] is False
    assert removed == "False"


def test_gunicorn_config_keeps_an_operator_metrics_directory(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    script = (
        "import os, app.gunicorn_conf as conf\n"
        "print(conf._created_metrics_dir, os.environ['PROMETHEUS_MULTIPROC_DIR'])\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    assert run_python(script, env).split() == ["None", str(metrics)]


def test_a_redis_store_without_the_redis_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)  # as if netmap[redis] were not installed
    with pytest.raises(ConfigError) as info:
        load_settings(env={"REDIS_URL": "redis://cache.internal:6379/0"})
    (problem,) = info.value.check.errors
    assert problem.key == "security.ratelimit_storage_uri"
    assert "pip install 'netmap[redis]'" in problem.message
    assert "cache.internal" not in str(info.value)  # the URL is a secret: redacted
