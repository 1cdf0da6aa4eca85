"""Scanner command lines built from an execution and [agent] settings (AGT-2)."""

from __future__ import annotations

from pathlib import Path

from app.agent.loop import lease_interval
from app.agent.scanners import masscan_command, nmap_command, split_targets_by_family
from app.config import load_settings


def _agent(**values):
    settings, _ = load_settings(env={}, overrides={"agent": values})
    return settings.agent


TARGETS = Path("/spool/targets.txt")


def test_default_nmap_command_streams_xml_of_open_tcp_ports():
    command = nmap_command(_agent(), TARGETS, 4, "22,80,8000-8010", ["tcp"])
    assert command[:6] == ["nmap", "-oX", "-", "-n", "-Pn", "-T4"]
    assert "--open" in command and "-sV" not in command and "-6" not in command
    assert command[command.index("-p") + 1] == "22,80,8000-8010"
    assert command[-2:] == ["-iL", str(TARGETS)]


def test_service_detection_udp_ipv6_and_all_states():
    settings = _agent(
        service_detection=True,
        version_intensity=3,
        report_states=["open", "closed"],
        nmap_extra_args=["--max-retries", "1"],
    )
    command = nmap_command(settings, TARGETS, 6, "53,443", ["tcp", "udp"])
    assert "-6" in command and "-sU" in command and "-sS" in command
    assert command[command.index("--version-intensity") + 1] == "3"
    assert command[command.index("--script") + 1] == "banner"
    assert "--open" not in command  # closed ports are wanted too
    assert command[command.index("-p") + 1] == "T:53,443,U:53,443"
    assert command[command.index("--max-retries") + 1] == "1"


def test_masscan_command_with_rate_and_udp_ports():
    command = masscan_command(_agent(masscan_rate=5000), TARGETS, "53,161", ["tcp", "udp"])
    assert command[:3] == ["masscan", "-oJ", "-"]
    assert command[command.index("--rate") + 1] == "5000"
    assert command[command.index("-p") + 1] == "53,161,U:53,U:161"


def test_targets_are_split_by_address_family():
    groups = split_targets_by_family(["127.0.0.1", "::1", "10.0.0.0/30", "2001:db8::/126"])
    assert groups == [(4, ["127.0.0.1", "10.0.0.0/30"]), (6, ["::1", "2001:db8::/126"])]


def test_lease_renewal_every_third_of_the_remaining_lease():
    from datetime import UTC, datetime, timedelta

    expires = (datetime.now(UTC) + timedelta(seconds=300)).isoformat()
    assert 95 <= lease_interval(expires) <= 100
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    assert lease_interval(past) == 10  # clocks disagree: renew often rather than late


def _agent_once(tmp_path, server: str, config_text: str):
    """``netmap agent --once`` as a process, with ``config_text`` as its settings file."""
    import os
    import subprocess
    import sys

    config = tmp_path / "agent.toml"
    config.write_text(config_text)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "agent",
            "--server",
            server,
            "--config",
            str(config),
            "--spool",
            str(tmp_path / "spool"),
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NETMAP_SCANNER_TOKEN": "nms_x"},
    )


def test_an_agent_whose_scanner_cannot_run_refuses_to_start(tmp_path):
    """With nmap missing the agent claimed port scans and failed each for good; it now
    says so at start, before it asks the server for anything."""
    done = _agent_once(tmp_path, "http://127.0.0.1:9", '[agent]\nnmap_path = "/nonexistent/nmap"\n')
    assert done.returncode == 1, done.stderr[-2000:]
    assert "nmap cannot be run ('/nonexistent/nmap')" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_agent_once_gives_up_on_a_server_it_cannot_reach(tmp_path):
    """`--once` (cron, scripts) used to retry a refused connection for ever."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _agent_once(
        tmp_path, f"http://127.0.0.1:{port}", "[agent]\nidle_backoff_max_seconds = 1\n"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "giving up (--once)" in done.stderr
    assert done.stderr.count("retrying in") == 5
