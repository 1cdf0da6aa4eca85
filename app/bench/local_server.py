"""``netmap up --no-runner`` on a benchmark's scratch database.

Benchmarks that measure the HTTP path (uploads through gunicorn, the agent end to
end, the read/write soak) run the server as production does, in its own processes,
so the client's work and the server's do not share one interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping

import click

# Room for the largest batches the benchmarks send (well above what they measure).
MAX_BODY_BYTES = 64 * 1024 * 1024


def server_environment(scratch, *, max_batch: int, lease_seconds: int) -> dict[str, str]:
    """This process's environment without its NETMAP_ settings, pointed at ``scratch``
    (its database and its throwaway secret key)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env.update(
        NETMAP_DATABASE_URL=scratch.database_url,
        NETMAP_SECRET_KEY=scratch.settings.security.secret_key,
        NETMAP_INGEST_MAX_OBSERVATIONS_PER_BATCH=str(max_batch),
        NETMAP_INGEST_MAX_BODY_BYTES=str(MAX_BODY_BYTES),
        NETMAP_SCAN_EXECUTION_LEASE_SECONDS=str(lease_seconds),
    )
    return env


def start_server(
    scratch, env: Mapping[str, str], *, timeout: float = 180
) -> tuple[subprocess.Popen, str]:
    """Start the server with ``env`` and wait for its "netmap is up" line: (process, url).

    A server that does not come up is stopped, and the tail of its log is the error."""
    log_path = scratch.directory / "netmap-up.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "app", "--data-dir", str(scratch.directory / "var"), "up",
             "--no-runner", "--host", "127.0.0.1", "--port", "0"],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=log,
        )  # fmt: skip
    assert server.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = server.stdout.readline().decode()
        if not line:
            break
        found = re.search(r"netmap is up: (\S+)", line)
        if found:
            return server, found.group(1)
    stop_server(server)
    raise click.ClickException(
        "netmap up did not start: " + log_path.read_text(errors="replace")[-2000:]
    )


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
