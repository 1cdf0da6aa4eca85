"""Shared test helpers and fixtures live in tests/support/, never in another conftest.

A conftest is pytest's per-directory hook file; importing one from elsewhere runs it
twice under two names and hides where a fixture really comes from. Fixtures several
directories need are modules in tests/support/ (registered in the root conftest's
``pytest_plugins`` or imported by the conftests that use them).
"""

from __future__ import annotations

import re

from tests.support.processes import PROJECT_ROOT

CONFTEST_IMPORT = re.compile(
    r"^\s*(from\s+tests(\.\w+)*\.conftest\s+import|import\s+tests(\.\w+)*\.conftest)", re.M
)


def test_no_module_imports_a_conftest():
    offenders = [
        str(path.relative_to(PROJECT_ROOT))
        for path in sorted((PROJECT_ROOT / "tests").rglob("*.py"))
        if CONFTEST_IMPORT.search(path.read_text(encoding="utf-8"))
        and path.name != "test_test_layout.py"
    ]
    assert offenders == []


def test_the_pattern_finds_both_spellings():
    assert CONFTEST_IMPORT.search("from tests.conftest import make_settings")
    assert CONFTEST_IMPORT.search("    from tests.integration.search.conftest import x")
    assert CONFTEST_IMPORT.search("import tests.integration.projection.conftest")
    assert not CONFTEST_IMPORT.search("from tests.support.settings import make_settings")
