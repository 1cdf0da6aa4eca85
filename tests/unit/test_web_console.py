"""The console's pure helpers: where sign-in may send a browser, how times are printed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from flask import Flask

from app.web import format_when
from app.web.access import safe_next


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/console/tasks?status=queued", "/console/tasks?status=queued"),
        ("/console/", "/console/"),
        (None, None),
        ("", None),
        ("/api/tasks", None),
        ("//evil.example/console/", None),
        ("https://evil.example/console/", None),
        ("/console/\\\\evil.example", None),
        ("javascript:alert(1)", None),
    ],
)
def test_safe_next_allows_only_console_paths(target, expected):
    with Flask(__name__).test_request_context("/"):
        assert safe_next(target) == expected


def test_format_when_prints_utc_and_tolerates_blanks():
    moment = datetime(2026, 11, 30, 18, 4, 5, tzinfo=UTC)
    assert format_when(moment) == "2026-11-30 18:04:05Z"
    assert format_when(moment.isoformat()) == "2026-11-30 18:04:05Z"
    assert format_when(None) == ""
    assert format_when("not a time") == "not a time"


def test_a_count_reads_with_its_noun():
    from app.web import format_counted

    assert format_counted(1, "address", "addresses") == "1 address"
    assert format_counted(0, "address", "addresses") == "0 addresses"
    assert format_counted(3, "endpoint") == "3 endpoints"
    assert format_counted(1, "endpoint") == "1 endpoint"
