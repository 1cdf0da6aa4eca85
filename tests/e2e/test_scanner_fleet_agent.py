"""The real agent process reports itself to a real server (issue 33, scanner fleet).

``python -m app.agent --once`` against ``netmap up``: its claim poll (no work) is a sign
of life and carries its version, host name and the engines found on this host with
their versions (asked with ``--version`` at start); ``GET /api/scanners`` shows them.
After ``POST /api/scanners/<id>/disable`` the agent's next claim is refused (401) and
it exits with an error.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

import pytest

from tests.e2e.test_agent_nmap import run_agent
from tests.support.netmap_server import netmap_server

pytestmark = pytest.mark.e2e


def _engine_version(command: str) -> str | None:
    path = shutil.which(command)
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    words = (out.stdout + out.stderr).split()
    return words[words.index("version") + 1] if "version" in words else None


def test_agent_reports_itself_and_a_revoked_token_stops_it(database_url, tmp_path):
    expected_engines = {
        name: version
        for name in ("nmap", "masscan")
        if (version := _engine_version(name)) is not None
    }
    assert "nmap" in expected_engines, "the agent tests need nmap on this host"
    with netmap_server(database_url, tmp_path, runner=False) as server:
        token = server.scanner_token("fleet-agent")
        scanners = server.get("/api/scanners").json()["items"]
        (mine,) = [s for s in scanners if s["name"] == "fleet-agent"]
        assert mine["status"] == "never_seen"

        agent = run_agent(server.url, token, tmp_path, "--once", "--log-format", "json")
        assert agent.returncode == 0, agent.stderr[-3000:]

        (mine,) = [s for s in server.get("/api/scanners").json()["items"] if s["id"] == mine["id"]]
        assert mine["status"] == "online"
        assert mine["hostname"] == socket.gethostname()
        assert mine["version"]  # the installed netmap distribution's version
        assert mine["engines"] == expected_engines
        assert mine["current_execution_id"] is None

        disabled = server.post(f"/api/scanners/{mine['id']}/disable")
        assert disabled.status_code == 200, disabled.text
        agent = run_agent(server.url, token, tmp_path, "--once", "--log-format", "json")
        assert agent.returncode != 0
        events = [json.loads(line) for line in agent.stderr.splitlines() if line.startswith("{")]
        rejected = [e for e in events if e["event"] == "AgentClaimRejected"]
        assert rejected and rejected[0]["status"] == 401, agent.stderr[-2000:]
