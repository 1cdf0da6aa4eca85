"""The agent against a real server with real nmap on loopback listeners (AGT-1 … AGT-6).

An HTTP server, a TCP server sending a (non-ASCII) banner and a TLS listener
run on 127.0.0.1; a task for 127.0.0.1 with their ports (plus one closed
port) is scanned by ``python -m app.agent --once``, and ``/api/assets`` must
show exactly the open ports with the services nmap recognised. The server is
also restarted under a running agent: it waits the outage out and finishes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.support.listeners import BANNER, loopback_listeners
from tests.support.netmap_server import netmap_server
from tests.support.processes import (
    PROJECT_ROOT,
    LoggedProcess,
    base_env,
    free_port,
    wait_for,
)

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


def test_server_restarted_mid_scan_the_agent_waits_and_finishes(database_url, tmp_path):
    port = free_port()
    lease = {"NETMAP_SCAN_EXECUTION_LEASE_SECONDS": "300"}  # outlives the restart
    sockets = []
    for _ in range(40):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sockets.append(sock)
    ports = [s.getsockname()[1] for s in sockets]
    config = tmp_path / "agent.toml"
    config.write_text(
        "[agent]\nbatch_size = 5\nidle_backoff_max_seconds = 1\n"
        'nmap_extra_args = ["--max-rate", "8"]\n'
    )
    try:
        with netmap_server(database_url, tmp_path / "first", port=port, **lease) as server:
            token = server.scanner_token()
            # Ports only: the 40 silent listeners would keep service detection waiting.
            task = server.create_task(["127.0.0.1"], ",".join(map(str, ports)), profile="quick")
            agent = LoggedProcess(
                [
                    sys.executable, "-m", "app.agent", "--server", server.url,
                    "--spool", str(tmp_path / "spool"), "--config", str(config),
                    "--log-format", "json", "--once",
                ],
                base_env(NETMAP_SCANNER_TOKEN=token),
                tmp_path,
                "agent",
            )  # fmt: skip
            wait_for(lambda: agent.events("AgentScanStarted"), 60, "nmap to start")
        # The server is down now; nmap finishes meanwhile and its batches wait.
        wait_for(lambda: agent.events("AgentUploadRetry"), 120, "uploads failing")
        assert not agent.events("AgentBatchUploaded")
        with netmap_server(database_url, tmp_path / "second", port=port, **lease) as server:
            try:
                assert agent.wait(timeout=300) == 0, agent.stderr()[-3000:]
            finally:
                agent.stop()
            execution = server.executions(task["id"])[0]
            assert execution["status"] == "succeeded"
            assert execution["endpoint_count"] == 40
    finally:
        for sock in sockets:
            sock.close()
    batches = agent.events("AgentBatchUploaded")
    assert sum(b["items"] for b in batches) == 40 and batches[-1]["is_final"]
