"""Cron-style commands start without the web stack: lazy command groups in `netmap` (PRF-3).

Each check runs a fresh interpreter (a real ``python -m app`` start) and reads
``sys.modules`` at exit, so an eager import anywhere on the path — a command
group attached by object at the bottom of ``app/cli.py``, a module-level
``import flask`` in ``app/__init__.py`` or in a traffic module — fails it.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from app.cli import LazyGroup
from tests.support.import_probe import heavy_imports_after
from tests.support.nginx_logs import CST, LogDir, nginx_line

# pydantic is not here: the settings every command loads are pydantic-settings models.
HEAVY = ("flask", "werkzeug", "matplotlib", "elasticsearch", "jinja2")


def _loaded_after(args: list[str], tmp_path: Path, **extra_env: str) -> tuple[list[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env["NETMAP_DATA_DIR"] = str(tmp_path / "var")
    env.update(extra_env)
    loaded, done = heavy_imports_after(args, heavy=HEAVY, env=env)
    return loaded, done.stdout


def test_traffic_rollup_help_imports_no_web_chart_or_search_stack(tmp_path):
    loaded, output = _loaded_after(["traffic", "rollup", "--help"], tmp_path)
    assert "--force-full-scan" in output  # the command itself was resolved and ran
    assert loaded == []


def test_standalone_rollup_run_imports_no_web_chart_or_search_stack(tmp_path):
    logs = LogDir(tmp_path / "nginx", "a.example.com")
    logs.write_lines([nginx_line(datetime(2026, 8, 1, 9, tzinfo=CST))])
    # An endpoint nobody listens on: the run reads, commits and fails to post (exit 1),
    # which is all it takes to import everything the standalone path needs.
    args = ["traffic", "rollup", "--log-dir", str(logs.root), "--domains", "a.example.com"]
    args += ["--state-dir", str(tmp_path / "state"), "--endpoint", "http://127.0.0.1:9"]
    args += ["--start-date", "2026-08-01", "--end-date", "2026-08-01", "--token-env", "T"]
    config = tmp_path / "netmap.toml"
    config.write_text("[traffic]\npost_retries = 0\n")  # fail the post at once
    loaded, output = _loaded_after(args, tmp_path, T="token", NETMAP_CONFIG=str(config))
    assert '"scannedLines": 1' in output
    assert loaded == []


def test_top_level_help_lists_lazy_and_eager_commands(tmp_path):
    loaded, output = _loaded_after(["--help"], tmp_path)
    for name in ("bench", "db", "modules", "runner", "traffic", "up", "users"):
        assert f"  {name} " in output
    assert "flask" not in loaded


def test_lazy_group_imports_a_command_on_first_use_and_keeps_add_command_objects(
    tmp_path, monkeypatch
):
    (tmp_path / "lazy_target_for_cli_test.py").write_text(
        "import click\n\n@click.command()\ndef hello():\n    click.echo('lazy ran')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group = LazyGroup("g")

    @click.command("eager")
    def eager() -> None:
        click.echo("eager ran")

    group.add_command(eager)
    group.add_command("lazy_target_for_cli_test:hello")
    assert group.list_commands(click.Context(group)) == ["eager", "hello"]
    assert "lazy_target_for_cli_test" not in sys.modules  # listing imports nothing
    runner = CliRunner()
    assert runner.invoke(group, ["eager"]).output == "eager ran\n"
    assert "lazy_target_for_cli_test" not in sys.modules
    result = runner.invoke(group, ["hello"])
    assert result.exit_code == 0 and result.output == "lazy ran\n"
    assert "lazy_target_for_cli_test" in sys.modules
    with pytest.raises(ValueError):
        group.add_command("no_attribute_named")
