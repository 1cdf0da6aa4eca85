"""The ``netmap`` command in an install for the scanner agent only (``netmap[agent]``):
the server's libraries are absent, so ``netmap --help`` must still list every command
and a server command must say what to install, not end in a traceback.

The absence is real for the process: an import hook refuses SQLAlchemy, Flask and
psycopg2 before the CLI is imported, as an agent-only virtualenv would."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import PROJECT_ROOT

WITHOUT_SERVER = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"sqlalchemy", "flask", "psycopg2", "alembic"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
from app.cli import main
main(sys.argv[1:], prog_name="netmap")
"""


def _netmap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVER, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )


def test_help_lists_the_commands_and_marks_those_needing_the_server():
    shown = _netmap("--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Traceback" not in shown.stderr
    assert "agent" in shown.stdout
    assert "(needs netmap[server]" in shown.stdout


def test_a_server_command_says_what_to_install():
    refused = _netmap("bench", "floor")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert "needs the server's libraries" in refused.stderr
    assert "install netmap[server]" in refused.stderr
