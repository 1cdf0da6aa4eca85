"""The agent against a real server with real nmap on loopback listeners (AGT-1, AGT-2, AGT-6).

An HTTP server, a TCP server sending a (non-ASCII) banner and a TLS listener
run on 127.0.0.1; a task for 127.0.0.1 with their ports (plus one closed
port) is scanned by ``python -m app.agent --once``, and ``/api/assets`` must
show exactly the open ports with the services nmap recognised.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.listeners import BANNER, loopback_listeners
from tests.support.netmap_server import netmap_server
from tests.support.processes import PROJECT_ROOT, base_env, wait_for

pytestmark = pytest.mark.e2e


def run_agent(server_url: str, token: str, tmp_path, *args: str, config: str = "", **env: str):
    config_path = tmp_path / "agent.toml"
    config_path.write_text(config)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "app.agent",
            "--server",
            server_url,
            "--spool",
            str(tmp_path / "spool"),
            "--config",
            str(config_path),
            *args,
        ],
        env=base_env(NETMAP_SCANNER_TOKEN=token, **env),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_agent_scans_loopback_listeners_with_nmap_and_assets_show_services(database_url, tmp_path):
    with loopback_listeners(tmp_path) as listeners, netmap_server(database_url, tmp_path) as server:
        token = server.scanner_token()
        ports = ",".join(str(p) for p in [*listeners.ports, listeners.closed_port])
        task = server.create_task(["127.0.0.1"], ports)
        agent = run_agent(
            server.url,
            token,
            tmp_path,
            "--once",
            "--kinds",
            "ports",
            "--log-format",
            "json",
            config="[agent]\nservice_detection = true\nversion_intensity = 5\nbatch_size = 2\n",
        )
        assert agent.returncode == 0, agent.stderr[-3000:]
        events = [json.loads(line) for line in agent.stderr.splitlines() if line.startswith("{")]
        names = [e["event"] for e in events]
        assert "AgentScanStarted" in names and names[-1] == "AgentExecutionSucceeded"
        batches = [e for e in events if e["event"] == "AgentBatchUploaded"]
        # Three open ports (nmap --open drops the closed one) in batches of two; the last is final.
        assert [(b["items"], b["is_final"]) for b in batches] == [(2, False), (1, True)]
        assert "claim_token" not in agent.stderr and token not in agent.stderr

        execution = server.executions(task["id"])[0]
        assert execution["status"] == "succeeded"
        assert execution["endpoint_count"] == 3

        def projected():
            items = server.assets(ip="127.0.0.1")
            return items if len(items) == 3 else None

        assets = {a["port"]: a for a in wait_for(projected, 60, "the projection of 3 endpoints")}
        assert set(assets) == set(listeners.ports)  # the closed port is not an asset
        http, banner, tls = (
            assets[listeners.http_port],
            assets[listeners.banner_port],
            assets[listeners.tls_port],
        )
        assert (http["service"], http["product"], http["version"]) == (
            "http",
            "SimpleHTTPServer",
            "0.6",
        )
        assert (tls["service"], tls["product"]) == ("https", "SimpleHTTPServer")
        assert banner["service"] == "smtp"
        assert banner["banner"] == BANNER.strip()  # non-ASCII survives nmap's escaping
        assert not list((tmp_path / "spool").rglob("execution-*"))  # spool cleaned
