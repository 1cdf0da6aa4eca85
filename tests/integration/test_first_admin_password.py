"""``netmap up``'s first admin: a NETMAP_ADMIN_PASSWORD that fails the password policy
is a clear message naming the rule (and nothing is created), not a raw traceback."""

from __future__ import annotations

import pytest

from app.local_stack import AdminPasswordRejected, ensure_first_admin
from tests.support.sql import scalar


@pytest.mark.parametrize(
    "password, rule",
    [
        ("short", "must be a string of"),
        ("password1234", "commonly used password"),
        ("xadminx-long-enough-1", "must not contain the username"),
        ("aaaaaaaaaaaaaaaa", "too easy to guess"),
    ],
)
def test_a_weak_admin_password_names_the_rule_and_creates_nothing(
    database_url, engine, monkeypatch, password, rule
):
    monkeypatch.setenv("NETMAP_ADMIN_PASSWORD", password)
    with pytest.raises(AdminPasswordRejected, match=rule) as raised:
        ensure_first_admin(database_url)
    assert str(raised.value).startswith("NETMAP_ADMIN_PASSWORD does not meet the password policy")
    assert scalar("SELECT count(*) FROM users") == 0


def test_a_good_admin_password_is_used(database_url, engine, monkeypatch):
    monkeypatch.setenv("NETMAP_ADMIN_PASSWORD", "correct-horse-battery-staple-9")
    assert ensure_first_admin(database_url) == "correct-horse-battery-staple-9"
    assert scalar("SELECT count(*) FROM users WHERE is_admin") == 1
