"""The import contracts in pyproject.toml hold, and they catch what they are for: an
upward import (infrastructure importing an entry point), an import loop between two
sibling modules, and the agent importing the server stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import PROJECT_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the code the contracts look at."""
    for name in ("app", "jobs"):
        shutil.copytree(
            PROJECT_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(PROJECT_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract():
    done = _lint(PROJECT_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_layers(tree: Path):
    _append(tree / "app" / "config" / "loading.py", "import app.http.context  # noqa")
    done = _lint(tree)
    assert done.returncode != 0
    assert "Entry points -> domains -> infrastructure BROKEN" in done.stdout
    assert "app.config.loading -> app.http.context" in done.stdout


def test_a_loop_between_sibling_modules_is_found(tree: Path):
    _append(tree / "app" / "leases" / "guard.py", "import app.leases.heartbeat  # noqa")
    done = _lint(tree)
    assert done.returncode != 0
    assert "No import loops between sibling modules or packages BROKEN" in done.stdout


def test_the_agent_may_not_import_the_server_stack(tree: Path):
    _append(tree / "app" / "agent" / "events.py", "import sqlalchemy  # noqa")
    done = _lint(tree)
    assert done.returncode != 0
    assert "The scanner agent is independent of the server stack BROKEN" in done.stdout
