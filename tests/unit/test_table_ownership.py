"""Each table has one owning package (docs/architecture.md, "Domains and the tables they own").

The owner table in the architecture page is the one place ownership is written
down; these tests read it. Every table a migration creates must appear there
exactly once; no package writes (INSERT, UPDATE, DELETE) a table it does not
own; and the SQL text of ``app/result_ingest/`` (string literals, f-strings
included; docstrings and comments are prose) may name only the tables result
ingest owns at all: anything else goes through the owner's functions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
OWNER_ROW = re.compile(r"^\| `(?P<package>[\w/]+)` \| (?P<tables>[^|]*) \|")
CREATED_TABLE = re.compile(r"CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(\w+)", re.IGNORECASE)

WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)

# Packages whose SQL may name only their own tables (extend as domains are cleaned up).
CHECKED_PACKAGES = ("app/result_ingest/",)
# Benchmarks seed scratch databases directly, across domains, before measuring.
WRITES_EXEMPT = ("app/bench/",)


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


def _literals(source: str):
    """(line, text) of each string literal that is not a docstring."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def tables_named(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, table) for each known table name in the source's string literals."""
    found = []
    for line, text in _literals(source):
        for word in re.findall(r"\b[a-z_][a-z0-9_]*\b", text):
            if word in known:
                found.append((line, word))
    return sorted(set(found))


def tables_written(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, table) for each known table an INSERT, UPDATE or DELETE names."""
    found = []
    for line, text in _literals(source):
        for table in WRITE.findall(text):
            if table.lower() in known:
                found.append((line, table.lower()))
    return sorted(set(found))


def package_of(path: Path) -> str | None:
    """``app/<package>/`` or ``jobs/`` for a source file; None for app's top-level modules."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "jobs":
        return "jobs/"
    if parts[0] == "app" and len(parts) > 2:
        return f"app/{parts[1]}/"
    return None


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
    assert tables_written(source, known) == [(4, "scan_executions")]
    assert tables_written("q = 'delete  from Scan_Upload_Receipts'", known) == [
        (1, "scan_upload_receipts")
    ]


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


def test_no_package_writes_a_table_it_does_not_own():
    owner_of = owners()
    known = set(owner_of)
    problems = []
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")]):
        package = package_of(path)
        if package is None or package in WRITES_EXEMPT:
            continue
        for line, table in tables_written(path.read_text(encoding="utf-8"), known):
            if owner_of[table] != package:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: writes {table} (owned by {owner_of[table]})"
                )
    assert problems == [], "writes to another domain's table:\n" + "\n".join(problems)
