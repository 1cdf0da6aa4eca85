"""Each table has one owning package (docs/architecture.md, "Domains and the tables they own").

The owner table in the architecture page is the one place ownership is written
down; these tests read it. Every table a migration creates must appear there
exactly once, and the SQL text of ``app/result_ingest/`` (string literals,
f-strings included; docstrings and comments are prose) may name only the
tables result ingest owns: anything else goes through the owner's functions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
OWNER_ROW = re.compile(r"^\| `(?P<package>[\w/]+)` \| (?P<tables>[^|]*) \|")
CREATED_TABLE = re.compile(r"CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(\w+)", re.IGNORECASE)

# Packages whose SQL may name only their own tables (extend as domains are cleaned up).
CHECKED_PACKAGES = ("app/result_ingest/",)


def owner_rows() -> list[tuple[str, str]]:
    """(table, package) for each table listed in the owner table, in order."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("## Domains and the tables")[1]
    section = section.split("\n## ")[0]
    rows = []
    for line in section.splitlines():
        match = OWNER_ROW.match(line)
        if match is None:
            continue
        for table in re.findall(r"`(\w+)`", match["tables"]):
            rows.append((table, match["package"]))
    return rows


def owners() -> dict[str, str]:
    return dict(owner_rows())


def migrated_tables() -> set[str]:
    tables = set()
    for path in (ROOT / "alembic" / "versions").glob("*.py"):
        tables.update(t.lower() for t in CREATED_TABLE.findall(path.read_text(encoding="utf-8")))
    return tables


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def tables_named(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, table) for each known table name in the source's string literals."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for word in re.findall(r"\b[a-z_][a-z0-9_]*\b", node.value):
                if word in known:
                    found.append((node.lineno, word))
    return sorted(set(found))


def test_the_owner_table_lists_every_migrated_table_once():
    rows = owner_rows()
    tables = [table for table, _ in rows]
    duplicates = sorted({t for t in tables if tables.count(t) > 1})
    assert duplicates == [], f"tables with more than one owner: {duplicates}"
    unowned = sorted(migrated_tables() - set(tables))
    assert unowned == [], f"tables created by migrations with no owner in {ARCHITECTURE}: {unowned}"


def test_the_checker_sees_a_foreign_table_in_sql_and_ignores_prose():
    known = {"scan_executions", "scan_upload_receipts"}
    source = (
        '"""Updates scan_executions? No: the docstring is prose."""\n'
        "table = 'scan_upload_receipts'\n"
        "def f(x):\n"
        '    return f"UPDATE scan_executions SET status = {x}"\n'
    )
    assert tables_named(source, known) == [(2, "scan_upload_receipts"), (4, "scan_executions")]


def test_checked_packages_name_only_their_own_tables_in_sql():
    owner_of = owners()
    known = set(owner_of)
    problems = []
    for package in CHECKED_PACKAGES:
        own = {t for t, p in owner_of.items() if p == package}
        assert own, f"{package} owns no table in {ARCHITECTURE}"
        for path in sorted((ROOT / package).glob("*.py")):
            for line, table in tables_named(path.read_text(encoding="utf-8"), known):
                if table not in own:
                    problems.append(
                        f"{path.relative_to(ROOT)}:{line}: {table} (owned by {owner_of[table]})"
                    )
    assert problems == [], "SQL naming another domain's table:\n" + "\n".join(problems)
