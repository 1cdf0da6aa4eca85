"""The command line's import graph has one direction (FND-4): the root CLI (``app/cli.py``)
attaches the domains' command groups, and those groups take what they share from
``app/cli_support.py``, never from ``app.cli`` (which would be a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from app import db
from app.cli_support import database_for_command
from tests.support.processes import PROJECT_ROOT

# Only the ``python -m app`` entry point may import the root command line.
ENTRY_POINTS = {"app/__main__.py", "app/cli.py"}


def _imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_but_the_entry_point_imports_the_root_cli():
    offenders = []
    for package in ("app", "jobs"):
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            relative = path.relative_to(PROJECT_ROOT).as_posix()
            if relative not in ENTRY_POINTS and "app.cli" in _imports_of(path):
                offenders.append(relative)
    assert offenders == []


def test_the_probe_sees_both_import_forms(tmp_path):
    # The check above must be able to fail: both spellings of the import are found.
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from app import cli\n    from app.cli import main\n")
    assert "app.cli" in _imports_of(sample)
    sample.write_text("from app import cli_support\n")
    assert "app.cli" not in _imports_of(sample)


def test_the_db_group_does_not_shadow_the_db_module():
    from app import cli

    assert "db" not in vars(cli)
    assert cli.main.get_command(None, "db") is cli.db_group  # `netmap db ...` stays


def test_database_for_command_installs_an_engine_for_the_command_and_restores_the_previous():
    previous = sa.create_engine("postgresql+psycopg2://nobody@127.0.0.1:9/none")
    settings = SimpleNamespace(
        database=SimpleNamespace(url="postgresql://nobody@127.0.0.1:9/command")
    )
    db.set_engine(previous)
    try:
        with database_for_command(settings, check_schema=False) as url:
            assert url == "postgresql://nobody@127.0.0.1:9/command"
            engine = db.get_engine()
            assert engine is not previous and engine.url.database == "command"
            assert isinstance(engine.pool, sa.pool.NullPool)  # a one-off command: no pool
        assert db.get_engine() is previous
        with pytest.raises(RuntimeError), database_for_command(settings, check_schema=False):
            raise RuntimeError("the command failed")
        assert db.get_engine() is previous
        with database_for_command(settings, install_engine=False, check_schema=False):
            assert db.get_engine() is previous
    finally:
        db.set_engine(None)
        previous.dispose()
