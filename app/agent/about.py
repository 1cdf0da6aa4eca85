"""What the agent tells the server about itself on every claim and lease renewal.

The server's fleet list shows it (``GET /api/scanners``): the agent's version, the
host name, and each scan engine the agent can run with its version. The engines are
asked once, when the agent starts (``nmap --version``, ``masscan --version``, bounded
by a timeout); an engine that is missing or does not answer is left out, so the server
shows what this host can actually run.
"""

from __future__ import annotations

import re
import socket
import subprocess
from importlib import metadata
from typing import Any

from app.config import AgentSettings

VERSION_TIMEOUT_SECONDS = 10.0
_VERSION_RE = re.compile(r"\bversion\s+([0-9][0-9A-Za-z.+_-]{0,62})", re.IGNORECASE)


def agent_version() -> str | None:
    try:
        return metadata.version("netmap")[:64]
    except metadata.PackageNotFoundError:
        return None


def engine_version(command: str) -> str | None:
    """The version an engine prints for ``--version`` (None: missing, silent or unreadable)."""
    try:
        done = subprocess.run(
            [command, "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = _VERSION_RE.search(done.stdout + "\n" + done.stderr)
    return found.group(1) if found else None


def detect(settings: AgentSettings) -> dict[str, Any]:
    """The ``agent`` object of claim and renewal bodies (asked once per agent start)."""
    engines = {}
    for name, command in (("nmap", settings.nmap_path), ("masscan", settings.masscan_path)):
        version = engine_version(command)
        if version is not None:
            engines[name] = version
    return {
        "version": agent_version(),
        "hostname": socket.gethostname()[:255] or None,
        "engines": engines,
    }
