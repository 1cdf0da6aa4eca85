"""Migrations create their objects outright (docs/architecture.md, "Migrations").

``CREATE TABLE IF NOT EXISTS`` (and friends) would let a migration "succeed" on a
database whose objects already differ from what the script describes; creating
outright makes such drift fail loudly at upgrade time. The one exception is the
``pg_trgm`` extension, which is database-wide and often pre-created by managed
services.
"""

from __future__ import annotations

import re
from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[2] / "alembic" / "versions"
GUARDED_DDL = re.compile(
    r"(CREATE\s+(?:UNLOGGED\s+)?(?:UNIQUE\s+)?(?:TABLE|INDEX|SEQUENCE|VIEW|SCHEMA)"
    r"|ADD\s+COLUMN)\s+IF\s+NOT\s+EXISTS",
    re.IGNORECASE,
)


def test_no_migration_guards_its_ddl_with_if_not_exists():
    offenders = [
        f"{path.name}: {match.group(0)}"
        for path in sorted(VERSIONS.glob("*.py"))
        for match in GUARDED_DDL.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_rule_is_checked_against_real_scripts():
    # The pattern must see every script (a wrong directory would make the test above vacuous).
    assert len(list(VERSIONS.glob("*.py"))) >= 10
    assert GUARDED_DDL.search("create unique index if not exists ix on t (c)")
