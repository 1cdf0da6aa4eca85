"""The real agent process reports itself to a real server (issue 33, scanner fleet).

``python -m app.agent --once`` against ``netmap up``: its claim poll (no work) is a sign
of life and carries its version, host name and the engines found on this host with
their versions (asked with ``--version`` at start); ``GET /api/scanners`` shows them.
After ``POST /api/scanners/<id>/disable`` the agent's next claim is refused (401) and
it exits with an error. The runner's scanner_offline job tells a webhook once when the
agent has gone silent and once when it is back. A scan that outlasts a short lease
shows the scanner ``busy`` with its execution, renewed with the agent's report, and
then the last execution's observation rate.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from tests.e2e.test_agent_nmap import run_agent
from tests.support.netmap_server import netmap_server
from tests.support.processes import PROJECT_ROOT, base_env, wait_for
from tests.support.webhook_receiver import WebhookReceiver

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


def test_the_runner_tells_once_when_the_agent_goes_offline_and_comes_back(database_url, tmp_path):
    """Real processes: ``netmap up`` with its runner evaluates the scanner_offline rule
    every second; the real agent's claim poll is the sign of life; a loopback receiver
    verifies every signature. Offline is told once (many ticks later still once), and
    so is the return."""
    receiver = WebhookReceiver().start()
    try:
        with netmap_server(
            database_url,
            tmp_path,
            NETMAP_SCAN_SCANNER_OFFLINE_SECONDS="10",
            NETMAP_ALERTS_CONDITIONS_INTERVAL_SECONDS="1",
            NETMAP_ALERTS_ALLOW_PRIVATE_TARGETS="true",
        ) as server:
            channel = server.post(
                "/api/alerts/channels", json={"kind": "webhook", "url": receiver.url}
            )
            assert channel.status_code == 201, channel.text
            receiver.secrets.append(channel.json()["channel"]["secret"])
            rule = server.post(
                "/api/alerts/rules",
                json={
                    "name": "fleet",
                    "on": ["scanner_offline"],
                    "back_online": True,
                    "channels": [channel.json()["channel"]["id"]],
                },
            )
            assert rule.status_code == 201, rule.text
            token = server.scanner_token("watched")
            agent = run_agent(server.url, token, tmp_path, "--once")
            assert agent.returncode == 0, agent.stderr[-3000:]

            def types() -> list[str]:
                return [h.json["type"] for h in receiver.hooks()]

            wait_for(lambda: types() == ["netmap.scanner.offline"], 60, "offline message")
            time.sleep(4)  # several more ticks of the runner's job
            assert types() == ["netmap.scanner.offline"]
            (offline,) = receiver.hooks()
            assert offline.verified and offline.json["data"]["scanner"]["name"] == "watched"

            agent = run_agent(server.url, token, tmp_path, "--once")
            assert agent.returncode == 0, agent.stderr[-3000:]
            wait_for(lambda: len(types()) == 2, 60, "online message")
            time.sleep(3)
            assert types() == ["netmap.scanner.offline", "netmap.scanner.online"]
            assert all(h.verified for h in receiver.hooks(ok_only=False))
            assert set(receiver.ids().values()) == {1}
    finally:
        receiver.stop()


@contextmanager
def _silent_listener():
    """A TCP port that accepts and never says anything: nmap's service detection waits
    out its probes there, so the scan outlasts a short lease."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def test_a_scanning_agent_is_busy_renews_with_its_report_and_shows_its_rate(database_url, tmp_path):
    lease = 10
    with (
        _silent_listener() as port,
        netmap_server(
            database_url, tmp_path, runner=False, NETMAP_SCAN_EXECUTION_LEASE_SECONDS=str(lease)
        ) as server,
    ):
        token = server.scanner_token("scanning")
        task = server.create_task(["127.0.0.1"], str(port))
        config = tmp_path / "agent.toml"
        config.write_text("[agent]\nservice_detection = true\nversion_intensity = 2\n")
        started = time.monotonic()
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.agent",
                "--server",
                server.url,
                "--spool",
                str(tmp_path / "spool"),
                "--config",
                str(config),
                "--once",
                "--log-format",
                "json",
            ],
            env=base_env(NETMAP_SCANNER_TOKEN=token),
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def mine() -> dict:
                items = server.get("/api/scanners").json()["items"]
                return next(s for s in items if s["name"] == "scanning")

            busy = wait_for(lambda: (s := mine())["status"] == "busy" and s, 60, "busy")
            (execution,) = server.executions(task["id"])
            assert busy["current_execution_id"] == execution["id"]
            assert busy["engines"].get("nmap")
            _, stderr = agent.communicate(timeout=300)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        elapsed = time.monotonic() - started
        assert agent.returncode == 0, stderr[-3000:]
        # The scan outlasted the lease: the agent's renewals (carrying its report) kept it.
        assert elapsed > lease, f"the scan took {elapsed:.1f}s, not longer than the lease"
        events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        assert events[-1]["event"] == "AgentExecutionSucceeded"
        assert not [e for e in events if e["event"] == "AgentLeaseLost"]
        done = mine()
        assert done["status"] == "online" and done["current_execution_id"] is None
        assert done["last_execution_id"] == execution["id"]
        assert done["observations_per_second"] is not None and done["observations_per_second"] > 0
