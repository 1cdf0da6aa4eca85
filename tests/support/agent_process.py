"""The real scanner agent as a process of its own, pointed at a test server."""

from __future__ import annotations

import sys

from tests.support.processes import LoggedProcess, base_env


def start_agent(
    server, tmp_path, name: str, config: str, *args: str, url: str | None = None
) -> LoggedProcess:
    """``python -m app.agent`` for ``server``'s scanner token, ports only, with ``config``
    (its TOML text) and the extra ``args``; JSON log lines in the process's log."""
    config_path = tmp_path / f"{name}.toml"
    config_path.write_text(config)
    command = [
        sys.executable,
        "-m",
        "app.agent",
        "--server",
        url or server.url,
        "--spool",
        str(tmp_path / "spool"),
        "--config",
        str(config_path),
        "--log-format",
        "json",
        "--kinds",
        "ports",
        *args,
    ]
    return LoggedProcess(command, base_env(NETMAP_SCANNER_TOKEN=server.token), tmp_path, name)
