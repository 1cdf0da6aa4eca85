"""Links to console pages in alert messages.

``[alerts] public_url`` is where people reach netmap: the site (``https://netmap.example``)
or the console itself (``https://netmap.example/console``); both give the same links,
so a link never lands beside the console. Unset, a link is the page's path from the
site's root (``/console/tasks/3/changes?run=9``): a receiver that knows the server can
still follow it. ``netmap up`` sets it to its own address.
"""

from __future__ import annotations

from app.config import AlertSettings

CONSOLE_PREFIX = "/console"


def console_base(settings: AlertSettings) -> str:
    """The console's address, without a trailing slash."""
    site = settings.public_url.strip().rstrip("/")
    site = site.removesuffix(CONSOLE_PREFIX)
    return f"{site}{CONSOLE_PREFIX}"


def console_link(settings: AlertSettings, path: str) -> str:
    """``path`` (from the console's root: ``/tasks/3``) at the console's address."""
    return f"{console_base(settings)}{path}"
