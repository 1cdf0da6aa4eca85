"""The project explains itself: every reference in the code resolves inside the repository.

Code comments cite requirement ids (ING-8, PRJ-4 …) and rules of docs/architecture.md
("docs/architecture.md, rule: short transactions"); both must be found in docs/. Design
documents that live outside the repository must not be cited at all, and relative links
between the documents must point at files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENT_ID = re.compile(
    r"\b(FND|IDN|SCN|ING|PRJ|STO|MOD|REP|TRF|RUN|OBS|OPS|PRF|ANA|AGT|EXP|WEB)-[0-9]+\b"
)
# Written in pieces so this file does not cite what it forbids.
OUTSIDE_DOCUMENTS = re.compile(
    r"DESIGN[ .]|DESIGN$|" + "API" + r"\.md|" + "SPEC" + r"(\.md|\s*§)|\bseeds?\s*0\d\d|\bseeds/",
    re.MULTILINE,
)
RULE_REFERENCE = re.compile(r"docs/architecture\.md,\s+rule:\s+([A-Za-z][A-Za-z -]*[A-Za-z])")
CODE_DIRS = ("app", "jobs", "alembic", "tests")
ROOT_FILES = ("wsgi.py", "Procfile", "Makefile", "setup.cfg", "pyproject.toml", "README.md")


def _code_files(dirs=CODE_DIRS) -> list[Path]:
    files = [p for d in dirs for p in (ROOT / d).rglob("*.py")]
    return [p for p in files if "__pycache__" not in p.parts and p != Path(__file__).resolve()]


def _defined_requirements() -> set[str]:
    text = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    entry = re.compile(r"^\s*(?:[-*]\s+|#+\s+)(?:\*\*)?(" + REQUIREMENT_ID.pattern + r")", re.M)
    return {m.group(1) for m in entry.finditer(text)}


def test_every_cited_requirement_id_is_defined_in_docs():
    defined = _defined_requirements()
    assert len(defined) >= 82  # the first release's ids, at least
    missing: dict[str, list[str]] = {}
    for path in _code_files(("app", "jobs")):
        for match in REQUIREMENT_ID.finditer(path.read_text(encoding="utf-8")):
            if match.group(0) not in defined:
                missing.setdefault(match.group(0), []).append(str(path.relative_to(ROOT)))
    assert not missing, f"ids cited in code but not defined in docs/requirements.md: {missing}"


def test_no_code_cites_documents_outside_the_repository():
    offenders = []
    for path in _code_files() + [ROOT / name for name in ROOT_FILES if (ROOT / name).exists()]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE_DOCUMENTS.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_rule_references_name_a_rule_of_the_architecture_page():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rules = {m.group(1).lower() for m in re.finditer(r"\*\*Rule: ([^.*]+)\.\*\*", page)}
    assert "short transactions" in rules
    cited: set[str] = set()
    for path in _code_files():
        text = re.sub(r"\s*\n\s*(#\s*)?", " ", path.read_text(encoding="utf-8"))
        cited |= {m.group(1).lower() for m in RULE_REFERENCE.finditer(text)}
    assert cited, "the code cites no rule at all: the pattern no longer matches"
    assert cited <= rules, f"unknown rules: {sorted(cited - rules)}"


@pytest.mark.parametrize(
    "document",
    sorted(
        str(p.relative_to(ROOT))
        for p in [*(ROOT / "docs").rglob("*.md"), *(ROOT / "deploy").rglob("*.md")]
    ),
)
def test_relative_links_in_documents_resolve(document):
    path = ROOT / document
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        resolved = (path.parent / target).resolve()
        if resolved.is_relative_to(ROOT / "deploy" / "nginx"):
            continue  # the nginx configuration is another deploy guide's part
        assert resolved.exists(), f"{document} links to missing {target}"
