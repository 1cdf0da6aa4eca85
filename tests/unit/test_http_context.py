"""The HTTP layer reads settings and per-app objects one way: ``app.http.context``.

``create_app`` puts them on the app; blueprints (app/http) and console pages (app/web)
ask ``context.settings()``, ``context.store()`` … and never reach into
``current_app.config`` / ``current_app.extensions`` or Flask's copies of settings
themselves, so a reader finds every use of a setting by one name.
"""

from __future__ import annotations

import re

from tests.support.processes import PROJECT_ROOT

OTHER_WAYS = re.compile(
    r"current_app\.(config|extensions|permanent_session_lifetime)"
    r"|\bapp\.config\["
    r"|\bg\.settings\b"
    r"|netmap\.(settings|store|object_store|login_throttle|config_check|report_render)\b"
)


def _offenders(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if OTHER_WAYS.search(line)]


def test_blueprints_and_pages_read_settings_only_through_the_context_module():
    offenders = []
    for package in ("app/http", "app/web"):
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if path.name == "context.py" and path.parent.name == "http":
                continue
            relative = path.relative_to(PROJECT_ROOT)
            offenders += [f"{relative}: {line}" for line in _offenders(path.read_text())]
    assert offenders == []


def test_the_pattern_finds_each_other_way():
    for line in (
        'current_app.extensions["netmap.settings"]',
        'current_app.config.get("MAX_CONTENT_LENGTH")',
        "current_app.permanent_session_lifetime",
        'if not app.config["SESSION_COOKIE_SECURE"]:',
        'existing = current_app.extensions.get("netmap.store")',
    ):
        assert _offenders(line), line
    assert not _offenders("limit = context.settings().ingest.max_body_bytes")
