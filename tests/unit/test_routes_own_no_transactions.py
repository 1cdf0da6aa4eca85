"""Routes and console pages open no transactions (docs/architecture.md, "Services own
their transactions"): ``app/http/`` and ``app/web/`` call service functions of the
owning domain package, which open their own short transactions, so the API and the
console share one path instead of each carrying its own database glue."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONT_ENDS = ("app/http", "app/web")
TRANSACTION = re.compile(r"\btransaction\(")

# Being moved onto service functions by the rework of tasks and scanners. When a file
# here no longer opens a transaction, the last test fails until its entry is removed.
ALLOWED = {
    "app/http/scanner.py",  # being moved
}


def transaction_lines(source: str) -> list[str]:
    """The lines of ``source`` that open (or wrap) a transaction."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(source.splitlines(), start=1)
        if TRANSACTION.search(line)
    ]


def _front_end_files() -> list[Path]:
    return sorted(path for base in FRONT_ENDS for path in ROOT.joinpath(base).rglob("*.py"))


def test_no_route_or_page_opens_a_transaction():
    offenders = []
    for path in _front_end_files():
        name = path.relative_to(ROOT).as_posix()
        if name in ALLOWED:
            continue
        offenders += [f"{name}:{hit}" for hit in transaction_lines(path.read_text())]
    assert offenders == []


def test_the_finder_finds_a_transaction():
    assert transaction_lines("    with transaction() as conn:\n")
    assert transaction_lines("with db.transaction(isolation_level='SERIALIZABLE') as c:\n")
    assert not transaction_lines("from app.identity import service\nservice.create_user(x)\n")


def test_every_allowlisted_file_still_exists_and_still_needs_it():
    for name in sorted(ALLOWED):
        path = ROOT / name
        assert path.is_file(), f"{name} is gone: drop it from ALLOWED"
        assert transaction_lines(path.read_text()), f"{name} opens no transaction: drop it"
