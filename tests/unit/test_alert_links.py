"""Links to console pages in alert messages (``app.alerts.links``) and the address
``netmap up`` gives them (``app.local_stack.child_environment``)."""

from __future__ import annotations

import pytest

from app.alerts.links import console_base, console_link
from app.config import load_settings
from app.local_stack import child_environment


def _settings(env: dict[str, str] | None = None, **overrides):
    return load_settings(env=env or {}, overrides=overrides)[0]


@pytest.mark.parametrize(
    ("public_url", "base"),
    [
        ("", "/console"),
        ("https://netmap.example", "https://netmap.example/console"),
        ("https://netmap.example/", "https://netmap.example/console"),
        ("https://netmap.example/console", "https://netmap.example/console"),
        ("https://netmap.example/console/", "https://netmap.example/console"),
        ("https://example.org/netmap", "https://example.org/netmap/console"),
    ],
)
def test_the_site_or_its_console_give_the_same_links(public_url, base):
    alerts = _settings(alerts={"public_url": public_url}).alerts
    assert console_base(alerts) == base
    assert console_link(alerts, "/tasks/3/changes?run=9") == f"{base}/tasks/3/changes?run=9"


def test_netmap_up_links_messages_to_itself_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("NETMAP_ALERTS_PUBLIC_URL", raising=False)
    local = _settings(server={"host": "127.0.0.1"})
    env = child_environment(local, "http://127.0.0.1:8000", NETMAP_BIND="127.0.0.1:8000")
    assert env["NETMAP_ALERTS_PUBLIC_URL"] == "http://127.0.0.1:8000"
    assert env["NETMAP_BIND"] == "127.0.0.1:8000"
    # Configured: the children read the same configuration; nothing is added.
    told = _settings(server={"host": "127.0.0.1"}, alerts={"public_url": "https://n.example"})
    assert "NETMAP_ALERTS_PUBLIC_URL" not in child_environment(told, "http://127.0.0.1:8000")
    # Every interface: no host a reader could open, so links stay paths.
    everywhere = _settings(server={"host": "0.0.0.0"})
    assert "NETMAP_ALERTS_PUBLIC_URL" not in child_environment(everywhere, "http://0.0.0.0:80")
