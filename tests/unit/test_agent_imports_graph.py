"""The agent loads without the server stack (AGT-1): no Flask, SQLAlchemy, psycopg2 or
Elasticsearch module is imported by the agent's entry points, checked in a fresh
interpreter the way a scan host would run it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import PROJECT_ROOT

SERVER_STACK = ("flask", "werkzeug", "sqlalchemy", "psycopg2", "elasticsearch", "alembic")


def _loaded_after(code: str) -> set[str]:
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_agent_package_imports_no_server_code():
    loaded = _loaded_after(
        "import app.agent.cli, app.agent.loop, app.agent.nmap_xml, app.agent.json_lines, "
        "app.agent.resolver, app.agent.spool, app.agent.targets, app.target_rules"
    )
    assert loaded.isdisjoint(SERVER_STACK), sorted(loaded & set(SERVER_STACK))
    assert {"requests", "click"} <= loaded  # the probe really loaded the agent


def test_python_m_app_agent_help_runs_without_the_server_stack():
    loaded = _loaded_after(
        "import sys\nsys.argv = ['netmap-agent', '--help']\n"
        "try:\n    import app.agent.__main__\nexcept SystemExit:\n    pass"
    )
    assert "app" in loaded and loaded.isdisjoint(SERVER_STACK)


def test_netmap_agent_is_attached_to_the_main_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "app", "agent", "--help"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: netmap agent" in done.stdout and "--token-env" in done.stdout
    missing_token = subprocess.run(
        [sys.executable, "-m", "app.agent", "--server", "http://127.0.0.1:9", "--once"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert missing_token.returncode == 2 and "NETMAP_SCANNER_TOKEN" in missing_token.stderr
